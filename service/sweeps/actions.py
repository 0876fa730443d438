"""What owners and admins do to a whole sweep: cancel it, hold or release it. Each acts on
the members still queued or running, through the same writes as a job's own action, and
leaves one audit entry for the sweep."""

from sqlalchemy import select, update

from gpuq.contract.states import ACTIVE, JobStatus, Reason
from service.errors import Conflict, Forbidden
from service.jobs import writes
from service.jobs.writes import JOB
from service.store.db import Database, utcnow
from service.store.tables import Sweep
from service.sweeps.reads import get_sweep, load_sweep
from service.sweeps.submit import SWEEP
from service.team.audit import record
from service.team.users import Caller


def check_may_change_sweep(sweep: Sweep, caller: Caller) -> None:
    if not caller.manages(sweep.owner):
        raise Forbidden(
            f"sweep {sweep.id} belongs to {sweep.owner}; only its owner or an admin may change it"
        )


def cancel_sweep(db: Database, sweep_id: int, caller: Caller) -> Sweep:
    """Cancels the queued members at once and asks the scheduler to stop the running ones;
    409 if every member already ended."""
    with db.write() as session:
        sweep = load_sweep(session, sweep_id)
        check_may_change_sweep(sweep, caller)
        unended = JOB.c.status.in_([JobStatus.queued, *ACTIVE])
        query = select(JOB.c.id, JOB.c.status).where(JOB.c.sweep_id == sweep_id, unended)
        pending = list(session.connection().execute(query))
        if not pending:
            raise Conflict(f"sweep {sweep_id} already ended: every member has")
        message = f"its sweep {sweep_id} was cancelled by {caller.name}"
        for job_id, status in pending:
            if status == JobStatus.queued:
                writes.cancel_queued(session, job_id, Reason.cancelled_by_user, message)
            else:
                writes.request_cancel(session, job_id)
        session.connection().execute(
            update(SWEEP)
            .where(SWEEP.c.id == sweep_id, SWEEP.c.cancelled_at.is_(None))
            .values(cancelled_at=utcnow(), cancelled_by=caller.name)
        )
        record(session, caller.name, "cancel", f"sweep/{sweep_id}", members=len(pending))
    return get_sweep(db, sweep_id)


def hold_sweep(db: Database, sweep_id: int, caller: Caller, *, held: bool) -> Sweep:
    """Holds the queued members (none of them starts) or releases them; 409 if none is
    queued."""
    with db.write() as session:
        sweep = load_sweep(session, sweep_id)
        check_may_change_sweep(sweep, caller)
        queued = session.connection().execute(
            select(JOB.c.id).where(JOB.c.sweep_id == sweep_id, JOB.c.status == JobStatus.queued)
        )
        ids = [job_id for (job_id,) in queued]
        if not ids:
            raise Conflict(f"no member of sweep {sweep_id} is queued: there is nothing to hold")
        for job_id in ids:
            writes.record_hold(session, job_id, held)
        session.connection().execute(update(SWEEP).where(SWEEP.c.id == sweep_id).values(held=held))
        action = "hold" if held else "release"
        record(session, caller.name, action, f"sweep/{sweep_id}", members=len(ids))
    return get_sweep(db, sweep_id)
