"""`gpuq run`'s snapshot: the project as it is on disk now, stored on the server once (an
unchanged tree uploads nothing), and named by the job in place of its folder, so edits
after submit never reach it; with where the code came from (`provenance`).

A program's argument that is a relative path to something the snapshot does not hold (out
of the project, `--data ../data/x`, or ignored by git, `--data data/x.npz`) is made
absolute: the job runs in its own copy, where it would name nothing, and data is never
copied.
"""

import os
import re
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer

from gpuq import snapshots
from gpuq.client import Gpuq
from gpuq.http import Client
from service.cli.options import note

SnapshotFlag = Annotated[
    bool | None,
    typer.Option(
        "--snapshot/--no-snapshot",
        help="Run a copy of the project taken now: by default inside a git work tree (the "
        "files git would track, as they are on disk, less .gpuqignore's), with --snapshot "
        "also outside one; --no-snapshot runs in this folder as it is when the job starts.",
        show_default=False,
    ),
]
#: The size over which a snapshot is refused here, before anything is queued (the server
#: has its own limit: GPUQ_SNAPSHOT_MAX_MB).
DEFAULT_MAX_MB = 100


def with_snapshot(api: Client, spec: dict[str, Any], wanted: bool | None) -> dict[str, Any]:
    """`spec` (a command's, run from `command.workdir`) with the snapshot of its project:
    by default when the folder is inside a git work tree, always with `wanted`, never
    with `wanted=False` (the spec unchanged)."""
    command = spec["command"]
    folder = Path(command["workdir"]).resolve()  # as `collect` sees it, through any link
    if wanted is False:
        return spec
    project = snapshots.collect(folder, outside_git=wanted is True)
    if project is None:
        return spec
    if project.skipped:
        note(f"not in the snapshot (not files): {', '.join(project.skipped[:5])}")
    try:
        snapshots.check_size(project, max_mb())
        with tempfile.TemporaryDirectory(prefix="gpuq-snapshot-") as tmp:
            snapshot, tar = snapshots.snapshot_to_file(project, Path(tmp))
            stored = _upload_unless_held(api, snapshot.sha256, tar)
    except snapshots.SnapshotError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--snapshot'") from None
    note(
        f"snapshot {snapshot.sha256[:12]}: {snapshot.files} files, "
        f"{snapshot.size / 2**20:.1f} MiB ({'uploaded' if stored else 'already stored'})"
    )
    new_command = {k: v for k, v in command.items() if k != "workdir"}
    new_command["snapshot"] = snapshot.sha256
    new_command["snapshot_workdir"] = str(project.workdir)
    new_command["argv"] = [
        program_in(project, folder, command["argv"][0]),
        *unheld_made_absolute(command["argv"][1:], folder, project),
    ]
    provenance = {
        **snapshots.provenance(project),
        "folder": str(folder),
        "python": interpreter(command["argv"][0]),
    }
    return {**spec, "command": new_command, "provenance": provenance}


def of_submitted(api: Client, spec: Any, wanted: bool | None) -> Any:
    """A spec file's job or sweep (`gpuq submit`, `gpuq sweep submit`) with the snapshot of
    its `command.workdir` in its place, as `gpuq run` takes one; any other spec as it is."""
    command = spec.get("command") if isinstance(spec, dict) else None
    if not isinstance(command, dict) or command.get("snapshot"):
        return spec
    workdir = command.get("workdir")
    if not isinstance(workdir, str) or not os.path.isabs(workdir) or not os.path.isdir(workdir):
        return spec  # gpuq names what is wrong with it
    return with_snapshot(api, spec, wanted)


def interpreter(program: str) -> str | None:
    """The Python a program is, with its version (`/usr/bin/python3 (CPython 3.11.7)`);
    None for a program that is not one."""
    if not re.fullmatch(r"python[\d.]*", Path(program).name):
        return None
    try:
        said = subprocess.run(
            [program, "-c", ASK_VERSION], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return said.stdout.strip()[:512] or None


ASK_VERSION = (
    "import platform, sys; "
    "print(f'{sys.executable} ({platform.python_implementation()} {platform.python_version()})')"
)


def max_mb() -> int:
    """The largest snapshot sent: `GPUQ_SNAPSHOT_MAX_MB` where this shell sets it."""
    try:
        return int(os.environ.get("GPUQ_SNAPSHOT_MAX_MB", DEFAULT_MAX_MB))
    except ValueError:
        return DEFAULT_MAX_MB


def _upload_unless_held(api: Client, sha256: str, tar: Path) -> bool:
    """Uploads the tar unless the server holds it for us already; whether it uploaded."""
    gq = Gpuq(http=api)
    if gq.has_snapshot(sha256):
        return False
    gq.upload_snapshot(tar, sha256)
    return True


def program_in(project: snapshots.Project, folder: Path, program: str) -> str:
    """The program as the job finds it: one of the snapshot's files relative to the
    working folder (`./train.sh`), so the copy's runs; anything else as it was (`python`
    from a virtualenv that git ignores stays the absolute path it is)."""
    if not os.path.isabs(program):
        return program
    try:
        inside = Path(program).relative_to(project.root).as_posix()
    except ValueError:
        return program
    if inside not in project.files:
        return program
    relative = os.path.relpath(program, folder)
    return relative if "/" in relative else f"./{relative}"


def unheld_made_absolute(args: list[str], folder: Path, project: snapshots.Project) -> list[str]:
    """`args`, with each that names an existing path, relative to `folder`, that the
    snapshot does not hold (`../data/x`, `--data=../data/x`, a file git ignores) made
    absolute."""
    held = set(project.files)
    held.update(str(parent) for f in project.files for parent in PurePosixPath(f).parents)
    return [_absolute_unless_held(arg, folder, project.root, held) for arg in args]


def _absolute_unless_held(arg: str, folder: Path, root: Path, held: set[str]) -> str:
    option, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not value or os.path.isabs(value) or (arg.startswith("-") and not equals):
        return arg
    path = Path(os.path.normpath(folder / value))
    if not os.path.lexists(path):
        return arg
    if path == root or (root in path.parents and path.relative_to(root).as_posix() in held):
        return arg
    return f"{option}{equals}{path}"
