"""A job's files for download: `artifacts/`, `checkpoints/` and `tensorboard/` of an attempt.

Names are relative paths: `model.keras` and `history.json` (from `artifacts/`),
`checkpoints/...`, `tensorboard/...`. No name may lead outside its attempt's folders:
`..`, absolute paths and links (the job's to make) are refused.
"""

import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO

from gpuq.contract import job_files
from gpuq.contract.rundir import RunDir
from service.errors import Invalid, NotFound

NAME_LOC = ("path", "name")
#: (name prefix, folder in the attempt's folder), the user's own `artifacts/` first
ROOTS = (("", "artifacts"), ("checkpoints/", "checkpoints"), ("tensorboard/", "tensorboard"))


@dataclass(frozen=True)
class Artifact:
    name: str
    #: where it lies in the attempt's folder: `artifacts/model.keras`
    relative: str
    size_bytes: int
    modified_at: datetime


def _artifact(name: str, relative: str, found: os.stat_result) -> Artifact:
    return Artifact(name, relative, found.st_size, datetime.fromtimestamp(found.st_mtime, UTC))


def open_artifact(artifact: Artifact, run: RunDir) -> BinaryIO:
    """The file, opened only if it still is a regular file reached without a link (it is
    the job's to change while gpuq reads it); `NotFound` otherwise."""
    try:
        return job_files.open_file(run.path, artifact.relative)
    except OSError:
        raise NotFound(f"no artifact named {artifact.name!r} any more") from None


def list_artifacts(run: RunDir) -> list[Artifact]:
    """Every regular file of the attempt's folders, by name; links are left out."""
    found: dict[str, Artifact] = {}
    for prefix, folder in ROOTS:
        for relative, status in job_files.regular_files(run.path, folder):
            name = prefix + relative
            if name not in found:
                found[name] = _artifact(name, f"{folder}/{relative}", status)
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
    for prefix, folder in ROOTS:
        if not name.startswith(prefix):
            continue
        relative = f"{folder}/{name.removeprefix(prefix)}"
        try:
            found = job_files.lstat(run.path, relative)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode):
            return _artifact(name, relative, found)
    raise NotFound(f"no artifact named {name!r}; GET .../artifacts lists them")
