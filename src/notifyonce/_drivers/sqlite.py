"""SQLite: aiosqlite (async), the standard library's sqlite3 (sync)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL
from sqlalchemy.util import greenlet_spawn

from notifyonce._drivers.base import Driver, Work
from notifyonce._drivers.execute import is_observed

__all__ = ["BUSY_TIMEOUT_INFO", "SQLiteDriver"]

T = TypeVar("T")
_BUSY = 5  # SQLITE_BUSY
#: The key under which a SQLite connection's ``info`` remembers the busy timeout last set
#: on it (``PRAGMA busy_timeout``): the ledger and the SQL rate store each want their own
#: on a connection they share, and set it when the value noted here is not theirs.
BUSY_TIMEOUT_INFO = "notifyonce_busy_timeout_ms"


def set_busy_timeout(execute: Callable[[str], object], info: dict[Any, Any], ms: int) -> None:
    """``PRAGMA busy_timeout = ms`` on a connection, unless its ``info`` notes it has it."""
    if info.get(BUSY_TIMEOUT_INFO) != ms:
        execute(f"PRAGMA busy_timeout = {ms}")
        info[BUSY_TIMEOUT_INFO] = ms


class SQLiteDriver(Driver):
    """SQLite: a library in the process, one writer at a time per file.

    Writers of one process queue here, in front of the file's lock: connections that race
    for it spin in SQLite's busy handler, which sleeps in steps of up to 100 ms (16 racing
    connections made a few hundred claims a second). The busy handler is left for other
    processes. The queue is one per event loop (and one for threads, for sync engines).

    From async code, work on a database file runs in one worker thread on the standard
    sqlite3 driver, on an engine of the driver's own over the same file: aiosqlite makes
    each operation of a call (checkout, BEGIN, the statement, fetch, COMMIT, checkin) a hop
    to its thread and back, about a dozen per claim, and the write lock would be held
    across those hops and the event loop's turns. That engine keeps one or two connections
    open (so a database in WAL mode is not checkpointed by a last connection closing after
    every call) and closes them when the caller's engine is disposed. A private database
    (in memory) has only the caller's connection, and its work runs there; so does the
    work of an engine someone watches (``echo``, a cursor-execute listener), so that its
    log and its listeners see the ledger's statements.
    """

    label = "SQLite"
    backends = ("sqlite",)
    sync_dbapi = ""  # the bare scheme: the standard library's sqlite3
    async_dbapi = "aiosqlite"
    async_only = frozenset({"aiosqlite"})
    sync_only = frozenset({"pysqlite"})
    extras: ClassVar[dict[str, str]] = {"aiosqlite": "sqlite"}

    row_locks = False
    # An OperationalError is also "database is locked": the database is there, it is busy.
    operational_error_is_unavailable = False
    one_writer = True
    upsert_returning = True
    partial_indexes = True
    # An open read keeps writers of the file from committing ("database is locked").
    streams_reads = False
    lock_wait_option = "busy_timeout"

    @classmethod
    def absent_file(cls, url: URL) -> str | None:
        """The database file when it does not exist (connecting would create it empty);
        None for an in-memory database, a SQLite URI (its options say whether it may be
        created) or a file that exists."""
        path = url.database
        if not path or path == ":memory:" or path.startswith("file:") or url.query.get("uri"):
            return None
        return None if os.path.exists(path) else path

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._thread_queue = threading.Lock()
        self._file_engine: sa.Engine | None = None
        database = engine.url.database
        self.private = not database or database == ":memory:" or database.startswith("file:")
        self.private = self.private or "mode=memory" in str(engine.url)

    @staticmethod
    def insert(table: sa.Table) -> Any:
        return sqlite.insert(table)

    @staticmethod
    def epoch_now() -> sa.ColumnElement[Any]:
        return sa.literal_column("(julianday('now') - 2440587.5) * 86400.0")

    @staticmethod
    def minute_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
        return sa.func.substr(column, 1, 16)  # stored as 'YYYY-MM-DD HH:MM:SS.ffffff'

    def lock_wait_ended(self, orig: object) -> bool:
        code = getattr(orig, "sqlite_errorcode", None)  # Python 3.11+
        return code == _BUSY or (code is None and "database is locked" in str(orig))

    def begin_write(self, execute: Callable[[str], object], info: dict[Any, Any], ms: int) -> None:
        # BEGIN IMMEDIATE takes the write lock up front. A deferred BEGIN would start as a
        # reader and fail with "database is locked" when it upgrades while another
        # connection writes; the busy timeout makes writers of other processes queue
        # instead of failing. It is set once per connection, not on every call.
        set_busy_timeout(execute, info, ms)
        execute("BEGIN IMMEDIATE")

    @contextlib.contextmanager
    def lock_waits_bounded(self, conn: sa.Connection, seconds: float | None) -> Iterator[None]:
        if seconds is not None:
            ms = math.ceil(seconds * 1000)
            set_busy_timeout(conn.exec_driver_sql, conn.connection.info, ms)
        yield

    async def run(self, work: Work[T]) -> T:
        async with self._queue():
            # On the caller's connections: see the class's docstring.
            if self.private or is_observed(self.engine):
                return await greenlet_spawn(work, self.engine)
            return await asyncio.to_thread(work, self._over_file())

    def run_sync(self, work: Work[T]) -> T:
        with self._thread_queue:
            return work(self.engine)

    def _queue(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = asyncio.Lock()
        return queue

    def _over_file(self) -> sa.Engine:
        """The driver's own sync engine on the caller's database file."""
        if self._file_engine is None:
            url = self.engine.url.set(drivername="sqlite")
            # One connection at a time per event loop comes through the queue.
            own = sa.create_engine(url, pool_size=1, max_overflow=4)
            sa.event.listen(self.engine, "engine_disposed", lambda _: own.dispose())
            # An unclosed sqlite3 connection is a ResourceWarning on Python 3.13: close them
            # when the driver goes, if the caller never disposes the engine.
            weakref.finalize(self, own.pool.dispose)
            self._file_engine = own
        return self._file_engine
