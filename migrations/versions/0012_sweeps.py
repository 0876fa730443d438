"""Sweeps: many runs of one experiment, each an ordinary job with its sweep and parameters.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweep",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("max_parallel", sa.Integer(), nullable=True),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("cancelled_at", UTCDateTime(), nullable=True),
        sa.Column("cancelled_by", sa.String(), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_sweep_owner", "sweep", ["owner"])
    op.create_index("ix_sweep_idempotency_key", "sweep", ["idempotency_key"], unique=True)
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("params", sa.JSON(), nullable=True))
        batch.create_index("ix_job_sweep_id", ["sweep_id"])


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_index("ix_job_sweep_id")
        batch.drop_column("params")
        batch.drop_column("sweep_id")
    op.drop_index("ix_sweep_idempotency_key", "sweep")
    op.drop_index("ix_sweep_owner", "sweep")
    op.drop_table("sweep")
