"""Maintenance drains: an admin keeps new jobs off one GPU or the whole box while the
running ones finish, until they resume it. Queued jobs say why they wait (the words are
here too: the scheduler and the Slurm hand-over both use them)."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from service.errors import NotFound
from service.public import DrainPublic
from service.store.db import Database, utcnow
from service.store.tables import Gpu, Maintenance
from service.team.audit import record

RESUME_HINT = "nothing new starts until an admin resumes it (`gpuq admin resume`)"


def admin_drain(
    db: Database, gpus: Sequence[int] | None, reason: str | None, actor: str
) -> list[DrainPublic]:
    """Drains each of `gpus` (None: the whole box) and returns every drain; draining again
    changes only the reason. 404 for a GPU this box does not have."""
    with db.write() as session:
        for index in _targets(session, gpus):
            row = session.exec(select(Maintenance).where(_on(index))).first()
            if row is None:
                row = Maintenance(gpu_index=index, actor=actor)
            row.reason, row.actor = reason, actor
            session.add(row)
            record(session, actor, "drain", _target(index), reason=reason)
        session.flush()
        return drains(session)


def admin_resume(db: Database, gpus: Sequence[int] | None, actor: str) -> list[DrainPublic]:
    """Ends the drains of `gpus` (None: every drain, the whole box's too) and returns those
    left. 404 for a GPU this box does not have; a GPU not drained is left as it is."""
    with db.write() as session:
        query = select(Maintenance)
        if gpus is not None:
            query = query.where(col(Maintenance.gpu_index).in_(_targets(session, gpus)))
        for row in session.exec(query).all():
            session.delete(row)
            record(session, actor, "resume", _target(row.gpu_index), was=row.reason)
        session.flush()
        return drains(session)


def current(db: Database) -> list[DrainPublic]:
    """Every drain: the whole box's first, then the GPUs' by index."""
    with db.read() as session:
        return drains(session)


_DRAINS = sa_select(Maintenance.__table__)  # type: ignore[attr-defined]


def drains(session: Session) -> list[DrainPublic]:
    """`current`, inside a transaction the caller holds."""
    rows = session.connection().execute(_DRAINS).all()  # Core rows: every step reads them
    rows = sorted(rows, key=lambda r: -1 if r.gpu_index is None else r.gpu_index)
    return [DrainPublic(gpu=r.gpu_index, reason=r.reason, by=r.actor, since=r.since) for r in rows]


def box_reason(drain: DrainPublic, now: datetime | None = None) -> str:
    """Why a queued job waits while the whole box is drained."""
    why = f": {drain.reason}" if drain.reason else ""
    since = _clock(drain.since, now or utcnow())
    return f"the box is drained for maintenance by {drain.by} since {since}{why}; {RESUME_HINT}"


def gpu_reason(drain: DrainPublic | None) -> str | None:
    """Why nothing is placed on a drained GPU (`GPU 1 is ...`); None if it is not drained."""
    if drain is None:
        return None
    return f"drained for maintenance ({drain.reason or 'by ' + drain.by})"


def _clock(moment: datetime, now: datetime) -> str:
    """`14:05 UTC` today, with the date on another day."""
    return f"{moment:%H:%M} UTC" if moment.date() == now.date() else f"{moment:%Y-%m-%d %H:%M} UTC"


def _targets(session: Session, gpus: Sequence[int] | None) -> Sequence[int | None]:
    if gpus is None:
        return [None]
    known = set(session.exec(select(Gpu.index)).all())
    missing = sorted(set(gpus) - known)
    if missing:
        raise NotFound(f"no GPU with index {missing[0]}")
    return sorted(set(gpus))


def _on(index: int | None) -> ColumnElement[bool]:
    column = col(Maintenance.gpu_index)
    return column.is_(None) if index is None else column == index


def _target(index: int | None) -> str:
    return "box" if index is None else f"gpu/{index}"
