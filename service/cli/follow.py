"""`gpuq run` in the foreground, as `srun` is: a line on stderr when the job is accepted
and at each change of its state, the program's output on stdout as it comes, and the
program's exit code at the end (`exit_code_of`).

Ctrl-C cancels the job and follows it to its end; a second Ctrl-C leaves at once. If the
terminal goes away, the job goes on: `gpuq logs -f ID` follows it again.
"""

import json
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import Any, TypeVar

from gpuq.contract.states import TERMINAL
from gpuq.http import ApiError, Client
from service.cli.job_summary import nodes_text
from service.cli.jobs import gpus_text, print_output
from service.cli.options import note

T = TypeVar("T")


class RunExit(IntEnum):
    """How `gpuq run` and `gpuq shell` exit when gpuq, not the program, ended the job
    (otherwise: the program's code, or 128 + the signal that killed it)."""

    cancelled = 121  #: cancelled (`gpuq cancel`, an admin, a failed dependency, a closed terminal)
    stopped = 122  #: ended by gpuq for its memory cap, a GPU it was not given, or the idle rule
    lost = 123  #: its runner was lost (killed, or the host restarted)
    time_limit = 124  #: its `--time` ran out (as `timeout` exits)
    not_started = 127  #: its program could not be started (as a shell's "not found")
    interrupted = 130  #: you pressed Ctrl-C, and the job was cancelled


_BY_REASON = {
    "time_limit": RunExit.time_limit,
    "memory_cap_exceeded": RunExit.stopped,
    "placement_violation": RunExit.stopped,
    "idle": RunExit.stopped,
    "worker_lost": RunExit.lost,
    "launch_error": RunExit.not_started,
    "invalid_spec": RunExit.not_started,
}


def exit_code_of(job: dict[str, Any]) -> int:
    """The exit code that tells how `job` ended."""
    if job["status"] == "succeeded":
        return 0
    if job.get("reason") in _BY_REASON:
        return _BY_REASON[job["reason"]]
    if job["status"] == "cancelled":
        return RunExit.cancelled
    if job.get("exit_signal"):
        return 128 + job["exit_signal"]
    return job.get("exit_code") or 1


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def waiting_text(job: dict[str, Any]) -> str:
    """`3rd in line, waiting for 1 GPU with 8192 MiB free`, or what is known of it."""
    parts = []
    if job.get("queue_position"):
        parts.append(f"{_ordinal(job['queue_position'])} in line")
    if job.get("wait_reason"):
        parts.append(job["wait_reason"])
    return ", ".join(parts)


def state_line(job: dict[str, Any]) -> str:
    """A job's state in one line, with where it runs or why it waits."""
    head = f"job {job['id']} {job['status']}"
    if job["status"] == "queued":
        why = waiting_text(job)
        return f"{head}: {why}" if why else head
    if job["status"] in ("starting", "running"):
        gpus = job.get("assigned_gpus") or []
        if job.get("nodes"):
            return f"{head} on {nodes_text(job['nodes'])}"
        if job.get("executor") == "slurm":
            return f"{head} under Slurm (job {job.get('executor_job_id') or '-'})"
        if not gpus:
            return f"{head} on the CPU"
        cap = job.get("spec", {}).get("resources", {}).get("memory_mb")
        each = "" if cap is None else f" ({cap} MiB{' each' if len(gpus) > 1 else ''})"
        return f"{head} on {gpus_text(gpus)}{each}"
    return end_line(job)


def end_line(job: dict[str, Any]) -> str:
    text = f"job {job['id']} {job['status']}"
    if job.get("reason"):
        text += f" ({job['reason']})"
    if job.get("message") and job["status"] != "succeeded":
        text += f": {job['message']}"
    return text


def accepted(client: Client, job: dict[str, Any]) -> dict[str, Any]:
    """Says the job was accepted and, once the scheduler has looked at it (or after a
    second), where it stands in the queue; the job as then seen."""
    if job["status"] == "queued" and not job.get("wait_reason"):
        job = client.json(
            "GET", f"/v1/jobs/{job['id']}", params={"wait_s": 1.0, "since": job["revision"]}
        )
    note(state_line(job) if job["status"] == "queued" else f"job {job['id']} queued")
    return job


