"""A job's files for download: `artifacts/`, `checkpoints/` and `tensorboard/` of an attempt.

Names are relative paths: `model.keras` and `history.json` (from `artifacts/`),
`checkpoints/...`, `tensorboard/...`. No name may lead outside its attempt's folders:
`..`, absolute paths and links pointing elsewhere are refused.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gpuq.contract.rundir import RunDir
from gpuq.contract.safe_open import open_inside
from service.errors import Invalid, NotFound

NAME_LOC = ("path", "name")


@dataclass(frozen=True)
class Artifact:
    name: str
    path: Path
    size_bytes: int
    modified_at: datetime


def _roots(run: RunDir) -> list[tuple[str, Path]]:
    """(name prefix, folder), the user's own `artifacts/` first."""
    return [
        ("", run.artifacts),
        ("checkpoints/", run.checkpoints),
        ("tensorboard/", run.tensorboard),
    ]


def _artifact(name: str, path: Path) -> Artifact:
    stat = path.stat()
    return Artifact(name, path, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))


def _inside(path: Path, root: Path, run: RunDir) -> bool:
    # The folder itself may have been made a link by the job (its owner's to change).
    real_root = root.resolve()
    return real_root.is_relative_to(run.path.resolve()) and path.resolve().is_relative_to(real_root)


def open_artifact(artifact: Artifact, run: RunDir) -> BinaryIO:
    """The file, opened only if it still is a regular file inside the run directory (it
    is the job's to change while gpuq reads it); `NotFound` otherwise."""
    try:
        return open_inside(artifact.path, run.path)
    except (FileNotFoundError, PermissionError):
        raise NotFound(f"no artifact named {artifact.name!r} any more") from None


def list_artifacts(run: RunDir) -> list[Artifact]:
    """Every regular file of the attempt's folders, by name; links leading out are left out."""
    found: dict[str, Artifact] = {}
    for prefix, root in _roots(run):
        if not root.is_dir() or not root.resolve().is_relative_to(run.path.resolve()):
            continue  # a folder the job made a link out of its run directory: not walked
        for path in sorted(root.rglob("*")):
            name = prefix + path.relative_to(root).as_posix()
            if name not in found and path.is_file() and _inside(path, root, run):
                found[name] = _artifact(name, path)
    return sorted(found.values(), key=lambda a: a.name)


def check_name(name: str) -> None:
    """422 for a name that could leave the job's folders, whatever is on disk."""
    if not name or len(name) > 1024:
        raise Invalid(NAME_LOC, "an artifact name is 1 to 1024 characters")
    if "\x00" in name or "\\" in name:
        raise Invalid(NAME_LOC, "an artifact name must not contain NUL or backslash characters")
    if name.startswith("/"):
        raise Invalid(NAME_LOC, "an artifact name is relative, e.g. model.keras")
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise Invalid(NAME_LOC, "an artifact name must not contain '.', '..' or empty segments")


def find_artifact(run: RunDir, name: str) -> Artifact:
    """The file called `name` in the attempt's folders; 404 if there is none."""
    check_name(name)
    for prefix, root in _roots(run):
        if not name.startswith(prefix):
            continue
        path = root / name.removeprefix(prefix)
        if path.is_file() and _inside(path, root, run):
            return _artifact(name, path)
    raise NotFound(f"no artifact named {name!r}; GET .../artifacts lists them")
