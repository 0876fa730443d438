"""What a runner starts: gpuq's own training process, or a `command` job's program.

The runner works it out from `spec.json` with the standard library alone (no pydantic:
every job's start waits for it) and records it in `launch.json`.
"""

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from gpuq import contract
from gpuq.contract.device_plan import ENV, DevicePlan
from gpuq.contract.rundir import RunDir

HOOK = Path(__file__).parent / "hook" / "sitecustomize.py"
#: the `gpuq` package (found by a module of its own that imports nothing heavy): everything
#: the hook imports is in it
PACKAGE = Path(contract.__file__).parent.parent


def hook_path(run: RunDir) -> Path:
    """A folder holding only the start-up hook and the `gpuq` package, for PYTHONPATH
    (made whole by whichever of a job's nodes comes first: each writes beside, then
    renames)."""
    folder = run.path / "pythonpath"
    folder.mkdir(exist_ok=True)
    partial = folder / f".sitecustomize.{os.getpid()}"
    shutil.copy(HOOK, partial)
    os.replace(partial, folder / "sitecustomize.py")
    with contextlib.suppress(FileExistsError):
        (folder / "gpuq").symlink_to(PACKAGE, target_is_directory=True)
    return folder


def launch_plan(
    run: RunDir, runner_env: dict[str, str], *, on_node: bool = False
) -> dict[str, Any]:
    """`launch.json`: argv, working directory and the variables the job's process adds to
    its runner's environment `runner_env`; `running_at_start` for programs gpuq cannot see
    inside, which count as running once started. Makes the attempt's folders (checkpoints,
    artifacts, TensorBoard) first. A job on several nodes starts a gpuq worker on each
    (`worker.node`) through Slurm's `srun`; each (`on_node`) then starts the job's own
    process."""
    run.create()  # its folders, where the scheduler left them to the runner
    runspec = json.loads(run.spec.read_text())
    command = runspec["spec"].get("command")
    nodes = int((runspec["spec"].get("resources") or {}).get("nodes") or 1)
    if nodes > 1 and not on_node:
        argv = [
            "srun",
            # One node's worker failing ends the others: no job hangs in an all-reduce.
            "--kill-on-bad-exit=1",
            f"--nodes={nodes}",
            f"--ntasks={nodes}",
            "--ntasks-per-node=1",
            sys.executable,
            "-P",
            "-m",
            "worker.node",
            str(run.path),
        ]
        return {
            "argv": argv,
            "env": {},
            "cwd": str(run.path),
            "running_at_start": command is not None,
            "nodes": nodes,
        }
    if command is None:
        argv = [sys.executable, "-P", "-m", "worker.train", str(run.path)]
        return {"argv": argv, "env": {}, "cwd": str(run.path), "running_at_start": False}
    env = dict(command.get("env") or {})
    inherited = env.get("PYTHONPATH", runner_env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join([str(hook_path(run)), *([inherited] if inherited else [])])
    env[ENV] = DevicePlan.from_dict(runspec["devices"]).to_json()
    return {
        "argv": list(command["argv"]),
        "env": env,
        "cwd": command.get("workdir") or str(run.path),
        "running_at_start": True,
        # a session's program gets a terminal of its own (`worker.session`)
        "terminal": runspec["spec"].get("kind") == "session",
    }
