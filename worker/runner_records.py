"""What a runner writes of its job's process in the run directory: `runner.json` when the
process starts, `exit.json` when it ends. Standard library only, like the runner and the
session's runner that both write them."""

import os
import subprocess
import time
from typing import Any

from gpuq.contract.processes import process_start_ticks
from gpuq.contract.rundir import RunDir, write_json_atomic


def end_with(run: RunDir, code: int, **said: Any) -> int:
    """Writes `exit.json` for a program that ended with `code` (`Popen`'s: minus the
    signal that killed it), with what else is `said` of its end; the runner's own exit
    code (128 + a signal, as a shell says)."""
    record = {"exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None}
    write_json_atomic(run.exit, {**record, **said, "finished_at": time.time()})
    return code if code >= 0 else 128 - code


def record_start(run: RunDir, child: "subprocess.Popen[bytes]", began: float) -> None:
    """`runner.json`: this runner's and the job's process, for people and tools (gpuq
    itself signals only the runner it recorded)."""
    write_json_atomic(
        run.runner,
        {
            "runner_pid": os.getpid(),
            "runner_start_ticks": process_start_ticks(os.getpid()),
            "train_pid": child.pid,
            "train_start_ticks": process_start_ticks(child.pid),
            # Wall-clock times, for start-up latency (`bench.training`).
            "runner_began_at": began,
            "train_spawned_at": time.time(),
        },
        durable=False,  # pids mean nothing after a power cut
    )
