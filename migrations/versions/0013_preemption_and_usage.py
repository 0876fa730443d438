"""Preemption and usage: a job's preemptions and GPU utilisation, and a ledger of ended
attempts with a per-owner rollup.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempt_usage",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_indices", sa.JSON(), nullable=False),
        sa.Column("queued_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("lost_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("preempted_by", sa.Integer(), nullable=True),
    )
    op.create_index("ix_attempt_usage_job_id", "attempt_usage", ["job_id"])
    op.create_index("ix_attempt_usage_owner", "attempt_usage", ["owner"])
    op.create_index("ix_attempt_usage_ended_at", "attempt_usage", ["ended_at"])
    op.create_table(
        "usage_total",
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
    )
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("queued_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("preempted_by", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("gpu_util_avg_pct", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("gpu_util_samples", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        for column in (
            "gpu_util_samples",
            "gpu_util_avg_pct",
            "preempted_by",
            "preemptions",
            "queued_at",
        ):
            batch.drop_column(column)
    op.drop_table("usage_total")
    op.drop_index("ix_attempt_usage_ended_at", "attempt_usage")
    op.drop_index("ix_attempt_usage_owner", "attempt_usage")
    op.drop_index("ix_attempt_usage_job_id", "attempt_usage")
    op.drop_table("attempt_usage")
