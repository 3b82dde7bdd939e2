"""Create the file-id table of SQLFileIdStore.

Revision ID: notifyonce_0003
Revises: notifyonce_0002
Create Date: 2026-12-01

A frozen snapshot of the table as ``SQLFileIdStore.create_schema()`` builds it in this
release; the test suite checks that both produce the same columns, types and keys. Its
name is the ``notifyonce_file_table_name`` option, else ``notifyonce_file_ids`` beside the
default ledger table and ``<ledger table>_file_ids`` beside any other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from notifyonce._ledger.table import UtcDateTime
from notifyonce._senders.telegram.file_sql import file_pk_name
from notifyonce.migrations import file_table_from_config, settings_from_config

revision = "notifyonce_0003"
down_revision = "notifyonce_0002"
branch_labels = None
depends_on = None


def _settings() -> tuple[str, str | None]:
    config = op.get_context().config
    assert config is not None
    _, schema = settings_from_config(config)
    return file_table_from_config(config), schema


def upgrade() -> None:
    table_name, schema = _settings()
    op.create_table(
        table_name,
        sa.Column("file_key", sa.String(191), nullable=False),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("stored_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("file_key", name=file_pk_name(table_name)),
        schema=schema,
    )


def downgrade() -> None:
    table_name, schema = _settings()
    op.drop_table(table_name, schema=schema)
