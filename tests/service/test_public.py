"""A bad value a job's events left in the database (stored before they were checked) reads
as absent: it never fails a whole list of jobs, nor anything else that shows the job."""

import json

from gpuq.contract.states import JobStatus
from service import jobs
from service.jobs.writes import JOB
from service.store.tables import JobMetric
from tests.conftest import job_spec


def test_bad_stored_progress_metrics_and_fields_read_as_absent(db, api):
    bad, fine = (api.post("/v1/jobs", json=job_spec()).json()["id"] for _ in range(2))
    with db.write() as session:
        for job_id in (bad, fine):
            jobs.transition(session, job_id, JobStatus.starting, attempt=1)
        # SQLite keeps what it is given, whatever the column's type.
        session.connection().execute(
            JOB.update()
            .where(JOB.c.id == bad)
            .values(
                progress={"epoch": "x", "fraction": 0.5},
                metrics={"loss": "x", "nested": {"a": 1}, "mae": 0.5, "val_mae": None},
                num_replicas="many",
                exit_code="x",
            )
        )
        session.add(JobMetric(job_id=bad, attempt=1, epoch=1, values={"epoch": 1.5, "loss": 1}))
        session.add(JobMetric(job_id=bad, attempt=1, epoch=1, step=2, values={"loss": "x"}))
        session.add(JobMetric(job_id=bad, attempt=1, epoch=2, values=["not", "a", "dict"]))

    listed = api.get("/v1/jobs")
    assert listed.status_code == 200, listed.text
    job = next(j for j in listed.json()["jobs"] if j["id"] == bad)
    assert set(job["progress"].values()) == {None}
    assert job["metrics"] == {"mae": 0.5, "val_mae": None}
    assert (job["num_replicas"], job["exit_code"]) == (None, None)
    shown = api.get(f"/v1/jobs/{bad}").json()
    # A running job's efficiency counts the time it has run: the two reads differ there.
    assert {**shown, "efficiency": None} == {**job, "efficiency": None}
    assert api.get(f"/v1/jobs/{bad}/metrics").json() == {
        "epochs": [{"epoch": 1, "loss": 1}, {"epoch": 2}],
        "steps": [{"epoch": 1, "step": 2}],
    }
    scrape = api.get("/metrics")
    assert scrape.status_code == 200
    assert f'gpuq_job_progress_ratio{{job="{bad}"' not in scrape.text

    with db.write() as session:
        session.connection().execute(
            JOB.update().where(JOB.c.id == bad).values(progress="x", metrics=json.dumps([1]))
        )
    assert api.get("/v1/jobs").status_code == 200
    assert api.get(f"/v1/jobs/{bad}").json()["progress"]["epoch"] is None
