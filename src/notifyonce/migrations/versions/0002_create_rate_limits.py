"""Create the rate-limit table of SQLRateStore.

Revision ID: notifyonce_0002
Revises: notifyonce_0001
Create Date: 2026-12-01

A frozen snapshot of the table as ``SQLRateStore.create_schema()`` builds it in this
release; the test suite checks that both produce the same columns, types and keys. Its
name is the ``notifyonce_rate_table_name`` option, else ``notifyonce_rate_limits`` beside
the default ledger table and ``<ledger table>_rate_limits`` beside any other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._senders.rate.sql import rate_pk_name
from notifyonce.migrations import rate_table_from_config, settings_from_config

revision = "notifyonce_0002"
down_revision = "notifyonce_0001"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    _, schema = settings_from_config(config)
    return rate_table_from_config(config), schema


def upgrade() -> None:
    table_name, schema = _settings()
    op.create_table(
        table_name,
        sa.Column("scope", sa.String(191), nullable=False),
        sa.Column("tat", sa.Double(), nullable=False),
        sa.Column("flood_until", sa.Double(), nullable=False),
        sa.Column("flood_chat", sa.String(64), nullable=True),
        sa.Column("chat_flood_until", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name=rate_pk_name(table_name)),
        schema=schema,
    )


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_table(table_name, schema=schema)
