"""The interface every database driver implements.

A `Driver` is what notifyonce knows about one database (PostgreSQL, MySQL/MariaDB,
SQLite): the names SQLAlchemy gives it and the URLs of its drivers, what it can do (row
locks, partial indexes, RETURNING on an upsert, a server clock), how its errors read (a
deadlock worth running again, a lock wait that ran out), the few SQL expressions that are
written differently on each (the clock, an upsert, a minute as text), and how a body of
sync work runs against it: its transactions, autocommit, and for SQLite the one writer
at a time that a file allows. The ledger, the SQL rate store, the file-id store, a
broadcast's recipients, the console and the command line ask their engine's driver and
never compare dialect names themselves. Adding a database is one subclass here (and the
ledger's statements for it, in ``_ledger/dialects.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.util import greenlet_spawn

from notifyonce._drivers.execute import DriverLink

__all__ = ["Driver", "Work"]

T = TypeVar("T")
#: Sync work that runs against an engine: given the sync ``Engine`` to connect with.
Work = Callable[[sa.Engine], T]


class Driver:
    """One database as notifyonce uses it. Subclasses answer for theirs; `driver_for` hands
    out the one instance of an engine.

    The class attributes are what the database is and can do; they are read from the
    class when no engine is at hand (a column type, a URL). An instance belongs to one
    engine and keeps what running on it needs (SQLite's queue and worker thread, pooled
    connections kept between calls).
    """

    #: The name used in notifyonce's messages and docs.
    label: ClassVar[str]
    #: SQLAlchemy's names of the database (``URL.get_backend_name()``, ``Dialect.name``);
    #: the first is the one a URL is written with.
    backends: ClassVar[tuple[str, ...]]
    #: Other schemes a URL of this database may carry (``postgres://`` from libpq).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The DBAPI a sync engine uses when the URL names none or an async one.
    sync_dbapi: ClassVar[str]
    #: The DBAPI an async engine uses when the URL names none or a sync-only one.
    async_dbapi: ClassVar[str]
    #: DBAPIs that run only under an AsyncEngine, and only under a sync Engine.
    async_only: ClassVar[frozenset[str]] = frozenset()
    sync_only: ClassVar[frozenset[str]] = frozenset()
    #: The DBAPI modules notifyonce's extras install, and the extra of each.
    extras: ClassVar[dict[str, str]] = {}
    #: DBAPI modules SQLAlchemy may ask for that no extra installs, and the URL scheme of
    #: the one the extra does install.
    other_dbapis: ClassVar[dict[str, tuple[str, str]]] = {}

    #: SQL that reads the server's clock as a datetime; None: no server (the host's clock).
    clock_query: ClassVar[str | None] = None
    #: SELECT ... FOR UPDATE locks rows (SQLite locks the whole database instead).
    row_locks: ClassVar[bool] = True
    #: Concurrent readers of locked rows can skip them (FOR UPDATE SKIP LOCKED).
    skip_locked: ClassVar[bool] = False
    #: One statement in a transaction of its own is cheaper in autocommit (no BEGIN, COMMIT).
    autocommit_statements: ClassVar[bool] = False
    #: An OperationalError means the database is unreachable (SQLite's: "locked", busy).
    operational_error_is_unavailable: ClassVar[bool] = True
    #: One writer at a time: a process queues its writers in front of the database's lock.
    one_writer: ClassVar[bool] = False
    #: An upsert can return the rows it wrote (``RETURNING``).
    upsert_returning: ClassVar[bool] = False
    #: Indexes can hold only the rows a WHERE selects.
    partial_indexes: ClassVar[bool] = False
    #: Key text is stored as bytes compared byte for byte (VARBINARY), not as a string.
    binary_keys: ClassVar[bool] = False
    #: Timestamps keep their zone (timestamptz); elsewhere naive UTC is stored.
    aware_timestamps: ClassVar[bool] = False
    #: A read left open does not hold the writers of the database back.
    streams_reads: ClassVar[bool] = True
    #: The option that bounds a wait for another session's lock: "lock_timeout" where the
    #: database waits for rows, "busy_timeout" where it waits for the whole file.
    lock_wait_option: ClassVar[str] = "lock_timeout"

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.engine.url.render_as_string(hide_password=True)})"

    # -- names and URLs ------------------------------------------------------------------

    @classmethod
    def sync_url(cls, url: URL) -> URL:
        """``url`` with a DBAPI a sync engine can use (the default one unless it names one)."""
        return cls._url_with(url, cls.sync_dbapi, cls.async_only)

    @classmethod
    def async_url(cls, url: URL) -> URL:
        """``url`` with a DBAPI an async engine can use (the default one unless it names one)."""
        return cls._url_with(url, cls.async_dbapi, cls.sync_only)

    @classmethod
    def absent_file(cls, url: URL) -> str | None:
        """The file ``url`` names when the database is a file that does not exist (which
        connecting would create, empty); None for a server's database or a file there."""
        return None

    @classmethod
    def _url_with(cls, url: URL, default: str, unfit: frozenset[str]) -> URL:
        backend, _, dbapi = url.drivername.partition("+")
        if dbapi and dbapi not in unfit and backend not in cls.aliases:
            return url
        scheme = cls.backends[0] if backend in cls.aliases else backend
        return url.set(drivername=f"{scheme}+{default}" if default else scheme)

    # -- SQL written differently on each database ---------------------------------------

    @staticmethod
    def insert(table: sa.Table) -> Any:
        """An INSERT that can take this database's upsert clause."""
        raise NotImplementedError

    @staticmethod
    def epoch_now() -> sa.ColumnElement[Any]:
        """The database's wall clock in seconds since the epoch, as precise as it has it."""
        raise NotImplementedError

    @staticmethod
    def minute_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
        """A UTC timestamp column as the text of its minute, ``'YYYY-MM-DD HH:MM'``."""
        raise NotImplementedError

    @staticmethod
    def rows_by_key(
        table: sa.Table, key: sa.Column[Any], columns: Sequence[sa.Column[Any]], values: str
    ) -> sa.Select[Any]:
        """A SELECT of ``key`` and ``columns`` from the rows whose ``key`` (the first column
        of the primary key) is one of the bound list ``values``, searched through the
        primary key whatever the planner knows of the table (a young table, never
        analyzed, looked cheaper to read whole). Here ``key IN (...)``: SQLite and MariaDB
        search an IN on a key's first column through the key, with or without statistics
        (tests/test_audience.py explains it on a young table)."""
        return sa.select(key, *columns).where(key.in_(sa.bindparam(values, expanding=True)))

    @staticmethod
    def timestamp_type() -> sa.types.TypeEngine[Any]:
        """The column type of a UTC timestamp with sub-second precision."""
        return sa.DateTime()

    @staticmethod
    def key_type(length: int) -> sa.types.TypeEngine[Any]:
        """The column type of a key part of ``length`` characters compared exactly."""
        return sa.String(length)

    @classmethod
    def index_where(cls) -> str:
        """The keyword of an ``Index`` whose WHERE makes it partial on this database."""
        return f"{cls.backends[0]}_where"

    # -- errors ------------------------------------------------------------------------

    def is_retryable(self, orig: object) -> bool:
        """A deadlock or lock timeout whose transaction the server rolled back."""
        return False

    def lock_wait_ended(self, orig: object) -> bool:
        """Whether a DBAPI error says a wait for a lock ran out of its timeout."""
        return False

    # -- transactions --------------------------------------------------------------------

    def begin_write(self, execute: Callable[[str], object], info: dict[Any, Any], ms: int) -> None:
        """Start a writing transaction with ``execute`` (plain SQL on the connection whose
        ``info`` is given); a lock wait bounded by ``ms`` where the database asks here.
        (Default: nothing; the transaction begins with the first statement.)"""

    @contextlib.contextmanager
    def lock_waits_bounded(self, conn: sa.Connection, seconds: float | None) -> Iterator[None]:
        """Waits for other sessions' locks bounded by ``seconds`` inside the block, for
        one transaction on ``conn``; the connection's own setting back afterwards."""
        yield

    def link(self, pooled: Any, autocommit: bool) -> DriverLink:
        """Compiled statements' way to a pooled connection the caller checked out."""
        return DriverLink(pooled, self.engine.dialect)

    @property
    def direct_statements(self) -> bool:
        """Whether a statement in autocommit may be awaited on the driver's own connection
        from async code, outside SQLAlchemy's greenlet bridge (as `link` runs it inside)."""
        return False

    @property
    def autocommit_connections(self) -> bool:
        """Whether a SQLAlchemy ``Connection`` may run a statement alone in autocommit, as
        `autocommit_statements` prefers (not through a pooler that would split its
        round trips between two server connections)."""
        return self.autocommit_statements

    def switches_to_autocommit(self) -> bool:
        """Whether a statement in autocommit needs its connection switched to it first."""
        return True

    # -- running work --------------------------------------------------------------------

    async def run(self, work: Work[T]) -> T:
        """Run sync ``work`` from async code: all of it in one greenlet on the engine's sync
        facade (the async driver's I/O is awaited inside; no hop per operation)."""
        return await greenlet_spawn(work, self.engine)

    def run_sync(self, work: Work[T]) -> T:
        """Run ``work`` from sync code."""
        return work(self.engine)

    # -- connections kept between calls ------------------------------------------------

    @property
    def keeps_connections(self) -> bool:
        """Whether a connection goes back to the pool without awaiting anything, so that a
        call may hand its connection to the next call of the same moment (the ledger's
        Spare) or keep it for a run (its Held)."""
        return False

    def watch(self, keeper: Any) -> None:
        """Take ``keeper`` (one that keeps connections between calls) into account: what it
        keeps when the engine is disposed is closed then."""
