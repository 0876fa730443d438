"""Maintenance drains and `not_before` through the API, with the scheduler starting real
command jobs on simulated GPUs (`sim:2x8GiB`)."""

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from gpuq.http import Client
from service.cli.main import main
from service.team.users import add_user
from tests.conftest import command_spec, ended, serving, wait_for

pytestmark = pytest.mark.e2e

DRAINED_0 = "GPU 0 is drained for maintenance (driver upgrade)"
BOX = re.compile(
    r"the box is drained for maintenance by root since \d\d:\d\d UTC: driver upgrade; "
    r"nothing new starts until an admin resumes it \(`gpuq admin resume`\)"
)


def wait_until_file(path) -> str:
    return f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.05)"


def submit(client, spec) -> int:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def started(job) -> bool:
    return job["status"] != "queued"


def test_a_drained_gpu_finishes_its_job_and_takes_nothing_new_until_resumed(client, tmp_path):
    go = tmp_path / "go"
    running = submit(client, command_spec(wait_until_file(go), gpu_ids=[0], memory_mb=1024))
    assert wait_for(client, running, started)["assigned_gpus"] == [0]

    response = client.post("/v1/admin/drain", json={"gpus": [0], "reason": "driver upgrade"})
    assert response.status_code == 200, response.text
    [drain] = response.json()
    assert (drain["gpu"], drain["reason"], drain["by"]) == (0, "driver upgrade", "anonymous")
    assert client.get("/v1/admin/drain").json() == [drain]
    gpus = {g["index"]: g for g in client.get("/v1/gpus").json()}
    assert gpus[0]["maintenance"] == {k: drain[k] for k in ("reason", "by", "since")}
    assert gpus[1]["maintenance"] is None

    # Drained, GPU 0 takes no new job, not even one its memory would fit beside the running one.
    shared = submit(client, command_spec("pass", gpus=1, memory_mb=1024))
    assert wait_for(client, shared, ended)["assigned_gpus"] == [1]
    pinned_spec = command_spec("pass", gpu_ids=[0], memory_mb=1024)
    preview = client.post("/v1/jobs", params={"dry_run": "true"}, json=pinned_spec).json()
    assert not preview["would_start"] and DRAINED_0 in preview["wait_reason"]
    pinned = submit(client, pinned_spec)
    assert DRAINED_0 in wait_for(client, pinned, lambda j: j["wait_reason"])["wait_reason"]

    go.touch()
    assert wait_for(client, running, ended)["status"] == "succeeded"
    deadline = time.monotonic() + 30
    while client.get("/v1/gpus").json()[0]["allocations"]:
        assert time.monotonic() < deadline, "GPU 0 was never freed"
        time.sleep(0.1)
    # A job submitted now ends only after a later scheduler step, which saw GPU 0 free.
    assert wait_for(client, submit(client, command_spec("pass", gpus=0)), ended)
    job = client.get(f"/v1/jobs/{pinned}").json()
    assert job["status"] == "queued" and DRAINED_0 in job["wait_reason"]

    assert client.post("/v1/admin/resume", json={"gpus": [0]}).json() == []
    job = wait_for(client, pinned, ended)
    assert (job["status"], job["assigned_gpus"]) == ("succeeded", [0])
    trail = [(e["action"], e["target"]) for e in client.get("/v1/audit").json()["entries"]]
    assert ("drain", "gpu/0") in trail and ("resume", "gpu/0") in trail


