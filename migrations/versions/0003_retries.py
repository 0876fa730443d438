"""Retries: when a requeued job may start again, and what its earlier attempts did.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("retry_at", UTCDateTime(), nullable=True))
        batch.add_column(
            sa.Column("previous_attempts", sa.JSON(), nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("previous_attempts")
        batch.drop_column("retry_at")
