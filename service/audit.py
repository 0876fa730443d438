"""The audit log: every mutation, who made it, and to what."""

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from service.db import Database
from service.errors import Invalid
from service.models import AuditEntry


def record(session: Session, actor: str, action: str, target: str, **detail: Any) -> None:
    """Adds an entry inside the caller's write transaction: both land, or neither."""
    session.add(AuditEntry(actor=actor, action=action, target=target, detail=detail))


def entries(
    db: Database, *, limit: int = 100, cursor: str | None = None
) -> tuple[Sequence[AuditEntry], str | None]:
    """Newest first, a page at a time."""
    query = select(AuditEntry).order_by(col(AuditEntry.id).desc()).limit(limit + 1)
    if cursor is not None:
        if not cursor.isdigit() or len(cursor) > 18:
            raise Invalid(("query", "cursor"), "cursor is not one this server handed out")
        query = query.where(col(AuditEntry.id) < int(cursor))
    with db.read() as session:
        rows = list(session.exec(query).all())
    if len(rows) > limit:
        return rows[:limit], str(rows[limit - 1].id)
    return rows, None
