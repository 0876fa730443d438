"""Many builtin jobs packed three to a simulated GPU: every one must succeed.

Before gpuq handed the batches to the replicas itself (`gpuq.replica_batches`), one such job
in twenty to sixty died of SIGSEGV at an epoch boundary, when Keras dropped a tf.distribute
iterator whose prefetch thread was still fetching. The crash came at an epoch boundary, so
the test counts boundaries, not jobs: 20 jobs each cross 60 (1,200 in all, as the 60 jobs of
20 epochs it measured the crash with) while two others train beside it on the same two cores;
docs/reference/development.md gives the rate this test measured before and after.
"""

import time

import pytest

from tests.conftest import ended, job_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOBS = 20
#: three fit GPU 0's 8192 MiB, a fourth does not
PACKED = {"gpu_ids": [0], "memory_mb": 2600}
SHAPE = {
    "model": {"builtin": "mlp", "hidden_units": [64, 32]},
    "data": {"source": "synthetic", "samples": 320, "features": 64},
    "epochs": 60,
    "batch_size": 32,
    "validation_split": 0.1,
}


def test_twenty_builtin_jobs_packed_three_to_a_gpu_all_succeed(client):
    ids = [
        client.post("/v1/jobs", json=job_spec(resources=PACKED, keras=SHAPE)).json()["id"]
        for _ in range(JOBS)
    ]
    deadline = time.monotonic() + 1500
    jobs: dict[int, dict] = {}
    while len(jobs) < JOBS and time.monotonic() < deadline:
        listed = client.get("/v1/jobs", params={"limit": 500}).json()["jobs"]
        jobs.update({job["id"]: job for job in listed if job["id"] in ids and ended(job)})
        time.sleep(1)
    assert len(jobs) == JOBS, f"{JOBS - len(jobs)} jobs had not ended in 25 minutes"
    failed = [
        (job["id"], job["reason"], job["message"])
        for job in jobs.values()
        if job["status"] != "succeeded"
    ]
    assert not failed, f"{len(failed)} of {JOBS} packed jobs failed: {failed}"
    assert _most_at_once(jobs.values()) == 3  # they really were packed


def _most_at_once(jobs) -> int:
    """The most jobs that trained at the same moment."""
    edges = sorted(
        [(job["running_at"], 1) for job in jobs] + [(job["finished_at"], -1) for job in jobs]
    )
    most = now = 0
    for _, change in edges:
        now += change
        most = max(most, now)
    return most
