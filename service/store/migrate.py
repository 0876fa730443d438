"""Applies the Alembic migrations in `migrations/` to a database."""

import importlib.util
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Enum, String

from service.store.db import Database


def script_location() -> Path:
    """The migrations' folder: the package `service.migrations` where gpuq is installed (a
    wheel, or the editable install that maps it to the checkout's top-level `migrations/`),
    else that folder itself, beside `service/` in a checkout on PYTHONPATH."""
    installed = importlib.util.find_spec("service.migrations")
    if installed is not None and installed.origin is not None:
        return Path(installed.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    return config


def compare_type(
    context: Any, inspected: Any, metadata: Any, inspected_type: Any, metadata_type: Any
) -> bool | None:
    """Alembic's type comparison, except that an enum stored as a plain string (migration
    0001: no PostgreSQL enum types) matches; None leaves the rest to Alembic."""
    if isinstance(metadata_type, Enum) and isinstance(inspected_type, String):
        return False
    return None


def upgrade(db: Database) -> tuple[str | None, str | None]:
    """Brings the database schema to the newest revision (idempotent); returns the revision
    before (None for an empty database) and after."""
    config = alembic_config()
    # SQLite: a plain connection, as Alembic manages its own transaction and DDL cannot run
    # inside our BEGIN IMMEDIATE hook's extra BEGIN, within the write turn of all gpuq's
    # processes (`Database.migrating`). PostgreSQL: the writer, whose advisory lock makes
    # processes that start together migrate one after the other.
    engine = db.writer if db.dialect == "postgresql" else db.reader
    with db.migrating(), engine.connect() as connection:
        before = MigrationContext.configure(connection).get_current_revision()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        after = MigrationContext.configure(connection).get_current_revision()
        connection.commit()
    return before, after
