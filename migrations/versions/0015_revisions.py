"""Revisions of what many requests read and few writes change (`users`): a counter that
triggers raise on every change to the table, so a cache of it is read again only then, not
after every commit.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: revision name → the table whose every change raises it
WATCHED = {"users": "user"}
OPERATIONS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    op.create_table(
        "revision",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("value", sa.Integer(), nullable=False, server_default="0"),
    )
    for name, table in WATCHED.items():
        op.execute(f"INSERT INTO revision (name, value) VALUES ('{name}', 0)")
        raise_it = f"UPDATE revision SET value = value + 1 WHERE name = '{name}'"
        if op.get_bind().dialect.name == "postgresql":
            op.execute(
                f"CREATE FUNCTION {table}_revision() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN {raise_it}; RETURN NULL; END $$"
            )
            op.execute(
                f'CREATE TRIGGER {table}_revision AFTER INSERT OR UPDATE OR DELETE ON "{table}" '
                f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_revision()"
            )
            continue
        for operation in OPERATIONS:
            trigger = f"{table}_revision_{operation.lower()}"
            op.execute(
                f'CREATE TRIGGER {trigger} AFTER {operation} ON "{table}" BEGIN {raise_it}; END'
            )


def downgrade() -> None:
    for table in WATCHED.values():
        if op.get_bind().dialect.name == "postgresql":
            op.execute(f'DROP TRIGGER {table}_revision ON "{table}"')
            op.execute(f"DROP FUNCTION {table}_revision()")
        else:
            for operation in OPERATIONS:
                op.execute(f"DROP TRIGGER {table}_revision_{operation.lower()}")
    op.drop_table("revision")
