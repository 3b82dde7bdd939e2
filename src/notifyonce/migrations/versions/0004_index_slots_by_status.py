"""Index the ledger table by status, action and cycle.

Revision ID: notifyonce_0004
Revises: notifyonce_0003
Create Date: 2026-12-01

Listings by status (a campaign's ``unknown`` and still-claimed chats at the end of a
broadcast, ``notifyonce list`` and ``requeue``) read only the rows with that status, of that
action and cycle, instead of every row of the campaign. Building it on a large table takes a
while: on PostgreSQL, create it yourself first with ``CREATE INDEX CONCURRENTLY`` under the
same name, and `notifyonce migrate` records this revision as done instead of running it.
"""

from __future__ import annotations

from alembic import op

from notifyonce._ledger.table import index_names
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0004"
down_revision = "notifyonce_0003"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    return settings_from_config(config)


def upgrade() -> None:
    table_name, schema = _settings()
    name = index_names(table_name)["status"]
    op.create_index(name, table_name, ["status", "action", "cycle"], schema=schema)


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_index(index_names(table_name)["status"], table_name=table_name, schema=schema)
