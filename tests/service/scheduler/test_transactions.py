"""One write transaction per step for what it starts, ingests and reaps; what a start that
never committed leaves behind is killed (real runners, a real database)."""

import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import event

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.executors import LocalExecutor
from service.scheduler import ingest, starting
from service.scheduler.loop import Scheduler
from tests.conftest import ANA, command_spec

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
    return jobs.create_job(db, spec=JobSpec.model_validate(spec), caller=ANA)[0].id


def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """Whether `pid` has ended and its parent has reaped it (the executor tells the same)."""
    return not os.path.exists(f"/proc/{pid}")


def test_one_step_starting_two_jobs_commits_once(db, scheduler, commits):
    first, second = queue(db, SLEEP), queue(db, SLEEP)
    commits.clear()
    scheduler.place()
    assert len(commits) == 1
    for job_id in (first, second):
        job = jobs.get_job(db, job_id)
        assert (job.status, job.attempt, job.executor) == (JobStatus.starting, 1, "local")
        assert job.runner_pid is not None and not gone(job.runner_pid)
    assert set(scheduler.books.running) == {first, second}


def test_a_start_that_does_not_commit_kills_its_runners(db, scheduler, commits):
    first, second = queue(db, SLEEP), queue(db, SLEEP)

    def refuse(_conn: object) -> None:
        raise RuntimeError("the disk is full")

    event.listen(db.writer, "commit", refuse)
    try:
        with pytest.raises(RuntimeError, match="the disk is full"):
            scheduler.place()
    finally:
        event.remove(db.writer, "commit", refuse)
    assert [jobs.get_job(db, i).status for i in (first, second)] == [JobStatus.queued] * 2
    assert scheduler.books.running == {}
    assert scheduler.books.disowned == {first, second}
    runners = scheduler.books.executor.job_sessions()  # runner pid → job
    assert sorted(runners.values()) == [first, second]
    until(lambda: all(gone(pid) for pid in runners))
    # Their exits are reported once, and are no one's.
    until(lambda: _reaped(scheduler))
    assert [jobs.get_job(db, i).status for i in (first, second)] == [JobStatus.queued] * 2


def _reaped(scheduler: Scheduler) -> bool:
    scheduler.ingest_and_reap()
    return not scheduler.books.disowned


def test_reaping_two_exits_is_one_commit(db, scheduler, commits):
    fails = command_spec("raise SystemExit(3)", gpus=0)
    ok, failed = queue(db, command_spec("pass", gpus=0)), queue(db, fails)
    scheduler.place()
    pids = [jobs.get_job(db, i).runner_pid for i in (ok, failed)]
    until(lambda: all(gone(pid) for pid in pids if pid is not None))
    commits.clear()
    scheduler.ingest_and_reap()
    assert len(commits) == 1
    assert jobs.get_job(db, ok).status == JobStatus.succeeded
    job = jobs.get_job(db, failed)
    assert (job.status, job.exit_code) == (JobStatus.failed, 3)
    assert scheduler.books.running == {}


def test_ingest_writes_every_jobs_events_in_one_commit_and_skips_files_that_did_not_grow(
    db, scheduler, commits, monkeypatch
):
    first, second = queue(db, SLEEP), queue(db, SLEEP)
    scheduler.place()
    files = [scheduler.books.running[i].run.events for i in (first, second)]
    # The runner's own event (its program started) comes first; then nothing until exit.
    until(lambda: all(p.exists() and b'"running"' in p.read_bytes() for p in files))
    for path in files:
        with open(path, "a") as f:
            f.write(json.dumps({"event": "started", "num_replicas": 1}) + "\n")
    commits.clear()
    scheduler.ingest_and_reap()
    assert len(commits) == 1
    for job_id in (first, second):
        job = jobs.get_job(db, job_id)
        assert (job.status, job.num_replicas) == (JobStatus.running, 1)
    reads: list[object] = []
    monkeypatch.setattr(ingest, "read_events", lambda *a: reads.append(a) or ([], 0))
    scheduler.ingest_and_reap()
    assert (len(commits), reads) == (1, [])


def test_reconcile_kills_a_runner_whose_start_never_committed(db, settings, scheduler, caplog):
    job_id = queue(db, SLEEP)
    # A scheduler that started the job and stopped before its commit: a real runner for
    # attempt 1, while the database still says queued (attempt 0).
    crashed = LocalExecutor(settings.runs_dir)
    spec = JobSpec.model_validate(SLEEP)
    launch = starting.new_launch(scheduler.books, job_id, 1, spec, DevicePlan.cpu())
    try:
        pid = crashed.start(launch).runner_pid
        assert pid is not None
        run = crashed.run_dir(job_id, 1)
        until(lambda: run.runner.exists() and os.path.getsize(run.runner) > 0)
        scheduler.reconcile()
        until(lambda: gone(pid))
        assert scheduler.books.disowned == {job_id}
        with caplog.at_level(logging.WARNING, logger="service.scheduler.finishing"):
            until(lambda: _reaped(scheduler))
        assert not [r for r in caplog.records if r.name.endswith("finishing")]
        job = jobs.get_job(db, job_id)
        assert (job.status, job.attempt) == (JobStatus.queued, 0)
        assert scheduler.books.running == {}
    finally:
        crashed.signal(job_id, signal.SIGKILL)
        crashed.close()


def test_reconcile_leaves_queued_jobs_without_a_run_directory_alone(db, scheduler):
    job_id = queue(db, SLEEP)
    scheduler.reconcile()
    assert scheduler.books.disowned == set()
    assert jobs.get_job(db, job_id).status == JobStatus.queued


def test_one_commit_for_what_running_jobs_said_and_how_the_others_ended(db, scheduler, commits):
    sleeps, quick = queue(db, SLEEP), queue(db, command_spec("pass", gpus=0))
    scheduler.place()
    events = scheduler.books.running[sleeps].run.events
    pid = jobs.get_job(db, quick).runner_pid
    assert pid is not None
    until(lambda: gone(pid) and events.exists() and b'"running"' in events.read_bytes())
    commits.clear()
    scheduler.ingest_and_reap()
    assert len(commits) == 1
    assert jobs.get_job(db, sleeps).status == JobStatus.running
    assert jobs.get_job(db, quick).status == JobStatus.succeeded
    assert list(scheduler.books.running) == [sleeps]
    assert scheduler.books.running[sleeps].offset == events.stat().st_size
