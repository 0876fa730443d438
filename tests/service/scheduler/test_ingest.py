import json
import logging

import pytest
from sqlmodel import select

from gpuq.contract.event_records import ProgressRecord
from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.jobs import writes
from service.public import Progress
from service.scheduler import ingest
from service.scheduler.ingest import digest_events, new_events, read_events, record_events
from service.scheduler.running import MemoryRecord, Running
from service.store.tables import JobMetric
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")


def test_only_complete_lines_are_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "started"}\n{"event": "st')
    events, offset = read_events(path, 0)
    assert events == [{"event": "started"}]
    assert offset == len('{"event": "started"}\n')
    with open(path, "a") as f:
        f.write('ep", "epoch": 1}\n')
    events, _ = read_events(path, offset)
    assert events == [{"event": "step", "epoch": 1}]


def test_a_missing_file_reads_as_nothing(tmp_path):
    assert read_events(tmp_path / "absent", 0) == ([], 0)


def step(epoch, n, loss):
    return {
        "event": "step",
        "epoch": epoch,
        "step": n,
        "metrics": {"loss": loss},
        "progress": {"epoch": epoch, "epochs": 2, "step": n, "steps": 4},
    }


def test_events_set_progress_metrics_and_running(db, tmp_path):
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    with db.write() as session:
        jobs.transition(session, job.id, JobStatus.starting, attempt=1)
    batch = [
        {"event": "started", "num_replicas": 2},
        step(1, 1, 0.9),
        {
            "event": "epoch",
            "epoch": 1,
            "step": 4,
            "metrics": {"loss": 0.5},
            "progress": {"epoch": 1, "epochs": 2, "step": 4, "steps": 4, "fraction": 0.5},
        },
        # the same epoch again (a re-read after a restart) must not duplicate it
        {"event": "epoch", "epoch": 1, "step": 4, "metrics": {"loss": 0.4}, "progress": {}},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in batch))
    running = Running(job.id, RunDir(tmp_path), [], MemoryRecord(None))
    found = new_events(running)
    assert found is not None
    events, offset = found
    assert offset == path.stat().st_size and events.trained
    with db.write() as session:
        record_events(session, {job.id: found})
    job = jobs.get_job(db, job.id)
    assert job.status == JobStatus.running
    assert job.num_replicas == 2
    assert job.events_offset == offset
    assert job.metrics == {"loss": 0.4}
    with db.read() as session:
        rows = session.exec(select(JobMetric)).all()
    positions = sorted((r.epoch, r.step, json.dumps(r.values)) for r in rows)
    assert positions == [(1, 0, '{"loss": 0.4}'), (1, 1, '{"loss": 0.9}')]


def test_events_of_a_job_started_before_gpuq_saw_it_start_wait_for_that_start(db, tmp_path):
    """A queueing executor (Slurm) can start a job between two of gpuq's looks at its
    queue: the program's one `running` event must not be read while the job is `queued`."""
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    (tmp_path / "events.jsonl").write_text(json.dumps({"event": "running", "pid": 7}) + "\n")
    running = Running(job.id, RunDir(tmp_path), [], MemoryRecord(None))
    found = new_events(running)
    assert found is not None
    with db.write() as session:
        assert record_events(session, {job.id: found}) == {}
    job = jobs.get_job(db, job.id)
    assert (job.status, job.events_offset) == (JobStatus.queued, 0)
    assert new_events(running) == found  # read again at the next step
    with db.write() as session:
        assert writes.mark_started(session, job.id)
        assert record_events(session, {job.id: found}) == {job.id: found}
    job = jobs.get_job(db, job.id)
    assert job.status == JobStatus.running and job.running_at is not None
    assert job.events_offset == found[1]


#: Lines a job may write to hurt others: each must be skipped, and nothing of it stored.
HOSTILE = [
    {"event": "step", "step": "x"},
    {"event": "epoch", "epoch": 1, "progress": {"epoch": "x"}},
    {"event": "epoch", "epoch": 1, "progress": "x"},
    {"event": "epoch", "epoch": 10**30, "metrics": {"loss": 0.1}},
    {"event": "epoch", "epoch": 1, "metrics": {"loss": "x" * 100_000}},
    {"event": "epoch", "epoch": 1, "metrics": {"loss": {"nested": [1]}}},
    {"event": "epoch", "epoch": 1, "metrics": {f"m{i}": 1 for i in range(1000)}},
    {"event": "started", "num_replicas": "many"},
    {"event": "started", "num_replicas": 2**70},
    {"event": "failed", "message": ["not", "text"]},
    {"event": "failed", "message": "NUL\0"},
    "a string",
    None,  # a line that is not JSON
]


