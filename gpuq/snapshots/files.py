"""Which files a snapshot holds (`collect`): inside a git work tree, those git would track
(`git ls-files --cached --others --exclude-standard`, so `.gitignore` holds) as they are on
disk now; outside git, when asked, every file under the folder. `.gpuqignore` leaves out
more in both cases.

Nothing is followed: a symlink is kept as the link it is (its target's text), wherever it
points; a link to a folder is not walked. What is neither a file nor a link (a FIFO, a
socket, a device, and a git submodule or nested repository, whose folder git names in place
of its content) is left out and named in `Project.skipped`.
"""

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gpuq.snapshots.errors import SnapshotError
from gpuq.snapshots.git import run_git, work_tree_top
from gpuq.snapshots.ignore import IgnoreRules


@dataclass(frozen=True)
class Project:
    """The files a snapshot holds, as they were when collected."""

    root: Path  #: the work tree's top, or the folder itself outside git
    workdir: PurePosixPath  #: the folder the command runs in, relative to `root` ("." at it)
    files: tuple[str, ...]  #: posix names relative to `root`, sorted; files and symlinks
    sizes: tuple[int, ...]  #: each file's size (a symlink's: its target's length), in order
    skipped: tuple[str, ...] = ()  #: what was left out for not being a file or a link
    in_git: bool = False  #: whether `root` is a git work tree's top

    @property
    def total_size(self) -> int:
        """The bytes the files hold, all together."""
        return sum(self.sizes)


def collect(folder: Path, *, outside_git: bool) -> Project | None:
    """The project `folder` is in: its git work tree's files, or outside git (or without a
    git binary) every file under `folder` when `outside_git`, else None."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise SnapshotError(f"{folder} is not a folder")
    top = work_tree_top(folder)
    if top is None and not outside_git:
        return None
    root = folder if top is None else top.resolve()
    rules = IgnoreRules.of(root)
    try:
        if top is None:
            names: Iterable[str] = walked_files(root, rules)
        else:
            names = (name for name in git_listed(root) if not rules.excludes(name))
        files, sizes, skipped = examined_files(root, set(names))
    except PermissionError as exc:
        raise SnapshotError(f"cannot read {exc.filename}: permission denied") from None
    return Project(
        root=root,
        workdir=PurePosixPath(folder.relative_to(root).as_posix()),
        files=files,
        sizes=sizes,
        skipped=skipped,
        in_git=top is not None,
    )


def git_listed(top: Path) -> list[str]:
    """The names git would track at the work tree's top `top`: tracked (any stage of a
    conflict) and untracked-but-not-ignored, deleted ones included."""
    args = ("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    done = run_git(top, *args)
    if done is None or done.returncode != 0:
        why = "git is not installed" if done is None else os.fsdecode(done.stderr).strip()
        raise SnapshotError(f"`git ls-files` failed in {top}: {why}")
    # a nested repository that git does not enter is named as its folder, "sub/"
    return [os.fsdecode(name.rstrip(b"/")) for name in done.stdout.split(b"\0") if name]


def walked_files(root: Path, rules: IgnoreRules) -> Iterator[str]:
    """Every name under `root` but `.git` folders and what `rules` exclude; links to
    folders are names, never walked."""
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(root / prefix if prefix else root) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.name == ".git":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if not rules.excludes_folder(name):
                        pending.append(name + "/")
                elif not rules.excludes(name):
                    yield name


def examined_files(
    root: Path, names: set[str]
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """`names`, sorted, split into files and links with their sizes, and what is neither
    (FIFOs, sockets, devices, submodules' folders); names no longer on disk are dropped."""
    files: list[str] = []
    sizes: list[int] = []
    skipped: list[str] = []
    base = os.fspath(root)
    for name in sorted(names):
        path = os.path.join(base, name)
        try:
            mode = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted, not yet committed
        if stat.S_ISREG(mode.st_mode):
            files.append(name)
            sizes.append(mode.st_size)
        elif stat.S_ISLNK(mode.st_mode):
            files.append(name)
            sizes.append(len(os.fsencode(os.readlink(path))))
        else:
            skipped.append(name)
    return tuple(files), tuple(sizes), tuple(skipped)
