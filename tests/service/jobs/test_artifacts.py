"""Listing and finding a job's files; no name leads outside its folders."""

import pytest

from gpuq.contract.rundir import RunDir
from service.errors import Invalid, NotFound
from service.jobs.artifacts import check_name, find_artifact, list_artifacts, open_artifact


@pytest.fixture
def run(tmp_path):
    run = RunDir.of(tmp_path / "runs", 7, 1)
    run.create()
    (run.artifacts / "model.keras").write_bytes(b"model")
    (run.artifacts / "history.json").write_text("{}")
    (run.checkpoints / "backup").mkdir()
    (run.checkpoints / "backup" / "latest.weights.h5").write_bytes(b"w" * 10)
    (run.tensorboard / "train").mkdir()
    (run.tensorboard / "train" / "events.out.tfevents.1").write_bytes(b"e")
    (tmp_path / "secret").write_text("not yours")
    (run.artifacts / "escape").symlink_to(tmp_path / "secret")
    (run.path / "output.log").write_text("log")
    (run.artifacts / "inner").symlink_to(run.artifacts / "model.keras")  # a link, even inward
    (run.checkpoints / "tb").symlink_to(run.tensorboard, target_is_directory=True)
    return run


def test_the_listing_has_the_files_of_the_three_folders_and_no_link_out(run):
    listing = {a.name: a.size_bytes for a in list_artifacts(run)}
    assert listing == {
        "checkpoints/backup/latest.weights.h5": 10,
        "history.json": 2,
        "model.keras": 5,
        "tensorboard/train/events.out.tfevents.1": 1,
    }


def test_files_are_found_by_their_listed_names(run):
    assert find_artifact(run, "model.keras").relative == "artifacts/model.keras"
    found = find_artifact(run, "checkpoints/backup/latest.weights.h5")
    assert found.relative == "checkpoints/backup/latest.weights.h5"
    with open_artifact(found, run) as f:
        assert f.read() == b"w" * 10


@pytest.mark.parametrize(
    "name",
    ["../output.log", "../../../secret", "/etc/passwd", "a/./b", "a//b", "..", "x\\..\\y", "a\0"],
)
def test_names_that_could_leave_the_folders_are_invalid(run, name):
    with pytest.raises(Invalid) as caught:
        find_artifact(run, name)
    assert caught.value.loc == ("path", "name")


@pytest.mark.parametrize(
    "name",
    [
        "escape",
        "inner",
        "checkpoints/tb/train/events.out.tfevents.1",
        "output.log",
        "spec.json",
        "checkpoints",
        "nope",
    ],
)
def test_links_out_folders_and_files_outside_the_folders_are_not_found(run, name):
    with pytest.raises(NotFound):
        find_artifact(run, name)


def test_a_plain_name_passes_the_check():
    check_name("checkpoints/backup/latest.weights.h5")
