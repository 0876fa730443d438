"""The usage rollup: each UTC day's usage per owner, of all their attempts and per GPU
(`usage_day`), and the days each ended attempt touched (`attempt_day`), made from the
ledger and the ended jobs already stored. A report over a year then reads a row per day,
owner and GPU instead of every attempt.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

from service.usage import rollup

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_day",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("gpu", sa.Integer(), primary_key=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=False),
        sa.Column("lost_failures_s", sa.Float(), nullable=False),
        sa.Column("lost_preemptions_s", sa.Float(), nullable=False),
        sa.Column("succeeded", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("cancelled", sa.Integer(), nullable=False),
        sa.Column("timed_out", sa.Integer(), nullable=False),
        sa.Column("waits", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "attempt_day",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("usage_id", sa.Integer(), primary_key=True),
    )
    rollup.rebuild(op.get_bind())


def downgrade() -> None:
    op.drop_table("attempt_day")
    op.drop_table("usage_day")
