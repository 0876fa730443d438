"""Where the code came from: git's commit, branch and uncommitted change, the interpreter,
and the lock file beside the code, in the job spec's provenance fields."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuq.contract.provenance import Provenance
from gpuq.snapshots import collect, provenance
from gpuq.snapshots.files import Project
from tests.gpuq.snapshots.repos import git, make_repo, write


def project_at(folder: Path) -> Project:
    project = collect(folder, outside_git=True)
    assert project is not None
    return project


def test_a_clean_tree_its_commit_and_branch(repo: Path):
    found = provenance(project_at(repo))
    assert found["git_commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert (found["git_branch"], found["git_dirty"], found["git_diff_sha256"]) == (
        "main", False, None,
    )  # fmt: skip
    assert found["python"] == f"{sys.executable} (CPython {sys.version.split()[0]})"
    Provenance.model_validate({"folder": str(repo), **found})  # the spec's fields, as sent


def test_an_edit_makes_it_dirty_with_the_hash_of_its_diff(repo: Path):
    (repo / "train.py").write_text("print('edited')\n")
    found = provenance(project_at(repo))
    diff = subprocess.run(
        ["git", "diff", "HEAD", "--binary"], cwd=repo, capture_output=True, check=True
    ).stdout
    assert found["git_dirty"] is True
    assert found["git_diff_sha256"] == hashlib.sha256(diff).hexdigest()
    git(repo, "checkout", "--", "train.py")
    write(repo, {"new.py": "untracked"})
    untracked_only = provenance(project_at(repo))
    assert (untracked_only["git_dirty"], untracked_only["git_diff_sha256"]) == (True, None)


def test_a_detached_head_has_no_branch(repo: Path):
    git(repo, "checkout", "-q", "--detach")
    found = provenance(project_at(repo))
    assert found["git_branch"] is None
    assert found["git_commit"] == git(repo, "rev-parse", "HEAD").strip()


def test_before_the_first_commit_and_outside_git(tmp_path: Path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q", "-b", "main")
    write(fresh, {"train.py": "x"})
    found = provenance(project_at(fresh))
    assert (found["git_commit"], found["git_branch"], found["git_dirty"]) == (None, "main", True)
    plain = tmp_path / "plain"
    write(plain, {"train.py": "x"})
    outside = provenance(project_at(plain))
    assert [outside[k] for k in ("git_commit", "git_branch", "git_dirty", "git_diff_sha256")] == [
        None, None, None, None,
    ]  # fmt: skip


def test_the_lock_file_the_most_exact_kind_first_the_working_folder_first(tmp_path: Path):
    files = {
        "uv.lock": "root lock",
        "requirements.txt": "numpy\n",
        "app/requirements.txt": "torch\n",
        "app/pyproject.toml": "[project]\n",
        "app/train.py": "x",
    }
    repo = make_repo(tmp_path / "mono", files)
    found = provenance(project_at(repo / "app"))
    assert found["lockfile"] == "uv.lock"
    assert found["lockfile_sha256"] == hashlib.sha256(b"root lock").hexdigest()
    (repo / "uv.lock").unlink()
    nearest = provenance(project_at(repo / "app"))
    assert nearest["lockfile"] == "app/requirements.txt"
    assert nearest["lockfile_sha256"] == hashlib.sha256(b"torch\n").hexdigest()
    (repo / "app" / "requirements.txt").unlink()
    (repo / "requirements.txt").unlink()
    assert provenance(project_at(repo / "app"))["lockfile"] == "app/pyproject.toml"
    assert provenance(project_at(repo))["lockfile"] is None


@pytest.mark.parametrize("field", ["folder", "git_branch", "python", "lockfile"])
@pytest.mark.parametrize("control", ["\x1b[2J", "\n", "\x00", "\x9b31m", "\x7f"])
def test_provenance_text_refuses_control_characters(field, control):
    # `gpuq show` prints it to whoever looks at the job: no terminal escapes in it
    with pytest.raises(ValidationError, match=field):
        Provenance.model_validate({field: f"main{control}"})
    assert getattr(Provenance.model_validate({field: "main é/ü 1"}), field) == "main é/ü 1"
