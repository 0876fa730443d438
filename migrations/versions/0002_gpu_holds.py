"""GPU holds (draining, quarantined) and job warnings.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("warnings", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("gpu") as batch:
        batch.add_column(sa.Column("hold", sa.String(), nullable=True))
        batch.add_column(sa.Column("hold_reason", sa.String(), nullable=True))
        batch.add_column(sa.Column("hold_job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("hold_pids", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("hold_since", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu") as batch:
        for column in ("hold_since", "hold_pids", "hold_job_id", "hold_reason", "hold"):
            batch.drop_column(column)
    with op.batch_alter_table("job") as batch:
        batch.drop_column("warnings")
