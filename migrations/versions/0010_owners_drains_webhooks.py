"""Jobs run as their owners, maintenance drains, `not_before`, idle jobs, webhooks.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

from service.store.db import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("user") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(), nullable=True))
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("unix_user", sa.String(), nullable=True))
        batch.add_column(sa.Column("not_before", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("idle_since", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("webhook_url", sa.String(), nullable=True))
        batch.add_column(sa.Column("notified_status", sa.String(), nullable=True))
    op.create_table(
        "maintenance",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("since", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "user_webhook",
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("url", sa.String(), nullable=True),
        sa.Column("secret", sa.String(), nullable=False),
    )
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts", sa.JSON(), nullable=False),
        sa.Column("next_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_webhook_delivery_job_id", "webhook_delivery", ["job_id"])
    op.create_index("ix_webhook_delivery_state_next", "webhook_delivery", ["state", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_delivery_state_next", "webhook_delivery")
    op.drop_index("ix_webhook_delivery_job_id", "webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_table("user_webhook")
    op.drop_table("maintenance")
    with op.batch_alter_table("job") as batch:
        for column in ("notified_status", "webhook_url", "idle_since", "not_before", "unix_user"):
            batch.drop_column(column)
    with op.batch_alter_table("user") as batch:
        batch.drop_column("unix_user")
