"""Reservations on a real Slurm cluster: gpuq books the window in Slurm (`scontrol create
reservation`), submits the jobs that name it with `--reservation`, changes and deletes it
there, and refuses, with Slurm's words, what Slurm refuses."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import command_spec
from tests.e2e.server import Server
from tests.slurm.test_executor import FINAL, slurm_server, submit, until


@pytest.fixture
def gpuq(slurm_cluster, tmp_path) -> Iterator[Server]:
    """`gpuq serve` handing its jobs to the test cluster (its jobs here all end)."""
    server = slurm_server(slurm_cluster, tmp_path / "gpuq")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def reservation(cluster, name: str) -> dict[str, str]:
    """`scontrol show reservation NAME`'s fields; empty if Slurm has none by that name."""
    done = cluster.run("scontrol", "show", "reservation", name, check=False)
    if done.returncode != 0 or "not found" in done.stdout + done.stderr:
        return {}
    return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field)


def book(server, **body: Any) -> httpx.Response:
    starts = datetime.now(UTC) + timedelta(seconds=body.pop("starts_in_s", 0))
    body = {"name": "paper", "gpus": 2, "duration_s": 600, **body}
    body["starts_at"] = starts.isoformat()
    return httpx.post(f"{server.url}/v1/reservations", json=body)


def test_a_reservation_is_slurms_and_a_job_naming_it_runs_in_it(gpuq, slurm_cluster):
    server = gpuq
    response = book(server, users=["anonymous"])
    assert response.status_code == 201, response.text
    booked = response.json()
    assert booked["slurm_reservation"] == "gpuq-paper"
    fields = reservation(slurm_cluster, "gpuq-paper")
    assert fields["Nodes"] == slurm_cluster.node and fields["NodeCnt"] == "1"
    assert "IGNORE_JOBS" in fields["Flags"]

    job_id = submit(server, {**command_spec("pass", gpus=1), "reservation": "paper"})
    job = until(server, job_id, lambda j: j["status"] in FINAL, timeout_s=60)
    assert job["status"] == "succeeded", job
    assert slurm_cluster.show_job(job["executor_job_id"])["Reservation"] == "gpuq-paper"

    longer = httpx.patch(f"{server.url}/v1/reservations/paper", json={"duration_s": 1200})
    assert longer.status_code == 200, longer.text
    ends = datetime.fromisoformat(reservation(slurm_cluster, "gpuq-paper")["EndTime"])
    starts = datetime.fromisoformat(reservation(slurm_cluster, "gpuq-paper")["StartTime"])
    assert abs((ends - starts).total_seconds() - 1200) <= 60

    gone = httpx.delete(f"{server.url}/v1/reservations/paper")
    assert gone.status_code == 200, gone.text
    assert reservation(slurm_cluster, "gpuq-paper") == {}


def test_what_slurm_refuses_gpuq_refuses_with_slurms_words(gpuq, slurm_cluster):
    server = gpuq
    slurm_cluster.run(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=theirs",
        "StartTime=now",
        "Duration=30",
        f"Nodes={slurm_cluster.node}",
        "Users=root",
    )
    try:
        refused = book(server, users=["anonymous"])
        assert refused.status_code == 409, refused.text
        assert "Slurm would not create the reservation" in refused.text
        assert "Requested nodes are busy" in refused.text
        assert httpx.get(f"{server.url}/v1/reservations").json() == []
        too_many = book(server, gpus=slurm_cluster.gpus + 1, users=["anonymous"])
        assert too_many.status_code in (409, 422), too_many.text
    finally:
        slurm_cluster.run("scontrol", "delete", "ReservationName=theirs", check=False)
