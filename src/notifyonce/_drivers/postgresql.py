"""PostgreSQL: asyncpg or psycopg 3 (async), psycopg 3 (sync)."""

from __future__ import annotations

import contextlib
import math
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from notifyonce._drivers.base import Driver
from notifyonce._drivers.execute import AsyncpgLink, DriverLink
from notifyonce._errors import ValidationError

__all__ = ["POOLED_BY_TRANSACTION", "PostgreSQLDriver", "pgbouncer_options"]

# Deadlock detected, serialization failure (a caller running SERIALIZABLE): the server
# rolled the transaction back, so running it again from the start is safe.
_RETRY_STATES = frozenset({"40P01", "40001"})
# lock_not_available: a wait that lock_timeout ended.
_LOCK_TIMEOUT = "55P03"
# The engine option `pgbouncer_options` sets: the engine reaches PostgreSQL through a
# pooler in transaction mode.
POOLED_BY_TRANSACTION = "notifyonce_pgbouncer"


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
        self._pooled = bool(engine.get_execution_options().get(POOLED_BY_TRANSACTION))

    @property
    def autocommit_connections(self) -> bool:
        # SQLAlchemy's asyncpg adapter prepares a statement and runs it in two round
        # trips; in autocommit a transaction pooler may send the second to another server
        # connection, where the statement does not exist. In a transaction both go to
        # the same one. (The ledger's own statements go to asyncpg directly, unnamed and
        # parsed again with their values: they keep autocommit.)
        return not (self._pooled and self.engine.dialect.driver == "asyncpg")

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

    @property
    def direct_statements(self) -> bool:
        # asyncpg's own connection, as `link` gives it for autocommit.
        return self.engine.dialect.driver == "asyncpg"

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


def _statement_name() -> str:
    # Unique on every server connection a pooler may hand out: asyncpg's own names
    # (``__asyncpg_stmt_1__``) are counted per client connection, so two clients' first
    # statements meet on one server connection as "already exists".
    return f"__notifyonce_{uuid.uuid4().hex}__"


def pgbouncer_options(url: str | URL) -> dict[str, Any]:
    """The engine options for a PostgreSQL reached through a pooler in transaction mode
    (PgBouncer's ``pool_mode = transaction``): pass them to ``create_engine`` or
    ``create_async_engine`` with the same URL.

    Such a pooler gives each transaction, and each statement outside one, whichever
    server connection is free, so a named prepared statement made on one is missing on
    the next: ``prepared statement "__asyncpg_stmt_15__" does not exist`` (asyncpg, which
    prepares every statement) or ``prepared statement "_pg3_0" already exists`` (psycopg,
    from a query's sixth run). These options prepare nothing that outlives its statement:

    - psycopg 3: ``prepare_threshold=None``, no statement is ever prepared by name;
    - asyncpg: ``statement_cache_size=0`` (asyncpg sends each statement unnamed, parsed
      again with its values: nothing waits on the server between two messages), and
      SQLAlchemy's own prepared statements (uncached, ``prepared_statement_cache_size=0``)
      get names unique across clients. Those are made inside a transaction, so they run
      on the server connection that has them; each stays there until PgBouncer closes
      that connection (``server_lifetime``). psycopg leaves none.

    A URL with no PostgreSQL driver that notifyonce runs on is a ValidationError naming
    ``url``. Neither a password nor the rest of the URL appears in the message.

    Examples:
        >>> pgbouncer_options("postgresql+psycopg://app@bouncer:6432/app")["connect_args"]
        {'prepare_threshold': None}
        >>> sorted(pgbouncer_options("postgresql+asyncpg://app@bouncer:6432/app")["connect_args"])
        ['prepared_statement_cache_size', 'prepared_statement_name_func', 'statement_cache_size']
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValidationError("url", "not a valid SQLAlchemy URL") from None
    backend, _, dbapi = parsed.drivername.partition("+")
    if backend not in (*PostgreSQLDriver.backends, *PostgreSQLDriver.aliases):
        raise ValidationError("url", f"a pooler's options are for PostgreSQL, not {backend!r}")
    if dbapi == "asyncpg":
        connect_args: dict[str, Any] = {
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": _statement_name,
        }
    elif dbapi in ("psycopg", "psycopg_async"):
        connect_args = {"prepare_threshold": None}
    else:
        raise ValidationError(
            "url",
            f"name the driver: postgresql+asyncpg:// or postgresql+psycopg://, not {backend}"
            + (f"+{dbapi}" if dbapi else "")
            + "://",
        )
    return {"connect_args": connect_args, "execution_options": {POOLED_BY_TRANSACTION: True}}
