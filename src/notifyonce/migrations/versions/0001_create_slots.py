"""Create the ledger table.

Revision ID: notifyonce_0001
Revises:
Create Date: 2026-11-30

A frozen snapshot of the table as ``create_schema()`` builds it in this release; the test
suite checks that both produce the same columns, types, indexes and constraints.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._ledger.table import KeyText, UtcDateTime, index_names
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0001"
down_revision = None
# A branch label lets an application's own Alembic history include ours
# (`alembic upgrade notifyonce@head`).
branch_labels = ("notifyonce",)
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    return settings_from_config(config)


def upgrade() -> None:
    table_name, schema = _settings()
    names = index_names(table_name)
    op.create_table(
        table_name,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action", KeyText(64), nullable=False),
        sa.Column("subject", KeyText(128), nullable=False),
        sa.Column("cycle", KeyText(128), nullable=False),
        sa.Column("cycle_at", UtcDateTime(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("lease_until", UtcDateTime(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("sent_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("message_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=names["pk"]),
        sa.UniqueConstraint("action", "cycle", "subject", name=names["key"]),
        schema=schema,
    )
    op.create_index(names["lease"], table_name, ["status", "lease_until"], schema=schema)
    op.create_index(names["cycle_at"], table_name, ["cycle_at"], schema=schema)
    op.create_index(names["subject_sent"], table_name, ["subject", "sent_at"], schema=schema)


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_table(table_name, schema=schema)
