"""Job revisions: a number that grows on every change to any job, for long polls and events.

Triggers keep it, so no writer (API, scheduler, a second API process) can forget to.
Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

from service.store.postgres import WRITE_LOCK_KEY

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
    if op.get_bind().dialect.name == "postgresql":
        _postgres_triggers()
        return
    # The inner UPDATEs change `rev`, so the WHEN clause stops them from firing again.
    op.execute(
        f"CREATE TRIGGER job_rev_insert AFTER INSERT ON job BEGIN "
        f"UPDATE job SET rev = {NEXT_REV} WHERE id = NEW.id; END"
    )
    op.execute(
        f"CREATE TRIGGER job_rev_update AFTER UPDATE ON job WHEN NEW.rev = OLD.rev BEGIN "
        f"UPDATE job SET rev = {NEXT_REV} WHERE id = NEW.id; END"
    )


def _postgres_triggers() -> None:
    # A BEFORE trigger sets the new row's `rev` itself. It takes the writers' advisory lock
    # (gpuq's writers hold it already) so that revisions follow commit order even for a
    # writer outside gpuq: a reader that has seen revision N has seen every one below it.
    op.execute(
        f"CREATE FUNCTION job_next_rev() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF TG_OP = 'INSERT' OR NEW.rev = OLD.rev THEN "
        f"PERFORM pg_advisory_xact_lock({WRITE_LOCK_KEY}); NEW.rev := {NEXT_REV}; "
        f"END IF; RETURN NEW; END $$"
    )
    op.execute(
        "CREATE TRIGGER job_rev BEFORE INSERT OR UPDATE ON job "
        "FOR EACH ROW EXECUTE FUNCTION job_next_rev()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER job_rev ON job")
        op.execute("DROP FUNCTION job_next_rev()")
    else:
        op.execute("DROP TRIGGER job_rev_update")
        op.execute("DROP TRIGGER job_rev_insert")
    op.drop_index("ix_job_rev", "job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("rev")
