"""Preemption as the `place` step does it (`GPUQ_PREEMPT=priority`): when the first job
that cannot start (the plan's head) could start on GPUs that lower-priority running jobs
hold, the cheapest of them (`victim_choice.victims`) get SIGTERM, as a cancel would, and the
head waits with a reason that names them. Each victim saves and exits; `finishing` queues it
again to resume (reason `preempted`, no retry counted), and the next plan starts the head
on the GPUs it gave back. While any victim is still stopping nothing more is preempted.
Where the head waits for cores or host memory of the box, the victims must give back
enough of those too.

Under an executor with a queue of its own (Slurm) the `place` step does not run: Slurm's
own preemption is the path there."""

import logging
import signal
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select

from gpuq.contract.spec import may_be_preempted
from gpuq.contract.states import ACTIVE, Reason
from service.jobs.writes import JOB
from service.scheduler.placement import Request
from service.scheduler.plan_inputs import PlanInputs
from service.scheduler.running import Books
from service.scheduler.victim_choice import Candidate, Rules, eligible, victims
from service.settings import Settings
from service.store.db import Database
from service.usage.ledger import last_epoch_at

log = logging.getLogger(__name__)


@dataclass
class Preemption:
    """What the head of the queue does about the jobs in its way."""

    head: int
    why: str  #: its wait reason
    victims: tuple[Candidate, ...] = ()  #: to stop now (none: it waits for those stopping)


def rules(settings: Settings) -> Rules | None:
    """The site's preemption rules; None when preemption is off."""
    if settings.preempt == "off":
        return None
    return Rules(min_run_s=settings.preempt_min_run_s, max_times=settings.preempt_max_times)


#: What preemption weighs of each running job (built once: building costs more than running)
_ACTIVE = select(
    JOB.c.id,
    JOB.c.owner,
    JOB.c.priority,
    JOB.c.gpu_count,
    JOB.c.cpus,
    JOB.c.host_memory_mb,
    JOB.c.spec["kind"].as_string().label("kind"),
    JOB.c.spec["preemptible"].as_boolean().label("preemptible"),
    JOB.c.started_at,
    JOB.c.preemptions,
    JOB.c.preempted_by,
    JOB.c.stop_sent_at,
    JOB.c.stop_reason,
    last_epoch_at(JOB.c.id, JOB.c.attempt).label("checkpoint_at"),
).where(JOB.c.status.in_(ACTIVE))
#: the same, of the jobs this scheduler runs
_RUNNING = _ACTIVE.where(JOB.c.id.in_(bindparam("ids", expanding=True)))


def running_jobs(db: Database, ids: list[int] | None = None) -> list[Any]:
    """The jobs running here, as preemption weighs them: `ids`, or (None) every job the
    database has as starting or running."""
    if ids == []:
        return []
    with db.read() as session:
        if ids is None:
            return list(session.connection().execute(_ACTIVE).all())
        return list(session.connection().execute(_RUNNING, {"ids": ids}).all())


def candidates(jobs: list[Any], rule: Rules, now: float) -> list[Candidate]:
    """The running jobs that may be preempted, with what each would lose."""
    found = []
    for job in jobs:
        started = job.started_at.timestamp() if job.started_at else now
        mark = max(started, job.checkpoint_at.timestamp()) if job.checkpoint_at else started
        if eligible(
            rule,
            preemptible=may_be_preempted(job.kind or "keras", job.preemptible),
            ran_s=now - started,
            preemptions=job.preemptions,
            stopping=job.stop_sent_at is not None,
        ):
            found.append(
                Candidate(
                    job.id,
                    job.owner,
                    job.priority,
                    job.gpu_count,
                    now - mark,
                    cpus=job.cpus,
                    host_memory_mb=job.host_memory_mb,
                )
            )
    return found


def consider(books: Books, inputs: PlanInputs, head: Request | None) -> Preemption | None:
    """What `head` (the plan's first job that cannot start) does about the running jobs in
    its way: preempt some, wait for those preempted for it, or nothing (None)."""
    rule = rules(books.settings)
    if rule is None or head is None:
        return None
    jobs = running_jobs(books.db, list(books.running))
    stopping = [j.id for j in jobs if j.stop_reason == Reason.preempted]
    if stopping:
        mine = [j.id for j in jobs if j.id in stopping and j.preempted_by == head.job_id]
        if not mine:
            return None
        which = ", ".join(f"job {i}" for i in mine)
        why = f"waiting for {which} to save and stop: preempted for this job"
        return Preemption(head.job_id, why)
    chosen = _cheapest(inputs, head, jobs, rule)
    if not chosen:
        return None
    why = f"preempting {listed(chosen)}; starts once {they(chosen)} stopped"
    return Preemption(head.job_id, why, victims=chosen)


def preview(
    settings: Settings, db: Database, inputs: PlanInputs, head: Request
) -> tuple[Candidate, ...]:
    """The jobs `head` would preempt now, for the dry run (none while others still stop),
    from what the database has running."""
    rule = rules(settings)
    if rule is None:
        return ()
    jobs = running_jobs(db)
    if any(j.stop_reason == Reason.preempted for j in jobs):
        return ()
    return _cheapest(inputs, head, jobs, rule)


def _cheapest(
    inputs: PlanInputs, head: Request, jobs: list[Any], rule: Rules
) -> tuple[Candidate, ...]:
    found = candidates(jobs, rule, time.time())
    return victims(head, inputs.gpus, inputs.allocations, found, inputs.topology, inputs.room)


def listed(victims: tuple[Candidate, ...]) -> str:
    """`job 7 (ana, priority 0, loses ~40 s), job 9 (...)`."""
    return ", ".join(v.describe() for v in victims)


def they(victims: tuple[Candidate, ...]) -> str:
    return "it has" if len(victims) == 1 else "they have"


def stop_victims(books: Books, head: int, stopped: list[Candidate]) -> None:
    """SIGTERM to each victim whose stop was recorded (after that record's commit)."""
    for victim in stopped:
        log.info("job %d: preempted for job %d (%s)", victim.job_id, head, victim.describe())
        books.executor.signal(victim.job_id, signal.SIGTERM)
