"""Alembic environment: runs against the connection that `service.migrate` hands over."""

from alembic import context
from sqlmodel import SQLModel

import service.store.reservation_tables
import service.store.snapshot_tables
import service.store.tables
import service.store.usage_tables  # noqa: F401
from service.store.migrate import compare_type

target_metadata = SQLModel.metadata
connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=target_metadata,
    render_as_batch=True,
    compare_type=compare_type,
)
with context.begin_transaction():
    context.run_migrations()
