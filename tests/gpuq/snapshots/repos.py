"""Real git repositories for the snapshot's tests, made in a test's own folder."""

import subprocess
from pathlib import Path


def git(folder: Path, *args: str) -> str:
    """`git ARGS` in `folder`; its output (it must succeed)."""
    done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def make_repo(folder: Path, files: dict[str, str]) -> Path:
    """A git repository at `folder` on branch main holding `files`, committed once."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "config", "user.name", "Ana")
    git(folder, "config", "user.email", "ana@example.com")
    write(folder, files)
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", "first")
    return folder


def write(folder: Path, files: dict[str, str]) -> None:
    """Each of `files` (name: text) written under `folder`, its folders made."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
