"""Create the recipients table of the audience: who is gone, who opted out of what.

Revision ID: notifyonce_0007
Revises: notifyonce_0006
Create Date: 2026-12-06

A frozen snapshot of the table as ``AsyncAudience.create_schema()`` (and the ledger's
``create_schema()``) builds it in this release; the test suite checks that both produce
the same columns, types and keys. Its name follows the ledger table's:
``notifyonce_recipients`` beside the default ledger table, ``<ledger table>_recipients``
beside any other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._audience.table import default_recipient_table, recipient_pk_name
from notifyonce._ledger.table import KeyText, UtcDateTime
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0007"
down_revision = "notifyonce_0006"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    ledger_table, schema = settings_from_config(config)
    return default_recipient_table(ledger_table), schema


def upgrade() -> None:
    table_name, schema = _settings()
    op.create_table(
        table_name,
        sa.Column("recipient", KeyText(128), nullable=False),
        sa.Column("category", KeyText(64), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("detail", sa.String(255), nullable=True),
        sa.Column("since", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("recipient", "category", name=recipient_pk_name(table_name)),
        schema=schema,
    )


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_table(table_name, schema=schema)
