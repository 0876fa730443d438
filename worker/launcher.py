"""The launcher: a pre-started parent that forks a runner per job in about a millisecond,
and keeps warm training processes ready for builtin jobs.

`gpuq serve` starts it once (`python -m worker.launcher [--warm N]`) and writes one
JSON line per job to its stdin: `{"run_dir": ..., "env": {...}, "run_as": {...} | null,
"warm": bool, "fence": [cgroup folders]}`. A `warm` request (a builtin Keras job) goes
to a standby runner whose warm training process has already imported TensorFlow
(`standby`, `warm`), when one is ready and its code is current; any other request forks a
runner: the child leaves for a session of its own, enters the job's cgroups (`fenced`),
drops to the job owner's account where `run_as` names one (GPUQ_RUN_AS=owner: before
anything of the job runs), points its output at the job's `output.log` and becomes
`worker.runner` for that run directory, with everything already imported. The launcher
answers each request with `{"pid": N, "warm": bool}` (or `{"error": "..."}`) on stdout,
and tells of what happens meanwhile on `--events-fd` (its stdout unless given):
`{"exited": N, "status": S}` once it has reaped a runner, which is how the scheduler
learns that a job ended, `{"pool": [...]}` whenever its standbys change, and
`{"warning": "..."}`. Apart, the answer goes straight back to the caller that waits for
it, with no thread between them.

It keeps N standbys (a used one never takes a second job: a fresh one starts behind it),
replaces one that dies while idle, backs off when they cannot start (no TensorFlow), and
retires them all when gpuq's code or TensorFlow changes on disk. It is single-threaded
(forking is safe: it never imports TensorFlow) and uses the standard library only. When
its stdin closes (the service stopped or died) it ends its standbys and exits; runners
carry on, adopted by init, and the next `gpuq serve` finds them as it always does.

A cold start goes to a spare runner, forked ahead of its job (`spares`, `--spares`, one by
default), when one is ready: the scheduler's start then waits for no fork. With
`--hook-dir` the launcher keeps the start-up hook's folder (a command job's PYTHONPATH)
there, made once for every runner it forks rather than once in each run directory.
"""

import argparse
import contextlib
import functools
import json
import os
import selectors
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuq.contract.processes import never_hung_up, spared_by_oom_killer
from worker import launch_plan, runner
from worker.spares import Spares
from worker.warm_pool import WarmPool

READ_CHUNK = 65536


def _child(request: dict[str, Any], ready: int) -> int:
    """Runs in the forked child: becomes the job's runner; returns its exit code."""
    os.setsid()
    os.write(ready, b".")  # the session exists: signals to its group now reach it
    run = runner.become(request)
    return runner.main(["worker.runner", str(run.path)])


def spawn(request: dict[str, Any]) -> int:
    """Forks the runner; returns its pid once it leads its own session."""
    readable, ready = os.pipe()

    def child() -> int:
        os.close(readable)
        return _child(request, ready)

    pid = runner.forked(child)
    os.close(ready)
    try:
        os.read(readable, 1)  # empty if the child died first; its exit is reported anyway
    finally:
        os.close(readable)
    return pid


def write_line(fd: int, message: dict[str, Any]) -> None:
    with contextlib.suppress(BrokenPipeError):  # the service is gone; stdin ends next
        os.write(fd, (json.dumps(message) + "\n").encode())


class HookFolder:
    """The start-up hook's folder that the launcher keeps in `under` for the runners it
    forks (`launch_plan.share_hook`). If it cannot be made, the launcher says so once and
    each runner makes its own, as one started without a launcher does."""

    def __init__(self, under: Path | None, tell: Callable[[dict[str, Any]], None]) -> None:
        self.under = under
        self.tell = tell

    def share(self) -> bool:
        """Makes the folder if it is not there, or not the hook's as it is now on disk;
        True if the runners forked from now on get another folder than before."""
        before = launch_plan.shared_hook
        if self.under is not None:
            try:
                launch_plan.share_hook(self.under)
            except OSError as exc:
                self.tell({"warning": f"could not make the start-up hook's folder: {exc}"})
                self.under = launch_plan.shared_hook = None
        return launch_plan.shared_hook != before


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="worker.launcher")
    parser.add_argument("--warm", type=int, default=0, help="standby runners to keep ready")
    parser.add_argument(
        "--events-fd", type=int, default=1, help="where exits, standbys and warnings go"
    )
    parser.add_argument(
        "--hook-dir", type=Path, help="where to keep the start-up hook's folder for runners"
    )
    parser.add_argument(
        "--spares", type=int, default=1, help="runners to keep forked ahead of their jobs"
    )
    args = parser.parse_args(argv)
    never_hung_up()
    spared_by_oom_killer()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, None)
    tell = functools.partial(write_line, args.events_fd)
    pool = WarmPool(args.warm, selector, tell)
    hook = HookFolder(args.hook_dir, tell)
    hook.share()  # before the first standby or spare is forked
    spares = Spares(args.spares)
    pending = b""
    while True:
        pool.top_up()
        spares.top_up()
        waits = [s for s in (pool.next_check_s(), spares.due_in_s()) if s is not None]
        for key, _ in selector.select(min(waits, default=None)):
            if key.data is None:  # a request, or the service went away
                chunk = os.read(0, READ_CHUNK)
                if not chunk:
                    pool.retire_all()
                    spares.retire_all()
                    return 0
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    _start_job(line, pool, spares, selector, hook)
            elif isinstance(key.data, int):  # a runner exited
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(key.data, 0)
                tell({"exited": key.data, "status": os.waitstatus_to_exitcode(status)})
            else:
                key.data(key)  # the pool's own: a standby's word, or its exit
        pool.check_code()


def _start_job(
    line: bytes,
    pool: WarmPool,
    spares: Spares,
    selector: selectors.BaseSelector,
    hook: HookFolder,
) -> None:
    """Starts the job a request line describes: on a warm standby if it asks for one and
    one is ready, else on a spare runner, else on a freshly forked one (each finds the
    start-up hook's folder made already)."""
    try:
        request = json.loads(line)
        pid = pool.take(request) if request.get("warm") else None
        warm = pid is not None
        if pid is None:
            if hook.share():  # the spares know another folder
                spares.retire_all()
            pid = spares.take(line) or spawn(request)
    except (OSError, ValueError, KeyError) as exc:
        write_line(1, {"error": str(exc)})
        return
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
    write_line(1, {"pid": pid, "warm": warm})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
