"""A builtin (`kind: "keras"`) job's part of the spec: its model (gpuq's MLP or CNN, or a
Keras model's JSON), its data (synthetic, `.npz`, CSV), loss, metrics and training loop."""

from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from gpuq.contract.spec_fields import HostPath, StrictModel, empty_list


class Head(StrictModel):
    outputs: int = Field(1, ge=1, le=100_000, description="Width of the output layer.")
    activation: Literal["relu", "gelu", "tanh", "sigmoid", "elu", "swish"] = Field(
        "relu", description="Activation of the hidden layers."
    )
    output_activation: Literal["linear", "sigmoid", "softmax"] = Field(
        "linear", description="`softmax` for class probabilities, `linear` for regression."
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout after each hidden layer.")


class MlpModel(Head):
    builtin: Literal["mlp"] = Field(description="A fully connected network built by gpuq.")
    hidden_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        [128, 64], min_length=1, max_length=32, description="Width of each hidden Dense layer."
    )


class CnnModel(Head):
    builtin: Literal["cnn"] = Field(
        description="Conv2D blocks (conv + max-pool) and a Dense head, for image inputs "
        "shaped (height, width, channels)."
    )
    filters: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        [32, 64], min_length=1, max_length=8, description="Filters of each Conv2D block."
    )
    kernel_size: int = Field(3, ge=1, le=15, description="Square kernel size of every Conv2D.")
    dense_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        [128], max_length=8, description="Hidden Dense layers after the conv blocks."
    )


class KerasJsonModel(StrictModel):
    keras_json: str = Field(
        min_length=2,
        max_length=512 * 1024,
        description="`model.to_json()` of a Keras 3 model, built from an allow-list of layer "
        "types (no Lambda, no custom objects). Its input shape must match the data.",
    )

    @field_validator("keras_json")
    @classmethod
    def _safe(cls, text: str) -> str:
        from gpuq.contract import keras_json

        try:
            keras_json.check(text)
        except keras_json.UnsafeModel as exc:
            raise ValueError(str(exc)) from None
        return text


def _model_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("builtin") or ("keras_json" if "keras_json" in value else None)
    return getattr(value, "builtin", None) or (
        "keras_json" if hasattr(value, "keras_json") else None
    )


Model = Annotated[
    Annotated[MlpModel, Tag("mlp")]
    | Annotated[CnnModel, Tag("cnn")]
    | Annotated[KerasJsonModel, Tag("keras_json")],
    Discriminator(
        _model_tag,
        custom_error_type="model_kind",
        custom_error_message="model needs `builtin` (mlp or cnn) or `keras_json`",
    ),
]


class SyntheticData(StrictModel):
    source: Literal["synthetic"] = Field(description="Random data generated in the worker.")
    samples: int = Field(2000, ge=1, le=10_000_000, description="Number of examples.")
    features: int = Field(32, ge=1, le=100_000, description="Inputs per example.")
    task: Literal["regression", "classification"] = Field(
        "regression", description="Real-valued targets, or class labels."
    )
    classes: int = Field(2, ge=2, le=100_000, description="Number of classes (classification).")
    image_shape: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        None,
        min_length=3,
        max_length=3,
        description="Generate images of this (height, width, channels) instead of `features`.",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of the generator.")


class NpzData(StrictModel):
    source: Literal["npz"] = Field(description="Arrays from a NumPy .npz file on this host.")
    path: HostPath = Field(description="Absolute path of the .npz file.")
    x: str = Field("x", min_length=1, max_length=256, description="Array name of the inputs.")
    y: str = Field("y", min_length=1, max_length=256, description="Array name of the targets.")


class CsvData(StrictModel):
    source: Literal["csv"] = Field(description="A CSV file with a header row on this host.")
    path: HostPath = Field(description="Absolute path of the .csv file.")
    label: str = Field(
        min_length=1,
        max_length=256,
        description="Column holding the target; the other columns (all numeric) are the inputs.",
    )
    delimiter: str = Field(",", min_length=1, max_length=1, description="Field separator.")


Data = Annotated[SyntheticData | NpzData | CsvData, Field(discriminator="source")]

Loss = Literal[
    "mse",
    "mae",
    "huber",
    "binary_crossentropy",
    "categorical_crossentropy",
    "sparse_categorical_crossentropy",
]
Metric = Literal["mae", "mse", "accuracy", "sparse_categorical_accuracy", "binary_accuracy"]


class KerasSpec(StrictModel):
    model: Model = Field(description="The model: a builtin (`mlp`, `cnn`) or `keras_json`.")
    data: Data = Field(description="Where the training data comes from (`source`).")
    epochs: int = Field(1, ge=1, le=100_000, description="Passes over the training data.")
    batch_size: int = Field(
        32, ge=1, le=1_000_000, description="Global batch, split across the replicas."
    )
    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] = Field("adam", description="Optimizer.")
    learning_rate: float = Field(0.001, gt=0.0, le=10.0, description="Optimizer step size.")
    loss: Loss = Field("mse", description="Keras loss name.")
    metrics: list[Metric] = Field(
        default_factory=empty_list, max_length=8, description="Keras metrics reported each epoch."
    )
    validation_split: float = Field(
        0.0, ge=0.0, lt=1.0, description="Share of the data held out to report `val_` metrics."
    )
    shuffle: bool = Field(True, description="Shuffle the training data each epoch.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed for weights and shuffling.")
    log_device_placement: bool = Field(
        False, description="Log which device runs each TensorFlow op (into this job's log)."
    )
    soft_device_placement: bool = Field(
        True, description="Let TensorFlow fall back to another device for ops it cannot place."
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> "KerasSpec":
        data = self.data
        flat = isinstance(data, CsvData) or (
            isinstance(data, SyntheticData) and data.image_shape is None
        )
        if isinstance(self.model, CnnModel) and flat:
            raise ValueError(
                "the cnn model needs image data: synthetic with image_shape, or npz images"
            )
        if (
            self.loss == "sparse_categorical_crossentropy"
            and isinstance(data, SyntheticData)
            and data.task == "classification"
            and isinstance(self.model, Head)
            and self.model.outputs != data.classes
        ):
            raise ValueError(
                f"model.outputs ({self.model.outputs}) must equal data.classes ({data.classes})"
                " for sparse_categorical_crossentropy"
            )
        if (
            isinstance(data, SyntheticData)
            and self.validation_split * data.samples >= data.samples - 1
        ):
            raise ValueError("validation_split leaves no samples to train on")
        return self
