import json

import pytest

from gpuq.contract.keras_json import UnsafeModel, check


def layer(class_name: str, module: str = "keras.layers", **config) -> dict:
    return {"module": module, "class_name": class_name, "config": config, "registered_name": None}


def sequential(*layers: dict) -> str:
    return json.dumps(
        {
            "module": "keras",
            "class_name": "Sequential",
            "config": {"name": "s", "layers": list(layers)},
            "registered_name": None,
        }
    )


def test_plain_layers_pass():
    init = layer("GlorotUniform", module="keras.initializers")
    text = sequential(
        layer("InputLayer", batch_shape=[None, 8]), layer("Dense", units=4, kernel_initializer=init)
    )
    assert check(text)["class_name"] == "Sequential"


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (
            layer("Lambda", function={"class_name": "__lambda__", "config": {"code": "..."}}),
            "Lambda layers carry Python code",
        ),
        (layer("MyLayer"), "'MyLayer' is not on gpuq's allow-list"),
        (layer("Dense", module="mypackage.layers"), "only Keras's own are allowed"),
        ({**layer("Dense"), "registered_name": "Custom>Dense"}, "custom object 'Custom>Dense'"),
    ],
)
def test_code_carrying_or_unknown_objects_are_refused(bad, words):
    with pytest.raises(UnsafeModel, match=words):
        check(sequential(layer("InputLayer", batch_shape=[None, 8]), bad))


def test_the_top_level_must_be_a_model():
    with pytest.raises(UnsafeModel, match="must be a Keras model"):
        check(json.dumps(layer("Dense")))
    with pytest.raises(UnsafeModel, match="not valid JSON"):
        check("{")


def test_hostile_nesting_is_bounded():
    deep: dict = {"class_name": "Dense"}
    for _ in range(200):
        deep = {"class_name": "Dense", "config": deep}
    with pytest.raises(UnsafeModel, match="nested too deeply"):
        check(sequential(deep))
