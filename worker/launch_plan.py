"""What a runner starts: gpuq's own training process, or a `command` job's program.

The runner works it out from `spec.json` with the standard library alone (no pydantic:
every job's start waits for it) and records it in `launch.json`.
"""

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuq import contract
from gpuq.contract.device_plan import ENV, DevicePlan
from gpuq.contract.rundir import RunDir
from worker import snapshot_copy

HOOK = Path(__file__).parent / "hook" / "sitecustomize.py"
#: the `gpuq` package (found by a module of its own that imports nothing heavy): everything
#: the hook imports is in it
PACKAGE = Path(contract.__file__).parent.parent


#: The hook's folder that the launcher made for the runners it forks (`share_hook`); a
#: runner started any other way makes one in its run directory (`hook_path`).
shared_hook: Path | None = None
_shared_from: tuple[int, int, int] | None = None  #: the hook file it was made from (its stat)


def hook_path(run: RunDir) -> Path:
    """A folder holding only the start-up hook and the `gpuq` package, for PYTHONPATH: the
    launcher's (`shared_hook`) while it is whole, else one in the run directory (made
    whole by whichever of a job's nodes comes first: each writes beside, then renames)."""
    return _whole_shared() or _fill(run.path / "pythonpath")


def share_hook(under: Path) -> Path:
    """Makes `under/<digest>/` (the digest of the hook and of where `gpuq` is) for every
    runner this process forks from now on, unless it is there already: three new files
    fewer for each job's start. gpuq's own, read-only to jobs (they may run as their
    owners). Cheap to call before each start: the hook is read again only once it changed
    on disk."""
    global shared_hook, _shared_from
    stat = HOOK.stat()
    mark = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    if mark == _shared_from and (whole := _whole_shared()) is not None:
        return whole
    digest = hashlib.sha256(HOOK.read_bytes() + os.fsencode(PACKAGE)).hexdigest()[:16]
    folder = under / digest
    if not (folder / "sitecustomize.py").is_file():
        under.mkdir(exist_ok=True)
        under.chmod(0o755)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=under))
        try:
            _fill(partial)
            for path in (partial, partial / "sitecustomize.py"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            os.rename(partial, folder)
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
            if not (folder / "sitecustomize.py").is_file():  # not another launcher's
                raise
    shared_hook, _shared_from = folder, mark
    return folder


def _whole_shared() -> Path | None:
    """The launcher's hook folder (`shared_hook`) if it is there, hook and all."""
    if shared_hook is not None and (shared_hook / "sitecustomize.py").is_file():
        return shared_hook
    return None


def _fill(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    partial = folder / f".sitecustomize.{os.getpid()}"
    shutil.copy(HOOK, partial)
    os.replace(partial, folder / "sitecustomize.py")
    with contextlib.suppress(FileExistsError):
        (folder / "gpuq").symlink_to(PACKAGE, target_is_directory=True)
    return folder


def launch_plan(run: RunDir, *, on_node: bool = False) -> dict[str, Any]:
    """`launch.json`: argv, working directory and the variables the job's process adds to
    its runner's environment; `running_at_start` for programs gpuq cannot see inside,
    which count as running once started. Makes the attempt's folders (checkpoints,
    artifacts, TensorBoard) first. A job on several nodes starts a gpuq worker on each
    (`worker.node`) through Slurm's `srun`; each (`on_node`) then starts the job's own
    process."""
    run.create()  # its folders, where the scheduler left them to the runner
    if not on_node:
        snapshot_copy.unpack(run)
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
    # The hook's folder and the spec's own; never the runner's, which is where gpuq's code
    # comes from (`service.executors.environment.code_path`), not the job's.
    own = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(hook_path(run)), *([own] if own else [])])
    env[ENV] = DevicePlan.from_dict(runspec["devices"]).to_json()
    return {
        "argv": list(command["argv"]),
        "env": env,
        "cwd": _working_folder(run, command),
        "running_at_start": True,
        # a session's program gets a terminal of its own (`worker.session`)
        "terminal": runspec["spec"].get("kind") == "session",
    }


def _working_folder(run: RunDir, command: dict[str, Any]) -> str:
    """Where a command job's program starts: in its snapshot's copy (at the folder it was
    submitted from), in its `workdir`, or in its run folder."""
    if command.get("snapshot"):
        inside = run.code / command.get("snapshot_workdir", ".")
        try:
            inside.mkdir(parents=True, exist_ok=True)  # a folder with no file of its own
        except OSError as exc:  # a file of the snapshot's by that name, say
            message = f"cannot run in the snapshot's {inside}: {exc}"
            raise snapshot_copy.BadSnapshot(message) from exc
        return str(inside)
    return command.get("workdir") or str(run.path)
