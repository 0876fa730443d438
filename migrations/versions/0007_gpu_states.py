"""A GPU's lifecycle in a `state` column (free, draining, quarantined) instead of a
nullable `hold`: "hold" now means only a job kept from starting.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

RENAMED = {
    "hold_reason": "state_reason",
    "hold_since": "state_since",
    "hold_job_id": "drain_job_id",
    "hold_pids": "drain_pids",
}


def upgrade() -> None:
    op.execute("UPDATE gpu SET hold = 'free' WHERE hold IS NULL")
    with op.batch_alter_table("gpu") as batch:
        batch.alter_column(
            "hold",
            new_column_name="state",
            existing_type=sa.String(),
            nullable=False,
            server_default="free",
        )
        for old, new in RENAMED.items():
            batch.alter_column(old, new_column_name=new)


def downgrade() -> None:
    with op.batch_alter_table("gpu") as batch:
        batch.alter_column(
            "state", new_column_name="hold", existing_type=sa.String(), nullable=True
        )
        for old, new in RENAMED.items():
            batch.alter_column(new, new_column_name=old)
    op.execute("UPDATE gpu SET hold = NULL WHERE hold = 'free'")
