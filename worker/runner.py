"""The runner: a small parent (no TensorFlow) that outlives the training process.

Run as `python -m worker.runner RUN_DIR` in its own session (or forked by the
launcher). It starts the process that `spec.json` calls for (`launch_plan`, recorded in
`launch.json`) with output to `output.log`, or hands the job to a warm training process
it started earlier (`standby`); it records the process's pid and start time in
`runner.json`, touches `heartbeat` every 2 s while the job runs, and writes `exit.json`
when training ends, so the outcome is known even if `gpuq serve` was down at the time. It
imports the standard library only: every job's start waits for it.
"""

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuq.contract.account import Account
from gpuq.contract.events import Event, EventWriter
from gpuq.contract.exits import ExitCode
from gpuq.contract.nodes import job_end
from gpuq.contract.rundir import RunDir, write_json_atomic
from worker import fenced
from worker.launch_plan import launch_plan
from worker.oom import oom_kills
from worker.runner_records import end_with, record_start
from worker.snapshot_copy import BadSnapshot

HEARTBEAT_S = 2.0


def main(argv: list[str]) -> int:
    """A cold start: the runner starts the job's process itself."""
    began = time.time()
    run = RunDir(Path(argv[1]))
    survive_group_signals()
    fenced.job_oom_score()  # started by gpuq itself, not the launcher: its score
    if not fenced.await_inside(os.environ.get("GPUQ_FENCE")):
        # Its program must not run unfenced.
        return never_started(run, "gpuq could not move the job into its cgroups (its fence)")
    try:
        plan = launch_plan(run)
    except BadSnapshot as exc:
        return never_started(run, str(exc))
    # A record of what ran, for people; nothing reads it back.
    write_json_atomic(run.launch, plan, durable=False)
    if plan.get("terminal"):
        from worker.session import run_session  # only sessions need the terminal's modules

        return run_session(run, plan, began)
    args = plan["argv"]
    # Under Slurm the runner is the batch step, and `scancel --batch` or the time limit's
    # warning (`--signal=B:TERM@...`) reaches it alone: training gets its own process group
    # and the runner passes those signals on to it.
    batch_step = "SLURM_JOB_ID" in os.environ
    try:
        with open(run.log, "ab", buffering=0) as log:
            child = subprocess.Popen(
                args,
                env={**os.environ, **plan["env"]},
                cwd=plan["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0 if batch_step else None,
            )
    except OSError as exc:
        return never_started(run, f"cannot start {args[0]!r}: {exc}")
    if batch_step:
        # On several nodes the job's processes are `srun`'s tasks, and a signal to `srun`
        # would kill them outright: Slurm itself signals every step of the job instead.
        pass_on = _signal_steps if plan.get("nodes", 1) > 1 else _pass_on
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda number, _: pass_on(child.pid, number))
    return supervise(
        run,
        child,
        began=began,
        running_at_start=plan["running_at_start"],
        nodes=plan.get("nodes", 1),
    )


def become(request: dict[str, Any], keep: int | None = None) -> RunDir:
    """Makes this freshly forked process the runner a launcher request describes: the
    owner's account, output to the job's log, its environment, its run directory; every
    file but stdio (and `keep`) closed: the launcher's pipes, pidfds and sockets. It enters
    the job's fence first, while it is still root (`fenced`)."""
    fenced.enter(request.get("fence") or ())
    if request.get("run_as"):
        Account.from_json(request["run_as"]).become()
    run_dir = Path(request["run_dir"])
    output_to_log(run_dir)
    close_inherited(keep)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(run_dir)
    return RunDir(run_dir)


def output_to_log(run_dir: Path) -> None:
    """Standard output and error to the job's `output.log` (made the caller's, 0600, if it
    is not there yet), standard input from /dev/null."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(
        run_dir / "output.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
    )
    for fd, target in ((devnull, 0), (log, 1), (log, 2)):
        os.dup2(fd, target)
    os.close(log)
    os.close(devnull)


def forked(body: Callable[[], int]) -> int:
    """Forks: the child runs `body` and exits with what it returns (70, with the traceback
    on stderr, if it raised), never returning here; the parent gets the child's pid."""
    pid = os.fork()
    if pid == 0:
        # The launcher cannot be hung up (`gpuq.contract.processes.never_hung_up`); its
        # runners and what they start can, as any program on a terminal expects.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        code = 70
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def never_started(run: RunDir, why: str) -> int:
    """Records that the job's program never started, and why (`spawn_error`)."""
    exit_record = {
        "exit_code": ExitCode.launch_error.value,
        "signal": None,
        "spawn_error": why,
        "finished_at": time.time(),
    }
    write_json_atomic(run.exit, exit_record)
    return ExitCode.launch_error


def close_inherited(keep: int | None = None) -> None:
    """Closes every file of a forked process but stdio (and `keep`)."""
    last = os.sysconf("SC_OPEN_MAX")
    if keep is None:
        os.closerange(3, last)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, last)


def survive_group_signals() -> None:
    """The job's whole process group gets SIGTERM on cancel; the runner must live on to
    record how training ended. A handler (not SIG_IGN) is reset in a child on exec."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)


def supervise(
    run: RunDir,
    child: "subprocess.Popen[bytes]",
    *,
    began: float,
    running_at_start: bool,
    nodes: int = 1,
) -> int:
    """Records the job's process in `runner.json`, touches `heartbeat` until it exits (from
    `HEARTBEAT_S` on: a job that ends sooner has no heartbeat, only its `exit.json`), and
    writes `exit.json`; the runner's own exit code. On several `nodes` the process is
    `srun`, and the nodes' own records say how the job ended."""
    events = EventWriter(run.events)
    record_start(run, child, began)
    kills_before = oom_kills()
    if running_at_start:
        events.emit(Event.running, pid=child.pid)
    code = wait_beating(run, child)
    kills_after = oom_kills()
    if nodes > 1:
        write_json_atomic(run.exit, {**job_end(run, nodes, code), "finished_at": time.time()})
        return code if code >= 0 else 128 - code
    return end_with(
        run,
        code,
        # The kernel's OOM killer struck while this job ran, and the job died by SIGKILL.
        oom_killed=code == -signal.SIGKILL
        and None not in (kills_before, kills_after)
        and kills_after > kills_before,  # type: ignore[operator]
    )


def wait_beating(run: RunDir, child: "subprocess.Popen[bytes]") -> int:
    """Waits for `child` to exit, touching `heartbeat` every `HEARTBEAT_S` meanwhile; its
    exit code. The exit is seen the moment it happens (a pidfd), where `Popen.wait` with
    a timeout would find it at its next poll, up to 50 ms later."""
    exited = select.poll()
    pidfd = os.pidfd_open(child.pid)
    try:
        exited.register(pidfd, select.POLLIN)
        while not exited.poll(HEARTBEAT_S * 1000):
            run.heartbeat.touch()
    finally:
        os.close(pidfd)
    return child.wait()


def _pass_on(group: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, number)


def _signal_steps(_: int, number: int) -> None:
    """Signal `number` to every step of this Slurm job but the batch step (this runner):
    each node's worker passes it on to the job's process there."""
    name = signal.Signals(number).name.removeprefix("SIG")
    with contextlib.suppress(OSError):
        subprocess.Popen(
            ["scancel", f"--signal={name}", os.environ["SLURM_JOB_ID"]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
