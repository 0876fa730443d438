"""A finished job's files over HTTP and the CLI, TensorBoard logs, and path safety."""

import json
import subprocess

import httpx
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import command_spec
from tests.e2e.conftest import EPOCHS
from tests.e2e.server import GPUQ

pytestmark = pytest.mark.e2e


def artifacts_url(trained, name: str = "") -> str:
    return f"{trained.server.url}/v1/jobs/{trained.job['id']}/artifacts" + (
        f"/{name}" if name else ""
    )


def run_dir(trained):
    return trained.server.home / "runs" / str(trained.job["id"]) / "1"


def test_the_listing_has_the_model_history_checkpoints_and_tensorboard_logs(trained):
    listing = httpx.get(artifacts_url(trained)).json()
    assert (listing["job_id"], listing["attempt"]) == (trained.job["id"], 1)
    names = [a["name"] for a in listing["artifacts"]]
    assert {"model.keras", "history.json", "checkpoints/latest.weights.h5"} <= set(names)
    assert any(n.startswith("tensorboard/train/events.out.tfevents.") for n in names)
    assert any(n.startswith("tensorboard/validation/events.out.tfevents.") for n in names)
    sizes = {a["name"]: a["size_bytes"] for a in listing["artifacts"]}
    assert sizes["model.keras"] == (run_dir(trained) / "artifacts" / "model.keras").stat().st_size


def test_downloads_are_the_files_and_the_cli_saves_them(trained, tmp_path):
    response = httpx.get(artifacts_url(trained, "history.json"))
    assert response.status_code == 200
    assert 'filename="history.json"' in response.headers["content-disposition"]
    history = response.json()
    assert len(history["loss"]) == len(history["val_loss"]) == EPOCHS

    target = tmp_path / "downloaded.keras"
    done = subprocess.run(
        [*GPUQ, "artifacts", str(trained.job["id"]), "model.keras", "-o", str(target), "--json"],
        env=trained.server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["size_bytes"] == target.stat().st_size
    assert target.read_bytes() == (run_dir(trained) / "artifacts" / "model.keras").read_bytes()
    listed = subprocess.run(
        [*GPUQ, "artifacts", str(trained.job["id"])],
        env=trained.server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.stdout.splitlines()[0].split() == ["NAME", "BYTES", "MODIFIED"]
    assert "model.keras" in listed.stdout


def test_tensorboard_logs_hold_one_loss_point_per_epoch(trained):
    for split in ("train", "validation"):
        logs = EventAccumulator(str(run_dir(trained) / "tensorboard" / split)).Reload()
        losses = logs.Tensors("epoch_loss")
        assert [event.step for event in losses] == list(range(EPOCHS)), split


@pytest.mark.parametrize(
    "name",
    ["..%2F..%2Fgpuq.db", "%2e%2e/%2e%2e/gpuq.db", "/etc/passwd", "a%00b", "..%5C..%5Cgpuq.db"],
)
def test_names_leading_out_of_the_job_are_refused(trained, name):
    response = httpx.get(f"{artifacts_url(trained)}/{name}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["path", "name"]


def test_a_link_out_of_the_job_is_neither_listed_nor_served(trained):
    link = run_dir(trained) / "artifacts" / "passwd"
    link.symlink_to("/etc/passwd")
    try:
        names = [a["name"] for a in httpx.get(artifacts_url(trained)).json()["artifacts"]]
        assert "passwd" not in names
        assert httpx.get(artifacts_url(trained, "passwd")).status_code == 404
    finally:
        link.unlink()


def test_missing_files_jobs_and_attempts_are_clear(trained):
    assert httpx.get(artifacts_url(trained, "nope.bin")).status_code == 404
    later = httpx.get(artifacts_url(trained), params={"attempt": 2})
    assert later.status_code == 422
    assert "has had 1 attempt" in later.text
    gone = httpx.get(f"{trained.server.url}/v1/jobs/999/artifacts")
    assert gone.status_code == 404


def test_a_command_job_writes_its_own_artifacts_where_gpuq_says(trained):
    code = (
        "import os, pathlib; "
        "pathlib.Path(os.environ['GPUQ_ARTIFACTS_DIR'], 'result.txt').write_text('42'); "
        "pathlib.Path(os.environ['GPUQ_TENSORBOARD_DIR'], 'notes.txt').write_text('tb')"
    )
    spec = command_spec(code, gpus=0)
    url = trained.server.url
    job_id = httpx.post(f"{url}/v1/jobs", json=spec).json()["id"]
    trained.server.wait(job_id, {"succeeded", "failed"})
    names = [a["name"] for a in httpx.get(f"{url}/v1/jobs/{job_id}/artifacts").json()["artifacts"]]
    assert names == ["result.txt", "tensorboard/notes.txt"]
    assert httpx.get(f"{url}/v1/jobs/{job_id}/artifacts/result.txt").text == "42"
