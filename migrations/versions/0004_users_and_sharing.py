"""Users and tokens, the audit log; holds, dependencies and queue positions on jobs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("token_sha256", sa.String(), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_user_name", "user", ["name"], unique=True)
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("held", sa.Boolean(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("depends_on", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        for column in ("queue_position", "depends_on", "held"):
            batch.drop_column(column)
    op.drop_table("audit")
    op.drop_index("ix_user_name", "user")
    op.drop_table("user")
