"""The ledger's tables, as the Alembic revisions notifyonce_0001 to notifyonce_0007 leave
them: the slots, the rate limits of ``SQLRateStore``, the file ids of ``SQLFileIdStore``
and the audience's recipients, under their default names.

A project migrates with Django (``python manage.py migrate notifyonce``) or with Alembic
(``notifyonce migrate``), not both. A frozen snapshot, like the Alembic revisions: every
later Alembic revision gets a Django migration of its own, and tests/test_django.py reads
both schemas back from fresh databases and holds them equal on PostgreSQL, MariaDB and
SQLite.

The slots table is Django's own DDL. The other three are SQL per database: the
recipients' primary key is two columns, which Django 4.2 cannot declare, and a
``CharField`` primary key would get an extra ``LIKE`` index on PostgreSQL. The models
Django keeps in its state are the admin's read-only, unmanaged ones.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import StateApps

import notifyonce.contrib.django.fields
from notifyonce.contrib.django.fields import driver_of

_TIMESTAMP = {
    "postgresql": "TIMESTAMP WITH TIME ZONE",
    "mysql": "DATETIME(6)",
    "sqlite": "DATETIME",
}
_DOUBLE = {"postgresql": "DOUBLE PRECISION", "mysql": "DOUBLE", "sqlite": "DOUBLE"}


def _tables(schema_editor: BaseDatabaseSchemaEditor) -> list[str]:
    vendor = schema_editor.connection.vendor
    timestamp, double = _TIMESTAMP[vendor], _DOUBLE[vendor]
    binary_keys = driver_of(schema_editor.connection).binary_keys

    def _key(length: int) -> str:
        return f"VARBINARY({length * 4})" if binary_keys else f"VARCHAR({length})"

    return [
        f"""CREATE TABLE notifyonce_rate_limits (
            scope VARCHAR(191) NOT NULL,
            tat {double} NOT NULL,
            flood_until {double} NOT NULL,
            flood_chat VARCHAR(64),
            chat_flood_until {double} NOT NULL,
            CONSTRAINT pk_notifyonce_rate_limits PRIMARY KEY (scope))""",
        f"""CREATE TABLE notifyonce_file_ids (
            file_key VARCHAR(191) NOT NULL,
            file_id TEXT NOT NULL,
            stored_at {timestamp} NOT NULL,
            CONSTRAINT pk_notifyonce_file_ids PRIMARY KEY (file_key))""",
        f"""CREATE TABLE notifyonce_recipients (
            recipient {_key(128)} NOT NULL,
            category {_key(64)} NOT NULL,
            reason VARCHAR(32) NOT NULL,
            source VARCHAR(32) NOT NULL,
            detail VARCHAR(255),
            since {timestamp} NOT NULL,
            CONSTRAINT pk_notifyonce_recipients PRIMARY KEY (recipient, category))""",
    ]


def _create_tables(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in _tables(schema_editor):
        schema_editor.execute(statement)


def _drop_tables(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for table in ("notifyonce_recipients", "notifyonce_file_ids", "notifyonce_rate_limits"):
        schema_editor.execute(f"DROP TABLE {table}")


def _sent_index(partial: bool) -> models.Index:
    # Revision 0006: only the sent rows, where the database has partial indexes.
    condition = models.Q(sent_at__isnull=False) if partial else None
    return models.Index(
        fields=["action", "sent_at"], name="notifyonce_slots_action_sent_idx", condition=condition
    )


def _add_sent_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    partial = schema_editor.connection.features.supports_partial_indexes
    schema_editor.add_index(apps.get_model("notifyonce", "SlotTable"), _sent_index(partial))


def _remove_sent_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    partial = schema_editor.connection.features.supports_partial_indexes
    schema_editor.remove_index(apps.get_model("notifyonce", "SlotTable"), _sent_index(partial))


def _slot_fields() -> list[tuple[str, Any]]:
    key = notifyonce.contrib.django.fields.KeyTextField
    return [
        ("id", models.BigAutoField(primary_key=True, serialize=False)),
        ("action", key(max_length=64)),
        ("subject", key(max_length=128)),
        ("cycle", key(max_length=128)),
        ("cycle_at", models.DateTimeField(null=True)),
        ("status", models.CharField(max_length=16)),
        ("attempt", models.IntegerField()),
        ("token", models.BigIntegerField()),
        ("lease_until", models.DateTimeField()),
        ("created_at", models.DateTimeField()),
        ("updated_at", models.DateTimeField()),
        ("sent_at", models.DateTimeField(null=True)),
        ("last_error", models.CharField(max_length=500, null=True)),
        ("message_id", models.CharField(max_length=128, null=True)),
    ]


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[Operation]] = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                # The table under a name of its own: the admin's model of the same table
                # is unmanaged (below), and this one lives only while the table is made.
                migrations.CreateModel(
                    name="SlotTable",
                    fields=_slot_fields(),
                    options={
                        "db_table": "notifyonce_slots",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=["action", "cycle", "subject"], name="notifyonce_slots_key"
                            )
                        ],
                        "indexes": [
                            models.Index(
                                fields=["status", "lease_until"], name="notifyonce_slots_lease_idx"
                            ),
                            models.Index(fields=["cycle_at"], name="notifyonce_slots_cycle_at_idx"),
                            models.Index(
                                fields=["subject", "sent_at"],
                                name="notifyonce_slots_subject_sent_idx",
                            ),
                            models.Index(
                                fields=["status", "action", "cycle"],
                                name="notifyonce_slots_status_idx",
                            ),
                        ],
                    },
                ),
                migrations.RunPython(_add_sent_index, _remove_sent_index),
                migrations.RunPython(_create_tables, _drop_tables),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Slot",
                    fields=_slot_fields(),
                    options={
                        "verbose_name": "slot",
                        "db_table": "notifyonce_slots",
                        "ordering": ("-updated_at",),
                        "managed": False,
                    },
                ),
                migrations.CreateModel(
                    name="Campaign",
                    fields=[],
                    options={
                        "verbose_name": "campaign",
                        "ordering": ("-created_at",),
                        "proxy": True,
                        "indexes": [],
                        "constraints": [],
                    },
                    bases=("notifyonce.slot",),
                ),
            ],
        )
    ]
