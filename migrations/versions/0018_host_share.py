"""A job's cores and host memory: what it got at submit (its spec's, else the site's
defaults) and what its fence measured when it ended (peak host memory, CPU time).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

COLUMNS = (
    ("cpus", sa.Float()),
    ("host_memory_mb", sa.Integer()),
    ("host_memory_peak_mb", sa.Integer()),
    ("cpu_time_s", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
