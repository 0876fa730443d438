"""A project's `.gpuqignore`: what the snapshot leaves out beyond `.gitignore`, in
gitignore's syntax (read by `pathspec`, the maintained implementation of it).

As in git, a file in an excluded folder stays out even when a later `!pattern` names it:
a folder is asked about before what it holds, whether the names come from git or from
walking the folder."""

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

FILE = ".gpuqignore"


class IgnoreRules:
    """The patterns of one `.gpuqignore`, asked about names relative to its folder."""

    def __init__(self, lines: list[str]):
        self._spec: GitIgnoreSpec | None = None
        if any(line.strip() and not line.startswith("#") for line in lines):
            # imported here: every `gpuq` command loads this module, few projects need it
            import pathspec

            self._spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self._folders: dict[str, bool] = {}

    @classmethod
    def of(cls, root: Path) -> "IgnoreRules":
        """The rules of `root`'s `.gpuqignore`; none when it has none."""
        try:
            text = (root / FILE).read_text(encoding="utf-8", errors="surrogateescape")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            text = ""
        return cls(text.splitlines())

    def excludes(self, name: str) -> bool:
        """Whether the file `name` (posix, relative) is left out."""
        if self._spec is None:
            return False
        folder = name.rpartition("/")[0]
        return (bool(folder) and self.excludes_folder(folder)) or self._spec.match_file(name)

    def excludes_folder(self, name: str) -> bool:
        """Whether the folder `name` (posix, relative), and so all it holds, is left out."""
        if self._spec is None:
            return False
        known = self._folders.get(name)
        if known is None:
            parent = name.rpartition("/")[0]
            known = (bool(parent) and self.excludes_folder(parent)) or self._spec.match_file(
                name + "/"
            )
            self._folders[name] = known
        return known
