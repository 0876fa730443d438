"""Planning inputs taken from a real database: fair share, holds, dependencies, positions."""

from collections.abc import Callable
from datetime import timedelta

import pytest

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service import jobs
from service.gpus import registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry
from service.scheduler import snapshot
from service.scheduler.queued import QueuedJob, QueueReader
from service.store.db import utcnow
from service.store.tables import Job
from service.team.users import Caller
from tests.conftest import job_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")


@pytest.fixture
def gpus(db, settings):
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    return GpuRegistry(db, inventory)


def submit(db, owner: str, **overrides) -> int:
    spec = JobSpec.model_validate(job_spec(**overrides))
    job, _ = submit_job(db, spec=spec, caller=Caller(owner, admin=False))
    return job.id


def ran(db, owner: str, hours_ago: float, hours: float, gpus: int = 2) -> None:
    """A finished job in `owner`'s history."""
    end = utcnow() - timedelta(hours=hours_ago)
    with db.write() as session:
        session.add(
            Job(
                name="old",
                owner=owner,
                status=JobStatus.succeeded,
                spec={},
                gpu_count=gpus,
                started_at=end - timedelta(hours=hours),
                finished_at=end,
            )
        )


def take(db, gpus, settings):
    snap = snapshot.take(db, gpus, settings, cpu_busy=0, job_sessions=set())
    assert snap is not None
    return snap


def test_a_heavy_users_older_job_waits_behind_a_light_users_newer_one(db, gpus, settings):
    ran(db, "heavy", hours_ago=1, hours=8)
    ran(db, "light", hours_ago=1, hours=0.1)
    heavy_job = submit(db, "heavy", resources={"gpus": 2})
    light_job = submit(db, "light", resources={"gpus": 2})
    snap = take(db, gpus, settings)
    assert snap.inputs.usage["heavy"] > 10 * snap.inputs.usage["light"]
    assert snap.positions == [light_job, heavy_job]
    result = snap.inputs.plan()
    assert [p.job_id for p in result.placements] == [light_job]


def test_usage_fades_with_the_half_life(db, gpus, settings):
    ran(db, "ana", hours_ago=0, hours=1)
    fresh = take(db, gpus, settings).inputs.usage["ana"]
    ran(db, "bo", hours_ago=settings.fair_share_half_life_s / 3600, hours=1)
    faded = take(db, gpus, settings).inputs.usage["bo"]
    assert faded == pytest.approx(fresh / 2, rel=0.01)


def test_held_jobs_and_unmet_dependencies_are_not_considered(db, gpus, settings):
    first = submit(db, "ana")
    held = submit(db, "ana")
    jobs.set_held(db, held, Caller("ana", admin=False), held=True)
    later = submit(db, "ana", depends_on=[first])
    snap = take(db, gpus, settings)
    assert [r.job_id for r in snap.inputs.queue] == [first]
    assert snap.blocked[held] == f"held: `POST /v1/jobs/{held}/release` lets it start"
    assert snap.blocked[later] == f"waiting for job {first} to succeed (it is queued)"
    assert snap.positions == [first, held, later]


def test_a_failed_dependency_dooms_the_job(db, gpus, settings):
    first = submit(db, "ana")
    later = submit(db, "ana", depends_on=[first])
    with db.write() as session:
        jobs.transition(session, first, JobStatus.starting, attempt=1)
        jobs.transition(session, first, JobStatus.failed)
    snap = take(db, gpus, settings)
    assert snap.doomed == {later: f"it depends on job {first}, which ended failed"}


def test_an_idle_tick_skips_the_snapshot_only_when_asked(db, gpus, settings):
    assert (
        snapshot.take(db, gpus, settings, cpu_busy=0, job_sessions=set(), skip_if_idle=True) is None
    )
    assert take(db, gpus, settings).queued == {}
    submit(db, "ana")
    busy = snapshot.take(db, gpus, settings, cpu_busy=0, job_sessions=set(), skip_if_idle=True)
    assert busy is not None and list(busy.queued) == [1]


def counted_reader(db, monkeypatch) -> tuple[QueueReader, Callable[[], dict], list[int]]:
    """A queue reader, a read through it, and the ids of the rows it parsed meanwhile."""
    reader = QueueReader()
    parsed: list[int] = []
    from_row = QueuedJob.from_row
    monkeypatch.setattr(QueuedJob, "from_row", lambda row: parsed.append(row[0]) or from_row(row))

    def read() -> dict[int, QueuedJob]:
        with db.read() as session:
            return reader.read(session.connection())

    return reader, read, parsed


