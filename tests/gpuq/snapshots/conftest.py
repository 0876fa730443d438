"""A real git repository per test, git's machine-wide and user configuration left out (a
global excludes file would change what git lists)."""

from pathlib import Path

import pytest

from tests.gpuq.snapshots.repos import make_repo

FILES = {
    "train.py": "print('training')\n",
    "src/models/net.py": "LAYERS = 3\n",
    "README.md": "# the project\n",
    ".gitignore": "*.log\nbuild/\n",
}


@pytest.fixture(autouse=True)
def plain_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a few files committed once, on branch main."""
    return make_repo(tmp_path / "project", FILES)
