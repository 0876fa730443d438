"""How a finished job is judged: its final state, reason and one-line explanation.

The one place that turns an exit into a reason: `exit.json` (the runner's record, read as
`run_records.ExitRecord`), the exit code's meaning (`exits.REASONS`), why the scheduler
stopped the job, and the words the training process or the scheduler left about it.

A message quotes the job's own words (its `failed` event, a log line, a launch error) only
for the reasons whose message `service.jobs.privacy` hides from other members; the words
of the other reasons are gpuq's alone.
"""

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuq.contract.crash_site import CRASH_SIGNALS, crash_site
from gpuq.contract.exits import REASONS
from gpuq.contract.run_records import ExitRecord, exit_record
from gpuq.contract.states import JobStatus, Reason

HINTS = {
    Reason.gpu_oom: "lower batch_size or raise memory_mb",
    Reason.memory_cap_exceeded: "raise memory_mb or lower batch_size",
    Reason.placement_violation: (
        "use only the GPUs gpuq gives the job: leave CUDA_VISIBLE_DEVICES as it is and "
        "address them as cuda:0 to cuda:N-1"
    ),
    Reason.host_oom: "lower batch_size or use a smaller data set",
    Reason.invalid_spec: "check the job spec against the API docs at /docs",
    Reason.device_mismatch: "the GPUs may have changed; check `gpuq gpus`",
    Reason.idle: (
        "a hung all-reduce, a dead input pipeline or a finished notebook? Interactive work "
        "can say so with the spec's idle_exempt"
    ),
}


@dataclass(frozen=True)
class Outcome:
    status: JobStatus
    reason: Reason | None
    message: str
    exit_code: int | None
    signal: int | None = None  #: the signal that ended the program, if one did


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


#: What the scheduler kills a job for at once (no grace), and its words when it left none.
KILLED_FOR = {
    Reason.memory_cap_exceeded: "went over its GPU memory cap",
    Reason.placement_violation: "used a GPU it was not given",
}

#: How far back from its log's end an out-of-memory message counts as why a program ended.
OOM_LINES = 50
#: Out-of-memory words in a log: TensorFlow's, PyTorch's, then JAX's (XLA's).
OOM_MARKERS = (
    "ResourceExhaustedError",
    "OOM when allocating",
    "CUDA out of memory",
    "RESOURCE_EXHAUSTED: Out of memory",
)


def classify(
    *,
    exit_info: ExitRecord | Mapping[str, Any] | None,
    detail: str | None,
    stop_reason: Reason | None,
    time_limit_s: float | None,
    builtin: bool = True,
    log_tail: Sequence[str] = (),
    preempted_by: int | None = None,
) -> Outcome:
    """Judges a job from the runner's `exit.json`, the words left about its end (`detail`:
    the training process's `failed` event, or the scheduler's over-cap kill), whether the
    scheduler stopped it (for `preempted_by`, when preempted), and its last log lines (an
    out-of-memory message in a user's own program; the stacks a crash left).

    Exit codes mean something only for gpuq's own training process (`builtin`); a user's
    program may use any code. An `exit.json` that breaks the contract (`ExitRecord`)
    counts as none: the job's processes can write it."""
    record = exit_info if isinstance(exit_info, ExitRecord) else exit_record(exit_info)
    code = record.exit_code if record is not None else None
    stopped = _stopped_by_gpuq(stop_reason, detail, code, time_limit_s, preempted_by)
    if stopped is not None:
        return stopped
    if record is None:
        return Outcome(
            JobStatus.failed,
            Reason.worker_lost,
            "the job's runner ended without recording an exit (killed, or the host restarted)",
            None,
        )
    if record.on_node:
        return _on_node(record, detail, builtin, log_tail)
    return _ended_on_its_own(record, detail, builtin, log_tail)


def _stopped_by_gpuq(
    stop_reason: Reason | None,
    detail: str | None,
    code: int | None,
    time_limit_s: float | None,
    preempted_by: int | None,
) -> Outcome | None:
    """The outcome of a job gpuq (or its owner) stopped, for that reason; None if it was
    not stopped, or a preempted job ended well before it could be."""
    if stop_reason == Reason.time_limit:
        return Outcome(
            JobStatus.timed_out,
            Reason.time_limit,
            f"stopped after reaching its time limit of {time_limit_s:g} s",
            code,
        )
    if stop_reason in KILLED_FOR:
        said = detail or KILLED_FOR[stop_reason]
        return Outcome(JobStatus.failed, stop_reason, f"{said}: {HINTS[stop_reason]}", code)
    if stop_reason == Reason.idle:
        said = detail or "held its GPUs without training"
        return Outcome(JobStatus.failed, Reason.idle, f"{said}: {HINTS[Reason.idle]}", code)
    if stop_reason == Reason.early_stopped:
        said = detail or "stopped early: its sweep's stopping rule found it trailing the others"
        return Outcome(JobStatus.cancelled, Reason.early_stopped, said, code)
    if stop_reason == Reason.preempted and code != 0:
        said = (
            f"preempted by job {preempted_by}, which needed its GPUs"
            if preempted_by is not None
            else detail or "preempted"
        )
        return Outcome(
            JobStatus.queued,
            Reason.preempted,
            f"{said}; it is queued again and resumes from its last checkpoint",
            code,
        )
    if stop_reason == Reason.cancelled_by_user:
        return Outcome(
            JobStatus.cancelled, Reason.cancelled_by_user, "cancelled by its owner", code
        )
    return None


