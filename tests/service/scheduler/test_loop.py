"""The scheduler driven step by step against a real database (no loop thread)."""

import json
import math
import random
import signal
import time
import types

import pytest
from sqlmodel import select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service import jobs
from service.gpus import maintenance, registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry
from service.scheduler import place, replan
from service.scheduler.loop import Scheduler, SchedulerLocked
from service.scheduler.queued import QueueReader
from service.store.tables import Allocation
from tests.conftest import ANA, command_spec, job_spec
from tests.submitting import submit_job


@pytest.fixture
def scheduler(db, settings):
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    return Scheduler(db, settings, GpuRegistry(db, inventory))


def queue(db, **overrides) -> int:
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec(**overrides)), caller=ANA)
    return job.id


def test_place_records_why_a_job_waits(db, scheduler):
    # A whole-GPU job on GPU 1 is held by a job gpuq already placed there.
    holder = queue(db, resources={"gpu_ids": [1]})
    with db.write() as session:
        jobs.transition(session, holder, JobStatus.starting, assigned_gpus=[1], attempt=1)
        session.add(Allocation(job_id=holder, gpu_index=1, memory_mb=None))
    waiting = queue(db, resources={"gpu_ids": [1]})
    scheduler.steps.place()
    job = jobs.get_job(db, waiting)
    assert job.status == JobStatus.queued
    assert job.wait_reason == "waiting for GPUs 1 whole; GPU 1 is held whole by job 1"


def test_a_job_left_starting_whose_runner_is_gone_is_lost_and_frees_its_gpu(
    db, scheduler, settings
):
    job_id = queue(db)
    with db.write() as session:
        jobs.transition(session, job_id, JobStatus.starting, assigned_gpus=[0], attempt=1)
        session.add(Allocation(job_id=job_id, gpu_index=0, memory_mb=None))
    # Launched (its run directory is there), but its runner is gone without an exit record.
    (settings.runs_dir / str(job_id) / "1").mkdir(parents=True)
    scheduler.reconcile()
    scheduler.steps.settle()
    job = jobs.get_job(db, job_id)
    assert (job.status, job.reason) == (JobStatus.failed, Reason.worker_lost)
    with db.read() as session:
        assert session.exec(select(Allocation)).all() == []


def test_a_job_that_exited_while_the_service_was_down_is_judged_by_its_exit_record(
    db, scheduler, settings
):
    job_id = queue(db)
    with db.write() as session:
        jobs.transition(session, job_id, JobStatus.starting, assigned_gpus=[0], attempt=1)
    run = settings.runs_dir / str(job_id) / "1"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text(
        json.dumps(
            {
                "event": "epoch",
                "epoch": 1,
                "step": 2,
                "metrics": {"loss": 0.5},
                "progress": {"epoch": 1, "epochs": 1},
            }
        )
        + "\n"
    )
    (run / "exit.json").write_text(json.dumps({"exit_code": 0, "signal": None}))
    (run / "runner.json").write_text(json.dumps({"runner_pid": 999_999_999}))
    scheduler.reconcile()
    scheduler.step()
    job = jobs.get_job(db, job_id)
    assert job.status == JobStatus.succeeded
    assert job.metrics == {"loss": 0.5}


def test_only_one_scheduler_per_state_directory(scheduler, db, settings):
    scheduler.start()
    try:
        other = Scheduler(db, settings, scheduler.books.gpus)
        with pytest.raises(SchedulerLocked, match="already scheduling"):
            other.start()
    finally:
        scheduler.stop()


def test_what_the_plan_knows_of_the_queue_is_what_the_database_holds(db, scheduler, monkeypatch):
    """The plan keeps the queue between steps and takes its own writes of reasons and
    positions as written (`QueueReader.wrote`): whatever other writers do between plans,
    its view is a fresh read's, and every position written is the job's place in line."""
    monkeypatch.setattr(place, "POSITIONS_EVERY_S", 0.0)  # every plan brings them up to date
    holder = queue(db, resources={"gpu_ids": [1]})
    with db.write() as session:  # GPU 1 held: every job below waits for it
        jobs.transition(session, holder, JobStatus.starting, assigned_gpus=[1], attempt=1)
        session.add(Allocation(job_id=holder, gpu_index=1, memory_mb=None))
    rng = random.Random(31)
    queued = [queue(db, resources={"gpu_ids": [1]}) for _ in range(5)]
    for _ in range(40):
        scheduler.steps.placer._replan.forget()  # plan even where nothing changed
        scheduler.steps.place()
        rows = [jobs.get_job(db, i) for i in queued]
        line = sorted(rows, key=lambda j: (-j.priority, j.id))
        assert [j.queue_position for j in line] == list(range(1, len(line) + 1))
        job_id = rng.choice(queued)  # then another writer, before the next plan reads
        action = rng.choice(["submit", "priority", "hold", "release", "cancel", "nothing"])
        with db.write() as session:
            if action == "priority":
                jobs.writes.record_priority(session, job_id, rng.randint(-2, 2))
            elif action in ("hold", "release"):
                jobs.writes.record_hold(session, job_id, action == "hold")
            elif action == "cancel" and len(queued) > 1:
                jobs.writes.cancel_queued(session, job_id, Reason.cancelled_by_user, "no")
                queued.remove(job_id)
        if action == "submit":
            queued.append(queue(db, resources={"gpu_ids": [1]}, priority=rng.randint(-2, 0)))
        with db.read() as session:  # what that plan reads, against a fresh read
            known = scheduler.steps.placer._queue.read(session.connection())
            assert known == QueueReader().read(session.connection())


