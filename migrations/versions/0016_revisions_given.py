"""SQLite: a job's revision may come with the write that changes it, sparing the trigger's
second write of the row.

gpuq's insert of a job gives `rev` as the next revision itself, inside the write
transaction that serialises every writer; the triggers of 0005 then rewrote the row once
more to set it (and the insert had to read it back: `RETURNING` does not see what an AFTER
trigger sets). Now both triggers set it only where a write did not give a revision above
every other job's: a writer that leaves `rev` alone (gpuq's updates, or any writer outside
gpuq), or sets a lower one, still gets the next revision, so revisions follow commit order
as before. PostgreSQL's BEFORE trigger sets `NEW.rev` in the same write already: unchanged.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NEXT_REV = "(SELECT COALESCE(MAX(rev), 0) + 1 FROM job)"
#: true unless the row's new revision is above every other job's (through `ix_job_rev`:
#: at most two rows read)
NOT_ABOVE_THE_REST = (
    "NEW.rev <= COALESCE((SELECT rev FROM job WHERE id <> NEW.id ORDER BY rev DESC LIMIT 1), 0)"
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    _replace(
        insert_when=NOT_ABOVE_THE_REST, update_when=f"NEW.rev = OLD.rev OR {NOT_ABOVE_THE_REST}"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    _replace(insert_when=None, update_when="NEW.rev = OLD.rev")


def _replace(insert_when: str | None, update_when: str) -> None:
    # The inner UPDATEs set a revision above all others, so the WHEN clauses stop them from
    # firing again.
    set_next = f"BEGIN UPDATE job SET rev = {NEXT_REV} WHERE id = NEW.id; END"
    op.execute("DROP TRIGGER job_rev_insert")
    op.execute("DROP TRIGGER job_rev_update")
    when = "" if insert_when is None else f"WHEN {insert_when} "
    op.execute(f"CREATE TRIGGER job_rev_insert AFTER INSERT ON job {when}{set_next}")
    op.execute(f"CREATE TRIGGER job_rev_update AFTER UPDATE ON job WHEN {update_when} {set_next}")
