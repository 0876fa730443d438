"""The job spec: the body of `POST /v1/jobs`, also read back by the worker from spec.json.

Everything here is checked before a job is accepted, so a worker only ever sees specs that
parse. Checks that need the box (GPU count, file paths) live in `service.admission`.
"""

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

MAX_GPUS = 64
#: the most machines one job may span (`resources.nodes`)
MAX_NODES = 64


# Pydantic inspects a field's default factory each time it builds a default, and a
# builtin's signature (`list`, `dict`) is parsed from text every time: about 0.25 ms per
# field, several per job row. A plain function is inspected in microseconds.
def empty_list() -> list[Any]:
    return []


def empty_dict() -> dict[str, Any]:
    return {}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


def _host_path(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not contain NUL characters")
    if ".." in value.split("/"):  # a `..` segment, as `PurePosixPath(value).parts` has it
        raise ValueError("must not contain '..' segments; give the real absolute path")
    return value


#: A path on the gpuq host: no NUL bytes, no `..` tricks (checked for existence at submit).
HostPath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_host_path)]


def _web_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


#: Where a webhook is posted.
WebUrl = Annotated[str, Field(min_length=8, max_length=2048), AfterValidator(_web_url)]


def _in_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


#: A moment with its time zone (ISO 8601, e.g. `2026-11-23T18:00:00Z`), kept in UTC.
UtcTime = Annotated[AwareDatetime, Field(strict=False), AfterValidator(_in_utc)]


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
    replicas_per_gpu: int = Field(
        1,
        ge=1,
        le=8,
        description="Split each assigned GPU into this many logical GPUs (memory cap divided "
        "evenly), so one GPU can run a multi-replica MirroredStrategy job.",
    )
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="Machines to train on at once (Slurm executor only); `gpus` is then the "
        "GPUs of each. A keras job trains one model with MultiWorkerMirroredStrategy; a "
        "command job gets TF_CONFIG and torchrun's variables on every node.",
    )
    collective_timeout_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="With nodes > 1: how long a keras job's all-reduce may wait for the "
        "other nodes before it fails (default GPUQ_COLLECTIVE_TIMEOUT_S).",
    )

    @model_validator(mode="after")
    def _check_gpus(self) -> "Resources":
        if self.gpu_ids is not None:
            if len(set(self.gpu_ids)) != len(self.gpu_ids):
                raise ValueError("gpu_ids must not repeat a GPU")
            if self.gpus is not None and self.gpus != len(self.gpu_ids):
                raise ValueError(f"gpus ({self.gpus}) disagrees with gpu_ids ({self.gpu_ids})")
        if self.replicas_per_gpu > 1 and self.memory_growth:
            raise ValueError("replicas_per_gpu needs fixed memory caps; drop memory_growth")
        if self.replicas_per_gpu > 1 and self.gpu_count == 0:
            raise ValueError("replicas_per_gpu needs at least one GPU")
        if self.nodes > 1 and self.gpu_ids is not None:
            raise ValueError("gpu_ids cannot name GPUs on several nodes; ask for `gpus` per node")
        return self

    @property
    def gpu_count(self) -> int:
        if self.gpu_ids is not None:
            return len(self.gpu_ids)
        return 1 if self.gpus is None else self.gpus

    @property
    def total_gpus(self) -> int:
        """The GPUs the job holds on all its nodes."""
        return self.gpu_count * self.nodes


RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR")


class CommandSpec(StrictModel):
    argv: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1,
        max_length=1024,
        description="The program and its arguments, run directly (no shell). A bare name is "
        "looked up on the service's PATH.",
    )
    workdir: HostPath | None = Field(
        None, description="Absolute working directory; default the run dir."
    )
    env: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)],
        Annotated[str, Field(max_length=32768)],
    ] = Field(
        default_factory=empty_dict,
        max_length=256,
        description="Extra environment variables. The GPU variables are gpuq's to set.",
    )

    @model_validator(mode="after")
    def _check(self) -> "CommandSpec":
        if any("\0" in part for part in self.argv):
            raise ValueError("argv must not contain NUL characters")
        if "/" in self.argv[0]:
            _host_path(self.argv[0])
        taken = sorted(k for k in self.env if k in RESERVED_ENV or k.startswith("GPUQ_"))
        if taken:
            raise ValueError(f"env may not set {', '.join(taken)}: gpuq sets them for the job")
        if any("\0" in v for v in self.env.values()):
            raise ValueError("env values must not contain NUL characters")
        return self


#: the highest priority a spec may ask for (and minus it, the lowest)
PRIORITY_MAX = 1000

_SLURM_NAME = r"^[\w.\-]+$"


