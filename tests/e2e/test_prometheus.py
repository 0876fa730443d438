"""`GET /metrics`, parsed with prometheus_client's own parser, while a job holds a GPU.

GPU memory comes from the NVML stand-in; the job is a real process."""

import time
from datetime import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import command_spec, ended, wait_for
from tests.e2e.test_gpu_guard import SLEEP, guarded, submit, train_pid
from tests.fakes import FakeNvml

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


def scrape(client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} from a scrape of `/metrics`."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_a_whole_gpu_jobs_peak_is_weighed_against_its_gpu(settings):
    fake = FakeNvml(count=2, memory_mb=8192)
    with guarded(settings, fake) as client:
        job_id = submit(client, command_spec(SLEEP.format(30), gpu_ids=[1]))
        wait_for(client, job_id, lambda j: j["status"] == "running")
        fake.put(1, train_pid(settings, job_id), 1500)
        job = wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 1500)
        assert job["efficiency"]["text"].startswith(
            "used 1.5 GiB of a whole 8 GiB GPU: --mem 2G would let others share it; "
        )
        assert job["efficiency"]["suggested_memory_mb"] == 2048
        client.post(f"/v1/jobs/{job_id}/cancel")
        wait_for(client, job_id, ended)


def test_metrics_show_jobs_gpu_memory_peaks_waits_and_the_loop(settings):
    fake = FakeNvml(count=2, memory_mb=8192)
    fake.put(1, 999_999, 700)  # someone else's process on GPU 1
    with guarded(settings, fake) as client:
        job_id = submit(client, command_spec(SLEEP.format(30), gpu_ids=[0], memory_mb=2048))
        queued = submit(client, command_spec(SLEEP.format(0), gpu_ids=[0], memory_mb=7000))
        wait_for(client, job_id, lambda j: j["status"] == "running")
        fake.put(0, train_pid(settings, job_id), 1500)
        job = wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 1500)
        assert job["efficiency"]["text"].startswith("used 1.5 of 2 GiB requested; ")
        m = scrape(client)

        assert m["gpuq_jobs"][(("state", "running"),)] == 1
        assert m["gpuq_jobs"][(("state", "queued"),)] == 1
        assert m["gpuq_jobs"][(("state", "succeeded"),)] == 0
        job = (("job", str(job_id)), ("owner", "anonymous"))
        assert m["gpuq_job_gpu_memory_peak_bytes"][job] == 1500 * MIB
        assert m["gpuq_job_gpu_memory_cap_bytes"][job] == 2048 * MIB
        gpu0, gpu1 = ((("gpu", str(i)), ("uuid", f"GPU-fake-{i}")) for i in (0, 1))
        assert m["gpuq_gpu_memory_total_bytes"][gpu0] == 8192 * MIB
        assert m["gpuq_gpu_memory_allocated_bytes"][gpu0] == 2048 * MIB
        assert m["gpuq_gpu_memory_used_bytes"][gpu0] == 1500 * MIB
        assert m["gpuq_gpu_memory_foreign_bytes"][gpu0] == 0
        assert m["gpuq_gpu_memory_foreign_bytes"][gpu1] == 700 * MIB
        states = {dict(k)["gpu"]: dict(k)["state"] for k, v in m["gpuq_gpu_state"].items() if v}
        assert states == {"0": "in_use", "1": "free"}
        assert m["gpuq_queue_wait_seconds_count"][()] == 1
        assert m["gpuq_queue_wait_seconds_bucket"][(("le", "+Inf"),)] == 1
        assert m["gpuq_scheduler_loop_duration_seconds_count"][()] > 0

        client.post(f"/v1/jobs/{job_id}/cancel")
        client.post(f"/v1/jobs/{queued}/cancel")
        wait_for(client, job_id, ended)
        after = scrape(client)
        assert after["gpuq_jobs"][(("state", "cancelled"),)] == 2
        assert job not in after.get("gpuq_job_gpu_memory_peak_bytes", {}), "only active jobs"


def test_gpu_seconds_count_running_jobs_so_far_and_ended_attempts_per_owner(client):
    from sqlmodel import select

    from service.store.usage_tables import UsageTotal

    def gpu_seconds() -> float:
        return scrape(client)["gpuq_gpu_seconds_total"][(("owner", "anonymous"),)]

    job_id = submit(client, command_spec(SLEEP.format(3), gpus=2))
    wait_for(client, job_id, lambda j: j["status"] == "running")
    first = gpu_seconds()
    time.sleep(0.5)
    second = gpu_seconds()
    assert 0 < first < second, "a running job's GPU-seconds grow, two per second"
    job = wait_for(client, job_id, ended)
    held = (
        datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["started_at"])
    ).total_seconds()
    after = gpu_seconds()
    assert after >= second, "a counter never goes down as a job ends"
    assert after == pytest.approx(2 * held, abs=0.1)
    with client.app.state.service.db.read() as session:
        assert session.exec(select(UsageTotal.gpu_seconds)).all() == [after]
    again = submit(client, command_spec(SLEEP.format(0), gpus=1))
    wait_for(client, again, ended)
    assert gpu_seconds() > after
    assert "# TYPE gpuq_gpu_seconds_total counter" in client.get("/metrics").text


def test_metrics_need_a_token_once_users_exist(api, db):
    from service.team import users
    from service.team.users import Caller

    token = users.add_user(db, "ana", admin=False, actor=Caller("root", admin=True))
    assert api.get("/metrics").status_code == 401
    assert api.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
