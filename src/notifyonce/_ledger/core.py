"""The ledger's one implementation: its statements, transactions and result reading.

Everything here is plain sync code over a SQLAlchemy ``Connection``. ``Ledger`` calls it
directly; ``AsyncLedger`` calls it through ``AsyncConnection.run_sync``, which runs the
same code on the async driver (SQLAlchemy's greenlet bridge), so there is exactly one
copy of the SQL and of the transaction rules. What differs between databases is asked of
the engine's driver (``notifyonce._drivers``: the database, its transactions and errors)
and of the ledger's `Dialect` (``dialects.py``: its statements), one class each per
database.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import logging
import math
import operator
import secrets
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.engine import Dialect as SADialect

from notifyonce._drivers import Driver
from notifyonce._drivers.errors import DATABASE_ERRORS, is_retryable, translate
from notifyonce._drivers.execute import (
    AsyncpgLink,
    Compiled,
    ConnectionLink,
    Link,
    is_observed,
    wrap_dbapi_error,
)
from notifyonce._errors import LedgerError, LedgerUnavailableError, ValidationError
from notifyonce._keys import SlotKey
from notifyonce._ledger.checks import (
    ClaimOptions,
    check_bool,
    check_lease,
    check_positive_int,
    check_synchronous_commit,
)
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.dialects import Dialect, MarkRow, dialect_for, mark_params
from notifyonce._ledger.records import CAPPED_NOTE, LedgerStats, SlotRecord, SweepResult
from notifyonce._ledger.side_tables import (
    build_cap_table,
    build_digest_table,
    default_cap_table,
    default_digest_table,
)
from notifyonce._ledger.table import (
    SlotStatus,
    build_table,
)
from notifyonce._outcome import DeliveryMode

__all__ = [
    "DATABASE_ERRORS",
    "MARK_CHUNK",
    "Chain",
    "Held",
    "Keeper",
    "LedgerCore",
    "Mark",
    "Plan",
    "Shape",
    "Spare",
    "Statement",
    "fresh_token",
]

logger = logging.getLogger("notifyonce.ledger")

T = TypeVar("T")
U = TypeVar("U")
Clock = Callable[[], dt.datetime]

_CLAIMED = SlotStatus.CLAIMED.value
# The error a claim undone after its answer was lost leaves on its rows.
_LOST_ANSWER = "released: the claim's answer was lost (nothing was sent)"
_SWEEP_NOTE = "lease expired before a result was recorded"
# Rows per mark statement: about 12 bind parameters a row, so 500 rows stay near 6,000.
MARK_CHUNK = 500

#: One outcome to record: (claim, status, detail, counted). ``counted`` False gives the
#: claim's attempt back: a release whose send certainly did not deliver (a 429, a refused
#: connection, a run stopped before the send) does not use up one of ``max_attempts``.
Mark = tuple[Claim, SlotStatus, "str | None", bool]
# Keys per look-up statement (two parameters each).
_LOOKUP_CHUNK = 500
# How often the ledger reads the database server's clock again (monotonic seconds).
_CLOCK_RESYNC = 60.0
_TOKEN_MASK = (1 << 63) - 1  # fencing tokens fit a signed BIGINT


class Shape(enum.Enum):
    """The transaction a call needs, which its plan names.

    Attributes:
        READ: Reads only: no write lock is taken, and where the driver prefers it (to save
            BEGIN and COMMIT) it runs in autocommit.
        ALONE: Writes that each stand on their own (one statement, or compare-and-sets
            that need not land together): autocommit where the driver prefers it,
            otherwise one writing transaction.
        TOGETHER: Writes that must land together: one writing transaction (on SQLite
            ``BEGIN IMMEDIATE``, taking the file's write lock up front), run again from
            the start after a deadlock.
    """

    READ = "reads only"
    ALONE = "writes that each stand alone"
    TOGETHER = "writes that land together"


@dataclass(frozen=True, slots=True)
class Plan(Generic[T]):
    """One call's work and the transaction it needs.

    Attributes:
        body: What runs: on a `Link` (``on_link``: the send path's compiled statements),
            else on a SQLAlchemy ``Connection``.
        shape: The transaction it needs.
        on_link: ``body`` takes a `Link`.
        undo: What to run, on a connection of its own, when ``body`` fails in a way that
            may have left its writes committed (a claim whose answer was lost): a best
            effort, before the failure is raised.
        statement: ``body`` as one statement in autocommit, for the driver's own
            connection awaited directly (see `Statement`), or None.
    """

    body: Callable[[Any], T]
    shape: Shape
    on_link: bool = True
    undo: Plan[Any] | None = None
    statement: Callable[[SADialect], Statement[T] | None] | None = None

    @property
    def writes(self) -> bool:
        """It writes: a writing transaction begins (SQLite: BEGIN IMMEDIATE)."""
        return self.shape is not Shape.READ

    @property
    def alone(self) -> bool:
        """It needs no transaction around it, so it may run in autocommit."""
        return self.shape is not Shape.TOGETHER


@dataclass(frozen=True, slots=True)
class Statement(Generic[T]):
    """A plan's body as one statement that stands alone: its compiled SQL, the values of
    one execution, and what makes the plan's result of the rows it returns.

    ``AsyncLedger`` awaits it on asyncpg's own connection, outside SQLAlchemy's greenlet
    bridge, when the call already has a connection at hand (kept from the previous call):
    the statement, its values and its result are those of ``body``, and a failure is
    handled by the same code as ``body``'s (`LedgerCore.direct_failed`).
    """

    compiled: Compiled
    params: dict[str, Any]
    finish: Callable[[Sequence[Any]], T]

    def then(self, after: Callable[[T], U]) -> Statement[U]:
        """The same statement, its result passed through ``after``."""
        finish = self.finish
        return Statement(self.compiled, self.params, lambda rows: after(finish(rows)))


@dataclass(frozen=True, slots=True)
class Chain(Generic[T]):
    """Plans run one after the other, each in its own transaction (``claim_many``'s
    chunks), their results joined by ``join``. When one fails, the plan ``compensate``
    makes of the results so far is run, as a best effort, before the failure is raised.
    """

    steps: Sequence[Plan[Any]]
    join: Callable[[list[Any]], T]
    compensate: Callable[[list[Any]], Plan[Any] | None]


class Keeper(Protocol):
    """Keeps a pooled connection between calls: `take` the kept one, `give` one back."""

    def take(self) -> Any:
        """The kept connection, or None."""

    def give(self, pooled: Any) -> bool:
        """Keep ``pooled``; False if it is not kept (the caller returns it to the pool)."""


class Held:
    """A pooled connection one loop of a run keeps for the run's length (a claim lane, the
    recorder): their statements follow one another, and a checkout and a check-in per
    statement cost as much CPU as asyncpg's execution of it. `close` gives it back."""

    def __init__(self) -> None:
        self._pooled: Any = None

    def take(self) -> Any:
        """The kept connection, if there is one."""
        pooled, self._pooled = self._pooled, None
        return pooled

    def give(self, pooled: Any) -> bool:
        """Keep ``pooled``; False when one is kept already."""
        if self._pooled is not None:
            return False
        self._pooled = pooled
        return True

    def close(self) -> None:
        """Give the connection back to the pool (in a greenlet: closing may await)."""
        pooled = self.take()
        if pooled is not None:
            pooled.close()

    def drop(self) -> None:
        """Discard the connection, which was cut (in a greenlet: closing may await): given
        back, the pool would try to roll it back and log the failure."""
        pooled = self.take()
        if pooled is not None and pooled.dbapi_connection is not None:
            with contextlib.suppress(Exception):
                pooled.invalidate()


class Spare(Held):
    """One pooled connection kept from a call for the next one in the same moment.

    A caller that awaits claims one after the other starts each as the last one returns,
    before the event loop turns: the connection goes from one to the next instead of back
    to the pool and out again (a checkout and a check-in cost as much CPU as asyncpg's
    own execution of the claim). It returns to the pool as soon as the event loop turns,
    so a caller never holds more than it does while a call runs.

    Only where the driver's connection goes back to the pool without awaiting anything
    (``Driver.keeps_connections``): a connection the pool would close instead (it is
    full, or the connection broke) is closed in a task of its own, where closing may
    await. One kept when the engine is disposed is closed then (the driver watches it):
    the pool it would go back to is gone.
    """

    def __init__(self, driver: Driver) -> None:
        super().__init__()
        self._engine = driver.engine
        self._closing: set[asyncio.Task[Any]] = set()
        # The event loop on which a `_release` is due (one for every call of the turn).
        self._due: asyncio.AbstractEventLoop | None = None
        driver.watch(self)

    def give(self, pooled: Any) -> bool:
        """Keep ``pooled`` until the event loop turns; False when one is kept already."""
        if not super().give(pooled):
            return False
        loop = asyncio.get_running_loop()
        if self._due is not loop:  # else the release already due gives back this one
            self._due = loop
            loop.call_soon(self._release)
        return True

    def _release(self) -> None:
        self._due = None
        pooled, self._pooled = self._pooled, None
        if pooled is None:
            return  # the next call took it, and keeps or returns it itself
        pool = self._engine.pool
        if (
            pooled.is_valid
            and isinstance(pool, sa.pool.QueuePool)
            and pool.checkedin() < pool.size()
        ):
            pooled.close()  # back into the pool's queue: nothing to await
            return
        from sqlalchemy.util import greenlet_spawn

        task = asyncio.get_running_loop().create_task(greenlet_spawn(pooled.close))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def _commit(connection: Connection | Any) -> None:
    """COMMIT the ledger's own transaction (a seam for the tests of a lost COMMIT)."""
    connection.commit()


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# Index order inside one action. Any fixed order works against deadlocks as long as every
# batch uses the same one.
_sort_key = operator.attrgetter("cycle", "subject")


class LedgerCore:
    """Builds and runs the ledger's statements on a sync ``Connection``."""

    def __init__(
        self,
        driver: Driver,
        *,
        table_name: str,
        schema: str | None,
        lease: dt.timedelta,
        clock: Clock | None,
        busy_timeout: dt.timedelta,
        retries: int,
        synchronous_commit: str | None = None,
    ) -> None:
        if not isinstance(table_name, str) or not table_name:
            raise ValidationError("table_name", "must be a non-empty str")
        if schema is not None and (not isinstance(schema, str) or not schema):
            raise ValidationError("schema", "must be a non-empty str or None")
        self.table = build_table(sa.MetaData(), table_name, schema)
        self.driver = driver
        self.dialect: Dialect = dialect_for(driver, self.table)
        self.lease = check_lease(lease)
        # Without a clock of the caller's, time is the database server's: every worker then
        # measures leases on one clock, whatever its own host's clock says. SQLite has no
        # server; its workers share the host, and so its clock.
        self.server_clock = clock is None and driver.clock_query is not None
        self.local_clock: Clock = clock if clock is not None else _utc_now
        self._offset = dt.timedelta(0)  # server time minus local time
        self._offset_read_at = -math.inf
        self.busy_timeout_ms = int(
            check_lease(busy_timeout, "busy_timeout") / dt.timedelta(milliseconds=1)
        )
        self.retries = check_positive_int("retries", retries)
        level = check_synchronous_commit(synchronous_commit)
        if level is not None:
            self.dialect.wait_for_standby(level)
        # Asked to wait for a standby: the first claim says first whether one is there.
        self.durability_due = level is not None
        # A claim's options when it passes none (most calls): checked once, shared.
        self._default_options = ClaimOptions(self.lease, False, None)

    # ---- durability across a failover -------------------------------------------------

    def check_durability(self, link: Link) -> str:
        """Read whether a failover can lose a committed claim on this database; one line,
        logged (a warning when the ledger was asked to wait for a standby and cannot)."""
        can_lose, line = self.dialect.durability(link)
        asked = self.dialect.synchronous_commit is not None
        logger.log(logging.WARNING if can_lose and asked else logging.INFO, "ledger: %s", line)
        self.durability_due = False
        return line

    def _durability_first(self, link: Link) -> None:
        """The check of `check_durability` before the first claim of a ledger that asked
        for ``synchronous_commit`` (once: later claims pay nothing)."""
        if self.durability_due:
            self.check_durability(link)

    # ---- time, options -------------------------------------------------------------

    def now(self) -> dt.datetime:
        """The ledger's current time, aware, in UTC: the caller's clock if one was given,
        else the database server's (the local clock corrected by the last reading)."""
        if self.local_clock is _utc_now:  # the host's clock: aware, UTC, nothing to check
            return dt.datetime.now(dt.timezone.utc) + self._offset
        now = self.local_clock()
        if not isinstance(now, dt.datetime) or now.utcoffset() is None:
            raise ValidationError("clock", "must return an aware datetime")
        return now.astimezone(dt.timezone.utc) + self._offset

    @property
    def clock_offset(self) -> dt.timedelta:
        """How far the database server's clock is ahead of this host's (last reading)."""
        return self._offset

    @property
    def clock_due(self) -> bool:
        """The server's clock should be read again before the next statement."""
        return self.server_clock and time.monotonic() - self._offset_read_at >= _CLOCK_RESYNC

    def sync_clock(self, link: Link) -> None:
        """Read the server's clock when the last reading is older than a minute.

        The offset is taken against the midpoint of the round trip, so it is off by at
        most half of one round trip. On a connection of the ledger's own, call it before
        anything else and end the transaction it began (``rollback``).
        """
        query = self.driver.clock_query
        if query is None or not self.clock_due:  # no server clock, or a recent reading
            return
        before = self.local_clock().astimezone(dt.timezone.utc)
        server = link.scalar(query)
        after = self.local_clock().astimezone(dt.timezone.utc)
        if isinstance(server, str):
            server = dt.datetime.fromisoformat(server)
        if server.tzinfo is None:  # MySQL's UTC_TIMESTAMP is naive UTC
            server = server.replace(tzinfo=dt.timezone.utc)
        self._offset = server - (before + (after - before) / 2)
        self._offset_read_at = time.monotonic()

    def claim_options(
        self, lease: object, take_expired: object, max_attempts: object
    ) -> ClaimOptions:
        """Validate the options shared by ``claim_slot`` and ``claim_many``."""
        if lease is None and take_expired is False and max_attempts is None:
            return self._default_options
        return ClaimOptions(
            lease=self.lease if lease is None else check_lease(lease),
            take_expired=check_bool("take_expired", take_expired),
            max_attempts=None
            if max_attempts is None
            else check_positive_int("max_attempts", max_attempts),
        )

    # ---- transactions and errors ----------------------------------------------------

    def run_owned(self, engine: sa.Engine, plan: Plan[T], spare: Keeper | None = None) -> T:
        """Check a connection out of ``engine`` and run ``plan`` in the ledger's own
        transaction (committed before this returns; run again after a deadlock).

        A plan of send-path statements runs on the pooled connection's DBAPI cursor,
        unless someone watches the engine's statements (``echo``, cursor-execute events):
        then, like every other plan, on a SQLAlchemy ``Connection``.
        """
        if plan.on_link and not is_observed(engine):
            return self._run_on_driver(engine, plan, spare)
        try:
            conn = engine.connect()
        except DATABASE_ERRORS as exc:
            raise self.translate(exc) from exc
        with conn:
            if self.clock_due:
                try:
                    self.sync_clock(ConnectionLink(conn))
                    conn.rollback()  # end the read's transaction: the body sets its own mode
                except DATABASE_ERRORS as exc:
                    raise self.translate(exc) from exc
            return self.run(conn, plan, owned=True)

    def run(self, conn: Connection, plan: Plan[T], *, owned: bool) -> T:
        """Run ``plan`` on a SQLAlchemy ``Connection``, in a transaction of its own or inside
        the caller's.

        ``owned``: the ledger checked the connection out itself, so it begins, commits and
        (on a deadlock) retries. Otherwise the caller's transaction is used as it is and
        nothing is committed.

        A single statement in a transaction of its own runs in autocommit on PostgreSQL:
        the statement is its own transaction, and BEGIN and COMMIT cost no round trips.
        """
        body: Callable[[Connection], T] = (
            (lambda c: plan.body(ConnectionLink(c))) if plan.on_link else plan.body
        )
        if owned and plan.alone and self.driver.autocommit_connections:
            conn.execution_options(isolation_level="AUTOCOMMIT")
        if not owned:
            try:
                self.sync_clock(ConnectionLink(conn))
                return body(conn)
            except DATABASE_ERRORS as exc:
                raise self.translate(exc) from exc
        attempt = 1
        while True:
            try:
                if plan.writes:
                    info = conn.connection.info
                    self.driver.begin_write(conn.exec_driver_sql, info, self.busy_timeout_ms)
                result = body(conn)
                _commit(conn)
                return result
            except DATABASE_ERRORS as exc:
                with contextlib.suppress(sa.exc.SQLAlchemyError):
                    conn.rollback()  # if the connection is gone, the server rolled back
                if attempt < self.retries and self.is_retryable(exc):
                    attempt += 1
                    continue
                raise self.translate(exc) from exc

    def _run_on_driver(self, engine: sa.Engine, plan: Plan[T], spare: Keeper | None) -> T:
        """`run_owned` on the DBAPI connection of a pooled connection."""
        sa_dialect = engine.dialect
        try:
            pooled = (spare.take() if spare is not None else None) or engine.raw_connection()
        except DATABASE_ERRORS as exc:
            raise self.translate(exc) from exc
        except Exception as exc:
            wrapped = wrap_dbapi_error(exc, sa_dialect, None, None, None, None)
            if wrapped is exc:
                raise
            raise self.translate(wrapped) from exc
        dbapi_connection = pooled.dbapi_connection
        assert dbapi_connection is not None  # a connection just checked out
        driver = self.driver
        autocommit = plan.alone and driver.autocommit_statements
        switch = autocommit and driver.switches_to_autocommit()
        link = driver.link(pooled, autocommit)
        done = False
        cut = False  # the database is unreachable on this connection: drop, never reuse it
        try:
            if self.clock_due:
                try:
                    self.sync_clock(link)
                    pooled.rollback()
                except DATABASE_ERRORS as exc:
                    error = self.translate(exc)
                    cut = isinstance(error, LedgerUnavailableError)
                    raise error from exc
            if switch:
                sa_dialect.set_isolation_level(dbapi_connection, "AUTOCOMMIT")
            attempt = 1
            while True:
                try:
                    if plan.writes:
                        driver.begin_write(link.statement, pooled.info, self.busy_timeout_ms)
                    result = plan.body(link)
                    if not autocommit:
                        try:
                            _commit(pooled)
                        except Exception as exc:
                            raise link.wrap(exc, None) from exc
                    done = True
                    return result
                except DATABASE_ERRORS as exc:
                    if not autocommit:
                        with contextlib.suppress(Exception):
                            pooled.rollback()  # if the connection is gone, nothing to undo
                    if attempt < self.retries and self.is_retryable(exc):
                        attempt += 1
                        continue
                    error = self.translate(exc)
                    cut = isinstance(error, LedgerUnavailableError)
                    raise error from exc
        finally:
            with contextlib.suppress(Exception):
                link.close()
                if switch and pooled.is_valid and not cut:
                    sa_dialect.reset_isolation_level(dbapi_connection)
            if cut:
                # Given back, the pool would roll it back first and log that failure with
                # its traceback; discarded, it is closed without a word.
                with contextlib.suppress(Exception):
                    if pooled.dbapi_connection is not None:  # None: closed with its link
                        pooled.invalidate()
            elif not (done and spare is not None and pooled.is_valid and spare.give(pooled)):
                pooled.close()

    def direct_statement(self, engine: sa.Engine, plan: Plan[T]) -> Statement[T] | None:
        """``plan``'s `Statement` when it may be awaited on the driver's own connection
        instead of running in a greenlet: a statement alone, in autocommit, on a driver
        whose connection takes it directly (asyncpg), nobody watching the engine's
        statements, the server's clock read recently enough; else None."""
        if plan.statement is None or not plan.alone or not self.direct_ready(engine, claims=True):
            return None
        return plan.statement(engine.dialect)

    def direct_ready(self, engine: sa.Engine, *, claims: bool) -> bool:
        """Whether a statement alone may be awaited on the driver's own connection now: a
        driver whose connection takes it directly (asyncpg), nobody watching the engine's
        statements, the server's clock read recently enough and, before a claim
        (``claims``), the standby's check done (see `check_durability`). Otherwise the
        call runs the usual way, which does what is due first."""
        return (
            self.driver.direct_statements
            and not self.clock_due
            and not (claims and self.durability_due)
            and not is_observed(engine)
        )

    def direct_failed(self, pooled: Any, exc: BaseException, sql: str) -> bool:
        """What `_run_on_driver` does when its statement fails, for a `Statement` that
        failed on ``pooled``'s driver connection (run in a greenlet: giving the connection
        back may await). The connection goes back to the pool, or is discarded when the
        database is unreachable on it. True: a deadlock the server rolled back, so the
        plan may run again; otherwise the error is raised as `_run_on_driver` raises it."""
        cut = False
        try:
            try:
                AsyncpgLink(pooled, self.driver.engine.dialect).raise_adapted(exc, sql)
            except DATABASE_ERRORS as error:
                if self.is_retryable(error):
                    return True
                translated = self.translate(error)
                cut = isinstance(translated, LedgerUnavailableError)
                raise translated from error
        finally:
            if cut:
                with contextlib.suppress(Exception):
                    if pooled.dbapi_connection is not None:
                        pooled.invalidate()
            else:
                with contextlib.suppress(Exception):
                    pooled.close()

    def is_retryable(self, exc: BaseException) -> bool:
        """A deadlock or lock timeout whose transaction the server rolled back."""
        return is_retryable(self.driver, exc)

    def translate(self, exc: BaseException) -> LedgerError:
        """The notifyonce error for a driver or SQLAlchemy error (chain it with ``from``)."""
        return translate(self.driver, exc)

    # ---- schema ----------------------------------------------------------------------

    def create_schema(self, conn: Connection) -> None:
        """Create the table and its indexes unless they exist.

        An index added by a later release is created on a table an earlier one made, and
        one a later release made partial (``WHERE``) is made again so. The recipients
        table beside it (the audience the Notifier asks by default) is created too.
        """
        # Here, not at the top: the audience's package imports this module.
        from notifyonce._audience.table import build_recipient_table, default_recipient_table

        self.table.metadata.create_all(conn, checkfirst=True)
        t = self.table
        recipients = build_recipient_table(sa.MetaData(), default_recipient_table(t.name), t.schema)
        recipients.create(conn, checkfirst=True)
        # The digests' events and the frequency caps' seats (empty until used).
        side = sa.MetaData()
        build_digest_table(side, default_digest_table(t.name), t.schema)
        build_cap_table(side, default_cap_table(t.name), t.schema)
        side.create_all(conn, checkfirst=True)
        found = {i["name"]: i for i in sa.inspect(conn).get_indexes(t.name, schema=t.schema)}
        where = self.driver.index_where()
        for index in t.indexes:
            have = found.get(index.name)
            if have is None:
                index.create(conn)
            elif index.kwargs.get(where) is not None and have["dialect_options"].get(where) is None:
                index.drop(conn)
                index.create(conn)

    # ---- claims ----------------------------------------------------------------------

    @staticmethod
    def claim_batch(keys: Sequence[SlotKey]) -> tuple[list[SlotKey], list[int]]:
        """``keys`` in index order (so that concurrent batches cannot deadlock) and a fresh
        fencing token for each: made here, on the client, so that a claim whose answer is
        lost can still be undone by its tokens (`release_lost`)."""
        ordered = sorted(keys, key=_sort_key)
        return ordered, _fresh_tokens(len(ordered))

    def claim_keys(
        self,
        link: Link,
        action: str,
        keys: Sequence[SlotKey],
        options: ClaimOptions,
        tokens: Sequence[int],
    ) -> list[Claim]:
        """Claim ``keys`` (distinct, one action, in index order) in one statement, with one
        token each (`claim_batch`); return the won ones."""
        self._durability_first(link)
        params, limited = self._claim_params(action, options)
        won = self.dialect.claim(link, params, keys, tokens, options.take_expired, limited)
        return _won(keys, tokens, won, params["lease_until"])

    def claim_statement(
        self,
        sa_dialect: SADialect,
        action: str,
        keys: Sequence[SlotKey],
        options: ClaimOptions,
        tokens: Sequence[int],
    ) -> Statement[list[Claim]] | None:
        """`claim_keys` as one `Statement`, or None where a claim is not one."""
        params, limited = self._claim_params(action, options)
        compiled = self.dialect.claim_compiled(
            sa_dialect, params, keys, tokens, options.take_expired, limited
        )
        if compiled is None:
            return None
        until = params["lease_until"]
        return Statement(compiled, params, lambda won: _won(keys, tokens, won, until))

    def one_claim(
        self, sa_dialect: SADialect, key: SlotKey, token: int, options: ClaimOptions
    ) -> tuple[Compiled, dict[str, Any]] | None:
        """`claim_statement` of one key and its token, as the compiled statement and the
        values of its execution (the same statement, from the same cache, and the same
        values), without the `Statement` and the result function around them; None
        where a claim is not one statement."""
        params, limited = self._claim_params(key.action, options)
        compiled = self.dialect.claim_compiled(
            sa_dialect, params, (key,), (token,), options.take_expired, limited
        )
        return None if compiled is None else (compiled, params)

    @staticmethod
    def one_won(
        key: SlotKey, token: int, rows: Sequence[Any], lease_until: dt.datetime
    ) -> Claim | None:
        """The claim of `one_claim`'s key if its statement won the row (`_won` of one key:
        the row carries the claim's token), else None."""
        for row_id, won_token, attempt in rows:
            if won_token == token:
                return Claim(key, row_id, token, attempt, lease_until)
        return None

    def write(
        self,
        link: Link,
        results: Sequence[Mark],
        action: str,
        keys: Sequence[SlotKey],
        options: ClaimOptions,
        tokens: Sequence[int],
    ) -> tuple[list[bool], list[Claim]]:
        """Mark ``results`` and claim ``keys`` (as `claim_keys` takes them) together: one
        statement where the database allows, else one transaction. One bool per result,
        and the won claims."""
        if not results:
            return [], self.claim_keys(link, action, keys, options, tokens)
        if not keys:
            return self.mark_many(link, results), []
        self._durability_first(link)
        params, limited = self._claim_params(action, options)
        landed, won = self.dialect.write(
            link, _mark_rows(results), params, keys, tokens, options.take_expired, limited
        )
        claims = _won(keys, tokens, won, params["lease_until"])
        return [mark[0].id in landed for mark in results], claims

    def _claim_params(self, action: str, options: ClaimOptions) -> tuple[dict[str, Any], bool]:
        """A claim statement's shared parameters, and whether it is bound by attempts."""
        now = self.now()
        params: dict[str, Any] = {"action": action, "lease_until": now + options.lease, "now": now}
        limited = options.take_expired and options.max_attempts is not None
        if limited:
            params["max_attempts"] = options.max_attempts
        return params, limited

    def release_lost(
        self, conn: Connection, keys: Sequence[SlotKey], tokens: Sequence[int]
    ) -> None:
        """Release the rows a claim of ``keys`` with ``tokens`` won, if it won any: the
        claim failed (its connection dropped) after the statement may have committed.

        Each row is found by its key and changed only while it still holds the claim's
        token; the claim gives its attempt back, since nothing was sent.
        """
        t = self.table
        stmt = (
            sa.update(t)
            .where(
                t.c.action == sa.bindparam("r_action", type_=t.c.action.type),
                t.c.cycle == sa.bindparam("r_cycle", type_=t.c.cycle.type),
                t.c.subject == sa.bindparam("r_subject", type_=t.c.subject.type),
                t.c.token == sa.bindparam("r_token", type_=t.c.token.type),
                t.c.status == _CLAIMED,
            )
            .values(
                status=SlotStatus.RELEASED.value,
                attempt=t.c.attempt - 1,
                updated_at=sa.bindparam("r_now", type_=t.c.updated_at.type),
                last_error=_LOST_ANSWER,
            )
        )
        now = self.now()
        conn.execute(
            stmt,
            [
                {
                    "r_action": key.action,
                    "r_cycle": key.cycle,
                    "r_subject": key.subject,
                    "r_token": token,
                    "r_now": now,
                }
                for key, token in zip(keys, tokens, strict=True)
            ],
        )

    def not_claimable(
        self, link: Link, action: str, keys: Sequence[SlotKey], options: ClaimOptions
    ) -> set[tuple[str, str]]:
        """The ``(cycle, subject)`` pairs among ``keys`` whose row a claim would not win now."""
        limited = options.take_expired and options.max_attempts is not None
        taken: set[tuple[str, str]] = set()
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            params: dict[str, Any] = {"action": action, "now": self.now()}
            if limited:
                params["max_attempts"] = options.max_attempts
            chunk = sorted(keys[start : start + _LOOKUP_CHUNK], key=_sort_key)
            taken |= self.dialect.not_claimable(link, params, chunk, options.take_expired, limited)
        return taken

    # ---- marks -----------------------------------------------------------------------

    def mark(
        self, link: Link, claim: Claim, status: SlotStatus, detail: str | None, counted: bool
    ) -> bool:
        """Compare-and-set one claim's row: only while its token holds it as CLAIMED.

        ``counted`` False: the claim gives its attempt back (a release that certainly did
        not deliver).
        """
        compiled, params = self.one_mark(link.dialect, claim, status, detail, counted)
        return link.count(compiled, params) == 1

    def one_mark(
        self,
        sa_dialect: SADialect,
        claim: Claim,
        status: SlotStatus,
        detail: str | None,
        counted: bool,
    ) -> tuple[Compiled, dict[str, Any]]:
        """`mark`'s compare-and-set as its compiled statement and the values of one
        execution (it landed when it changed one row)."""
        attempt = None if counted else claim.attempt - 1
        columns, params = mark_params(
            claim.id, claim.token, status.value, detail, self.now(), attempt
        )
        return self.dialect.mark_compiled(sa_dialect, columns), params

    def marked(self, conn: Connection, results: Sequence[Mark]) -> set[int]:
        """The row ids of ``results`` whose row holds the claim's token and the mark's
        status: the marks that landed (by an earlier run of the same write)."""
        t = self.table
        wanted = {mark[0].id: (mark[0].token, mark[1].value) for mark in results}
        found: set[int] = set()
        ids = sorted(wanted)
        for start in range(0, len(ids), MARK_CHUNK):
            query = sa.select(t.c.id, t.c.token, t.c.status).where(
                t.c.id.in_(ids[start : start + MARK_CHUNK])
            )
            found |= {
                row_id
                for row_id, token, status in conn.execute(query)
                if wanted[row_id] == (token, status)
            }
        return found

    def mark_many(self, link: Link, results: Sequence[Mark]) -> list[bool]:
        """Mark many claims (distinct rows) in one transaction; one bool per result.

        Chunks keep every statement far below each driver's limit on bind parameters
        (asyncpg 32,767), whatever the number of results.
        """
        landed: set[int] = set()
        for start in range(0, len(results), MARK_CHUNK):
            rows = _mark_rows(results[start : start + MARK_CHUNK])
            landed |= self.dialect.mark_many(link, rows, self.now())
        return [mark[0].id in landed for mark in results]

    def renew(self, link: Link, claims: Sequence[Claim], lease: dt.timedelta) -> list[bool]:
        """Extend the leases of ``claims`` that still hold their rows; one bool per claim."""
        until = self.now() + lease
        held: set[tuple[int, int]] = set()
        for start in range(0, len(claims), _LOOKUP_CHUNK):
            pairs = sorted({(c.id, c.token) for c in claims[start : start + _LOOKUP_CHUNK]})
            held |= self.dialect.renew(link, pairs, until)
        return [(c.id, c.token) in held for c in claims]

    # ---- reads -----------------------------------------------------------------------

    def get(self, conn: Connection, key: SlotKey) -> SlotRecord | None:
        """The row of ``key``, or None."""
        t = self.table
        stmt = sa.select(t).where(
            t.c.action == key.action, t.c.cycle == key.cycle, t.c.subject == key.subject
        )
        row = conn.execute(stmt).first()
        return None if row is None else _record(row)

    def last_sent(
        self, conn: Connection, subjects: Sequence[str], since: dt.datetime
    ) -> dict[str, dt.datetime]:
        """The latest ``sent_at`` at or after ``since`` per subject text."""
        t = self.table
        latest: dict[str, dt.datetime] = {}
        for start in range(0, len(subjects), 500):
            chunk = subjects[start : start + 500]
            stmt = (
                sa.select(t.c.subject, sa.func.max(t.c.sent_at).label("at"))
                .where(t.c.subject.in_(chunk), t.c.sent_at >= since)
                .group_by(t.c.subject)
            )
            for row in conn.execute(stmt):
                # max() loses the column type on some dialects: read it back as UTC.
                at = t.c.sent_at.type.process_result_value(row.at, conn.dialect)  # type: ignore[attr-defined]
                if isinstance(at, str):  # SQLite returns its text form from max()
                    at = dt.datetime.fromisoformat(at).replace(tzinfo=dt.timezone.utc)
                latest[row.subject] = at
        return latest

    def stats(self, conn: Connection) -> LedgerStats:
        """Counts per action and status, live and expired leases."""
        t = self.table
        now = self.now()
        counts: dict[tuple[str, SlotStatus], int] = {}
        grouped = sa.select(t.c.action, t.c.status, sa.func.count()).group_by(
            t.c.action, t.c.status
        )
        for action, status, count in conn.execute(grouped):
            counts[(action, SlotStatus(status))] = count
        live = sa.and_(t.c.status == _CLAIMED, t.c.lease_until >= now)
        live_count, oldest = conn.execute(
            sa.select(sa.func.count(), sa.func.min(t.c.updated_at)).where(live)
        ).one()
        expired = conn.execute(
            sa.select(sa.func.count()).where(t.c.status == _CLAIMED, t.c.lease_until < now)
        ).scalar_one()
        if isinstance(oldest, str):
            oldest = dt.datetime.fromisoformat(oldest)
        if oldest is not None:
            oldest = t.c.updated_at.type.process_result_value(oldest, conn.dialect)  # type: ignore[attr-defined]
        unknown = sum(n for (_, status), n in counts.items() if status is SlotStatus.UNKNOWN)
        capped: dict[str, int] = {}
        if any(status is SlotStatus.RELEASED for _, status in counts):
            held = sa.and_(t.c.status == SlotStatus.RELEASED.value, t.c.last_error == CAPPED_NOTE)
            found = sa.select(t.c.action, sa.func.count()).where(held).group_by(t.c.action)
            capped = {str(action): int(n) for action, n in conn.execute(found)}
        return LedgerStats(counts, live_count, oldest, expired, unknown, capped)

    # ---- maintenance -----------------------------------------------------------------

    def sweep(
        self,
        conn: Connection,
        mode: DeliveryMode,
        max_attempts: int,
        limit: int,
        actions: Sequence[str] | None = None,
        cycle: str | None = None,
    ) -> SweepResult:
        """Settle up to ``limit`` CLAIMED rows whose lease expired (of ``actions`` and of
        ``cycle``, if given)."""
        t = self.table
        now = self.now()
        expired = sa.and_(t.c.status == _CLAIMED, t.c.lease_until < now)
        if actions is not None:
            expired = sa.and_(expired, t.c.action.in_(actions))
        if cycle is not None:
            expired = sa.and_(expired, t.c.cycle == cycle)
        candidates = (
            sa.select(t.c.id, t.c.action, t.c.subject, t.c.cycle, t.c.cycle_at, t.c.attempt)
            .where(expired)
            .order_by(t.c.lease_until, t.c.id)
            .limit(limit)
        )
        if self.driver.row_locks:
            # Lock what we settle; on PostgreSQL a concurrent sweep takes the next rows.
            candidates = candidates.with_for_update(skip_locked=self.driver.skip_locked)
        rows = conn.execute(candidates).all()
        result = SweepResult(unknown=[], released=[])
        groups: dict[SlotStatus, list[int]] = {SlotStatus.UNKNOWN: [], SlotStatus.RELEASED: []}
        for row in rows:
            retry = mode is DeliveryMode.AT_LEAST_ONCE and row.attempt < max_attempts
            status = SlotStatus.RELEASED if retry else SlotStatus.UNKNOWN
            groups[status].append(row.id)
            key = SlotKey(row.action, row.subject, row.cycle, row.cycle_at)
            (result.released if retry else result.unknown).append(key)
        for status, ids in groups.items():
            if ids:
                conn.execute(
                    sa.update(t)
                    .where(t.c.id.in_(ids), expired)
                    .values(status=status.value, updated_at=now, last_error=_SWEEP_NOTE)
                )
        return result

    def purge(
        self,
        conn: Connection,
        older_than: dt.timedelta,
        opaque_finished_before: dt.datetime | None,
        dry_run: bool,
    ) -> int:
        """Delete rows whose cycle ended long enough ago and that nobody holds (``dry_run``:
        count them)."""
        t = self.table
        now = self.now()
        held = sa.and_(t.c.status == _CLAIMED, t.c.lease_until >= now)
        old = t.c.cycle_at < now - older_than
        if opaque_finished_before is not None:
            old = sa.or_(
                old, sa.and_(t.c.cycle_at.is_(None), t.c.updated_at < opaque_finished_before)
            )
        gone = sa.and_(old, sa.not_(held))
        if dry_run:
            return int(conn.execute(sa.select(sa.func.count()).where(gone)).scalar_one())
        return int(conn.execute(sa.delete(t).where(gone)).rowcount)

    # ---- operator's tools: finding and requeueing settled slots ------------------------

    def _settled(
        self,
        action: str | None,
        statuses: Sequence[SlotStatus],
        since: dt.datetime | None,
        subjects: Sequence[str] | None,
        cycle: str | None = None,
    ) -> sa.ColumnElement[bool]:
        """The rows ``slots`` lists and ``requeue`` puts back: one filter for both."""
        t = self.table
        cond: sa.ColumnElement[bool] = t.c.status.in_([s.value for s in statuses])
        if action is not None:
            cond = sa.and_(cond, t.c.action == action)
        if since is not None:
            cond = sa.and_(cond, t.c.updated_at >= since)
        if subjects is not None:
            cond = sa.and_(cond, t.c.subject.in_(subjects))
        if cycle is not None:
            cond = sa.and_(cond, t.c.cycle == cycle)
        return cond

    def slots(
        self,
        conn: Connection,
        action: str | None,
        statuses: Sequence[SlotStatus],
        since: dt.datetime | None,
        subjects: Sequence[str] | None,
        limit: int,
        cycle: str | None = None,
    ) -> list[SlotRecord]:
        """Up to ``limit`` rows with these statuses, most recently changed first."""
        t = self.table
        stmt = (
            sa.select(t)
            .where(self._settled(action, statuses, since, subjects, cycle))
            .order_by(t.c.updated_at.desc(), t.c.id.desc())
            .limit(limit)
        )
        return [_record(row) for row in conn.execute(stmt)]

    def requeue(
        self,
        conn: Connection,
        action: str,
        statuses: Sequence[SlotStatus],
        since: dt.datetime | None,
        subjects: Sequence[str] | None,
        dry_run: bool,
        cycle: str | None = None,
    ) -> list[SlotKey]:
        """Release the rows of ``action`` with these statuses so the next claim wins them.

        Only settled statuses are accepted by the callers (UNKNOWN, FAILED): a live claim
        is never touched, and the UPDATE re-checks the filter, so a row that changed in
        between is left alone. ``attempt`` and ``last_error`` are kept for the record.
        """
        t = self.table
        cond = self._settled(action, statuses, since, subjects, cycle)
        # Read through the status index, then put in row order here: an ORDER BY id let
        # MariaDB walk the primary key over the whole table instead.
        found = sa.select(t.c.id, t.c.action, t.c.subject, t.c.cycle, t.c.cycle_at).where(cond)
        if not dry_run and self.driver.row_locks:
            found = found.with_for_update()
        rows = sorted(conn.execute(found).all(), key=lambda row: row.id)
        keys = [SlotKey(r.action, r.subject, r.cycle, r.cycle_at) for r in rows]
        if dry_run or not rows:
            return keys
        ids = [r.id for r in rows]
        released = {"status": SlotStatus.RELEASED.value, "updated_at": self.now()}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            conn.execute(sa.update(t).where(t.c.id.in_(chunk), cond).values(released))
        return keys


def _won(
    keys: Sequence[SlotKey], tokens: Sequence[int], won: Sequence[Any], lease_until: dt.datetime
) -> list[Claim]:
    """The claims of the rows a claim statement won (``id``, ``token``, ``attempt`` each).

    Every won row took the statement's ``lease_until`` (inserted or taken over), so it is
    not read back: one timestamp less to decode per row.
    """
    by_token = dict(zip(tokens, keys, strict=True))
    return [
        Claim(by_token[token], row_id, token, attempt, lease_until)
        for row_id, token, attempt in won
        if token in by_token
    ]


def _mark_rows(results: Sequence[Mark]) -> list[MarkRow]:
    """Marks as the dialect writes them, in row order (against deadlocks)."""
    return sorted(
        (c.id, c.token, status.value, detail, c.attempt if counted else c.attempt - 1)
        for c, status, detail, counted in results
    )


def _record(row: Any) -> SlotRecord:
    return SlotRecord(
        key=SlotKey(row.action, row.subject, row.cycle, row.cycle_at),
        id=row.id,
        status=SlotStatus(row.status),
        attempt=row.attempt,
        token=row.token,
        lease_until=row.lease_until,
        created_at=row.created_at,
        updated_at=row.updated_at,
        sent_at=row.sent_at,
        last_error=row.last_error,
        message_id=row.message_id,
    )


def fresh_token() -> int:
    """One fencing token, made as `_fresh_tokens` makes each of a batch's."""
    return int.from_bytes(secrets.token_bytes(8), "little") & _TOKEN_MASK


def _fresh_tokens(count: int) -> list[int]:
    """Random 63-bit fencing tokens, distinct within the batch (they map rows back).

    One read of the system's random source for the whole batch, not one per token.
    """
    tokens = {
        word & _TOKEN_MASK for word in struct.unpack(f"<{count}Q", secrets.token_bytes(8 * count))
    }
    while len(tokens) < count:
        tokens.add(secrets.randbits(63))
    return list(tokens)
