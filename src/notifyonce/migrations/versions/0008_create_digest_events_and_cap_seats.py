"""Create the tables of digests and frequency caps: the digests' events, the caps' seats.

Revision ID: notifyonce_0008
Revises: notifyonce_0007
Create Date: 2026-12-07

A frozen snapshot of the tables as the ledger's ``create_schema()`` builds them in this
release; the test suite checks that both produce the same columns, types and keys. Their
names follow the ledger table's: ``notifyonce_digest_events`` and
``notifyonce_cap_seats`` beside the default ledger table, ``<ledger table>_digest_events``
and ``<ledger table>_cap_seats`` beside any other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._ledger.side_tables import (
    cap_names,
    default_cap_table,
    default_digest_table,
    digest_names,
)
from notifyonce._ledger.table import KeyText, UtcDateTime
from notifyonce.migrations import settings_from_config

revision = "notifyonce_0008"
down_revision = "notifyonce_0007"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str, str | None]:
    config = op.get_context().config
    assert config is not None
    ledger_table, schema = settings_from_config(config)
    return default_digest_table(ledger_table), default_cap_table(ledger_table), schema


def upgrade() -> None:
    digests, caps, schema = _settings()
    names = digest_names(digests)
    op.create_table(
        digests,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("action", KeyText(64), nullable=False),
        sa.Column("subject", KeyText(128), nullable=False),
        sa.Column("event_key", KeyText(128), nullable=False),
        sa.Column("window_start", UtcDateTime(), nullable=False),
        sa.Column("window_end", UtcDateTime(), nullable=False),
        sa.Column("due_at", UtcDateTime(), nullable=True),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("tz", sa.String(64), nullable=True),
        sa.Column("data", sa.Text(), nullable=True),
        sa.Column("slot_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=names["pk"]),
        sa.UniqueConstraint("action", "subject", "event_key", name=names["key"]),
        schema=schema,
    )
    op.create_index(names["due"], digests, ["action", "due_at", "id"], schema=schema)
    op.create_index(names["window"], digests, ["action", "subject", "window_start"], schema=schema)
    op.create_index(names["ends"], digests, ["action", "window_end"], schema=schema)
    op.create_table(
        caps,
        sa.Column("category", KeyText(64), nullable=False),
        sa.Column("recipient", KeyText(128), nullable=False),
        sa.Column("seat", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("used_at", UtcDateTime(), nullable=False),
        sa.Column("previous_at", UtcDateTime(), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("category", "recipient", "seat", name=cap_names(caps)["pk"]),
        schema=schema,
    )


def downgrade() -> None:
    digests, caps, schema = _settings()
    op.drop_table(caps, schema=schema)
    op.drop_table(digests, schema=schema)
