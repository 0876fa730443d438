"""One job never stops the others: what fails for one job in a step is logged for it, and
the step goes on for the rest (real database, the scheduler driven step by step)."""

import json
import logging

import pytest
from sqlmodel import select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service import jobs
from service.jobs import writes
from service.scheduler import finishing
from service.scheduler.enforce import stop_overdue
from service.scheduler.isolation import each_apart
from service.store.tables import Allocation
from tests.conftest import ANA, job_spec
from tests.service.scheduler.test_ingest import HOSTILE
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")


def started(db, settings, gpu: int, *, events: list, exit_record: dict) -> int:
    """A job left `starting` on `gpu` by a scheduler that stopped, whose runner has since
    ended, leaving these events and this exit record."""
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    with db.write() as session:
        jobs.transition(session, job.id, JobStatus.starting, assigned_gpus=[gpu], attempt=1)
        session.add(Allocation(job_id=job.id, gpu_index=gpu, memory_mb=None))
    run = settings.runs_dir / str(job.id) / "1"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "exit.json").write_text(json.dumps(exit_record))
    (run / "runner.json").write_text(json.dumps({"runner_pid": 999_999_999}))
    return job.id


EPOCH = {"event": "epoch", "epoch": 1, "metrics": {"loss": 0.5}, "progress": {"epoch": 1}}


def test_a_job_whose_exit_cannot_be_recorded_fails_alone(
    db, settings, scheduler, caplog, monkeypatch
):
    # Its events are hostile, and judging its end fails (its exit record fits the contract:
    # `test_an_exit_record_past_the_contract_is_judged_as_none`).
    hostile = started(db, settings, 0, events=[*HOSTILE, EPOCH], exit_record={"exit_code": 1})
    good = started(db, settings, 1, events=[EPOCH], exit_record={"exit_code": 0})
    judge = finishing.judge_exit

    def fails_for_the_hostile(exit, job, tail):
        if exit.job_id == hostile:
            raise ValueError("its own data")
        return judge(exit, job, tail)

    monkeypatch.setattr(finishing, "judge_exit", fails_for_the_hostile)
    scheduler.reconcile()
    scheduler.step()
    job = jobs.get_job(db, good)
    assert (job.status, job.metrics, job.progress) == (
        JobStatus.succeeded,
        {"loss": 0.5},
        {"epoch": 1},
    )
    job = jobs.get_job(db, hostile)
    assert (job.status, job.reason, job.exit_code) == (JobStatus.failed, Reason.worker_lost, None)
    assert job.message and job.message.startswith("gpuq could not record how the job ended")
    assert (job.metrics, job.progress) == ({"loss": 0.5}, {"epoch": 1})
    with db.read() as session:
        assert session.exec(select(Allocation)).all() == []
    assert scheduler.books.running == {}
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"job {hostile}: could not settle its exit; the other jobs go on"]


def test_an_exit_record_past_the_contract_is_judged_as_none(db, settings, scheduler, caplog):
    # Its runner runs as its owner, who can write its exit record too: an exit code past
    # any INTEGER column is no exit gpuq's runner wrote.
    hostile = started(db, settings, 0, events=[EPOCH], exit_record={"exit_code": 10**30})
    scheduler.reconcile()
    scheduler.step()
    job = jobs.get_job(db, hostile)
    assert (job.status, job.reason, job.exit_code) == (JobStatus.failed, Reason.worker_lost, None)
    assert job.message and job.message.startswith("the job's runner ended without recording")
    assert job.metrics == {"loss": 0.5}
    said = [r.getMessage() for r in caplog.records if r.name == finishing.__name__]
    assert f"job {hostile}: its exit.json breaks the contract (exit_code: " in said[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_one_jobs_failing_stop_leaves_the_others(db, settings, scheduler, monkeypatch):
    ids = [started(db, settings, i, events=[], exit_record={}) for i in (0, 1)]
    scheduler.reconcile()
    with db.write() as session:
        for job_id in ids:
            writes.request_cancel(session, job_id)
    record_stop = writes.record_stop

    def fails_for_the_first(session, job_id, *args, **kwargs):
        if job_id == ids[0]:
            raise ValueError("its own data")
        record_stop(session, job_id, *args, **kwargs)

    monkeypatch.setattr(writes, "record_stop", fails_for_the_first)
    stop_overdue(scheduler.books)
    assert [jobs.get_job(db, i).stop_reason for i in ids] == [None, Reason.cancelled_by_user]


def test_each_apart_undoes_the_failing_jobs_writes_alone(db):
    ids = [submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)[0].id]
    ids.append(submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)[0].id)

    def write(session, job_id: int, value: int) -> int:
        # The database refuses the value: the transaction must still commit the rest.
        writes.record_progress(session, job_id, 1, {"num_replicas": value}, [], now_running=False)
        return value

    with db.write() as session:
        done, failed = each_apart(
            session, {ids[0]: 10**30, ids[1]: 2}, lambda i, v: write(session, i, v), "write"
        )
    assert (done, failed) == ({ids[1]: 2}, [ids[0]])
    assert [jobs.get_job(db, i).num_replicas for i in ids] == [None, 2]
