"""SQLFileIdStore: the file_id of every uploaded file, in the ledger's own database.

One row per (bot, kind, content): written once after the first upload of a file, read by
every later run, so a broadcast resumed after a crash sends by file_id instead of
uploading again. Plain inserts and primary-key reads: no locks, nothing on the send path
but one read per file and run. Each runs as the engine's driver runs work (on a SQLite file,
in the queue the ledger's calls on that engine wait in).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._drivers import driver_for
from notifyonce._ledger.table import UtcDateTime
from notifyonce._senders.tables import beside_ledger, check_store_args, primary_key_name

__all__ = [
    "DEFAULT_FILE_TABLE_NAME",
    "SQLFileIdStore",
    "build_file_table",
    "default_file_table",
    "file_pk_name",
]

T = TypeVar("T")
DEFAULT_FILE_TABLE_NAME = "notifyonce_file_ids"
_MAX_KEY = 191  # utf8mb4 primary keys on MySQL stay within 767 bytes


def default_file_table(ledger_table: str) -> str:
    """The file-id table the migration creates beside a ledger table."""
    return beside_ledger(ledger_table, default=DEFAULT_FILE_TABLE_NAME, suffix="_file_ids")


file_pk_name = primary_key_name


def build_file_table(metadata: sa.MetaData, name: str, schema: str | None = None) -> sa.Table:
    """The file-id table: one row per uploaded file (``<bot>:<kind>:<sha256>``)."""
    return sa.Table(
        name,
        metadata,
        sa.Column("file_key", sa.String(_MAX_KEY), nullable=False),
        sa.Column("file_id", sa.Text(), nullable=False),
        sa.Column("stored_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("file_key", name=file_pk_name(name)),
        schema=schema,
    )


class SQLFileIdStore:
    """File ids kept in your database, so a re-run (or another worker) need not upload.

    Works on PostgreSQL, MySQL/MariaDB and SQLite. The table is created by
    `create_schema` or by the shipped Alembic migration (``notifyonce.migrations``,
    revision ``notifyonce_0003``).

    Args:
        engine: An ``AsyncEngine``; the ledger's engine is fine.
        table_name: The table's name: ``notifyonce_file_ids`` beside the default ledger
            table, ``<ledger table>_file_ids`` as the migration names it beside another.
        schema: Its schema.

    Examples:
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> store = SQLFileIdStore(create_async_engine("sqlite+aiosqlite:///bot.sqlite3"))
        >>> store.table.name
        'notifyonce_file_ids'
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_name: str = DEFAULT_FILE_TABLE_NAME,
        schema: str | None = None,
    ) -> None:
        check_store_args(engine, table_name)
        self._driver = driver_for(engine)
        self.engine = engine
        self.metadata = sa.MetaData()
        self.table = build_file_table(self.metadata, table_name, schema)

    def __repr__(self) -> str:
        return f"SQLFileIdStore(table_name={self.table.name!r})"

    async def create_schema(self) -> None:
        """Create the table if it does not exist (production: the Alembic migration)."""
        await self._transaction(self.metadata.create_all)

    async def get(self, key: str) -> str | None:
        """The file_id stored under ``key``, or None."""
        t = self.table
        query = sa.select(t.c.file_id).where(t.c.file_key == key)
        found: str | None = await self._transaction(
            lambda conn: conn.execute(query).scalar_one_or_none()
        )
        return found

    async def put(self, key: str, file_id: str) -> None:
        """Store ``file_id`` under ``key``; a key another worker stored first keeps its id."""
        row = {"file_key": key, "file_id": file_id, "stored_at": dt.datetime.now(dt.timezone.utc)}
        # Both ids name the same content: the first one stays.
        with contextlib.suppress(IntegrityError):
            await self._transaction(lambda conn: conn.execute(sa.insert(self.table).values(row)))

    async def forget(self, key: str) -> None:
        """Drop ``key`` (Telegram refused its file_id)."""
        statement = sa.delete(self.table).where(self.table.c.file_key == key)
        await self._transaction(lambda conn: conn.execute(statement))

    async def _transaction(self, work: Callable[[Connection], T]) -> T:
        def run(engine: sa.Engine) -> T:
            with engine.begin() as conn:
                return work(conn)

        return await self._driver.run(run)
