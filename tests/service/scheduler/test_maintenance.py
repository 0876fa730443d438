"""Maintenance drains and `not_before` as the scheduler sees them, on a real database."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.errors import NotFound
from service.gpus import maintenance, registry
from service.gpus.inventory import discover
from service.gpus.registry import GpuRegistry
from service.scheduler import readiness, snapshot
from service.scheduler.dry_runs import DryRuns
from service.scheduler.loop import Scheduler
from service.store.db import utcnow
from service.store.tables import Allocation, AuditEntry
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")

BOX_REASON = re.compile(
    r"the box is drained for maintenance by root since \d\d:\d\d UTC: driver upgrade; "
    r"nothing new starts until an admin resumes it \(`gpuq admin resume`\)"
)


@pytest.fixture
def gpus(db, settings):
    inventory = discover(settings.gpus)
    registry.sync(db, inventory)
    return GpuRegistry(db, inventory)


@pytest.fixture
def scheduler(db, settings, gpus):
    return Scheduler(db, settings, gpus)


def queue(db, **overrides) -> int:
    job, _ = submit_job(db, spec=JobSpec.model_validate(job_spec(**overrides)), caller=ANA)
    return job.id


def take(db, gpus, settings):
    snap = snapshot.take(db, gpus, settings, cpu_busy=0, job_sessions=set())
    assert snap is not None
    return snap


def occupy(db, gpu: int, memory_mb: int) -> int:
    """A job already running on `gpu` with `memory_mb` of it."""
    job_id = queue(db, resources={"gpu_ids": [gpu], "memory_mb": memory_mb})
    with db.write() as session:
        jobs.transition(session, job_id, JobStatus.starting, assigned_gpus=[gpu], attempt=1)
        session.add(Allocation(job_id=job_id, gpu_index=gpu, memory_mb=memory_mb))
    return job_id


def test_a_drained_gpu_gets_nothing_new_and_says_so(db, gpus, settings):
    # GPU 0 is the fuller one: best fit would take it, were it not drained.
    occupy(db, 0, 1024)
    maintenance.admin_drain(db, [0], "driver upgrade", "root")
    shared = queue(db, resources={"gpus": 1, "memory_mb": 1024})
    pinned = queue(db, resources={"gpu_ids": [0], "memory_mb": 1024})
    result = take(db, gpus, settings).inputs.plan()
    assert [(p.job_id, p.gpu_indices) for p in result.placements] == [(shared, (1,))]
    assert result.waiting[pinned] == (
        "waiting for GPUs 0 with 1024 MiB free; GPU 0 is drained for maintenance (driver upgrade)"
    )


def test_a_gpu_drained_without_a_reason_names_the_admin(db, gpus, settings):
    maintenance.admin_drain(db, [1], None, "root")
    [slot] = [g for g in take(db, gpus, settings).inputs.gpus if g.index == 1]
    assert slot.unavailable == "drained for maintenance (by root)"


def test_a_whole_box_drain_places_nothing_and_every_job_says_why(db, gpus, settings, scheduler):
    maintenance.admin_drain(db, None, "driver upgrade", "root")
    gpu_job = queue(db)
    cpu_job = queue(db, resources={"gpus": 0})
    held = queue(db)
    jobs.set_held(db, held, ANA, held=True)
    snap = take(db, gpus, settings)
    assert snap.inputs.queue == []
    assert BOX_REASON.fullmatch(snap.blocked[gpu_job])
    assert BOX_REASON.fullmatch(snap.blocked[cpu_job])
    assert snap.blocked[held].startswith("held: ")  # what is the job's own still shows first

    scheduler.steps.place()
    for job_id in (gpu_job, cpu_job):
        job = jobs.get_job(db, job_id)
        assert job.status == JobStatus.queued and BOX_REASON.fullmatch(job.wait_reason)
    preview = DryRuns(db, settings, gpus).preview(JobSpec.model_validate(job_spec()), "ana")
    assert not preview.would_start and BOX_REASON.fullmatch(preview.wait_reason)

    maintenance.admin_resume(db, None, "root")
    started = {p.job_id for p in take(db, gpus, settings).inputs.plan().placements}
    assert started == {gpu_job, cpu_job}


def test_draining_again_changes_the_reason_and_resume_ends_only_what_it_names(db, gpus):
    maintenance.admin_drain(db, [0, 1], "first", "root")
    maintenance.admin_drain(db, [1], "second", "bo")
    maintenance.admin_drain(db, None, None, "root")
    drains = maintenance.current(db)
    assert [(d.gpu, d.reason, d.by) for d in drains] == [
        (None, None, "root"),
        (0, "first", "root"),
        (1, "second", "bo"),
    ]
    left = maintenance.admin_resume(db, [1], "root")
    assert [d.gpu for d in left] == [None, 0]
    assert maintenance.admin_resume(db, None, "root") == []
    with db.read() as session:
        audit = session.exec(select(AuditEntry).order_by(AuditEntry.id)).all()
    trail = [(e.actor, e.action, e.target, e.detail) for e in audit]
    assert ("bo", "drain", "gpu/1", {"reason": "second"}) in trail
    assert ("root", "resume", "gpu/1", {"was": "second"}) in trail
    assert ("root", "resume", "box", {"was": None}) in trail
    assert [t[1:3] for t in trail].count(("drain", "gpu/1")) == 2


def test_an_unknown_gpu_cannot_be_drained(db, gpus):
    with pytest.raises(NotFound, match="no GPU with index 7"):
        maintenance.admin_drain(db, [1, 7], "x", "root")
    with pytest.raises(NotFound):
        maintenance.admin_resume(db, [7], "root")
    assert maintenance.current(db) == []


def test_the_gpu_view_shows_its_drain(db, gpus):
    maintenance.admin_drain(db, [1], "fan", "root")
    views = {g.index: g for g in gpus.describe([])}
    assert views[0].maintenance is None
    assert (views[1].maintenance.reason, views[1].maintenance.by) == ("fan", "root")


def test_a_job_waits_for_its_not_before(db, gpus, settings, scheduler):
    later = (utcnow() + timedelta(minutes=11, seconds=30)).replace(microsecond=0)
    waiting = queue(db, not_before=later.isoformat())
    due = queue(db, not_before=(utcnow() - timedelta(seconds=1)).isoformat())
    snap = take(db, gpus, settings)
    stamp = later.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert snap.blocked[waiting] == f"not before {stamp} (in 12 min)"
    assert [r.job_id for r in snap.inputs.queue] == [due]
    spec = JobSpec.model_validate(job_spec(not_before=later.isoformat()))
    preview = DryRuns(db, settings, gpus).preview(spec, "ana")
    assert not preview.would_start and preview.wait_reason.startswith(f"not before {stamp} (")


@pytest.mark.parametrize(
    ("left", "words"),
    [
        (timedelta(seconds=5), "in under a minute"),
        (timedelta(seconds=61), "in 2 min"),
        (timedelta(hours=2), "in 2 h"),
        (timedelta(hours=3, minutes=4), "in 3 h 4 min"),
        (timedelta(days=3, hours=1), "in 3 days"),
    ],
)
def test_not_before_says_how_long_is_left(left, words):
    now = datetime(2026, 11, 23, 18, 0, tzinfo=UTC)
    assert readiness.not_yet(now + left, now).endswith(f"({words})")
    assert readiness.not_yet(now, now) is None
