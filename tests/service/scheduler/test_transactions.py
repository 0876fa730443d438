"""One write transaction per step for what it claims, and one for what it ingests and reaps
with the record of what it launched; nothing is launched before its claim commits, and a
claim whose launch never came is queued again (real runners, a real database)."""

import json
import logging
import os
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import event
from sqlmodel import select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL, JobStatus
from service import jobs
from service.executors import LaunchError
from service.jobs import writes
from service.scheduler import ingest
from service.scheduler.loop import Scheduler
from service.store.tables import Allocation, Job
from tests.conftest import ANA, command_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")

SLEEP = command_spec("import time; time.sleep(60)", gpus=0)


@pytest.fixture
def commits(db) -> Iterator[list[int]]:
    """Counts the commits of write transactions: `len(commits)`."""
    seen: list[int] = []

    def count(_conn: object) -> None:
        seen.append(1)

    event.listen(db.writer, "commit", count)
    yield seen
    event.remove(db.writer, "commit", count)


def queue(db, spec: dict) -> int:
    return submit_job(db, spec=JobSpec.model_validate(spec), caller=ANA)[0].id


def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """Whether `pid` has ended and its parent has reaped it (the executor tells the same)."""
    return not os.path.exists(f"/proc/{pid}")


def runner_pid(scheduler: Scheduler, job_id: int) -> int:
    """The pid of the job's runner, as the executor knows it."""
    return next(p for p, j in scheduler.books.executor.job_sessions().items() if j == job_id)


def test_one_step_claims_two_jobs_in_one_commit_and_launches_them_after_it(db, scheduler, commits):
    first, second = queue(db, SLEEP), queue(db, SLEEP)
    launched_in: list[bool] = []  # whether the write lock was held at each launch
    executor = scheduler.books.executor
    start = executor.start

    def watched(launch):
        launched_in.append(db._write_lock.locked())
        return start(launch)

    executor.start = watched
    commits.clear()
    scheduler.steps.place()
    assert len(commits) == 1
    assert launched_in == [False, False]
    for job_id in (first, second):
        job = jobs.get_job(db, job_id)
        assert (job.status, job.attempt) == (JobStatus.starting, 1)
        assert not gone(runner_pid(scheduler, job_id))
    assert set(scheduler.books.running) == {first, second}
    # The launches are recorded by the next write, which the running jobs' events need
    # anyway.
    scheduler.steps.settle()
    assert len(commits) == 2
    for job_id in (first, second):
        job = jobs.get_job(db, job_id)
        assert (job.executor, job.runner_pid) == ("local", runner_pid(scheduler, job_id))
    assert scheduler.books.unrecorded == {}


def test_a_claim_that_does_not_commit_launches_nothing(db, scheduler, settings, commits):
    first, second = queue(db, SLEEP), queue(db, SLEEP)

    def refuse(_conn: object) -> None:
        raise RuntimeError("the disk is full")

    event.listen(db.writer, "commit", refuse)
    try:
        with pytest.raises(RuntimeError, match="the disk is full"):
            scheduler.steps.place()
    finally:
        event.remove(db.writer, "commit", refuse)
    assert [jobs.get_job(db, i).status for i in (first, second)] == [JobStatus.queued] * 2
    assert scheduler.books.running == {}
    assert scheduler.books.executor.job_sessions() == {}
    assert not settings.runs_dir.exists() or list(settings.runs_dir.iterdir()) == []
    # The next step claims and starts them.
    scheduler.steps.place()
    assert [jobs.get_job(db, i).status for i in (first, second)] == [JobStatus.starting] * 2


def test_reaping_two_exits_is_one_commit(db, scheduler, commits):
    fails = command_spec("raise SystemExit(3)", gpus=0)
    ok, failed = queue(db, command_spec("pass", gpus=0)), queue(db, fails)
    scheduler.steps.place()
    pids = [runner_pid(scheduler, i) for i in (ok, failed)]
    until(lambda: all(gone(pid) for pid in pids))
    commits.clear()
    scheduler.steps.settle()
    assert len(commits) == 1
    assert jobs.get_job(db, ok).status == JobStatus.succeeded
    job = jobs.get_job(db, failed)
    assert (job.status, job.exit_code) == (JobStatus.failed, 3)
    assert scheduler.books.running == {}


def test_ingest_writes_every_jobs_events_in_one_commit_and_skips_files_that_did_not_grow(
    db, scheduler, commits, monkeypatch
):
    first, second = queue(db, SLEEP), queue(db, SLEEP)
    scheduler.steps.place()
    files = [scheduler.books.running[i].run.events for i in (first, second)]
    # The runner's own event (its program started) comes first; then nothing until exit.
    until(lambda: all(p.exists() and b'"running"' in p.read_bytes() for p in files))
    for path in files:
        with open(path, "a") as f:
            f.write(json.dumps({"event": "started", "num_replicas": 1}) + "\n")
    commits.clear()
    scheduler.steps.settle()
    assert len(commits) == 1
    for job_id in (first, second):
        job = jobs.get_job(db, job_id)
        assert (job.status, job.num_replicas) == (JobStatus.running, 1)
    reads: list[object] = []
    monkeypatch.setattr(ingest, "read_events", lambda *a: reads.append(a) or ([], 0))
    scheduler.steps.settle()
    assert (len(commits), reads) == (1, [])


