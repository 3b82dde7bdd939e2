"""SQLRateStore: the limiter's state in a table of the database the ledger already uses.

A turn is one short transaction. Its first statement is an upsert that creates the rows it
needs (the bot, the lane, the chat) and locks them in one fixed order; on PostgreSQL and
SQLite the same statement returns them with the database's clock. The turn rule then runs
on the locked rows and one more upsert writes the new times. Every turn of a bot locks that
bot's row first, so two workers can never both take the same start: there is no window
between the read and the write in which another turn could see the old values.

Times are the database's clock, in seconds since the epoch, so workers on hosts whose
clocks disagree still take turns from one timeline.

A turn waits for another session's lock on those rows at most ``lock_timeout``: each
database is told so for the turn alone, as its driver does it (PostgreSQL ``SET LOCAL
lock_timeout``, MySQL's ``innodb_lock_wait_timeout`` for the session, set back after the
turn), and a wait that ends there fails closed, as `RateStoreUnavailableError`. Without
it a session that holds the bot's row (a stuck transaction, a console left open) would
hold every send of the bot, on PostgreSQL for ever. On SQLite, whose one write lock every
writer of the file takes, the bound is the connection's busy timeout (``busy_timeout``, as
long as the ledger's).

A transaction runs as the engine's driver runs work, all of it in one piece of sync code:
on a SQLite file that is the driver's worker thread, in the same queue as the ledger's
calls on that engine (see ``notifyonce._drivers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._drivers import driver_for
from notifyonce._senders.http import check_seconds
from notifyonce._senders.rate.stores import (
    PAID_LANE,
    RateStoreUnavailableError,
    ScopeState,
    Turn,
    TurnRequest,
    check_extra_jitter,
    check_patience,
    decide_flood,
    turn_from,
)
from notifyonce._senders.tables import beside_ledger, check_store_args, primary_key_name

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_RATE_TABLE_NAME",
    "SQLRateStore",
    "build_rate_table",
    "default_rate_table",
    "rate_pk_name",
]

DEFAULT_RATE_TABLE_NAME = "notifyonce_rate_limits"
#: Seconds a turn waits for rows another session holds locked before it fails closed
#: (PostgreSQL, MySQL).
DEFAULT_LOCK_TIMEOUT = 2.0
# The same on SQLite, whose one write lock every writer of the file takes, the ledger's
# claims and marks too: waiting for it is ordinary queueing there, bounded as the ledger's
# own busy timeout is.
_DEFAULT_BUSY_TIMEOUT = 30.0
_MAX_SCOPE = 191  # utf8mb4 primary keys on MySQL stay within 767 bytes
# Two stored times this close are the same time written back (a database's float round
# trip); any other turn moves a time on by a whole interval.
_SAME_TIME = 1e-6

T = TypeVar("T")


def default_rate_table(ledger_table: str) -> str:
    """The rate table the migration creates beside a ledger table."""
    return beside_ledger(ledger_table, default=DEFAULT_RATE_TABLE_NAME, suffix="_rate_limits")


rate_pk_name = primary_key_name


def build_rate_table(metadata: sa.MetaData, name: str, schema: str | None = None) -> sa.Table:
    """The rate table: one row per scope (a bot, its paid lane, a chat)."""
    return sa.Table(
        name,
        metadata,
        sa.Column("scope", sa.String(_MAX_SCOPE), nullable=False),
        sa.Column("tat", sa.Double(), nullable=False),
        sa.Column("flood_until", sa.Double(), nullable=False),
        sa.Column("flood_chat", sa.String(64), nullable=True),
        sa.Column("chat_flood_until", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name=rate_pk_name(name)),
        schema=schema,
    )


@dataclass(frozen=True, slots=True)
class _Booked:
    """A booked turn as the store wrote it: what `SQLRateStore.give_back` compares."""

    lane: str
    chat: str
    at: float
    lane_tat: float | None  # the lane's next start as this turn left it (None: not moved)
    chat_tat: float | None


class SQLRateStore:
    """Rate-limit state shared by every worker through your database.

    Works on PostgreSQL, MySQL/MariaDB and SQLite (one host). The table is created by
    `create_schema` or by the shipped Alembic migration (``notifyonce.migrations``).

    Args:
        engine: An ``AsyncEngine``; the ledger's engine is fine.
        table_name: The rate table's name.
        schema: Its schema.
        extra_jitter: Seconds added to the rate limit's ``jitter_allowance`` when pacing
            through this store. Workers in separate processes, each with its own round
            trips to the store and to Telegram, start their sends less precisely than one
            process does; 0.03 kept 429 answers well under 1 % in the four-worker test.
        lock_timeout: PostgreSQL and MySQL: seconds a turn waits for rate rows that another
            session holds locked (a transaction left open on the bot's row) before the
            send fails closed with
            [`RateStoreUnavailableError`][notifyonce.ratelimit.RateStoreUnavailableError]
            (nothing is sent; a Notifier's run stops and raises it). A turn holds its
            rows for a few milliseconds, so the default
            ([`DEFAULT_LOCK_TIMEOUT`][notifyonce.ratelimit.DEFAULT_LOCK_TIMEOUT], 2 s) is only
            reached when something is wrong. MySQL counts it in whole seconds (rounded up).
            None: wait as long as the database does (on PostgreSQL, for ever).
        busy_timeout: SQLite: the same bound, 30 s by default like the ledger's
            ``busy_timeout``: every writer of the file (the ledger's claims and marks
            too) takes the one lock a turn waits for, so there waiting is ordinary
            queueing, and a session holding the lock holds the ledger as well.
        outage_patience: Seconds a sender waits for the database when it cannot be
            reached after it had answered (a restart, a failover), asking again every
            half second; its sends pause meanwhile. Past it a turn fails closed
            (``RateStoreUnavailableError``). 0: at once. A lock wait that ends at
            ``lock_timeout`` is not an outage: it fails closed at once, as before.

    Examples:
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> store = SQLRateStore(create_async_engine("sqlite+aiosqlite:///bot.sqlite3"))
        >>> store.table.name
        'notifyonce_rate_limits'
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_name: str = DEFAULT_RATE_TABLE_NAME,
        schema: str | None = None,
        extra_jitter: float = 0.03,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
        busy_timeout: float = _DEFAULT_BUSY_TIMEOUT,
        outage_patience: float = 30.0,
    ) -> None:
        check_store_args(engine, table_name)
        self._driver = driver = driver_for(engine)
        self.extra_jitter = check_extra_jitter(extra_jitter)
        self.outage_patience = check_patience(outage_patience)
        self.lock_timeout = (
            None if lock_timeout is None else check_seconds("lock_timeout", lock_timeout)
        )
        self.busy_timeout = check_seconds("busy_timeout", busy_timeout)
        # The bound of this database's lock waits, as (the option's name, seconds).
        option = driver.lock_wait_option
        self._wait = (option, self.busy_timeout if option == "busy_timeout" else self.lock_timeout)
        self.engine = engine
        self.metadata = sa.MetaData()
        self.table = build_rate_table(self.metadata, table_name, schema)
        self._insert = driver.insert
        self._now = driver.epoch_now()
        self._returning = driver.upsert_returning

    def __repr__(self) -> str:
        return f"SQLRateStore(table_name={self.table.name!r})"

    async def create_schema(self) -> None:
        """Create the rate table if it does not exist (production: the Alembic migration)."""
        await self._driver.run(_in_transaction(self.metadata.create_all))

    async def purge(self, *, idle: float = 3600.0) -> int:
        """Delete rows of scopes idle for ``idle`` seconds; returns how many were deleted.

        Chats seen once leave a row behind; run this now and then (a daily job is plenty).
        """
        t = self.table
        cutoff = self._now - idle
        statement = sa.delete(t).where(
            t.c.tat < cutoff, t.c.flood_until < cutoff, t.c.chat_flood_until < cutoff
        )
        result = await self._driver.run(_in_transaction(lambda conn: conn.execute(statement)))
        return int(result.rowcount or 0)

    # -- the store protocol -------------------------------------------------------------

    async def take_turn(self, request: TurnRequest) -> Turn:
        """Book the earliest start for the request's send, or say how long to wait."""
        return await self._transaction(partial(self._take, request))

    async def flood_wait(self, bot: str, chat: str, retry_after: float) -> None:
        """Record a 429: delay ``chat``, or the whole bot when another chat is waiting."""
        await self._transaction(partial(self._flood, bot, chat, retry_after))

    async def give_back(self, turn: Turn) -> None:
        """Give back a booked turn no send used: the lane's and the chat's next starts go
        back to its start, each only if no later turn has moved it on (compare-and-set)."""
        if isinstance(turn.handle, _Booked):
            await self._transaction(partial(self._back, turn.handle))

    # -- the transactions, on a sync connection -------------------------------------------

    def _take(self, request: TurnRequest, conn: Connection) -> Turn:
        bot = f"b:{request.bot}"
        lane = f"p:{request.bot}" if request.lane == PAID_LANE else bot
        chat = f"c:{request.bot}:{request.chat}"
        now, rows = self._lock(conn, [bot, lane, chat])
        turn = turn_from(now, rows[bot], rows[lane], rows[chat], request)
        if turn.booked:
            self._write(conn, {lane: rows[lane], chat: rows[chat]})
        conn.commit()
        if turn.at is None:
            return turn
        booked = _Booked(
            lane,
            chat,
            turn.at,
            rows[lane].tat if request.lane_interval > 0 else None,
            rows[chat].tat if request.chat_interval > 0 else None,
        )
        return dataclasses.replace(turn, handle=booked)

    def _flood(self, bot: str, chat: str, retry_after: float, conn: Connection) -> None:
        bot_scope, chat_scope = f"b:{bot}", f"c:{bot}:{chat}"
        now, rows = self._lock(conn, [bot_scope, chat_scope])
        decide_flood(now, rows[bot_scope], chat, rows[chat_scope], retry_after)
        self._write(conn, rows)
        conn.commit()

    def _back(self, booked: _Booked, conn: Connection) -> None:
        _, rows = self._lock(conn, [booked.lane, booked.chat])
        back: dict[str, ScopeState] = {}
        for scope, left in ((booked.lane, booked.lane_tat), (booked.chat, booked.chat_tat)):
            row = rows[scope]
            if left is not None and abs(row.tat - left) < _SAME_TIME:
                row.tat = booked.at
                back[scope] = row
        if back:
            self._write(conn, back)
        conn.commit()

    # -- running them ---------------------------------------------------------------------

    async def _transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` (one transaction) with its lock waits bounded by ``lock_timeout``;
        a wait that ends there is a RateStoreUnavailableError naming this store and the
        wait."""
        try:
            return await self._driver.run(partial(self._bounded, work))
        except sa.exc.DBAPIError as exc:
            option, seconds = self._wait
            if seconds is None or not self._driver.lock_wait_ended(exc.orig):
                raise
            raise RateStoreUnavailableError(
                f"rate store unavailable: {self!r} waited {option} ({seconds:g} s) for "
                "rows another session holds locked; nothing was sent"
            ) from exc

    def _bounded(self, work: Callable[[Connection], T], engine: sa.Engine) -> T:
        with engine.connect() as conn, self._driver.lock_waits_bounded(conn, self._wait[1]):
            return work(conn)

    def _lock(self, conn: Connection, scopes: Sequence[str]) -> tuple[float, dict[str, ScopeState]]:
        """Create the rows if missing, lock them (sorted: no deadlocks), read them."""
        t = self.table
        ordered = sorted(set(scopes))
        blank = [
            {"scope": s, "tat": 0.0, "flood_until": 0.0, "chat_flood_until": 0.0} for s in ordered
        ]
        insert = self._insert(t).values(blank)
        columns = (t.c.scope, t.c.tat, t.c.flood_until, t.c.flood_chat, t.c.chat_flood_until)
        if self._returning:
            statement = insert.on_conflict_do_update(
                index_elements=[t.c.scope], set_={"tat": t.c.tat}
            ).returning(*columns, self._now)
            result = conn.execute(statement).all()
        else:
            conn.execute(insert.on_duplicate_key_update(tat=t.c.tat))
            query = sa.select(*columns, self._now).where(t.c.scope.in_(ordered))
            result = conn.execute(query).all()
        rows = {
            row[0]: ScopeState(float(row[1]), float(row[2]), row[3], float(row[4]))
            for row in result
        }
        return float(result[0][5]), rows

    def _write(self, conn: Connection, rows: dict[str, ScopeState]) -> None:
        t = self.table
        values = [
            {
                "scope": scope,
                "tat": state.tat,
                "flood_until": state.flood_until,
                "flood_chat": state.flood_chat,
                "chat_flood_until": state.chat_flood_until,
            }
            for scope, state in sorted(rows.items())
        ]
        insert = self._insert(t).values(values)
        names = ("tat", "flood_until", "flood_chat", "chat_flood_until")
        if self._returning:
            statement = insert.on_conflict_do_update(
                index_elements=[t.c.scope], set_={n: insert.excluded[n] for n in names}
            )
        else:
            statement = insert.on_duplicate_key_update({n: insert.inserted[n] for n in names})
        conn.execute(statement)


def _in_transaction(work: Callable[[Connection], T]) -> Callable[[sa.Engine], T]:
    """``work`` in a transaction of its own on a connection of the engine it is given."""

    def run(engine: sa.Engine) -> T:
        with engine.begin() as conn:
            return work(conn)

    return run
