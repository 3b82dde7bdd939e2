"""Index the ledger table by action and sent_at.

Revision ID: notifyonce_0005
Revises: notifyonce_0004
Create Date: 2026-12-01

The operator console (`notifyonce web`) draws each action's sends per minute and a running
campaign's rate from the last hour's deliveries: with this index that is a range of those
rows, instead of a pass over every row the action ever sent. Building it on a large table
takes a while: on PostgreSQL, create it yourself first with ``CREATE INDEX CONCURRENTLY``
under the same name, and `notifyonce migrate` records this revision as done instead of
running it.
"""

from __future__ import annotations

from alembic import op

from notifyonce._ledger.table import index_names
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0005"
down_revision = "notifyonce_0004"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    return settings_from_config(config)


def upgrade() -> None:
    table_name, schema = _settings()
    name = index_names(table_name)["action_sent"]
    op.create_index(name, table_name, ["action", "sent_at"], schema=schema)


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_index(index_names(table_name)["action_sent"], table_name=table_name, schema=schema)