def test_reconcile_queues_again_a_claim_whose_launch_never_came(db, scheduler, caplog):
    job_id = queue(db, command_spec("pass", gpus=1))
    # A scheduler that claimed the job on GPU 1 and stopped before it launched it.
    with db.write() as session:
        assert writes.claim_for_start(session, job_id, 1, [1], None)
    with caplog.at_level(logging.WARNING, logger="service.scheduler.loop"):
        scheduler.reconcile()
    assert f"job {job_id}: claimed for attempt 1 but never launched" in caplog.text
    job = jobs.get_job(db, job_id)
    assert (job.status, job.attempt, job.assigned_gpus, job.started_at) == (
        JobStatus.queued,
        0,
        [],
        None,
    )
    assert scheduler.books.running == {}
    with db.read() as session:
        assert session.exec(select(Allocation)).all() == []
    scheduler.steps.place()
    assert jobs.get_job(db, job_id).attempt == 1
    until(lambda: _settled(scheduler, db, job_id))
    job = jobs.get_job(db, job_id)
    assert (job.status, job.attempt, job.previous_attempts) == (JobStatus.succeeded, 1, [])


def _settled(scheduler: Scheduler, db, job_id: int) -> bool:
    scheduler.steps.settle()
    return jobs.get_job(db, job_id).status in TERMINAL


def test_reconcile_leaves_queued_jobs_without_a_run_directory_alone(db, scheduler):
    job_id = queue(db, SLEEP)
    scheduler.reconcile()
    assert scheduler.books.running == {}
    assert jobs.get_job(db, job_id).status == JobStatus.queued


def test_one_commit_for_what_running_jobs_said_and_how_the_others_ended(db, scheduler, commits):
    sleeps, quick = queue(db, SLEEP), queue(db, command_spec("pass", gpus=0))
    scheduler.steps.place()
    events = scheduler.books.running[sleeps].run.events
    pid = runner_pid(scheduler, quick)
    until(lambda: gone(pid) and events.exists() and b'"running"' in events.read_bytes())
    commits.clear()
    scheduler.steps.settle()
    assert len(commits) == 1
    assert jobs.get_job(db, sleeps).status == JobStatus.running
    assert jobs.get_job(db, quick).status == JobStatus.succeeded
    assert list(scheduler.books.running) == [sleeps]
    assert scheduler.books.running[sleeps].offset == events.stat().st_size


def test_a_claimed_job_that_cannot_be_launched_fails_and_the_others_start(db, scheduler):
    refused, broken, fine = queue(db, SLEEP), queue(db, SLEEP), queue(db, SLEEP)
    executor = scheduler.books.executor
    start = executor.start

    def picky(launch):
        if launch.job_id == refused:
            raise LaunchError("could not start the worker: no space left on device")
        if launch.job_id == broken:
            raise RuntimeError("a bug")
        return start(launch)

    executor.start = picky
    scheduler.books.settings.max_cpu_jobs = 3
    scheduler.steps.place()
    for job_id, message in ((refused, "no space left on device"), (broken, "a bug")):
        job = jobs.get_job(db, job_id)
        assert (job.status, job.reason) == (JobStatus.failed, "launch_error")
        assert message in job.message
    assert jobs.get_job(db, fine).status == JobStatus.starting
    assert set(scheduler.books.running) == {fine}


def test_each_claim_is_its_own_one_bad_job_never_undoes_anothers(db, scheduler, monkeypatch):
    good, forged, unlucky = (queue(db, SLEEP) for _ in range(3))
    # A stored spec gpuq cannot run (written past the API, as a restore or a bad migration
    # could), and a claim that fails for a reason of its own.
    with db.write() as session:
        session.connection().execute(
            Job.__table__.update().where(Job.id == forged).values(spec={"kind": "nonsense"})
        )
    claim = writes.claim_for_start

    def failing_for_one(session, job_id, *args, **kwargs):
        if job_id == unlucky:
            raise RuntimeError("the disk hiccuped")
        return claim(session, job_id, *args, **kwargs)

    monkeypatch.setattr(writes, "claim_for_start", failing_for_one)
    scheduler.steps.place()
    assert jobs.get_job(db, good).status == JobStatus.starting
    assert good in scheduler.books.running
    bad = jobs.get_job(db, forged)
    assert (bad.status, bad.reason) == (JobStatus.failed, "launch_error")
    assert "stored spec is not valid" in (bad.message or "")
    assert jobs.get_job(db, unlucky).status == JobStatus.queued  # undone alone: tried again
    monkeypatch.setattr(writes, "claim_for_start", claim)
    scheduler.steps.place()
    assert jobs.get_job(db, unlucky).status == JobStatus.starting
