"""The column types of the ledger's tables as Django fields: the migrations and the
admin's models use them, so both see the table as notifyonce writes it."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["KeyTextField"]


class KeyTextField(models.CharField):
    """A key part (action, subject, cycle): ``VARCHAR(n)``, and on MySQL/MariaDB
    ``VARBINARY(4n)`` of its UTF-8 bytes, compared byte for byte as notifyonce's own
    ``KeyText`` column is (MySQL's default collations would make ``"Ann"`` and ``"ann"``
    one key)."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str | None:
        if connection.vendor == "mysql":
            return f"varbinary({int(self.max_length or 0) * 4})"
        kind: str | None = super().db_type(connection)
        return kind

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8")
        return value

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> Any:
        value = super().get_db_prep_value(value, connection, prepared)
        if connection.vendor == "mysql" and isinstance(value, str):
            return value.encode("utf-8")
        return value
