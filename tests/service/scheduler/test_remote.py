"""The scheduler's process as the API's process sees it (`remote.SchedulerProcess`): a real
`python -P -m service.scheduler_process` on the test's database."""

import asyncio
import time

import pytest

from gpuq.contract.spec import JobSpec
from service import jobs
from service.runtime import Service, open_api, open_with_scheduler, open_with_scheduler_process
from service.scheduler.remote import SchedulerFailed
from service.team.users import Caller

pytestmark = pytest.mark.backends("sqlite", "postgres")

ANA = Caller("ana", admin=False)


def command(*argv: str) -> JobSpec:
    spec = {"kind": "command", "command": {"argv": list(argv)}, "resources": {"gpus": 0}}
    return JobSpec.model_validate(spec)


def wait_status(service: Service, job_id: int, status: str) -> None:
    deadline = time.monotonic() + 30
    while jobs.get_job(service.db, job_id).status != status:
        assert time.monotonic() < deadline, f"job {job_id} never {status}"
        time.sleep(0.05)


def test_its_commits_wake_the_apis_waiters_and_dry_runs_see_what_it_runs(settings):
    service = open_with_scheduler_process(settings.model_copy(update={"max_cpu_jobs": 1}))
    try:
        sleeper = service.jobs.submit(command("sleep", "30"), ANA).row["id"]

        async def next_notice() -> None:
            # This process commits nothing more: only a commit of the scheduler's process,
            # passed on over its socket, settles it (the notices' own poll never does).
            await asyncio.wait_for(service.db.notices.arm(), 10)

        asyncio.run(next_notice())
        wait_status(service, sleeper, "running")
        preview = service.jobs.preview(command("true"), ANA)
        assert not preview.would_start
        assert preview.wait_reason is not None and "CPU" in preview.wait_reason
        assert service.running_jobs() == 1
        assert len(service.dry_runs.job_sessions()) == 1  # the runner's, from the database
        names = {family.name for family in service.scheduler.metrics()}
        assert {"gpuq_scheduler_loop_duration_seconds", "gpuq_queue_wait_seconds"} <= names
        service.jobs.cancel(sleeper, ANA)
        wait_status(service, sleeper, "cancelled")
    finally:
        service.close()
    assert not service.scheduler.alive()


def test_a_second_scheduler_process_says_why_it_cannot_start(settings):
    first = open_with_scheduler_process(settings)
    try:
        with pytest.raises(SchedulerFailed, match="already scheduling"):
            open_with_scheduler_process(settings)
    finally:
        first.close()


def test_an_api_only_process_answers_dry_runs_from_what_runs_elsewhere(settings):
    one_slot = settings.model_copy(update={"max_cpu_jobs": 1})
    scheduling = open_with_scheduler(one_slot)  # the scheduler in a thread of its own process
    api_only = open_api(one_slot)
    try:
        assert api_only.jobs.preview(command("true"), ANA).would_start
        sleeper = api_only.jobs.submit(command("sleep", "30"), ANA).row["id"]
        scheduling.scheduler.wake()  # as its own poll would, a moment later
        wait_status(api_only, sleeper, "running")
        preview = api_only.jobs.preview(command("true"), ANA)
        assert not preview.would_start
        assert preview.wait_reason is not None and "CPU" in preview.wait_reason
        assert api_only.running_jobs() == 1
        assert api_only.dry_runs.job_sessions() == set(
            scheduling.scheduler.books.executor.job_sessions()
        )
        api_only.jobs.cancel(sleeper, ANA)
        scheduling.scheduler.wake()
        wait_status(api_only, sleeper, "cancelled")
    finally:
        api_only.close()
        scheduling.close()