def test_the_schedulers_queue_reader_rereads_only_jobs_that_changed(
    db, gpus, settings, monkeypatch
):
    first, second, third = (submit(db, "ana", name=f"j{n}") for n in range(3))
    reader, read, parsed = counted_reader(db, monkeypatch)
    assert set(read()) == {first, second, third}
    assert sorted(parsed) == [first, second, third]
    parsed.clear()
    assert set(read()) == {first, second, third} and parsed == []  # nothing changed
    with db.write() as session:  # one job changed, one started, one new
        jobs.writes.set_wait_reasons(session, [{"job_id": first, "why": "later", "position": 1}])
        assert jobs.writes.claim_for_start(session, second, 1, [0], None)
    fourth = submit(db, "bo")
    queued = read()
    assert set(queued) == {first, third, fourth}
    assert sorted(parsed) == sorted([first, fourth])
    assert (queued[first].wait_reason, queued[first].queue_position) == ("later", 1)
    # What the plan gets is what a fresh read gets.
    assert (
        take(db, gpus, settings).queued
        == snapshot.take(db, gpus, settings, cpu_busy=0, job_sessions=set(), reader=reader).queued
    )


def test_the_plans_own_writes_are_taken_as_written_and_a_later_change_is_read(
    db, gpus, settings, monkeypatch
):
    first, second, third = (submit(db, "ana", name=f"j{n}") for n in range(3))
    reader, read, parsed = counted_reader(db, monkeypatch)
    read()
    parsed.clear()
    third_waits = {"job_id": third, "why": "third's", "position": 3}
    with db.write() as session:  # what a plan writes, and the revisions it took
        before = jobs.writes.set_wait_reasons(
            session,
            [
                {"job_id": first, "why": "first's", "position": 1},
                {"job_id": second, "why": "second's", "position": 2},
                third_waits,
            ],
        )
    reader.wrote({first: ("first's", 1), second: ("second's", 2)}, before, before + 3)
    with db.write() as session:  # another writer, after the plan
        session.get(Job, second).held = True
    queued = read()
    # The first is taken as written; the second changed since, and the third's write
    # was not told: both are read again.
    assert sorted(parsed) == [second, third]
    assert (queued[first].wait_reason, queued[first].queue_position) == ("first's", 1)
    assert queued[second].held and queued[second].wait_reason == "second's"
    assert queued[third].wait_reason == "third's"
    assert queued == take(db, gpus, settings).queued  # what a fresh read gets
    parsed.clear()
    assert read() == queued and parsed == []  # taken once: nothing changed since


def test_a_hold_that_comes_in_while_the_plan_is_made_is_not_hidden_by_its_write(
    db, gpus, settings, monkeypatch
):
    first, second = (submit(db, "ana", name=f"j{n}") for n in range(2))
    reader, read, parsed = counted_reader(db, monkeypatch)
    assert not read()[second].held
    read_upto = reader.seen
    with db.write() as session:  # a hold, after the plan read the queue
        session.get(Job, second).held = True
    with db.write() as session:  # the plan's write, of what it read before the hold
        before = jobs.writes.set_wait_reasons(
            session,
            [
                {"job_id": first, "why": "first's", "position": 1},
                {"job_id": second, "why": "second's", "position": 2},
            ],
            unchanged_since=read_upto,
        )
    reader.wrote({first: ("first's", 1), second: ("second's", 2)}, before, before + 2)
    parsed.clear()
    queued = read()
    # The held job's row was left to the hold, and read again: the next plan sees it held.
    assert parsed == [second]
    assert queued[second].held and queued[second].wait_reason is None
    assert queued[first].wait_reason == "first's"
    assert queued == take(db, gpus, settings).queued  # what a fresh read gets


def test_the_queue_reader_asks_only_for_revisions_above_the_highest_it_read(db, monkeypatch):
    from service.scheduler import queued as queued_module

    first, second = submit(db, "ana", name="a"), submit(db, "ana", name="b")
    reader = QueueReader()
    compared: list[int] = []
    compare_all = QueueReader._compare_all
    monkeypatch.setattr(
        QueueReader, "_compare_all", lambda self, c: compared.append(1) or compare_all(self, c)
    )

    def read() -> dict[int, QueuedJob]:
        with db.read() as session:
            return reader.read(session.connection())

    assert set(read()) == {first, second} and len(compared) == 1
    with db.write() as session:  # a hold, a cancel and a new job, seen by their revisions
        session.get(Job, first).held = True
        assert jobs.writes.cancel_queued(session, second, Reason.cancelled_by_user, "no")
    third = submit(db, "bo")
    queued = read()
    assert set(queued) == {first, third} and queued[first].held
    assert len(compared) == 1  # no whole-queue comparison within RESYNC_S
    # A row deleted outside gpuq bumps no revision: the next comparison drops it.
    with db.write() as session:
        session.delete(session.get(Job, third))
    assert set(read()) == {first, third}
    monkeypatch.setattr(queued_module, "RESYNC_S", 0.0)
    assert set(read()) == {first} and len(compared) == 2