def test_bad_lines_are_skipped_and_the_good_ones_count():
    good = step(2, 3, 0.25)
    found = digest_events(
        [*HOSTILE[:5], good, *HOSTILE[5:], {"event": "started", "num_replicas": 2}]
    )
    assert found.skipped == len(HOSTILE)
    assert found.problem == "step: Input should be a valid integer"
    assert found.values == {
        "progress": {"epoch": 2, "epochs": 2, "step": 3, "steps": 4},
        "metrics": {"loss": 0.25},
        "num_replicas": 2,
    }
    assert found.metrics == [(2, 3, {"loss": 0.25})]
    assert found.trained


def test_the_progress_read_is_the_one_the_api_shows():
    assert list(ProgressRecord.model_fields) == list(Progress.model_fields)


def test_an_epoch_reported_without_progress_is_where_training_is():
    # `gpuq.report(27, val_loss=0.15)` says neither a total nor a share done.
    found = digest_events([{"event": "epoch", "epoch": 27, "metrics": {"val_loss": 0.15}}])
    assert found.values["progress"] == {"epoch": 27}


def test_unreadable_lines_and_files_read_as_nothing(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(f'{deep}\n\n{{"event": "running"}}\nnot json\n')
    events, offset = read_events(path, 0)
    assert (events, offset) == ([None, {"event": "running"}, None], path.stat().st_size)
    loop = tmp_path / "loop" / "events.jsonl"
    loop.parent.mkdir()
    loop.symlink_to(loop)
    assert read_events(loop, 0) == ([], 0)
    # A line longer than a read is skipped a read at a time, not waited for forever.
    monkeypatch.setattr(ingest, "MAX_READ_BYTES", 8)
    path.write_text("x" * 12 + '\n{"event": "running"}\n')
    assert read_events(path, 0) == ([None], 8)
    assert read_events(path, 8) == ([None], 13)


def test_a_flood_of_lines_is_read_a_bounded_number_at_a_time(tmp_path):
    # Each line costs the scheduler's step time: one job's flood must not hold up the step
    # for every job.
    path = tmp_path / "events.jsonl"
    path.write_text("x\n" * (2 * ingest.MAX_READ_LINES) + '{"event": "running"}\n')
    events, offset = read_events(path, 0)
    assert (len(events), offset) == (ingest.MAX_READ_LINES, 2 * ingest.MAX_READ_LINES)
    events, offset = read_events(path, offset)
    assert (len(events), offset) == (ingest.MAX_READ_LINES, 4 * ingest.MAX_READ_LINES)
    assert read_events(path, offset) == ([{"event": "running"}], path.stat().st_size)


def test_a_read_with_bad_lines_warns_once_naming_the_job(tmp_path, caplog):
    path = tmp_path / "events.jsonl"
    good = {"event": "epoch", "epoch": 1, "metrics": {"loss": 0.5}}
    path.write_text("".join(json.dumps(e) + "\n" for e in [*HOSTILE[:-1], good]) + "{\n")
    running = Running(7, RunDir(tmp_path), [], MemoryRecord(None))
    with caplog.at_level(logging.WARNING, logger="service.scheduler.ingest"):
        found = new_events(running)
    assert found is not None and found[0].metrics == [(1, 0, {"loss": 0.5})]
    assert [r.getMessage() for r in caplog.records] == [
        f"job 7: skipped {len(HOSTILE)} line(s) of its events.jsonl that break the contract; "
        "the first: 'step: Input should be a valid integer'"
    ]


def test_one_jobs_failing_record_leaves_the_others(db, tmp_path, monkeypatch, caplog):
    ids = []
    for _ in range(3):
        job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
        with db.write() as session:
            jobs.transition(session, job.id, JobStatus.starting, attempt=1)
        ids.append(job.id)
    found = {i: (digest_events([step(1, 1, 0.5)]), 100) for i in ids}
    record_progress = writes.record_progress

    def fails_for_the_second(session, job_id, *args, **kwargs):
        record_progress(session, job_id, *args, **kwargs)  # written, then undone
        if job_id == ids[1]:
            raise OverflowError("a value of its own")

    monkeypatch.setattr(writes, "record_progress", fails_for_the_second)
    with db.write() as session:
        record_events(session, found)
    assert [jobs.get_job(db, i).status for i in ids] == [
        JobStatus.running,
        JobStatus.starting,
        JobStatus.running,
    ]
    assert [jobs.get_job(db, i).events_offset for i in ids] == [100, 0, 100]
    with db.read() as session:
        assert sorted(r.job_id for r in session.exec(select(JobMetric))) == [ids[0], ids[2]]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"job {ids[1]}: could not record its events; the other jobs go on"
    ]