class SlurmOptions(StrictModel):
    """Where on a Slurm cluster the job goes (`GPUQ_EXECUTOR=slurm`); ignored on a box."""

    partition: str | None = Field(
        None, max_length=128, pattern=_SLURM_NAME, description="Instead of GPUQ_SLURM_PARTITION."
    )
    account: str | None = Field(
        None, max_length=128, pattern=_SLURM_NAME, description="Instead of GPUQ_SLURM_ACCOUNT."
    )
    qos: str | None = Field(None, max_length=128, pattern=_SLURM_NAME, description="A QOS.")
    constraint: str | None = Field(
        None,
        max_length=256,
        pattern=r"^[\w.\-&|,:*\[\]()!]+$",
        description="Node features, in Slurm's `--constraint` syntax (e.g. `a100|h100`).",
    )


def may_be_preempted(kind: str, preemptible: bool | None) -> bool:
    """Whether a job of `kind` whose spec says `preemptible` may be preempted: keras jobs
    unless they say no, command jobs only if they say yes, sessions never."""
    if kind == "session":
        return False
    return preemptible if preemptible is not None else kind == "keras"


class JobSpec(StrictModel):
    name: str = Field(
        "job", min_length=1, max_length=128, pattern=r"^[\w.\- ]+$", description="A label."
    )
    kind: Literal["keras", "command", "session"] = Field(
        "keras",
        description="`keras`: gpuq builds and trains the model in `keras`. `command`: runs "
        "your own program from `command` with the assigned GPUs and caps. `session`: runs "
        "`command` (a shell, a notebook) on its owner's terminal (`gpuq shell`) for as long "
        "as that terminal stays attached.",
    )
    keras: KerasSpec | None = Field(None, description="What to train and how (kind keras).")
    command: CommandSpec | None = Field(
        None, description="What to run (kinds command and session)."
    )
    resources: Resources = Field(
        default_factory=Resources, description="GPUs and memory the job needs."
    )
    priority: int = Field(
        0,
        ge=-PRIORITY_MAX,
        le=PRIORITY_MAX,
        description="Higher starts first. Above GPUQ_MAX_USER_PRIORITY (0) needs an admin.",
    )
    depends_on: list[Annotated[int, Field(ge=1, le=2**53)]] = Field(
        default_factory=empty_list,
        max_length=100,
        description="Job ids that must all succeed before this job starts; if one fails, "
        "this job is cancelled with reason dependency_failed.",
    )
    time_limit_s: float | None = Field(
        None, gt=0, le=366 * 86400, description="Stop the job (timed_out) after this long."
    )
    slurm: SlurmOptions | None = Field(
        None, description="Partition, account, QOS and constraint on a Slurm cluster."
    )
    not_before: UtcTime | None = Field(
        None,
        description="Do not start before this moment: ISO 8601 with its zone, e.g. "
        "`2026-11-23T18:00:00Z`. The job waits with this as its reason until then.",
    )
    webhook: WebUrl | None = Field(
        None,
        description="POST each change of this job's state here (JSON, signed with your "
        "webhook secret); default: your own webhook (`PUT /v1/webhook`).",
    )
    idle_exempt: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="Why this job may hold its GPUs without training (interactive work): it "
        "is never ended as idle. Admins see the reason.",
    )
    max_retries: int = Field(
        0,
        ge=0,
        le=10,
        description="Run the job again this many times at most after a failure that may pass "
        "(a crash, a signal, a lost worker), with growing back-off. Keras jobs resume from "
        "their last completed epoch.",
    )
    preemptible: bool | None = Field(
        None,
        description="Whether a more urgent job may stop this one and queue it again to resume "
        "(when the site sets GPUQ_PREEMPT). Default: true for keras jobs, which resume from "
        "their last epoch; false for command jobs, whose program must promise to save on "
        "SIGTERM and resume from what it saved. A session is never preempted.",
    )

    @property
    def may_be_preempted(self) -> bool:
        """Whether this job may be preempted, its kind's default applied."""
        return may_be_preempted(self.kind, self.preemptible)

    @model_validator(mode="after")
    def _check_kind(self) -> "JobSpec":
        body, other = ("keras", "command") if self.kind == "keras" else ("command", "keras")
        if getattr(self, body) is None:
            raise ValueError(f"kind {self.kind!r} needs a `{body}` section")
        if getattr(self, other) is not None:
            raise ValueError(f"kind {self.kind!r} takes no `{other}` section")
        if self.kind == "session" and self.max_retries:
            raise ValueError(
                "a session is not retried: its terminal is gone; leave out max_retries"
            )
        if self.kind == "session" and self.resources.nodes > 1:
            raise ValueError(
                "a session runs on one machine, where its terminal is; leave out resources.nodes"
            )
        if self.kind == "session" and self.preemptible:
            raise ValueError(
                "a session is never preempted: its terminal cannot wait in the queue; leave "
                "out preemptible"
            )
        return self
