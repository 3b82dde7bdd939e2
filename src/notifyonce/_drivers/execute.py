"""Statements compiled once per database, run straight on the driver's cursor.

A claim is one short statement whose cost is mostly the driver's round trip; SQLAlchemy's
execution path around it (an execution context, a result object, the compiled cache's key)
cost as much again. So the statements on the send path are built with SQLAlchemy once,
compiled once for the engine's dialect into a `Compiled` (the SQL text in the driver's
paramstyle, and the bind processors SQLAlchemy itself would apply), and run through a
`Link`:

- `DriverLink`: the DBAPI cursor of a pooled connection the ledger checked out itself;
  errors are wrapped and disconnects invalidated as SQLAlchemy's ``Connection`` does.
- `ConnectionLink`: a SQLAlchemy ``Connection`` (the caller's, or the ledger's own when
  the engine is observed: ``echo``, or a cursor-execute event listener such as an
  OpenTelemetry instrumentation), through ``exec_driver_sql``, so its transaction,
  events and logging work as usual.

Because nothing goes through SQLAlchemy's compiled cache, no statement is compiled per
call on any SQLAlchemy version (2.0 compiled the claim's ``ON CONFLICT DO UPDATE ... WHERE``
on every call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_only as await_

__all__ = [
    "Compiled",
    "ConnectionLink",
    "DriverLink",
    "Link",
    "is_observed",
    "status_count",
    "wrap_dbapi_error",
]

_MISSING = object()


class Compiled:
    """One statement compiled for one dialect: its SQL and how to bind a call's values.

    Parameters come as a mapping of bind names; binds the statement fixed (literals) keep
    their value. Each value passes through the bind processor of its type on this dialect,
    exactly as SQLAlchemy would (naive UTC datetimes for MySQL, bytes for MySQL's key
    columns, SQLite's datetime text).
    """

    __slots__ = ("_binds", "_slots", "_template", "positional", "sql")

    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql: str = compiled.string
        self.positional: bool = bool(compiled.positional)
        # A bind used twice (``now`` in created_at and updated_at) is one name; a positional
        # paramstyle may list it twice, in the order the placeholders appear.
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        names = list(compiled.positiontup or ()) if self.positional else list(by_name)
        binds: list[tuple[str, Callable[[Any], Any] | None, Any]] = []
        for name in names:
            bind = by_name[name]
            process = _bind_processor(bind.type, dialect)
            fixed = _MISSING if bind.required else bind.effective_value
            if fixed is not _MISSING and process is not None:
                fixed, process = process(fixed), None
            binds.append((name, process, fixed))
        self._binds = tuple(binds)
        # Positional: the fixed values in place, and where each call's values go.
        self._template = [None if fixed is _MISSING else fixed for _, _, fixed in binds]
        self._slots = tuple(
            (index, name, process)
            for index, (name, process, fixed) in enumerate(binds)
            if fixed is _MISSING
        )

    def with_sql(self, sql: str) -> Compiled:
        """The same statement and binds under another text (a comment added)."""
        twin = object.__new__(Compiled)
        twin.sql, twin.positional, twin._binds = sql, self.positional, self._binds
        twin._template, twin._slots = self._template, self._slots
        return twin

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """The driver's parameters for one execution."""
        if self.positional:
            values = self._template.copy()
            for index, name, process in self._slots:
                values[index] = params[name] if process is None else process(params[name])
            return tuple(values)
        return {
            name: fixed if fixed is not _MISSING else _process(process, params[name])
            for name, process, fixed in self._binds
        }


def _bind_processor(type_: Any, dialect: Dialect) -> Callable[[Any], Any] | None:
    """What SQLAlchemy applies to a value of ``type_`` before the driver gets it.

    An array whose items need nothing (text, integers: the ledger's arrays are lists it
    built itself) goes to the driver as it is: SQLAlchemy's processor would copy it item
    by item, a few microseconds a notification for nothing.
    """
    if isinstance(type_, sa.ARRAY):
        item = type_.item_type.dialect_impl(dialect).bind_processor(dialect)
        if item is None:
            return None
    own = getattr(type_, "own_bind_processor", None)
    if own is not None and isinstance(type_, sa.types.TypeDecorator):
        # The ledger's own column types: their ``process_bind_param`` for this dialect as
        # one function (None: the identity), then their implementation's processor, as
        # SQLAlchemy's TypeDecorator.bind_processor chains them, without a lookup per value.
        first: Callable[[Any], Any] | None = own(dialect)
        loaded: Any = type_.dialect_impl(dialect)
        then = loaded.impl_instance.bind_processor(dialect)
        if first is None or then is None:
            return first or then
        return lambda value: then(first(value))
    return type_.dialect_impl(dialect).bind_processor(dialect)  # type: ignore[no-any-return]


def _process(process: Callable[[Any], Any] | None, value: Any) -> Any:
    return value if process is None else process(value)


class Link(Protocol):
    """One connection, as the ledger's statements use it."""

    @property
    def dialect(self) -> Dialect:
        """The SQLAlchemy dialect of the connection's engine (its driver's paramstyle)."""

    def rows(self, compiled: Compiled, params: Mapping[str, Any]) -> Sequence[Any]:
        """Execute; every row it returned."""

    def count(self, compiled: Compiled, params: Mapping[str, Any]) -> int:
        """Execute; the number of rows it changed."""

    def scalar(self, sql: str) -> Any:
        """Run plain SQL without parameters; the first column of its first row."""

    def statement(self, sql: str) -> None:
        """Run plain SQL without parameters, for its effect."""


def is_observed(engine: sa.Engine) -> bool:
    """Whether someone watches the engine's statements (``echo``, cursor-execute events).

    Such an engine runs the ledger's statements through its ``Connection``, where they are
    logged and heard; others skip that layer.
    """
    dispatch = engine.dispatch
    return bool(engine.echo or dispatch.before_cursor_execute or dispatch.after_cursor_execute)


def wrap_dbapi_error(
    exc: Exception,
    dialect: Dialect,
    sql: str | None,
    dbapi_connection: Any,
    cursor: Any,
    on_disconnect: Callable[[Exception], None] | None,
) -> Exception:
    """A DBAPI error as SQLAlchemy's ``Connection`` would raise it (``DBAPIError``).

    A disconnect invalidates the pooled connection (``on_disconnect``), so the pool drops
    it instead of handing it out again.
    """
    dbapi = dialect.loaded_dbapi
    if not isinstance(exc, dbapi.Error):
        return exc
    disconnect = bool(dialect.is_disconnect(exc, dbapi_connection, cursor))
    if disconnect and on_disconnect is not None:
        on_disconnect(exc)
    return sa.exc.DBAPIError.instance(
        sql,
        None,
        exc,
        dbapi.Error,
        connection_invalidated=disconnect,
        dialect=dialect,
    )


class DriverLink:
    """The DBAPI cursor of a pooled connection (a ``PoolProxiedConnection``)."""

    __slots__ = ("_connection", "_cursor", "dialect")

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self._connection = connection
        self.dialect = dialect
        self._cursor: Any = None

    def _execute(self, sql: str, args: Any) -> Any:
        cursor = self._cursor
        try:
            if cursor is None:
                cursor = self._cursor = self._connection.cursor()
            cursor.execute(sql, args)
        except Exception as exc:
            raise self.wrap(exc, sql) from exc
        return cursor

    def wrap(self, exc: Exception, sql: str | None) -> Exception:
        """``exc`` as SQLAlchemy would raise it; invalidates the connection on a disconnect."""
        connection = self._connection
        return wrap_dbapi_error(
            exc, self.dialect, sql, connection.dbapi_connection, self._cursor, connection.invalidate
        )

    def rows(self, compiled: Compiled, params: Mapping[str, Any]) -> Sequence[Any]:
        cursor = self._execute(compiled.sql, compiled.args(params))
        try:
            return cursor.fetchall() if cursor.description is not None else []
        except Exception as exc:
            raise self.wrap(exc, compiled.sql) from exc

    def count(self, compiled: Compiled, params: Mapping[str, Any]) -> int:
        return int(self._execute(compiled.sql, compiled.args(params)).rowcount)

    def scalar(self, sql: str) -> Any:
        cursor = self._execute(sql, ())
        try:
            return cursor.fetchone()[0]
        except Exception as exc:
            raise self.wrap(exc, sql) from exc

    def statement(self, sql: str) -> None:
        self._execute(sql, ())

    def close(self) -> None:
        """Close the cursor (not the connection)."""
        if self._cursor is not None:
            cursor, self._cursor = self._cursor, None
            cursor.close()


class AsyncpgLink(DriverLink):
    """asyncpg's own connection, for statements in autocommit (PostgreSQL).

    SQLAlchemy's asyncpg cursor takes a lock, looks its prepared statement up, builds a
    description and parses the command status for every execution; asyncpg itself keeps
    its prepared statements, so the ledger's statements go to it directly. Its errors are
    translated by SQLAlchemy's adapter, as the cursor would.
    """

    __slots__ = ("_driver",)

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        super().__init__(connection, dialect)
        self._driver = connection.driver_connection

    def _call(self, sql: str, method: str, args: Sequence[Any]) -> Any:
        try:
            return await_(getattr(self._driver, method)(sql, *args))
        except Exception as exc:
            self.raise_adapted(exc, sql)

    def raise_adapted(self, exc: BaseException, sql: str) -> NoReturn:
        """Raise what asyncpg raised running ``sql`` as SQLAlchemy would (``DBAPIError``;
        a disconnect invalidates the connection); anything else as it is."""
        try:
            self._connection.dbapi_connection._handle_exception(exc)
        except Exception as adapted:
            if adapted is exc:
                raise
            raise self.wrap(adapted, sql) from exc
        raise exc  # pragma: no cover - the adapter always raises

    def rows(self, compiled: Compiled, params: Mapping[str, Any]) -> Sequence[Any]:
        return self._call(compiled.sql, "fetch", compiled.args(params))  # type: ignore[arg-type,no-any-return]

    def count(self, compiled: Compiled, params: Mapping[str, Any]) -> int:
        return status_count(self._call(compiled.sql, "execute", compiled.args(params)))  # type: ignore[arg-type]

    def scalar(self, sql: str) -> Any:
        return self._call(sql, "fetchval", ())

    def statement(self, sql: str) -> None:
        self._call(sql, "execute", ())


def status_count(status: str | None) -> int:
    """The rows a statement changed, read from asyncpg's command status (``UPDATE 1``)."""
    return int(status.rsplit(" ", 1)[-1]) if status else -1


class ConnectionLink:
    """A SQLAlchemy ``Connection``: its transaction, events and logging apply."""

    __slots__ = ("connection", "dialect")

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.dialect = connection.dialect

    def rows(self, compiled: Compiled, params: Mapping[str, Any]) -> Sequence[Any]:
        result = self.connection.exec_driver_sql(compiled.sql, compiled.args(params))
        return result.all() if result.returns_rows else []

    def count(self, compiled: Compiled, params: Mapping[str, Any]) -> int:
        result = self.connection.exec_driver_sql(compiled.sql, compiled.args(params))
        return int(result.rowcount)

    def scalar(self, sql: str) -> Any:
        return self.connection.exec_driver_sql(sql).scalar_one()

    def statement(self, sql: str) -> None:
        self.connection.exec_driver_sql(sql)
