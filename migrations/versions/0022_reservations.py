"""Reservations: GPUs booked for a window, for a list of users or a Unix group
(`reservation`).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservation",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("users", sa.JSON(), nullable=False),
        sa.Column("group", sa.String(), nullable=True),
        sa.Column("gpu_indices", sa.JSON(), nullable=False),
        sa.Column("named", sa.Boolean(), nullable=False),
        sa.Column("cpus", sa.Float(), nullable=True),
        sa.Column("host_memory_mb", sa.Integer(), nullable=True),
        sa.Column("starts_at", UTCDateTime(), nullable=False),
        sa.Column("ends_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("released_at", UTCDateTime(), nullable=True),
        sa.Column("released_why", sa.String(), nullable=True),
        sa.Column("slurm_name", sa.String(), nullable=True),
    )
    op.create_index("ix_reservation_name", "reservation", ["name"])
    op.create_index("ix_reservation_owner", "reservation", ["owner"])
    op.create_index("ix_reservation_ends_at", "reservation", ["ends_at"])


def downgrade() -> None:
    op.drop_index("ix_reservation_ends_at", table_name="reservation")
    op.drop_index("ix_reservation_owner", table_name="reservation")
    op.drop_index("ix_reservation_name", table_name="reservation")
    op.drop_table("reservation")
