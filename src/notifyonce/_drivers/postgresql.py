"""PostgreSQL: asyncpg or psycopg 3 (async), psycopg 3 (sync)."""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from notifyonce._drivers.base import Driver
from notifyonce._drivers.execute import AsyncpgLink, DriverLink

__all__ = ["PostgreSQLDriver"]

# Deadlock detected, serialization failure (a caller running SERIALIZABLE): the server
# rolled the transaction back, so running it again from the start is safe.
_RETRY_STATES = frozenset({"40P01", "40001"})
# lock_not_available: a wait that lock_timeout ended.
_LOCK_TIMEOUT = "55P03"


class PostgreSQLDriver(Driver):
    """PostgreSQL: row locks that concurrent sweeps skip, RETURNING, partial indexes,
    ``timestamptz``, the server's ``clock_timestamp()``.

    Statements in a transaction of their own run in autocommit: BEGIN and COMMIT would
    cost two round trips more. On asyncpg those go to its own connection, which keeps its
    prepared statements, instead of through SQLAlchemy's cursor adapter.
    """

    label = "PostgreSQL"
    backends = ("postgresql",)
    aliases = ("postgres",)  # the scheme libpq, Heroku and Render print
    sync_dbapi = "psycopg"
    async_dbapi = "asyncpg"
    async_only = frozenset({"asyncpg", "psycopg_async"})
    sync_only = frozenset({"psycopg2", "pg8000"})
    extras: ClassVar[dict[str, str]] = {"asyncpg": "postgres", "psycopg": "postgres"}
    other_dbapis: ClassVar[dict[str, tuple[str, str]]] = {
        "psycopg2": ("postgres", "postgresql+psycopg://")
    }

    clock_query = "SELECT clock_timestamp()"
    skip_locked = True
    autocommit_statements = True
    upsert_returning = True
    partial_indexes = True
    aware_timestamps = True

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self._keepers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._watching = False

    @staticmethod
    def insert(table: sa.Table) -> Any:
        return postgresql.insert(table)

    @staticmethod
    def rows_by_key(
        table: sa.Table, key: sa.Column[Any], columns: Sequence[sa.Column[Any]], values: str
    ) -> sa.Select[Any]:
        # The values as an array, each looked up in a LATERAL subquery: one index search
        # per value. (``key IN (...)`` on a young table, before its first ANALYZE, was
        # planned as a scan of every row, 6 ms for 200 values among 60,000 rows; OFFSET 0
        # keeps the subquery from being flattened into such a scan or a hash join.)
        asked = (
            sa.func.unnest(sa.bindparam(values, type_=postgresql.ARRAY(sa.Text)))
            .table_valued("value")
            .render_derived(name="asked")
        )
        found = (
            sa.select(*columns)
            .where(key == asked.c.value)
            .offset(sa.literal_column("0"))
            .lateral("found")
        )
        picked = [found.c[c.name] for c in columns]
        return sa.select(asked.c.value, *picked).select_from(asked.join(found, sa.true()))

    @staticmethod
    def epoch_now() -> sa.ColumnElement[Any]:
        return sa.literal_column("extract(epoch from clock_timestamp())::float8")

    @staticmethod
    def minute_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD HH24:MI")

    @staticmethod
    def timestamp_type() -> sa.types.TypeEngine[Any]:
        return postgresql.TIMESTAMP(timezone=True)

    def is_retryable(self, orig: object) -> bool:
        return getattr(orig, "sqlstate", None) in _RETRY_STATES

    def lock_wait_ended(self, orig: object) -> bool:
        return getattr(orig, "sqlstate", None) == _LOCK_TIMEOUT

    @contextlib.contextmanager
    def lock_waits_bounded(self, conn: sa.Connection, seconds: float | None) -> Iterator[None]:
        if seconds is not None:  # for this transaction only: nothing to set back
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = {math.ceil(seconds * 1000)}")
        yield

    def link(self, pooled: Any, autocommit: bool) -> DriverLink:
        # asyncpg runs outside a transaction unless told otherwise: its own connection
        # needs no switch to autocommit (SQLAlchemy's adapter around it does).
        if autocommit and self.engine.dialect.driver == "asyncpg":
            return AsyncpgLink(pooled, self.engine.dialect)
        return DriverLink(pooled, self.engine.dialect)

    def switches_to_autocommit(self) -> bool:
        # asyncpg's own connection is in autocommit already.
        return self.engine.dialect.driver != "asyncpg"

    @property
    def keeps_connections(self) -> bool:
        # asyncpg's connection goes back to a queue pool without awaiting anything.
        return self.engine.dialect.driver == "asyncpg" and isinstance(
            self.engine.pool, sa.pool.QueuePool
        )

    def watch(self, keeper: Any) -> None:
        if not self._watching:
            sa.event.listen(self.engine, "engine_disposed", self._disposed)
            self._watching = True
        self._keepers.add(keeper)

    def _disposed(self, engine: sa.Engine) -> None:
        # AsyncEngine.dispose runs this in its greenlet, where closing the driver's
        # connection may await; called from anywhere else, the connection is left to the
        # garbage collector.
        for keeper in list(self._keepers):
            pooled = keeper.take()
            if pooled is not None:
                with contextlib.suppress(Exception):
                    pooled.invalidate()
