"""Which executor runs a job and the id it knows the job by (`executor`,
`executor_job_id`): the runner's pid on a box, the Slurm job id on a cluster.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("executor", sa.String(), nullable=True))
        batch.add_column(sa.Column("executor_job_id", sa.String(), nullable=True))
    # Jobs launched before executors had names ran on this box, under their runner.
    op.execute(
        "UPDATE job SET executor = 'local', executor_job_id = CAST(runner_pid AS VARCHAR) "
        "WHERE runner_pid IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("executor_job_id")
        batch.drop_column("executor")
