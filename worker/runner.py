"""The runner: a small parent (no TensorFlow) that outlives the training process.

Run as `python -m worker.runner RUN_DIR` in its own session. It starts the process that
`launch.json` names (the scheduler wrote it) with output to `output.log`, records its pid
and start time in `runner.json`, touches `heartbeat` while it waits, and writes
`exit.json` when training ends, so the outcome is known even if `gpuq serve` was down at
the time. It imports the standard library only: every job's start waits for it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from worker.events import EventWriter
from worker.oom import oom_kills
from worker.rundir import RunDir, write_json_atomic

HEARTBEAT_S = 2.0


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (from /proc), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # comm (field 2) may contain spaces; fields after the closing paren are fixed
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def main(argv: list[str]) -> int:
    began = time.time()
    run = RunDir(Path(argv[1]))
    # The job's whole process group gets SIGTERM on cancel; the runner must live on to
    # record how training ended. A handler (not SIG_IGN) is reset in the child on exec.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    events = EventWriter(run.events)
    plan = json.loads(run.launch.read_text())
    args = plan["argv"]
    try:
        with open(run.log, "ab", buffering=0) as log:
            child = subprocess.Popen(
                args,
                env={**os.environ, **plan["env"]},
                cwd=plan["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        spawned = time.time()
    except OSError as exc:
        events.emit("failed", reason="launch_error", message=f"cannot start {args[0]!r}: {exc}")
        write_json_atomic(run.exit, {"exit_code": 127, "signal": None, "finished_at": time.time()})
        return 127
    write_json_atomic(
        run.runner,
        {
            "runner_pid": os.getpid(),
            "runner_start_ticks": process_start_ticks(os.getpid()),
            "train_pid": child.pid,
            "train_start_ticks": process_start_ticks(child.pid),
            # Wall-clock times, for start-up latency (`bench.training`).
            "runner_began_at": began,
            "train_spawned_at": spawned,
        },
        durable=False,  # pids mean nothing after a power cut
    )
    kills_before = oom_kills()
    if plan["running_at_start"]:
        events.emit("running", pid=child.pid)
    while True:
        run.heartbeat.touch()
        try:
            code = child.wait(timeout=HEARTBEAT_S)
            break
        except subprocess.TimeoutExpired:
            continue
    kills_after = oom_kills()
    write_json_atomic(
        run.exit,
        {
            "exit_code": code if code >= 0 else None,
            "signal": -code if code < 0 else None,
            # The kernel's OOM killer struck while this job ran, and the job died by SIGKILL.
            "oom_killed": code == -signal.SIGKILL
            and None not in (kills_before, kills_after)
            and kills_after > kills_before,  # type: ignore[operator]
            "finished_at": time.time(),
        },
    )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