def test_a_whole_box_drain_starts_nothing_and_only_admins_change_it(settings, db):
    root = {"Authorization": f"Bearer {add_user(db, 'root', admin=True)}"}
    ana = {"Authorization": f"Bearer {add_user(db, 'ana')}"}
    with serving(settings) as client:
        client.headers.update(ana)  # `wait_for` reads jobs as ana
        body = {"gpus": None, "reason": "driver upgrade"}
        assert client.post("/v1/admin/drain", json=body).status_code == 403
        nobody = {"Authorization": ""}
        assert client.post("/v1/admin/drain", json=body, headers=nobody).status_code == 401
        assert client.post("/v1/admin/drain", json=body, headers=root).status_code == 200
        [drain] = client.get("/v1/admin/drain").json()
        assert (drain["gpu"], drain["by"]) == (None, "root")

        gpu_job = submit(client, command_spec("pass", gpus=1))
        cpu_job = submit(client, command_spec("pass", gpus=0))
        for job_id in (gpu_job, cpu_job):
            job = wait_for(client, job_id, lambda j: j["wait_reason"])
            assert job["status"] == "queued" and BOX.fullmatch(job["wait_reason"]), job
        preview = client.post("/v1/jobs", params={"dry_run": "true"}, json=command_spec("pass"))
        preview = preview.json()
        assert not preview["would_start"] and BOX.fullmatch(preview["wait_reason"])
        gpus = client.get("/v1/gpus").json()
        assert [g["maintenance"]["reason"] for g in gpus] == ["driver upgrade"] * 2

        assert client.post("/v1/admin/resume", json={}).status_code == 403
        assert client.post("/v1/admin/resume", json={}, headers=root).json() == []
        for job_id in (gpu_job, cpu_job):
            assert wait_for(client, job_id, ended)["status"] == "succeeded"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpus": []}, "gpus"),
        ({"gpus": ["one"]}, "gpus"),
        ({"gpus": [-1]}, "gpus"),
        ({"reason": ""}, "reason"),
        ({"reason": "x" * 501}, "reason"),
        ({"gpu": [1]}, "gpu"),
    ],
)
def test_a_bad_drain_body_is_422_naming_the_field(api, body, field):
    response = api.post("/v1/admin/drain", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][:2] == ["body", field]
    assert api.get("/v1/admin/drain").json() == []


def test_an_unknown_gpu_is_404(api):
    response = api.post("/v1/admin/drain", json={"gpus": [0, 7]})
    assert response.status_code == 404 and "no GPU with index 7" in response.text
    assert api.get("/v1/admin/drain").json() == []


def test_a_job_waits_for_its_not_before_then_starts(client):
    not_before = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    spec = {**command_spec("pass", gpus=0), "not_before": not_before.isoformat()}
    job_id = submit(client, spec)
    stamp = not_before.strftime("%Y-%m-%dT%H:%M:%SZ")
    job = wait_for(client, job_id, lambda j: j["wait_reason"])
    assert job["status"] == "queued"
    assert job["wait_reason"] == f"not before {stamp} (in under a minute)"
    assert datetime.fromisoformat(job["not_before"]) == not_before
    job = wait_for(client, job_id, ended, timeout_s=30)
    assert job["status"] == "succeeded"
    assert datetime.fromisoformat(job["started_at"]) >= not_before


def test_not_before_needs_its_time_zone(api):
    spec = {**command_spec("pass"), "not_before": "2026-11-23T18:00:00"}
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "not_before"]
    spec["not_before"] = "2026-11-23T19:00:00+01:00"  # kept in UTC
    assert api.post("/v1/jobs", json=spec).json()["not_before"] == "2026-11-23T18:00:00Z"


def test_the_admin_commands_drain_show_and_resume(api, capsys):
    def gpuq(*args: str) -> str:
        assert main(list(args), api=Client(http=api)) == 0
        return capsys.readouterr().out

    out = gpuq("admin", "drain", "--gpu", "1", "--reason", "x")
    assert re.fullmatch(r"GPU 1 is drained by anonymous since [\d-]+ \d\d:\d\d UTC: x\n", out)
    [drain] = json.loads(gpuq("admin", "status", "--json"))
    assert (drain["gpu"], drain["reason"]) == (1, "x")
    listing = gpuq("gpus").splitlines()
    assert listing[0].split()[-1] == "DRAINED"
    assert listing[2].endswith("by anonymous: x") and listing[1].endswith("-")
    assert gpuq("admin", "resume", "--json") == "[]\n"
    assert gpuq("admin", "status") == "nothing is drained\n"
    assert "DRAINED" not in gpuq("gpus")
