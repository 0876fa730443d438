"""What a runner starts: gpuq's own training process, or a `command` job's program.

The scheduler decides it and writes it to `launch.json`, so the runner itself needs no
more than the standard library and starts in a few milliseconds.
"""

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from worker.devices import ENV, DevicePlan
from worker.rundir import RunDir
from worker.runspec import RunSpec

HOOK = Path(__file__).parent / "hook" / "sitecustomize.py"
PACKAGE = Path(__file__).parent


def device_plan(runspec: RunSpec) -> DevicePlan:
    d = runspec.devices
    return DevicePlan(d.mode, d.count, d.memory_limit_mb, d.memory_growth, d.replicas_per_gpu)


def hook_path(run: RunDir) -> Path:
    """A folder holding only the start-up hook and the `worker` package, for PYTHONPATH."""
    folder = run.path / "pythonpath"
    folder.mkdir(exist_ok=True)
    shutil.copy(HOOK, folder / "sitecustomize.py")
    link = folder / "worker"
    if not link.exists():
        link.symlink_to(PACKAGE, target_is_directory=True)
    return folder


def launch_plan(run: RunDir, runspec: RunSpec, runner_env: dict[str, str]) -> dict[str, Any]:
    """`launch.json`: argv, working directory and the variables the job's process adds to
    its runner's environment `runner_env`; `running_at_start` for programs gpuq cannot see
    inside, which count as running once started."""
    command = runspec.spec.command
    if command is None:
        argv = [sys.executable, "-m", "worker.train", str(run.path)]
        return {"argv": argv, "env": {}, "cwd": str(run.path), "running_at_start": False}
    env = dict(command.env)
    inherited = env.get("PYTHONPATH", runner_env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join([str(hook_path(run)), *([inherited] if inherited else [])])
    env[ENV] = device_plan(runspec).to_json()
    return {
        "argv": list(command.argv),
        "env": env,
        "cwd": command.workdir or str(run.path),
        "running_at_start": True,
    }
