"""Applies the Alembic migrations in `migrations/` to a database."""

from pathlib import Path

from alembic import command
from alembic.config import Config

from gpuq.service import migrations
from gpuq.service.db import Database

SCRIPT_LOCATION = Path(migrations.__file__).parent


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


def upgrade(db: Database) -> None:
    """Brings the database schema to the newest revision (idempotent)."""
    config = alembic_config()
    # A plain connection: Alembic manages its own transaction and DDL cannot run inside
    # our BEGIN IMMEDIATE hook's extra BEGIN.
    with db.reader.connect() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
        connection.commit()
