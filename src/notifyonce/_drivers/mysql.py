"""MySQL and MariaDB: asyncmy (async), PyMySQL (sync)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from notifyonce._drivers.base import Driver

__all__ = ["MySQLDriver"]

# 1213 deadlock victim, 1205 lock wait timeout. The server rolled the transaction back,
# so running it again from the start is safe.
_RETRY_CODES = frozenset({1213, 1205})
_LOCK_WAIT_TIMEOUT = 1205


def _code(orig: object) -> object:
    args: tuple[Any, ...] = getattr(orig, "args", ())
    return args[0] if args else None


class MySQLDriver(Driver):
    """MySQL and MariaDB: row locks (waited for, not skipped), no RETURNING on an upsert
    and no partial indexes; key text as VARBINARY, so that keys compare byte for byte as
    they do elsewhere; ``DATETIME(6)`` in naive UTC; the server's ``UTC_TIMESTAMP(6)``.
    """

    label = "MySQL/MariaDB"
    backends = ("mysql", "mariadb")
    sync_dbapi = "pymysql"
    async_dbapi = "asyncmy"
    async_only = frozenset({"asyncmy", "aiomysql"})
    sync_only = frozenset({"pymysql", "mysqldb", "mysqlconnector"})
    extras: ClassVar[dict[str, str]] = {"asyncmy": "mysql", "pymysql": "mysql"}
    other_dbapis: ClassVar[dict[str, tuple[str, str]]] = {
        "MySQLdb": ("mysql", "mysql+pymysql://"),
        "aiomysql": ("mysql", "mysql+asyncmy://"),
    }

    clock_query = "SELECT UTC_TIMESTAMP(6)"
    binary_keys = True

    @staticmethod
    def insert(table: sa.Table) -> Any:
        return mysql.insert(table)

    @staticmethod
    def epoch_now() -> sa.ColumnElement[Any]:
        return sa.literal_column("UNIX_TIMESTAMP(NOW(6))")

    @staticmethod
    def minute_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
        return sa.func.date_format(column, "%Y-%m-%d %H:%i")

    @staticmethod
    def timestamp_type() -> sa.types.TypeEngine[Any]:
        # fsp=6: leases and updated_at need sub-second precision.
        return mysql.DATETIME(fsp=6)

    @staticmethod
    def key_type(length: int) -> sa.types.TypeEngine[Any]:
        # The default collations ignore case and trailing spaces, so "Ann", "ann" and
        # "ann " would share one slot; the UTF-8 bytes (four a character at most) do not.
        return mysql.VARBINARY(length * 4)

    def is_retryable(self, orig: object) -> bool:
        return _code(orig) in _RETRY_CODES

    def lock_wait_ended(self, orig: object) -> bool:
        return _code(orig) == _LOCK_WAIT_TIMEOUT

    @contextlib.contextmanager
    def lock_waits_bounded(self, conn: sa.Connection, seconds: float | None) -> Iterator[None]:
        if seconds is None:
            yield
            return
        # Whole seconds, and for the session: set back after the transaction, since the
        # pool hands the connection to whoever comes next (the ledger, say).
        conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(seconds))}")
        try:
            yield
        finally:
            try:
                conn.rollback()  # what the block left open (a failed transaction)
                conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = DEFAULT")
                conn.commit()
            except Exception:  # a broken connection: the pool must not hand it out again
                conn.invalidate()
