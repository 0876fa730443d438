import json

import pytest
from sqlmodel import select

from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.scheduler.ingest import new_events, read_events, record
from service.scheduler.running import MemoryRecord, Running
from service.store.tables import JobMetric
from tests.conftest import ANA, job_spec

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
    job, _ = jobs.create_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
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
        record(session, {job.id: found})
    job = jobs.get_job(db, job.id)
    assert job.status == JobStatus.running
    assert job.num_replicas == 2
    assert job.events_offset == offset
    assert job.metrics == {"loss": 0.4}
    with db.read() as session:
        rows = session.exec(select(JobMetric)).all()
    positions = sorted((r.epoch, r.step, json.dumps(r.values)) for r in rows)
    assert positions == [(1, 0, '{"loss": 0.4}'), (1, 1, '{"loss": 0.9}')]
