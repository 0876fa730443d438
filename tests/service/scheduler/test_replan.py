"""`place` plans again only when something it plans with changed, or time passed."""

import signal
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.gpus import maintenance, registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry
from service.scheduler import place, replan
from service.scheduler.loop import Scheduler
from service.store.db import utcnow
from tests.conftest import ANA, command_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")

SLEEP = command_spec("import time; time.sleep(60)", gpus=0)


@pytest.fixture
def scheduler(db, settings, monkeypatch) -> Iterator[Scheduler]:
    monkeypatch.setattr(replan, "REPLAN_EVERY_S", 3600.0)  # no plan for time alone
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    scheduler = Scheduler(
        db, settings.model_copy(update={"max_cpu_jobs": 1}), GpuRegistry(db, inventory)
    )
    yield scheduler
    for job_id in list(scheduler.books.running):
        scheduler.books.executor.signal(job_id, signal.SIGKILL)
    scheduler.books.executor.close()


@pytest.fixture
def plans(monkeypatch) -> list[int]:
    """Counts the snapshots `place` takes."""
    taken: list[int] = []
    take = place.snapshot.take

    def counted(*args, **kwargs):
        taken.append(1)
        return take(*args, **kwargs)

    monkeypatch.setattr(place.snapshot, "take", counted)
    return taken


def queue(db, spec: dict) -> int:
    return submit_job(db, spec=JobSpec.model_validate(spec), caller=ANA)[0].id


def test_nothing_changed_no_snapshot(db, scheduler, plans):
    first, second = queue(db, SLEEP), queue(db, SLEEP)
    scheduler.steps.place()  # the first takes the one CPU slot
    scheduler.steps.place()  # a job started, and the second's wait reason was written: again
    assert len(plans) == 2
    scheduler.steps.place()
    scheduler.steps.place()
    assert len(plans) == 2
    assert jobs.get_job(db, second).wait_reason is not None

    third = queue(db, SLEEP)  # a submit
    scheduler.steps.place()
    scheduler.steps.place()  # its wait reason
    assert jobs.get_job(db, third).queue_position == 2
    count = len(plans)
    jobs.set_held(db, second, ANA, held=True)  # a change to a queued job
    scheduler.steps.place()
    assert len(plans) == count + 1
    assert jobs.get_job(db, second).wait_reason.startswith("held")

    with db.write() as session:  # the first ends: a slot is free once it is reaped
        jobs.transition(session, first, JobStatus.cancelled)
    scheduler.books.executor.signal(first, signal.SIGKILL)
    scheduler.books.running.pop(first)
    scheduler.steps.place()
    assert jobs.get_job(db, third).status == JobStatus.starting


def test_a_job_waiting_for_a_moment_is_planned_when_it_falls_due(db, scheduler, plans):
    # Far enough that three steps end before it even on a loaded machine.
    soon = utcnow() + timedelta(seconds=3)
    job_id = queue(db, {**SLEEP, "not_before": soon.isoformat()})
    scheduler.steps.place()
    scheduler.steps.place()  # its wait reason was written
    count = len(plans)
    scheduler.steps.place()
    assert len(plans) == count
    assert jobs.get_job(db, job_id).status == JobStatus.queued
    time.sleep(max(0.0, (soon - utcnow()).total_seconds()) + 0.1)
    scheduler.steps.place()
    assert len(plans) == count + 1
    assert jobs.get_job(db, job_id).status == JobStatus.starting


def test_an_admins_drain_is_planned_at_once(db, scheduler, plans):
    queue(db, SLEEP)
    waiting = queue(db, SLEEP)
    scheduler.steps.place()
    scheduler.steps.place()
    count = len(plans)
    maintenance.admin_drain(db, None, "new disks", "ana")
    scheduler.steps.place()
    assert len(plans) == count + 1
    assert "new disks" in jobs.get_job(db, waiting).wait_reason


@pytest.mark.backends("sqlite")
def test_the_fingerprint_reads_the_queue_from_an_index_alone(db):
    """Asked at every step: its cost must not be a row read per queued job."""
    for _ in range(3):
        queue(db, SLEEP)
    with db.reader.connect() as conn:
        sql = str(replan._query().compile(conn, compile_kwargs={"literal_binds": True}))
        steps = [row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
    reads_of_jobs = [
        step for step in steps if step.split()[:2] in (["SEARCH", "job"], ["SCAN", "job"])
    ]
    assert len(reads_of_jobs) == 2, steps  # how many are queued, and their highest revision
    assert all("USING COVERING INDEX ix_job_status_rev" in step for step in reads_of_jobs), steps
