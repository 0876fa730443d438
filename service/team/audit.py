"""The audit log: every mutation, who made it, and to what."""

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, select

from service.store.db import Database
from service.store.pages import newest_first
from service.store.tables import AuditEntry


def record(session: Session, actor: str, action: str, target: str, **detail: Any) -> None:
    """Adds an entry inside the caller's write transaction: both land, or neither."""
    session.add(AuditEntry(actor=actor, action=action, target=target, detail=detail))


def entries(
    db: Database, *, limit: int = 100, cursor: str | None = None
) -> tuple[Sequence[AuditEntry], str | None]:
    """Newest first, a page at a time."""
    return newest_first(db, select(AuditEntry), AuditEntry.id, limit=limit, cursor=cursor)