def follow_job(client: Client, job: dict[str, Any], *, as_json: bool) -> int:
    """Follows a just-accepted job to its end; the exit code `gpuq run` ends with."""
    job_id = job["id"]
    output = threading.Thread(target=_copy_output, args=(client, job_id, as_json), daemon=True)

    def to_the_end() -> dict[str, Any]:
        seen = accepted(client, job)
        if as_json:
            print(json.dumps(seen), flush=True)
        output.start()
        shown = state_line(seen) if seen["status"] == "queued" else None
        return print_changes(client.changes(job_id), shown)

    def leave() -> None:
        note(f"leaving; job {job_id} is still being stopped (`gpuq show {job_id}`)")

    try:
        last, pressed = interruptible(
            to_the_end,
            (signal.SIGINT,),
            first=lambda: cancel_saying_so(client, job_id),
            second=leave,
        )
    except Interrupted:
        return RunExit.interrupted
    if output.is_alive():
        output.join(timeout=30)  # the log ends once the job has and its output is read
    if as_json:
        print(json.dumps(last), flush=True)
    note(end_line(last))
    if pressed and last["status"] == "cancelled":
        return RunExit.interrupted
    return exit_code_of(last)


class Interrupted(Exception):
    """The user left before the work was done."""


def interruptible(
    work: Callable[[], T],
    signals: tuple[signal.Signals, ...],
    *,
    first: Callable[[], None],
    second: Callable[[], None] | None = None,
) -> tuple[T, bool]:
    """Runs `work` in a thread of its own while this one answers `signals`: the first
    calls `first`; the next (the first itself, without `second`) calls `second` and
    raises `Interrupted`. Returns what `work` returned and whether a signal came.

    No exception is ever raised inside `work`'s requests: a Ctrl-C that interrupted one
    half-way could leave the connection pool locked, and the cancel after it would hang.
    """
    done = threading.Event()
    result: dict[str, T] = {}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    came: queue.SimpleQueue[int] = queue.SimpleQueue()
    previous = {sig: signal.signal(sig, lambda number, _: came.put(number)) for sig in signals}
    presses = 0
    try:
        threading.Thread(target=run, daemon=True).start()
        while not done.is_set():
            try:
                came.get(timeout=0.1)
            except queue.Empty:
                continue
            presses += 1
            if presses == 1:
                first()
            if presses > 1 or second is None:
                if second is not None:
                    second()
                raise Interrupted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failure:
        raise failure[0]
    return result["value"], presses > 0


def print_changes(
    changes: Iterator[dict[str, Any]], shown: str | None, until: frozenset[str] = TERMINAL
) -> dict[str, Any]:
    """A line per new state (and per new reason to wait) until a state in `until` (the
    end, or the end is not shown); that job."""
    last: dict[str, Any] = {}
    for job in changes:
        last = job
        line = state_line(job)
        if job["status"] in until or job["status"] in TERMINAL:
            break
        if line != shown and not (job["status"] == "queued" and not waiting_text(job)):
            note(line)
            shown = line
    return last


def cancel_saying_so(client: Client, job_id: int, what: str = "job") -> None:
    """Cancels job `job_id` (or, with `what="sweep"`, that sweep) and says so."""
    try:
        client.json("POST", f"/v1/{what}s/{job_id}/cancel")
    except ApiError as exc:
        note(f"could not cancel {what} {job_id}: {exc}")
        return
    note(f"cancelling {what} {job_id} (Ctrl-C again leaves at once; it is stopped all the same)")


def _copy_output(client: Client, job_id: int, as_json: bool) -> None:
    """The job's output to stdout as it comes (JSON lines with `as_json`)."""
    try:
        print_output(
            job_id, client.stream(f"/v1/jobs/{job_id}/logs", follow="true"), as_json=as_json
        )
    except ApiError as exc:
        note(f"the output stopped: {exc}")
