"""The (action, sent_at) index holds only the sent rows (PostgreSQL, SQLite).

Revision ID: notifyonce_0006
Revises: notifyonce_0005
Create Date: 2026-12-04

The index of revision 0005 serves the console's sends per minute, which always ask for
``sent_at`` in a range. Holding every row, it also looked, to a planner whose statistics
were those of a young table (before its first ANALYZE every table looks tiny), as cheap
a way to a slot as the slot's own key: the send path's look-up then read every row of
the campaign for each key it asked, more with every batch. Partial, it serves only what
asks for sent rows. MySQL and MariaDB have no partial indexes (and count the rows of a
range instead of guessing): nothing changes there.

The index is built again: on a large PostgreSQL table, build it yourself first with
``CREATE INDEX CONCURRENTLY`` under a new name with ``WHERE sent_at IS NOT NULL``, drop the
old one, rename the new one to the old name, and `notifyonce migrate` records this
revision as done instead of running it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._ledger.table import index_names, partial_indexes
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0006"
down_revision = "notifyonce_0005"
branch_labels = None
depends_on = None

_SENT = sa.text("sent_at IS NOT NULL")


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    return settings_from_config(config)


def upgrade() -> None:
    if not partial_indexes(op.get_context().dialect):
        return
    table_name, schema = _settings()
    name = index_names(table_name)["action_sent"]
    op.drop_index(name, table_name=table_name, schema=schema)
    op.create_index(
        name,
        table_name,
        ["action", "sent_at"],
        schema=schema,
        postgresql_where=_SENT,
        sqlite_where=_SENT,
    )


def downgrade() -> None:
    if not partial_indexes(op.get_context().dialect):
        return
    table_name, schema = _settings()
    name = index_names(table_name)["action_sent"]
    op.drop_index(name, table_name=table_name, schema=schema)
    op.create_index(name, table_name, ["action", "sent_at"], schema=schema)
