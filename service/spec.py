"""The job spec: the body of `POST /v1/jobs`, also read back by the worker from spec.json.

Everything here is checked before a job is accepted, so a worker only ever sees specs that
parse. Checks that need the box (GPU count, file paths) live in `service.admission`.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_GPUS = 64


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MlpModel(StrictModel):
    builtin: Literal["mlp"] = Field(description="A fully connected network built by gpuq.")
    hidden_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        [128, 64], min_length=1, max_length=32, description="Width of each hidden Dense layer."
    )
    outputs: int = Field(1, ge=1, le=100_000, description="Width of the output layer.")
    activation: Literal["relu", "gelu", "tanh", "sigmoid", "elu", "swish"] = Field(
        "relu", description="Activation of the hidden layers."
    )
    output_activation: Literal["linear", "sigmoid", "softmax"] = Field(
        "linear", description="`softmax` for class probabilities, `linear` for regression."
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout after each hidden layer.")


class SyntheticData(StrictModel):
    source: Literal["synthetic"] = Field(description="Random data generated in the worker.")
    samples: int = Field(2000, ge=1, le=10_000_000, description="Number of examples.")
    features: int = Field(32, ge=1, le=100_000, description="Inputs per example.")
    task: Literal["regression", "classification"] = Field(
        "regression", description="Real-valued targets, or class labels."
    )
    classes: int = Field(2, ge=2, le=100_000, description="Number of classes (classification).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of the generator.")


class NpzData(StrictModel):
    source: Literal["npz"] = Field(description="Arrays from a NumPy .npz file on this host.")
    path: str = Field(min_length=1, max_length=4096, description="Absolute path of the .npz file.")
    x: str = Field("x", min_length=1, max_length=256, description="Array name of the inputs.")
    y: str = Field("y", min_length=1, max_length=256, description="Array name of the targets.")


Data = Annotated[SyntheticData | NpzData, Field(discriminator="source")]

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
    model: MlpModel = Field(description="The model to build: a builtin architecture.")
    data: Data = Field(description="Where the training data comes from (`source`).")
    epochs: int = Field(1, ge=1, le=100_000, description="Passes over the training data.")
    batch_size: int = Field(
        32, ge=1, le=1_000_000, description="Global batch, split across the replicas."
    )
    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] = Field("adam", description="Optimizer.")
    learning_rate: float = Field(0.001, gt=0.0, le=10.0, description="Optimizer step size.")
    loss: Loss = Field("mse", description="Keras loss name.")
    metrics: list[Metric] = Field(
        default_factory=list, max_length=8, description="Keras metrics reported each epoch."
    )
    validation_split: float = Field(
        0.0, ge=0.0, lt=1.0, description="Share of the data held out to report `val_` metrics."
    )
    shuffle: bool = Field(True, description="Shuffle the training data each epoch.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed for weights and shuffling.")

    @model_validator(mode="after")
    def _check_consistency(self) -> "KerasSpec":
        data = self.data
        if (
            self.loss == "sparse_categorical_crossentropy"
            and isinstance(data, SyntheticData)
            and data.task == "classification"
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


class Resources(StrictModel):
    gpus: int | None = Field(
        None, ge=0, le=MAX_GPUS, description="How many GPUs; 0 runs on the CPU. Default 1."
    )
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, min_length=1, max_length=MAX_GPUS, description="Explicit GPU indices to run on."
    )
    memory_mb: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Per-GPU memory cap in MiB, headroom included; GPUs are shared (packed). "
        "Leave out for whole GPUs.",
    )
    memory_growth: bool = Field(
        False, description="Let TensorFlow grow its GPU memory on demand instead of a fixed cap."
    )

    @model_validator(mode="after")
    def _check_gpus(self) -> "Resources":
        if self.gpu_ids is not None:
            if len(set(self.gpu_ids)) != len(self.gpu_ids):
                raise ValueError("gpu_ids must not repeat a GPU")
            if self.gpus is not None and self.gpus != len(self.gpu_ids):
                raise ValueError(f"gpus ({self.gpus}) disagrees with gpu_ids ({self.gpu_ids})")
        return self

    @property
    def gpu_count(self) -> int:
        if self.gpu_ids is not None:
            return len(self.gpu_ids)
        return 1 if self.gpus is None else self.gpus


RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR")


class CommandSpec(StrictModel):
    argv: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1,
        max_length=1024,
        description="The program and its arguments, run directly (no shell). A bare name is "
        "looked up on the service's PATH.",
    )
    workdir: str | None = Field(
        None, max_length=4096, description="Absolute working directory; default the run dir."
    )
    env: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)],
        Annotated[str, Field(max_length=32768)],
    ] = Field(
        default_factory=dict,
        max_length=256,
        description="Extra environment variables. The GPU variables are gpuq's to set.",
    )

    @model_validator(mode="after")
    def _check(self) -> "CommandSpec":
        if any("\0" in part for part in self.argv):
            raise ValueError("argv must not contain NUL characters")
        taken = sorted(k for k in self.env if k in RESERVED_ENV or k.startswith("GPUQ_"))
        if taken:
            raise ValueError(f"env may not set {', '.join(taken)}: gpuq sets them for the job")
        if any("\0" in v for v in self.env.values()):
            raise ValueError("env values must not contain NUL characters")
        return self


class JobSpec(StrictModel):
    name: str = Field(
        "job", min_length=1, max_length=128, pattern=r"^[\w.\- ]+$", description="A label."
    )
    kind: Literal["keras", "command"] = Field(
        "keras",
        description="`keras`: gpuq builds and trains the model in `keras`. `command`: runs "
        "your own program from `command` with the assigned GPUs and caps.",
    )
    keras: KerasSpec | None = Field(None, description="What to train and how (kind keras).")
    command: CommandSpec | None = Field(None, description="What to run (kind command).")
    resources: Resources = Field(
        default_factory=Resources, description="GPUs and memory the job needs."
    )
    priority: int = Field(0, ge=-1000, le=1000, description="Higher starts first.")
    time_limit_s: float | None = Field(
        None, gt=0, le=366 * 86400, description="Stop the job (timed_out) after this long."
    )
    max_retries: int = Field(
        0, ge=0, le=0, description="Automatic retries; not available yet, so only 0."
    )

    @model_validator(mode="after")
    def _check_kind(self) -> "JobSpec":
        body, other = ("keras", "command") if self.kind == "keras" else ("command", "keras")
        if getattr(self, body) is None:
            raise ValueError(f"kind {self.kind!r} needs a `{body}` section")
        if getattr(self, other) is not None:
            raise ValueError(f"kind {self.kind!r} takes no `{other}` section")
        return self
