"""The job routes through HTTP, with the scheduler off so jobs stay queued."""

import pytest

from tests.conftest import job_spec, serving

pytestmark = pytest.mark.backends("sqlite", "postgres")


def submit(api, **overrides):
    return api.post("/v1/jobs", json=job_spec(**overrides))


def test_submit_answers_201_with_the_queued_job(api):
    response = submit(api, name="first", priority=3)
    assert response.status_code == 201
    job = response.json()
    assert (job["id"], job["name"], job["status"], job["priority"]) == (1, "first", "queued", 3)
    assert job["assigned_gpus"] == [] and job["attempt"] == 0
    assert job["spec"]["keras"]["optimizer"] == "adam", "defaults are filled in"
    assert api.get("/v1/jobs/1").json() == job


def test_idempotency_key_replays_the_original_job(api):
    headers = {"Idempotency-Key": "abc-123"}
    first = api.post("/v1/jobs", json=job_spec(), headers=headers)
    again = api.post("/v1/jobs", json=job_spec(), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert len(api.get("/v1/jobs").json()["jobs"]) == 1
    other = api.post("/v1/jobs", json=job_spec(name="other"), headers=headers)
    assert other.status_code == 409
    assert "different job spec" in other.json()["detail"]


def test_listing_filters_and_pages(api):
    for i in range(5):
        submit(api, name=f"j{i}")
    api.post("/v1/jobs/2/cancel")
    page = api.get("/v1/jobs?limit=2").json()
    assert [j["id"] for j in page["jobs"]] == [5, 4]
    page = api.get(f"/v1/jobs?limit=2&cursor={page['next_cursor']}").json()
    assert [j["id"] for j in page["jobs"]] == [3, 2]
    page = api.get(f"/v1/jobs?limit=2&cursor={page['next_cursor']}").json()
    assert ([j["id"] for j in page["jobs"]], page["next_cursor"]) == ([1], None)
    cancelled = api.get("/v1/jobs?status=cancelled").json()["jobs"]
    assert [j["id"] for j in cancelled] == [2]
    both = api.get("/v1/jobs?status=cancelled&status=queued").json()["jobs"]
    assert len(both) == 5
    assert api.get("/v1/jobs?owner=anonymous").json()["jobs"][0]["owner"] == "anonymous"
    assert api.get("/v1/jobs?owner=someone-else").json()["jobs"] == []


def test_cancel_of_a_queued_job_and_again(api):
    submit(api)
    response = api.post("/v1/jobs/1/cancel")
    assert response.status_code == 202
    job = response.json()
    assert (job["status"], job["reason"]) == ("cancelled", "cancelled_by_user")
    assert job["finished_at"] is not None
    again = api.post("/v1/jobs/1/cancel")
    assert again.status_code == 409
    assert again.json() == {"detail": "job 1 already ended (cancelled)"}


def test_a_queued_job_has_no_logs_or_metrics_yet(api):
    submit(api)
    logs = api.get("/v1/jobs/1/logs")
    assert (logs.status_code, logs.text) == (200, "")
    assert logs.headers["content-type"].startswith("text/plain")
    assert api.get("/v1/jobs/1/metrics").json() == {"epochs": [], "steps": []}


def test_gpus_and_health(api):
    gpus = api.get("/v1/gpus").json()
    assert [(g["index"], g["memory_total_mb"], g["state"]) for g in gpus] == [
        (0, 8192, "free"),
        (1, 8192, "free"),
    ]
    health = api.get("/healthz")
    assert health.status_code == 200
    assert health.json()["scheduler"] == "elsewhere (API-only process)"


def test_healthz_fails_when_the_scheduler_died(settings):
    with serving(settings) as client:
        client.app.state.service.scheduler.stop()
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json()["status"] == "scheduler stopped"


def test_healthz_is_ok_with_the_scheduler(client):
    assert client.get("/healthz").json() == {
        "status": "ok",
        "scheduler": "running",
        "gpus": 2,
        "simulated_gpus": True,
        "running_jobs": 0,
    }


def test_dry_run_says_where_a_job_would_go_and_stores_nothing(api):
    response = api.post("/v1/jobs?dry_run=true", json=job_spec(resources={"gpu_ids": [1]}))
    assert response.status_code == 200
    assert response.json() == {
        "would_start": True,
        "assigned_gpus": [1],
        "memory_mb": None,
        "wait_reason": None,
        "placement": "GPU 1: asked for",
        "jobs_ahead": 0,
        "would_preempt": [],
    }
    assert api.get("/v1/jobs").json()["jobs"] == []


def test_dry_run_behind_queued_jobs_says_why_it_would_wait(api):
    submit(api, resources={"gpus": 2})
    submit(api, resources={"gpus": 2})
    preview = api.post("/v1/jobs?dry_run=true", json=job_spec()).json()
    assert preview["would_start"] is False
    assert preview["jobs_ahead"] == 2
    assert preview["wait_reason"] == "waiting behind job 2, which starts first"
    urgent = api.post("/v1/jobs?dry_run=true", json=job_spec(priority=5)).json()
    assert (urgent["would_start"], urgent["jobs_ahead"]) == (True, 0)


def test_dry_run_still_refuses_what_can_never_run(api):
    response = api.post("/v1/jobs?dry_run=true", json=job_spec(resources={"gpus": 9}))
    assert response.status_code == 422


#: a box of 16 cores and 64 GiB (its two GPUs have 8 GiB each), with the site's defaults
DEFAULTS = {
    "host_cpus": 16,
    "host_memory_mb": 65536,
    "reserved_host_memory_mb": 0,
    "default_cpus_per_gpu": 4,
    "default_host_memory_per_gpu_mb": 8192,
    "default_cpus": 1.5,
    "default_host_memory_mb": 2048,
}


@pytest.mark.parametrize(
    ("resources", "cpus", "host_memory_mb"),
    [
        ({"gpus": 2}, 8, 16384),  # whole GPUs: the default for each
        ({"gpus": 1, "memory_mb": 2048}, 1, 2048),  # a quarter of an 8 GiB GPU
        ({"gpus": 1, "memory_mb": 1100}, 0.54, 1100),  # 0.537 cores, rounded up to 0.01
        ({"gpus": 0}, 1.5, 2048),  # no GPU: the CPU-only defaults
        ({"gpus": 0, "memory_mb": 2048}, 1.5, 2048),  # a cap means nothing without a GPU
        ({"gpus": 2, "cpus": 3}, 3, 16384),  # the spec wins
        ({"gpus": 1, "memory_mb": 2048, "host_memory_mb": 100}, 1, 100),
        ({"gpus": 0, "cpus": 0.25, "host_memory_mb": 64}, 0.25, 64),
    ],
)
def test_a_job_gets_its_specs_cores_and_host_memory_else_the_sites_defaults(
    settings, resources, cpus, host_memory_mb
):
    with serving(settings.model_copy(update=DEFAULTS), schedule=False) as api:
        response = submit(api, resources=resources)
        assert response.status_code == 201, response.text
        job = response.json()
        assert (job["cpus"], job["host_memory_mb"]) == (cpus, host_memory_mb)
        assert api.get(f"/v1/jobs/{job['id']}").json() == job
        assert (job["host_memory_peak_mb"], job["cpu_time_s"]) == (None, None)


def test_a_default_is_cut_to_the_box_and_none_is_null(settings):
    big = DEFAULTS | {"default_cpus_per_gpu": 12, "default_host_memory_per_gpu_mb": 40000}
    with serving(settings.model_copy(update=big), schedule=False) as api:
        job = submit(api, resources={"gpus": 2}).json()
        assert (job["cpus"], job["host_memory_mb"]) == (16, 65536)
    with serving(settings, schedule=False) as api:  # no defaults
        job = submit(api, resources={"gpus": 2}).json()
        assert (job["cpus"], job["host_memory_mb"]) == (None, None)
        job = submit(api, resources={"gpus": 0, "cpus": 2}).json()
        assert (job["cpus"], job["host_memory_mb"]) == (2, None)
