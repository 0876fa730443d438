"""Checks a Keras model JSON (`model.to_json()`) against an allow-list, without Keras.

Keras rebuilds a model from JSON by class name, and some classes (Lambda, custom objects)
carry code. gpuq accepts only the plain building blocks below; the worker then loads with
Keras's safe mode on as a second line of defence.
"""

import json
from typing import Any

MODELS = {"Sequential", "Functional", "Model"}
LAYERS = {
    "InputLayer",
    "Dense",
    "EinsumDense",
    "Activation",
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "Flatten",
    "Reshape",
    "Permute",
    "RepeatVector",
    "Identity",
    "Rescaling",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "Conv1DTranspose",
    "Conv2DTranspose",
    "Conv3DTranspose",
    "DepthwiseConv1D",
    "DepthwiseConv2D",
    "SeparableConv1D",
    "SeparableConv2D",
    "MaxPooling1D",
    "MaxPooling2D",
    "MaxPooling3D",
    "AveragePooling1D",
    "AveragePooling2D",
    "AveragePooling3D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "GlobalMaxPooling3D",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalAveragePooling3D",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "ZeroPadding3D",
    "Cropping1D",
    "Cropping2D",
    "Cropping3D",
    "UpSampling1D",
    "UpSampling2D",
    "UpSampling3D",
    "BatchNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "UnitNormalization",
    "ReLU",
    "LeakyReLU",
    "PReLU",
    "ELU",
    "Softmax",
    "Embedding",
    "SimpleRNN",
    "LSTM",
    "GRU",
    "Bidirectional",
    "TimeDistributed",
    "Add",
    "Subtract",
    "Multiply",
    "Average",
    "Maximum",
    "Minimum",
    "Concatenate",
    "Dot",
    "Attention",
    "AdditiveAttention",
    "MultiHeadAttention",
}
PARTS = {
    # initializers, regularizers, constraints, dtype policies, and Keras's own tensor refs
    "GlorotUniform",
    "GlorotNormal",
    "HeUniform",
    "HeNormal",
    "LecunUniform",
    "LecunNormal",
    "Zeros",
    "Ones",
    "Constant",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "Orthogonal",
    "VarianceScaling",
    "IdentityInitializer",
    "L1",
    "L2",
    "L1L2",
    "OrthogonalRegularizer",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "DTypePolicy",
    "FloatDTypePolicy",
    "__keras_tensor__",
    "__tuple__",
}
ALLOWED = MODELS | LAYERS | PARTS
REFUSED = {
    "Lambda": "Lambda layers carry Python code and are refused; use builtin layers",
    "__lambda__": "serialised Python functions are refused",
    "__python_function__": "serialised Python functions are refused",
    "TFSMLayer": "layers that load other files are refused",
}
MAX_DEPTH = 64


class UnsafeModel(ValueError):
    """The JSON is not a model gpuq will build."""


def check(text: str) -> dict[str, Any]:
    """Parses and checks a model JSON; returns it, or raises `UnsafeModel` saying why."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise UnsafeModel(f"not valid JSON: {exc}") from exc
    if not isinstance(config, dict) or config.get("class_name") not in MODELS:
        raise UnsafeModel("the top level must be a Keras model (Sequential or Functional)")
    _check_layers(config, depth=0)
    return config


def _check_layers(node: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise UnsafeModel("the model JSON is nested too deeply")
    if isinstance(node, list):
        for item in node:
            _check_layers(item, depth + 1)
        return
    if not isinstance(node, dict):
        return
    if "class_name" in node:
        name = node["class_name"]
        if not isinstance(name, str):
            raise UnsafeModel("class_name must be a string")
        if name in REFUSED:
            raise UnsafeModel(REFUSED[name])
        if name not in ALLOWED:
            raise UnsafeModel(f"layer type {name!r} is not on gpuq's allow-list")
        module = node.get("module")
        if module is not None and not (module == "keras" or str(module).startswith("keras.")):
            raise UnsafeModel(
                f"{name!r} comes from module {module!r}; only Keras's own are allowed"
            )
        registered = node.get("registered_name")
        if registered not in (None, name) and not str(registered).startswith("keras"):
            raise UnsafeModel(f"custom object {registered!r} is refused")
    for value in node.values():
        _check_layers(value, depth + 1)
