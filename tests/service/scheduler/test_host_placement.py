"""The scheduler places by the box's cores and host memory (issue 49), driven step by step
on a real database with real runners: a box of 4 cores and 8 GiB for jobs
(GPUQ_HOST_CPUS=4, GPUQ_HOST_MEMORY_MB=9216 less the 1 GiB reserve)."""

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.runtime import open_api
from service.scheduler.loop import Scheduler
from tests.conftest import ANA, command_spec
from tests.submitting import submit_job

UNDERWAY = {JobStatus.starting, JobStatus.running}


@pytest.fixture
def settings(settings):
    # The fences (cgroups) are tested on their own: here only placement counts.
    return settings.model_copy(update={"host_cpus": 4.0, "host_memory_mb": 9216, "fences": "off"})


def queue(db, code: str = "pass", **fields) -> int:
    """A command job running `code`; `fields`: its resources, and `priority`,
    `time_limit_s`, `preemptible` at the top of its spec."""
    top = {k: fields.pop(k) for k in ("priority", "time_limit_s", "preemptible") if k in fields}
    spec = command_spec(code, **fields) | top
    return submit_job(db, spec=JobSpec.model_validate(spec), caller=ANA)[0].id


def waits_for(flag: Path) -> str:
    """Code that runs until `flag` exists."""
    return f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)"


def status(db, job_id: int) -> JobStatus:
    return jobs.get_job(db, job_id).status


def stepping(scheduler: Scheduler, check: Callable[[], bool], timeout_s: float = 30) -> None:
    """Steps the scheduler until `check` holds."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        scheduler.step()
        time.sleep(0.05)


def test_a_job_waits_for_cores_and_starts_once_the_job_holding_them_ends(db, scheduler, tmp_path):
    done = tmp_path / "done"
    first = queue(db, waits_for(done), gpus=1, cpus=3)
    second = queue(db, gpus=1, cpus=2)
    scheduler.step()
    assert status(db, first) in UNDERWAY
    job = jobs.get_job(db, second)
    assert (job.status, job.wait_reason) == (JobStatus.queued, "waiting for 2 cores; 1 free")
    assert job.cpus == 2
    done.touch()
    stepping(scheduler, lambda: status(db, second) != JobStatus.queued)
    assert status(db, first) == JobStatus.succeeded


def test_a_job_waits_for_host_memory_likewise(db, scheduler, tmp_path):
    done = tmp_path / "done"
    first = queue(db, waits_for(done), gpus=0, host_memory_mb=6144)
    second = queue(db, gpus=0, host_memory_mb=4096)
    scheduler.step()
    assert status(db, first) in UNDERWAY
    job = jobs.get_job(db, second)
    assert (job.status, job.wait_reason) == (
        JobStatus.queued,
        "waiting for 4 GiB of host memory; 2 GiB free",
    )
    done.touch()
    stepping(scheduler, lambda: status(db, second) != JobStatus.queued)
    assert status(db, first) == JobStatus.succeeded


def test_jobs_that_ask_no_cores_never_wait_for_them(db, scheduler, tmp_path):
    done = tmp_path / "done"
    every_core = queue(db, waits_for(done), gpus=1, cpus=4, host_memory_mb=8192)
    no_cores = queue(db, waits_for(done), gpus=1)
    cpu_job = queue(db, waits_for(done), gpus=0)
    scheduler.step()
    assert {status(db, i) for i in (every_core, no_cores, cpu_job)} <= UNDERWAY
    done.touch()
    stepping(scheduler, lambda: not scheduler.books.running)


def test_a_small_job_backfills_into_free_cores_only_if_it_cannot_delay_the_head(
    db, scheduler, tmp_path
):
    done = tmp_path / "done"
    holder = queue(db, waits_for(done), gpus=1, cpus=3, time_limit_s=600)
    scheduler.step()
    head = queue(db, gpus=1, cpus=4)  # every core: it starts once the holder ends
    long_small = queue(db, waits_for(done), gpus=0, cpus=1, time_limit_s=3600)
    short_small = queue(db, waits_for(done), gpus=0, cpus=1, time_limit_s=60)
    scheduler.step()
    assert jobs.get_job(db, head).wait_reason == "waiting for 4 cores; 1 free"
    assert jobs.get_job(db, long_small).wait_reason == (
        f"waiting behind job {head}, which starts first; this job could delay it"
    )
    assert status(db, short_small) in UNDERWAY  # it ends before the holder may
    done.touch()
    stepping(scheduler, lambda: status(db, head) != JobStatus.queued)
    assert status(db, holder) == JobStatus.succeeded
    stepping(scheduler, lambda: status(db, long_small) != JobStatus.queued)


def test_a_higher_priority_job_preempts_one_for_its_cores(db, scheduler, settings):
    scheduler.books.settings = settings.model_copy(
        update={"preempt": "priority", "preempt_min_run_s": 0.0}
    )
    low = queue(db, "import time; time.sleep(60)", gpus=1, cpus=3, priority=-1, preemptible=True)
    scheduler.step()
    assert status(db, low) in UNDERWAY
    urgent = queue(db, gpus=1, cpus=2)  # GPU 1 is free; the cores are not
    scheduler.step()
    assert jobs.get_job(db, urgent).wait_reason.startswith(f"preempting job {low} (ana,")
    stepping(scheduler, lambda: status(db, urgent) != JobStatus.queued)
    job = jobs.get_job(db, low)
    assert (job.status, job.preemptions, job.preempted_by) == (JobStatus.queued, 1, urgent)


def test_a_dry_run_says_what_cores_a_job_would_wait_for(db, scheduler, settings, tmp_path):
    done = tmp_path / "done"
    queue(db, waits_for(done), gpus=1, cpus=3)
    scheduler.step()
    service = open_api(settings)
    try:
        waits = service.jobs.preview(JobSpec.model_validate(command_spec("pass", cpus=2)), ANA)
        fits = service.jobs.preview(JobSpec.model_validate(command_spec("pass", cpus=1)), ANA)
    finally:
        service.close()
        done.touch()
    assert (waits.would_start, waits.wait_reason) == (False, "waiting for 2 cores; 1 free")
    assert (fits.would_start, fits.assigned_gpus) == (True, [1])
