"""The compiled model of a builtin Keras job and the data it trains on, checked to fit
together: what training on one node (`train`) and on several (`multi_node`) both start from.
"""

from typing import Any

from gpuq.contract.spec import KerasJsonModel, KerasSpec


class SpecMismatch(ValueError):
    """The spec is well-formed but its model and data do not fit together."""


def model_and_data(keras: Any, spec: KerasSpec, roots: list[str] | None) -> tuple[Any, Any, Any]:
    """The compiled model and the data it trains on (inside the strategy's scope)."""
    from worker import architectures, data

    if isinstance(spec.model, KerasJsonModel):
        model = architectures.build_model(keras, spec, ())
        x, y = data.load_arrays(spec, int(model.output_shape[-1]), roots)
        _check_inputs(tuple(model.input_shape[1:]), tuple(x.shape[1:]))
    else:
        x, y = data.load_arrays(spec, spec.model.outputs, roots)
        model = architectures.build_model(keras, spec, tuple(x.shape[1:]))
    return model, x, y


def _check_inputs(expected: tuple[int | None, ...], got: tuple[int, ...]) -> None:
    if len(expected) != len(got) or any(
        e not in (None, g) for e, g in zip(expected, got, strict=False)
    ):
        raise SpecMismatch(
            f"the model takes inputs shaped {expected} but the data's are shaped {got}"
        )
