"""Indexes for large job tables: a state's jobs newest first, and recently finished jobs.

`GET /v1/jobs?status=queued` pages by descending id, which `(status, priority, id)` cannot
give without sorting every job in that state; fair share reads jobs finished since a
horizon, which was a full scan.
Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_status_id", "job", ["status", "id"])
    op.create_index("ix_job_finished_at", "job", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_job_finished_at", "job")
    op.drop_index("ix_job_status_id", "job")
