"""Applies the Alembic migrations in `migrations/` to a database."""

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Enum, String

from gpuq.service import migrations
from gpuq.service.db import Database

SCRIPT_LOCATION = Path(migrations.__file__).parent


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


def compare_type(
    context: Any, inspected: Any, metadata: Any, inspected_type: Any, metadata_type: Any
) -> bool | None:
    """Alembic's type comparison, except that an enum stored as a plain string (migration
    0001: no PostgreSQL enum types) matches; None leaves the rest to Alembic."""
    if isinstance(metadata_type, Enum) and isinstance(inspected_type, String):
        return False
    return None


def upgrade(db: Database) -> None:
    """Brings the database schema to the newest revision (idempotent)."""
    config = alembic_config()
    # SQLite: a plain connection, as Alembic manages its own transaction and DDL cannot run
    # inside our BEGIN IMMEDIATE hook's extra BEGIN. PostgreSQL: the writer, whose advisory
    # lock makes processes that start together migrate one after the other.
    engine = db.writer if db.dialect == "postgresql" else db.reader
    with engine.connect() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        connection.commit()
