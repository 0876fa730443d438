"""What the runner starts: gpuq's own training process, or a `command` job's program."""

import os
import shutil
import sys
from pathlib import Path

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


def process_for(run: RunDir, runspec: RunSpec) -> tuple[list[str], dict[str, str], Path]:
    """argv, environment and working directory of the job's main process."""
    env = dict(os.environ)
    command = runspec.spec.command
    if command is None:
        return [sys.executable, "-m", "worker.train", str(run.path)], env, run.path
    env.update(command.env)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(hook_path(run)), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env[ENV] = device_plan(runspec).to_json()
    return list(command.argv), env, Path(command.workdir) if command.workdir else run.path
