"""Cursor pagination, newest first: the cursor is the last id of the previous page."""

from typing import Any, TypeVar

from sqlmodel import SQLModel, col
from sqlmodel.sql.expression import SelectOfScalar

from service.digits import only_digits
from service.errors import Invalid
from service.store.db import Database

Row = TypeVar("Row", bound=SQLModel)


def newest_first(
    db: Database, query: SelectOfScalar[Row], id_column: Any, *, limit: int, cursor: str | None
) -> tuple[list[Row], str | None]:
    """One page of `query`'s rows by descending id, and the cursor of the next (or None)."""
    query = query.order_by(col(id_column).desc()).limit(limit + 1)
    if cursor is not None:
        if not only_digits(cursor) or len(cursor) > 18:
            raise Invalid(("query", "cursor"), "cursor is not one this server handed out")
        query = query.where(col(id_column) < int(cursor))
    with db.read() as session:
        rows = list(session.exec(query).all())
    if len(rows) > limit:
        return rows[:limit], str(getattr(rows[limit - 1], "id"))  # noqa: B009
    return rows, None
