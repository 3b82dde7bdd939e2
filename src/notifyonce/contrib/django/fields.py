"""The column types of the ledger's tables as Django fields: the migrations and the
admin's models use them, so both see the table as notifyonce writes it."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from notifyonce._drivers import Driver, MySQLDriver, PostgreSQLDriver, SQLiteDriver

__all__ = ["KeyTextField", "driver_of"]

# Django's name for each database (``connection.vendor``) and notifyonce's driver for it.
_VENDORS: dict[str, type[Driver]] = {
    "postgresql": PostgreSQLDriver,
    "mysql": MySQLDriver,
    "sqlite": SQLiteDriver,
}


def driver_of(connection: BaseDatabaseWrapper) -> type[Driver]:
    """notifyonce's driver for a Django connection's database: what the app's migrations
    and fields ask of the database, they ask of it."""
    return _VENDORS[connection.vendor]


class KeyTextField(models.CharField):
    """A key part (action, subject, cycle): ``VARCHAR(n)``, and on MySQL/MariaDB
    ``VARBINARY(4n)`` of its UTF-8 bytes, compared byte for byte as notifyonce's own
    ``KeyText`` column is (MySQL's default collations would make ``"Ann"`` and ``"ann"``
    one key)."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if driver_of(connection).binary_keys:
            return f"varbinary({int(self.max_length or 0) * 4})"
        kind: str | None = super().db_type(connection)
        return kind

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        # A look-up by a str needs no encoding: MySQL compares the literal's bytes.
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8")
        return value
