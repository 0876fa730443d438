import pytest

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service import jobs
from service.errors import Conflict, Invalid, NotFound
from service.public import JobPublic
from service.store.db import Database
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")


def make(db: Database, **overrides) -> int:
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec(**overrides)), caller=ANA)
    assert job.id is not None
    return job.id


def move(db: Database, job_id: int, to: JobStatus, **values) -> bool:
    with db.write() as session:
        return jobs.transition(session, job_id, to, **values)


def test_a_new_job_is_queued_with_a_utc_timestamp(db):
    job = jobs.get_job(db, make(db))
    assert job.status == JobStatus.queued
    assert job.created_at.utcoffset().total_seconds() == 0


def test_the_gate_follows_the_lifecycle_and_stamps_each_step(db):
    job_id = make(db)
    assert not move(db, job_id, JobStatus.running), "queued cannot jump to running"
    assert move(db, job_id, JobStatus.starting)
    assert move(db, job_id, JobStatus.running)
    assert move(db, job_id, JobStatus.succeeded)
    job = jobs.get_job(db, job_id)
    assert job.started_at <= job.running_at <= job.finished_at


@pytest.mark.parametrize("final", [JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled])
def test_a_terminal_state_never_changes(db, final):
    job_id = make(db)
    move(db, job_id, JobStatus.starting)
    assert move(db, job_id, final)
    for target in JobStatus:
        assert not move(db, job_id, target)
    assert jobs.get_job(db, job_id).status == final


def test_only_one_of_two_racing_writers_wins(db):
    job_id = make(db)
    assert move(db, job_id, JobStatus.cancelled, reason=Reason.cancelled_by_user)
    assert not move(db, job_id, JobStatus.starting), "the scheduler must lose to the cancel"


def test_cancel_of_a_queued_job_ends_it_and_of_an_ended_job_is_a_conflict(db):
    job_id = make(db)
    job = jobs.cancel_job(db, job_id, ANA)
    assert (job.status, job.reason) == (JobStatus.cancelled, Reason.cancelled_by_user)
    with pytest.raises(Conflict):
        jobs.cancel_job(db, job_id, ANA)


def test_cancel_of_a_running_job_asks_the_scheduler(db):
    job_id = make(db)
    move(db, job_id, JobStatus.starting)
    job = jobs.cancel_job(db, job_id, ANA)
    assert job.status == JobStatus.starting
    assert job.cancel_requested_at is not None


def test_idempotency_key_returns_the_first_job(db):
    spec = JobSpec.model_validate(job_spec())
    first, created = submit_job(db, spec=spec, caller=ANA, idempotency_key="k1")
    again, created_again = submit_job(db, spec=spec, caller=ANA, idempotency_key="k1")
    assert (created, created_again) == (True, False)
    assert again.id == first.id
    other = JobSpec.model_validate(job_spec(name="other"))
    with pytest.raises(Conflict):
        submit_job(db, spec=other, caller=ANA, idempotency_key="k1")


def test_listing_pages_newest_first_and_filters(db):
    ids = [make(db) for _ in range(5)]
    move(db, ids[0], JobStatus.cancelled)
    page, cursor = jobs.list_jobs(db, limit=2)
    assert [j.id for j in page] == [ids[4], ids[3]]
    page, cursor = jobs.list_jobs(db, limit=2, cursor=cursor)
    assert [j.id for j in page] == [ids[2], ids[1]]
    page, cursor = jobs.list_jobs(db, limit=2, cursor=cursor)
    assert ([j.id for j in page], cursor) == ([ids[0]], None)
    cancelled, _ = jobs.list_jobs(db, statuses=[JobStatus.cancelled])
    assert [j.id for j in cancelled] == [ids[0]]
    assert jobs.list_jobs(db, owner="nobody")[0] == []
    with pytest.raises(Invalid):
        jobs.list_jobs(db, cursor="abc")


def test_a_job_read_without_the_orm_looks_the_same_as_through_it(db: Database):
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec()), caller=ANA)
    with db.write() as session:
        jobs.transition(
            session,
            job.id,
            JobStatus.starting,
            assigned_gpus=[1],
            attempt=1,
            progress={"epoch": 1, "epochs": 2, "samples_per_s": 10.5},
            metrics={"loss": 0.25},
        )
    public = JobPublic.of(jobs.get_job(db, job.id))
    assert JobPublic.of(jobs.read_job(db, job.id)) == public
    assert (public.status, public.assigned_gpus, public.progress.epoch) == ("starting", [1], 1)
    assert public.started_at is not None and public.started_at.tzinfo is not None
    with pytest.raises(NotFound):
        jobs.read_job(db, job.id + 1)


def test_a_submissions_answer_is_the_job_as_read_back(db: Database):
    """The answer is built from the inserted row (no ORM object), yet reads the same."""
    first = make(db)
    spec = JobSpec.model_validate(
        job_spec(not_before="2030-01-02T03:04:05.123456Z", depends_on=[first], priority=-3)
    )
    job, created = submit_job(db, spec=spec, caller=ANA, idempotency_key="same")
    again, created_again = submit_job(db, spec=spec, caller=ANA, idempotency_key="same")
    assert (created, created_again) == (True, False)
    assert job.model_dump() == again.model_dump() == jobs.get_job(db, job.id).model_dump()
    public = JobPublic.of(job)
    assert public == JobPublic.of(jobs.read_job(db, job.id))
    assert (public.status, public.depends_on, public.priority) == ("queued", [first], -3)
    assert public.not_before is not None and public.not_before.tzinfo is not None
    assert public.revision > jobs.get_job(db, first).rev