def _ended_on_its_own(
    record: ExitRecord, detail: str | None, builtin: bool, log_tail: Sequence[str]
) -> Outcome:
    """The outcome of a job on one node that nobody stopped, from its runner's record."""
    code = record.exit_code
    if record.terminal_closed:
        return Outcome(
            JobStatus.cancelled,
            Reason.terminal_closed,
            "its terminal went away (closed, or never attached): a session ends with it",
            code,
        )
    if record.spawn_error is not None:
        return Outcome(JobStatus.failed, Reason.launch_error, record.spawn_error, code)
    if code == 0:
        said = "trained and saved" if builtin else "the program exited with code 0"
        return Outcome(JobStatus.succeeded, None, said, 0)
    if code is None:
        return _ended_by_signal(record, builtin, log_tail)
    return _ended_with_code(code, detail, builtin, log_tail)


def _ended_by_signal(record: ExitRecord, builtin: bool, log_tail: Sequence[str]) -> Outcome:
    """A program with no exit code: the kernel's OOM killer, or another signal."""
    number = record.signal if record.signal is not None and 0 < record.signal < 128 else None
    if record.oom_killed:
        return Outcome(
            JobStatus.failed,
            Reason.host_oom,
            "the kernel's out-of-memory killer stopped the training process (host memory "
            f"ran out): {HINTS[Reason.host_oom]}",
            None,
            number,
        )
    number = number or 0
    return Outcome(
        JobStatus.failed, Reason.signal, _killed(number, builtin, log_tail), None, number or None
    )


def _ended_with_code(
    code: int, detail: str | None, builtin: bool, log_tail: Sequence[str]
) -> Outcome:
    """A program that exited non-zero: the code's meaning for gpuq's own training, an
    out-of-memory message in a user's program's log, or the code alone."""
    reason = REASONS.get(code, Reason.nonzero_exit) if builtin else Reason.nonzero_exit
    said = detail or f"the {'training process' if builtin else 'program'} exited with code {code}"
    last = log_tail[-OOM_LINES:]
    oom = next((line for line in reversed(last) if any(m in line for m in OOM_MARKERS)), None)
    if reason == Reason.nonzero_exit and oom is not None and detail is None:
        reason, said = Reason.gpu_oom, f"ran out of GPU memory ({oom.strip()[:300]})"
    hint = HINTS.get(reason)
    return Outcome(JobStatus.failed, reason, f"{said}: {hint}" if hint else said, code)


def _killed(number: int, builtin: bool, log_tail: Sequence[str]) -> str:
    """Why a program that a signal ended is gone: a crash says where, if its log says."""
    who = "training process" if builtin else "program"
    if number not in CRASH_SIGNALS:
        return f"the {who} was killed by {_signal_name(number)}" + (
            "; SIGKILL often means the host ran out of memory" if number == 9 else ""
        )
    said = f"the {who} crashed ({_signal_name(number)})"
    site = crash_site(log_tail)
    if site is None:
        return f"{said}; its log holds no Python stack"
    frame, own = site
    where = f"in {frame}" if own else f"outside Python, its main thread in {frame}"
    return f"{said} {where}; the stack is in the log"


def _on_node(
    record: ExitRecord, detail: str | None, builtin: bool, log_tail: Sequence[str]
) -> Outcome:
    """A job on several nodes that one node ended (`nodes.job_end` named it): judged as
    that node's exit, its name first (a host name: `ExitRecord.node`; its rank if it never
    announced one). The job's own words (`detail`) are the chief's."""
    node = record.node or f"rank {record.node_rank}"
    if record.node_lost:
        return Outcome(
            JobStatus.failed,
            Reason.worker_lost,
            f"node {node}: its gpuq worker ended without recording how the job's process "
            "ended (killed, or the node went down)",
            None,
        )
    own = record.model_copy(update={"node": None, "node_rank": None})
    judged = classify(
        exit_info=own,
        detail=detail if record.node_rank == 0 else None,
        stop_reason=None,
        time_limit_s=None,
        builtin=builtin,
        log_tail=[line for line in log_tail if line.startswith(f"[{node}] ")],
    )
    return replace(judged, message=f"node {node}: {judged.message}")