def test_positions_left_behind_by_a_start_are_rewritten_when_the_period_ends(
    db, scheduler, monkeypatch
):
    """Nothing else need happen: the plan that left them plans again by then."""
    # The placer's clock, moved on by hand: however slowly a loaded machine plans, the
    # period ends when the test says so.
    moved = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + moved[0])
    monkeypatch.setattr(place, "time", clock)
    monkeypatch.setattr(replan, "time", clock)
    monkeypatch.setattr(place, "POSITIONS_EVERY_S", 3600.0)  # longer than any slow plan
    scheduler.books.settings = scheduler.books.settings.model_copy(update={"max_cpu_jobs": 1})
    spec = JobSpec.model_validate(command_spec("import time; time.sleep(30)", gpus=0))
    first, second, third = (submit_job(db, spec=spec, caller=ANA)[0].id for _ in range(3))
    try:
        scheduler.steps.place()  # numbers the second and third: 1 and 2
        with db.write() as session:  # the first ends; the second starts at once
            jobs.transition(session, first, JobStatus.cancelled)
        scheduler.books.executor.signal(first, signal.SIGKILL)
        scheduler.books.running.pop(first)
        scheduler.steps.place()
        assert jobs.get_job(db, second).status == JobStatus.starting
        scheduler.steps.place()  # the plan that sees that start: nothing to write
        assert jobs.get_job(db, third).queue_position == 2  # within the period: left
        moved[0] = place.POSITIONS_EVERY_S  # the period is over
        scheduler.steps.place()  # nothing changed since the last plan, but the period is over
        assert jobs.get_job(db, third).queue_position == 1
    finally:
        for job_id in list(scheduler.books.running):
            scheduler.books.executor.signal(job_id, signal.SIGKILL)
        scheduler.books.executor.close()


def test_positions_left_behind_on_an_idle_box_are_rewritten_when_the_period_ends(
    db, scheduler, monkeypatch
):
    """With nothing running the loop sleeps `idle_poll_s`, but not past the moment the
    positions a cancel moved are due."""
    monkeypatch.setattr(place, "POSITIONS_EVERY_S", 2.0)
    settings = scheduler.books.settings.model_copy(update={"idle_poll_s": 60.0})
    scheduler.books.settings = settings
    maintenance.admin_drain(db, None, "driver upgrade", "root")  # nothing starts: all wait
    spec = JobSpec.model_validate(command_spec("pass", gpus=1))
    first, second, third = (submit_job(db, spec=spec, caller=ANA)[0].id for _ in range(3))
    scheduler.start()
    try:
        deadline = time.monotonic() + 10
        while jobs.get_job(db, third).queue_position != 3:
            assert time.monotonic() < deadline, "never numbered"
            time.sleep(0.05)
        with db.write() as session:
            jobs.transition(session, first, JobStatus.cancelled)
        cancelled = time.monotonic()
        scheduler.wake()
        while jobs.get_job(db, third).queue_position != 2:
            assert time.monotonic() - cancelled < 4, "the positions waited for the idle poll"
            time.sleep(0.05)
        assert jobs.get_job(db, second).queue_position == 1
    finally:
        scheduler.stop()


def test_queue_positions_move_up_within_the_refresh_period_after_a_start(
    db, scheduler, monkeypatch
):
    monkeypatch.setattr(place, "POSITIONS_EVERY_S", math.inf)  # the period never ends ...
    scheduler.books.settings = scheduler.books.settings.model_copy(update={"max_cpu_jobs": 1})
    spec = JobSpec.model_validate(command_spec("import time; time.sleep(30)", gpus=0))
    first, second, third = (submit_job(db, spec=spec, caller=ANA)[0].id for _ in range(3))
    try:
        scheduler.steps.place()  # the first takes the CPU slot; the others wait, numbered at once
        assert jobs.get_job(db, first).status == JobStatus.starting
        assert [jobs.get_job(db, i).queue_position for i in (second, third)] == [1, 2]
        with db.write() as session:  # the first ends; the second can start
            jobs.transition(session, first, JobStatus.cancelled)
        scheduler.books.executor.signal(first, signal.SIGKILL)
        scheduler.books.running.pop(first)
        scheduler.steps.place()
        assert jobs.get_job(db, second).status == JobStatus.starting
        # Same wait reason, so its row is not rewritten on this start ...
        assert jobs.get_job(db, third).queue_position == 2
        monkeypatch.setattr(place, "POSITIONS_EVERY_S", 0.0)  # ... until it does
        scheduler.steps.place()
        assert jobs.get_job(db, third).queue_position == 1
    finally:
        for job_id in list(scheduler.books.running):
            scheduler.books.executor.signal(job_id, signal.SIGKILL)
        scheduler.books.executor.close()
