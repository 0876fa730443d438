"""What the service accepts of a line of `events.jsonl`: one model per event kind it reads
(`<Kind>Record`, e.g. `StartedRecord` for `started`).

A job's own processes write that file, so every line is checked before anything of it is
stored: numbers that are numbers and fit the database's columns, metric names of bounded
length and count, metric values finite or null, text that any database stores, node
names that are host names. Fields the service does not read pass unchecked and are
dropped (gpuq's writers add `ts`, `devices`, `pid`...). `events` stays stdlib-only for the
runner and the start-up hook; this is the service's side.
"""

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpuq.contract.events import Event

MAX_INT = 2**31 - 1  #: the databases' INTEGER (epoch and step are columns)
MAX_METRICS = 128  #: metric names per event
MAX_NAME_CHARS = 128  #: characters of a metric name


def _finite(value: float | None) -> float | None:
    # NaN and infinities read as null, as gpuq's own writers send them (`events.finite`).
    return value if value is None or math.isfinite(value) else None


def _storable(text: str) -> str:
    if "\0" in text:
        raise ValueError("must not contain NUL characters")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return text


#: A count or position from 0: epoch, step, steps.
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
#: A number, or null; NaN and infinities read as null.
Finite = Annotated[float | None, AfterValidator(_finite)]
#: Text any database stores: no NUL, no lone surrogates.
Text = Annotated[str, AfterValidator(_storable)]
MetricName = Annotated[Text, Field(min_length=1, max_length=MAX_NAME_CHARS)]
#: A node's name as Slurm and DNS spell one: a label or a dotted name, never words. The
#: API shows a job's nodes to every member, as its placement.
HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
HostName = Annotated[str, Field(pattern=HOST_NAME)]
#: GPUs as `CUDA_VISIBLE_DEVICES` lists them: indices, UUIDs, MIG names.
DEVICES = r"^[A-Za-z0-9,:/._-]*$"
#: Metric name → value, as Keras names them (`loss`, `val_mae`...).
Metrics = Annotated[dict[MetricName, Finite], Field(max_length=MAX_METRICS)]


class _EventRecord(BaseModel):
    # Strict: "3" is no epoch. Fields not declared are not read, so they pass and go.
    model_config = ConfigDict(strict=True, extra="ignore")


class ProgressRecord(_EventRecord):
    """Where training is, as `GpuqProgress` reports it (the API's `Progress`)."""

    epoch: Count | None = None
    epochs: Count | None = None
    step: Count | None = None
    steps: Count | None = None
    fraction: Finite = None
    samples_per_s: Finite = None
    eta_s: Finite = None


class StartedRecord(_EventRecord):
    """TensorFlow is up."""

    num_replicas: Annotated[int, Field(ge=1, le=MAX_INT)] | None = None


class RunningRecord(_EventRecord):
    """A program gpuq cannot see inside has started."""


class StepRecord(_EventRecord):
    """A sampled step (or, as `EpochRecord`, an epoch's end) with its metrics."""

    epoch: Count | None = None
    step: Count | None = None
    progress: ProgressRecord | None = None
    metrics: Metrics | None = None


class EpochRecord(StepRecord):
    """An epoch ended."""


class FailedRecord(_EventRecord):
    """The training process explains its failing exit."""

    message: Text = ""


class StoppedRecord(FailedRecord):
    """Stopped early on request, model saved."""


class NodeRecord(_EventRecord):
    """One node of a job on several, as its gpuq worker announced it."""

    rank: Annotated[int, Field(ge=0, le=MAX_INT)]
    node: HostName
    gpus: Annotated[str, Field(max_length=MAX_NAME_CHARS, pattern=DEVICES)] | None = None


class NodesRecord(_EventRecord):
    """A job on several nodes found them all."""

    nodes: Annotated[list[NodeRecord], Field(max_length=1024)]


EventRecord = StartedRecord | RunningRecord | StepRecord | FailedRecord | NodesRecord

#: The kinds the service reads; it ignores the others (`resumed`, `finished`, a user's own).
RECORDS: dict[str, type[EventRecord]] = {
    Event.started: StartedRecord,
    Event.running: RunningRecord,
    Event.step: StepRecord,
    Event.epoch: EpochRecord,
    Event.failed: FailedRecord,
    Event.stopped: StoppedRecord,
    Event.nodes: NodesRecord,
}


def parse(line: Any) -> EventRecord | None:
    """One parsed line of `events.jsonl` as its event; None for a kind the service does not
    read. Raises `ValueError` (pydantic's `ValidationError` among them) for a line that
    breaks the contract."""
    if not isinstance(line, dict):
        raise ValueError("not a JSON object")
    kind = line.get("event")
    model = RECORDS.get(kind) if isinstance(kind, str) else None
    return None if model is None else model.model_validate(line)
