"""Snapshots of projects, stored once by the sha256 of their tar (`snapshot`), and the users
who stored each (`snapshot_owner`): a job names one (`command.snapshot`) and runs in its
own copy of it.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshot",
        sa.Column("sha256", sa.String(), primary_key=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("last_used_at", UTCDateTime(), nullable=True),
    )
    op.create_table(
        "snapshot_owner",
        sa.Column("sha256", sa.String(), sa.ForeignKey("snapshot.sha256"), primary_key=True),
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("added_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_snapshot_owner_owner", "snapshot_owner", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_snapshot_owner_owner", table_name="snapshot_owner")
    op.drop_table("snapshot_owner")
    op.drop_table("snapshot")
