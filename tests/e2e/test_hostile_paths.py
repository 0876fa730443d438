"""Nothing leaks through gpuq itself, tried as a hostile member would, with gpuq running as
root (as the suite does): the shadow file, a symlink out of an allowed folder, `..`
segments, another member's run directory, a command job as root. Owner mode's own walk is
in test_run_as.py (it needs real accounts).
"""

import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from service.store.db import Database
from service.store.migrate import upgrade
from service.team import users
from tests.conftest import TINY_KERAS, serving, wait_for

SHADOW = "/etc/shadow"


def shadow_line() -> str:
    return Path(SHADOW).read_text().splitlines()[0]


def csv_job(path: str, **extra: Any) -> dict[str, Any]:
    keras = {**TINY_KERAS, "data": {"source": "csv", "path": path, "label": "y"}}
    return {"name": "csv", "keras": keras, "resources": {"gpus": 1}, **extra}


def npz_job(path: str) -> dict[str, Any]:
    keras = {**TINY_KERAS, "data": {"source": "npz", "path": path}}
    return {"name": "npz", "keras": keras, "resources": {"gpus": 1}}


def command_job(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": "cmd", "kind": "command", "command": {"argv": argv, **extra}}


def refused(response: Any, status: int, *words: str) -> str:
    """The refusal's text, checked: the status, the words, and nothing of the file."""
    text = response.text
    assert response.status_code == status, text
    for word in words:
        assert word in text, text
    assert "root:" not in text and shadow_line()[:12] not in text
    return text


def test_open_mode_errors_name_the_problem_never_the_files_contents(settings):
    settings = settings.model_copy(update={"allow_root_jobs": False})
    with serving(settings, schedule=False) as client:
        refused(client.post("/v1/jobs", json=csv_job(SHADOW)), 422, "no column 'y'", "columns)")
        refused(client.post("/v1/jobs", json=npz_job(SHADOW)), 422, "not a readable .npz")
        # A program of the caller's, as root, by accident: refused with how to do it right.
        refused(
            client.post("/v1/jobs", json=command_job(["id"])),
            403,
            "would run as root",
            "gpuq users set NAME --unix-user LOGIN",
            "GPUQ_ALLOW_ROOT_JOBS=1",
        )


@pytest.fixture
def shared(settings):
    """gpuq with users, running jobs as its own account (root): data only from
    GPUQ_DATA_DIRS (the default, `$GPUQ_HOME/data`)."""
    settings = settings.model_copy(update={"allow_root_jobs": True})
    settings.home.mkdir(parents=True)
    db = Database.open(settings.db_url)
    upgrade(db)
    token = users.add_user(db, "mallory")
    db.dispose()
    data = settings.home / "data"
    data.mkdir()
    (data / "ok.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(64)))
    return settings, {"Authorization": f"Bearer {token}"}


def test_with_users_jobs_read_data_only_under_the_data_dirs(shared):
    settings, auth = shared
    data = settings.home / "data"
    (data / "shadow.csv").symlink_to(SHADOW)
    other_run = settings.runs_dir / "7" / "1" / "artifacts"
    other_run.mkdir(parents=True)
    (other_run / "theirs.csv").write_text("a,y\n1,2\n")
    with serving(settings, schedule=False) as client:
        client.headers.update(auth)
        assert client.post("/v1/jobs", json=csv_job(str(data / "ok.csv"))).status_code == 201
        refused(client.post("/v1/jobs", json=csv_job(SHADOW)), 422, "GPUQ_DATA_DIRS")
        refused(
            client.post("/v1/jobs", json=csv_job(str(data / "shadow.csv"))),
            422,
            "is not under GPUQ_DATA_DIRS",
            "symlinks followed",
        )
        refused(
            client.post("/v1/jobs", json=csv_job(f"{data}/../../../etc/shadow")),
            422,
            "'..' segments",
        )
        refused(
            client.post("/v1/jobs", json=csv_job(str(other_run / "theirs.csv"))),
            422,
            "gpuq's run directories",
        )
        outside = command_job([sys.executable, "-c", "pass"], workdir="/etc")
        refused(client.post("/v1/jobs", json=outside), 422, "workdir", "GPUQ_DATA_DIRS")


def test_a_data_file_swapped_for_a_link_after_submit_is_refused_by_the_worker(shared):
    settings, auth = shared
    good = settings.home / "data" / "ok.csv"
    later = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    with serving(settings) as client:
        client.headers.update(auth)
        response = client.post("/v1/jobs", json=csv_job(str(good), not_before=later))
        assert response.status_code == 201, response.text
        good.unlink()
        good.symlink_to(SHADOW)  # passed at submit; now it leads out of the data folder
        job = wait_for(client, response.json()["id"], lambda j: j["status"] == "failed", 120)
    assert job["reason"] == "invalid_spec"
    assert "is not a regular file under GPUQ_DATA_DIRS" in job["message"]
    everything = str(job) + "".join(job["log_tail"])
    assert "root:" not in everything and shadow_line()[:12] not in everything


def test_open_mode_may_still_read_whatever_gpuq_can(settings, tmp_path):
    data = tmp_path / "mine.csv"
    data.write_text("a,y\n" + "".join(f"{i},{i}\n" for i in range(8)))
    with serving(settings, schedule=False) as client:
        assert client.post("/v1/jobs", json=csv_job(str(data))).status_code == 201


def test_a_fifo_or_a_link_in_a_run_directory_is_never_served(settings):
    """A job owns its run directory: what it leaves there may point anywhere."""
    with serving(settings) as client:
        spec = command_job(
            [
                sys.executable,
                "-c",
                "import os; d = os.environ['GPUQ_ARTIFACTS_DIR']; "
                f"os.symlink({SHADOW!r}, d + '/shadow'); os.mkfifo(d + '/pipe'); "
                "os.symlink('/etc', d + '/etc')",
            ]
        )
        job_id = client.post("/v1/jobs", json=spec).json()["id"]
        wait_for(client, job_id, lambda j: j["status"] == "succeeded")
        names = [a["name"] for a in client.get(f"/v1/jobs/{job_id}/artifacts").json()["artifacts"]]
        assert names == []
        for name in ("shadow", "pipe", "etc/shadow"):
            started = time.monotonic()
            got = client.get(f"/v1/jobs/{job_id}/artifacts/{name}")
            assert got.status_code == 404 and time.monotonic() - started < 5
        # The log replaced by a link to the shadow file reads as nothing, not as the file;
        # the artifacts folder made a link to / is not walked (nor listed).
        run = settings.runs_dir / str(job_id) / "1"
        os.rename(run / "artifacts", run / "artifacts.was")
        (run / "artifacts").symlink_to("/")
        assert client.get(f"/v1/jobs/{job_id}/artifacts").json()["artifacts"] == []
        assert client.get(f"/v1/jobs/{job_id}/artifacts/etc/shadow").status_code == 404
        os.replace(run / "output.log", run / "output.was")
        (run / "output.log").symlink_to(SHADOW)
        log = client.get(f"/v1/jobs/{job_id}/logs")
        assert log.status_code == 200 and "root:" not in log.text
