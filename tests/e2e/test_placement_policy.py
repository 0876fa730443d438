"""GPUQ_PLACEMENT through the running scheduler, with real command jobs on simulated GPUs
(`sim:2x8GiB`): shared jobs spread over idle GPUs, a whole-GPU job still gets the GPU left
free, and each job says why it went where it did."""

import pytest

from tests.conftest import command_spec, ended, serving, wait_for
from tests.e2e.test_drain import submit, wait_until_file

pytestmark = pytest.mark.e2e


def running(job) -> bool:
    return job["status"] == "running"


def test_two_shared_jobs_on_an_idle_box_get_a_gpu_each(client, tmp_path):
    go = tmp_path / "go"
    first, second = (
        submit(client, command_spec(wait_until_file(go), gpus=1, memory_mb=3072)) for _ in range(2)
    )
    jobs = [wait_for(client, job_id, running) for job_id in (first, second)]
    assert [j["assigned_gpus"] for j in jobs] == [[0], [1]]
    assert [j["placement"] for j in jobs] == ["GPU 0: idle", "GPU 1: idle"]
    go.touch()
    assert [wait_for(client, i, ended)["status"] for i in (first, second)] == ["succeeded"] * 2
    # The reason stays with the job once it ended: where its last attempt ran, and why.
    assert client.get(f"/v1/jobs/{second}").json()["placement"] == "GPU 1: idle"


def test_a_whole_gpu_job_queued_beside_a_small_one_gets_the_free_gpu(client, tmp_path):
    go = tmp_path / "go"
    small = submit(client, command_spec(wait_until_file(go), gpus=1, memory_mb=2048))
    assert wait_for(client, small, running)["assigned_gpus"] == [0]
    # Both wait for one plan to see them together: the box is drained while they are queued.
    drain = client.post("/v1/admin/drain", json={"gpus": None, "reason": "both at once"})
    assert drain.status_code == 200, drain.text
    beside = submit(client, command_spec(wait_until_file(go), gpus=1, memory_mb=2048))
    whole = submit(client, command_spec(wait_until_file(go), gpus=1))
    for job_id in (beside, whole):
        assert wait_for(client, job_id, lambda j: j["wait_reason"])["status"] == "queued"
    assert client.post("/v1/admin/resume", json={"gpus": None}).status_code == 200
    jobs = {job_id: wait_for(client, job_id, running) for job_id in (beside, whole)}
    assert jobs[beside]["assigned_gpus"] == [0]
    assert jobs[beside]["placement"] == (
        f"GPU 0: beside job {small}; packed to keep GPU 1 whole for job {whole}"
    )
    assert (jobs[whole]["assigned_gpus"], jobs[whole]["placement"]) == ([1], "GPU 1: whole")
    go.touch()
    for job_id in (small, beside, whole):
        assert wait_for(client, job_id, ended)["status"] == "succeeded"
    # Simulated GPUs give no memory reading: the efficiency line says so, and what it held.
    efficiency = client.get(f"/v1/jobs/{whole}").json()["efficiency"]
    assert efficiency["text"].startswith("GPU memory not measured (whole 8 GiB GPUs); ran ")
    assert (efficiency["gpu_memory_limit_mb"], efficiency["suggested_memory_mb"]) == (8192, None)


def test_pack_shares_one_gpu_and_a_dry_run_says_why(settings, tmp_path):
    go = tmp_path / "go"
    with serving(settings.model_copy(update={"placement": "pack"})) as client:
        first = submit(client, command_spec(wait_until_file(go), gpus=1, memory_mb=2048))
        assert wait_for(client, first, running)["placement"] == "GPU 0: idle"
        spec = command_spec("pass", gpus=1, memory_mb=2048)
        preview = client.post("/v1/jobs", params={"dry_run": "true"}, json=spec).json()
        assert (preview["would_start"], preview["assigned_gpus"]) == (True, [0])
        assert preview["placement"] == (
            f"GPU 0: beside job {first}; packed (GPUQ_PLACEMENT=pack) to keep GPU 1 whole"
        )
        second = submit(client, spec)
        assert wait_for(client, second, ended)["assigned_gpus"] == [0]
        go.touch()
        assert wait_for(client, first, ended)["status"] == "succeeded"
