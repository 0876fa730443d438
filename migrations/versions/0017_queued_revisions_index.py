"""An index of jobs by state and revision: the scheduler's check of whether the queue
changed (`scheduler.replan.fingerprint`: how many are queued, their highest revision)
reads it alone, where `(status, id)` made it read the row of every queued job at every
step.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_status_rev", "job", ["status", "rev"])


def downgrade() -> None:
    op.drop_index("ix_job_status_rev", "job")
