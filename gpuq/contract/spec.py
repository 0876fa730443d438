"""The job spec: the body of `POST /v1/jobs`, also read back by the worker from spec.json.

Everything here is checked before a job is accepted, so a worker only ever sees specs that
parse. Checks that need the box (GPU count, file paths) live in `service.jobs.admission`.
A builtin job's part is in `keras_spec`, a command's or session's in `command_spec`, the
field types all parts share in `spec_fields`; this module exports them all.
"""

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuq.contract.command_spec import RESERVED_ENV, CommandSpec
from gpuq.contract.keras_spec import (
    CnnModel,
    CsvData,
    Data,
    Head,
    KerasJsonModel,
    KerasSpec,
    Loss,
    Metric,
    MlpModel,
    Model,
    NpzData,
    SyntheticData,
)
from gpuq.contract.provenance import Provenance
from gpuq.contract.slurm_options import SlurmOptions
from gpuq.contract.spec_fields import (
    MAX_GPUS,
    MAX_NODES,
    HostPath,
    StrictModel,
    UtcTime,
    WebUrl,
    empty_dict,
    empty_list,
)

__all__ = [
    "MAX_CPUS",
    "MAX_GPUS",
    "MAX_HOST_MEMORY_MB",
    "MAX_NODES",
    "PRIORITY_MAX",
    "RESERVED_ENV",
    "CnnModel",
    "CommandSpec",
    "CsvData",
    "Data",
    "Head",
    "HostPath",
    "JobSpec",
    "KerasJsonModel",
    "KerasSpec",
    "Loss",
    "Metric",
    "MlpModel",
    "Model",
    "NpzData",
    "Resources",
    "SlurmOptions",
    "StrictModel",
    "SyntheticData",
    "UtcTime",
    "WebUrl",
    "empty_dict",
    "empty_list",
    "may_be_preempted",
]


#: the most cores and host memory (MiB, 1 PiB) a job may ask for: well past any one machine
MAX_CPUS = 4096
MAX_HOST_MEMORY_MB = 1024**3


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
    cpus: float | None = Field(
        None,
        gt=0,
        le=MAX_CPUS,
        description="CPU cores, may be fractional (0.5); per node when nodes > 1. The job "
        "holds them and the kernel keeps it to them. Default: the site's per GPU "
        "(GPUQ_DEFAULT_CPUS_PER_GPU), or GPUQ_DEFAULT_CPUS for a job with no GPU; none if "
        "unset.",
    )
    host_memory_mb: int | None = Field(
        None,
        ge=16,
        le=MAX_HOST_MEMORY_MB,
        description="Host memory (RAM) in MiB, no swap beside it; per node when nodes > 1. "
        "Past it the kernel stops the job (reason host_oom). Default: the site's per GPU "
        "(GPUQ_DEFAULT_HOST_MEMORY_PER_GPU_MB), or GPUQ_DEFAULT_HOST_MEMORY_MB for a job "
        "with no GPU; none if unset.",
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


#: the highest priority a spec may ask for (and minus it, the lowest)
PRIORITY_MAX = 1000


def may_be_preempted(kind: str, preemptible: bool | None) -> bool:
    """Whether a job of `kind` whose spec says `preemptible` may be preempted: keras jobs
    unless they say no, command jobs only if they say yes, sessions never."""
    if kind == "session":
        return False
    return preemptible if preemptible is not None else kind == "keras"


#: a reservation's name (`/v1/reservations`), as a job names it in `reservation`
RESERVATION_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


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
        default_factory=Resources,
        description="GPUs, GPU memory, CPU cores and host memory the job needs.",
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
    provenance: Provenance | None = Field(
        None,
        description="Where its code came from, as the submitting client saw it (git's "
        "commit, branch and state, the interpreter, the lock file): `gpuq run` fills it in.",
    )
    reservation: str | None = Field(
        None,
        pattern=RESERVATION_NAME,
        description="Run in this reservation (its name): on its GPUs, once its window opens; "
        "the job waits until then. Its owner must be one of its users. Without it, a job whose "
        "owner is a user of a reservation open now is placed in it when it fits.",
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
        if self.reservation is not None and self.resources.gpu_count == 0:
            raise ValueError(
                "a reservation holds GPUs: a job with none runs outside it; leave out "
                "reservation, or ask for GPUs"
            )
        if self.kind == "session" and self.preemptible:
            raise ValueError(
                "a session is never preempted: its terminal cannot wait in the queue; leave "
                "out preemptible"
            )
        return self
