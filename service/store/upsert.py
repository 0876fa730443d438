"""An INSERT that can update the row it collides with, spelt for the database in use."""

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, SQLModel


def upsert(session: Session, model: type[SQLModel]) -> sqlite.Insert | postgresql.Insert:
    """An INSERT into `model`'s table that can take `on_conflict_do_update`, which SQLite
    and PostgreSQL spell alike."""
    table: Table = model.__table__  # type: ignore[attr-defined]
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
