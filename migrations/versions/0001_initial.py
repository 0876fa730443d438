"""Jobs, their metric history, GPUs and allocations.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Plain strings, not PostgreSQL enum types (which every new status or reason would have to
# alter): `gpuq.contract.states` holds the one list. SQLite stores strings either way.
STATUS = sa.String()
REASON = sa.String()


def upgrade() -> None:
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("reason", REASON, nullable=True),
        sa.Column("message", sa.String(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=True),
        sa.Column("assigned_gpus", sa.JSON(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("wait_reason", sa.String(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("num_replicas", sa.Integer(), nullable=True),
        sa.Column("gpu_memory_peak_mb", sa.Integer(), nullable=True),
        sa.Column("log_tail", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("runner_pid", sa.Integer(), nullable=True),
        sa.Column("events_offset", sa.Integer(), nullable=False),
        sa.Column("cancel_requested_at", UTCDateTime(), nullable=True),
        sa.Column("stop_reason", REASON, nullable=True),
        sa.Column("stop_sent_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("running_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_job_owner", "job", ["owner"])
    op.create_index("ix_job_idempotency_key", "job", ["idempotency_key"], unique=True)
    op.create_index("ix_job_status_priority", "job", ["status", "priority", "id"])
    op.create_table(
        "gpu",
        sa.Column("index", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("uuid", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("memory_total_mb", sa.Integer(), nullable=False),
        sa.Column("simulated", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "job_metric",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("job.id"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("job_id", "epoch", "step", name="uq_job_metric_position"),
    )
    op.create_index("ix_job_metric_job_id", "job_metric", ["job_id"])
    op.create_table(
        "allocation",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("job.id"), primary_key=True),
        sa.Column("gpu_index", sa.Integer(), sa.ForeignKey("gpu.index"), primary_key=True),
        sa.Column("memory_mb", sa.Integer(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("allocation")
    op.drop_table("job_metric")
    op.drop_table("gpu")
    op.drop_table("job")
