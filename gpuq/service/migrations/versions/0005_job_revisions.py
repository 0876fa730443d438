"""Job revisions: a number that grows on every change to any job, for long polls and events.

Triggers keep it, so no writer (API, scheduler, a second API process) can forget to.
Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NEXT_REV = "(SELECT COALESCE(MAX(rev), 0) + 1 FROM job)"


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("rev", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE job SET rev = id")
    op.create_index("ix_job_rev", "job", ["rev"], unique=True)
    # The inner UPDATEs change `rev`, so the WHEN clause stops them from firing again.
    op.execute(
        f"CREATE TRIGGER job_rev_insert AFTER INSERT ON job BEGIN "
        f"UPDATE job SET rev = {NEXT_REV} WHERE id = NEW.id; END"
    )
    op.execute(
        f"CREATE TRIGGER job_rev_update AFTER UPDATE ON job WHEN NEW.rev = OLD.rev BEGIN "
        f"UPDATE job SET rev = {NEXT_REV} WHERE id = NEW.id; END"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER job_rev_update")
    op.execute("DROP TRIGGER job_rev_insert")
    op.drop_index("ix_job_rev", "job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("rev")
