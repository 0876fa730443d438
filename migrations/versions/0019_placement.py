"""Why a job's latest attempt got its GPUs, as the plan said (`GPUQ_PLACEMENT`), and the
memory of each of those GPUs (the smallest), which a whole-GPU job's efficiency is measured
against.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("placement", sa.String(), nullable=True))
        batch.add_column(sa.Column("gpu_memory_total_mb", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("gpu_memory_total_mb")
        batch.drop_column("placement")
