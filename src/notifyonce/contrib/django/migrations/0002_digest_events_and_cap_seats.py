"""The tables of digests and frequency caps, as the Alembic revision notifyonce_0008 leaves
them under their default names: the digests' events and the caps' seats.

SQL per database, as the first migration's recipients table (tests/test_django.py holds
the two schemas equal on PostgreSQL, MariaDB and SQLite). Django keeps no model of them.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import StateApps

from notifyonce.contrib.django.fields import driver_of

_TIMESTAMP = {
    "postgresql": "TIMESTAMP WITH TIME ZONE",
    "mysql": "DATETIME(6)",
    "sqlite": "DATETIME",
}
_ID = {
    "postgresql": "BIGSERIAL NOT NULL",
    "mysql": "BIGINT NOT NULL AUTO_INCREMENT",
    "sqlite": "INTEGER NOT NULL",
}
_DIGESTS = "notifyonce_digest_events"
_CAPS = "notifyonce_cap_seats"


def _statements(schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
    vendor = schema_editor.connection.vendor
    timestamp = _TIMESTAMP[vendor]
    binary_keys = driver_of(schema_editor.connection).binary_keys

    def _key(length: int) -> str:
        return f"VARBINARY({length * 4})" if binary_keys else f"VARCHAR({length})"

    return [
        f"""CREATE TABLE {_DIGESTS} (
            id {_ID[vendor]},
            action {_key(64)} NOT NULL,
            subject {_key(128)} NOT NULL,
            event_key {_key(128)} NOT NULL,
            window_start {timestamp} NOT NULL,
            window_end {timestamp} NOT NULL,
            due_at {timestamp},
            at {timestamp} NOT NULL,
            tz VARCHAR(64),
            data TEXT,
            slot_id BIGINT,
            created_at {timestamp} NOT NULL,
            CONSTRAINT {_DIGESTS}_pkey PRIMARY KEY (id),
            CONSTRAINT {_DIGESTS}_key UNIQUE (action, subject, event_key))""",
        f"CREATE INDEX {_DIGESTS}_due_idx ON {_DIGESTS} (action, due_at, id)",
        f"CREATE INDEX {_DIGESTS}_window_idx ON {_DIGESTS} (action, subject, window_start)",
        f"CREATE INDEX {_DIGESTS}_ends_idx ON {_DIGESTS} (action, window_end)",
        f"""CREATE TABLE {_CAPS} (
            category {_key(64)} NOT NULL,
            recipient {_key(128)} NOT NULL,
            seat INTEGER NOT NULL,
            used_at {timestamp} NOT NULL,
            previous_at {timestamp},
            token BIGINT NOT NULL,
            CONSTRAINT pk_{_CAPS} PRIMARY KEY (category, recipient, seat))""",
    ]


def _create_tables(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in _statements(schema_editor):
        schema_editor.execute(statement)


def _drop_tables(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for table in (_CAPS, _DIGESTS):
        schema_editor.execute(f"DROP TABLE {table}")


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("notifyonce", "0001_initial")]

    operations: ClassVar[list[Operation]] = [
        # Not in a transaction: MySQL and MariaDB cannot roll DDL back, and Django refuses
        # DDL inside one there.
        migrations.RunPython(_create_tables, _drop_tables, atomic=False),
    ]
