"""Frequency caps: at most ``n`` notifications of a category per recipient per window.

A cap is kept as ``n`` seats per (category, recipient) in a table beside the ledger's.
Taking a seat is one conditional write of one row (a seat free since the window began, or
one not made yet), which every database decides atomically: of two runs that want a
recipient's last seat, one gets it and the other is told the recipient is capped. Within
any span of the cap's window a seat is taken at most once, so no recipient gets more than
``n``, however many runs send side by side. A seat is taken just before the slot's
claim and given back when the claim is lost or the send certainly did not happen; a crash
between the two costs a seat, never an extra message. A recipient with no seat free has
its slot claimed and at once released with the error ``capped`` (no request goes out),
so the ledger keeps, once per slot, what the run's report counts as skipped ``capped``:
``notifyonce stats`` and the console count those rows.

Who imports this: the notifier (the caps of a Notifier) and the run (taking the seats).
It imports the ledger's tables and the drivers, nothing of the hall.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._audience import normalize_category
from notifyonce._drivers import Driver, driver_for
from notifyonce._drivers.errors import in_transaction
from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._ledger.records import CAPPED_NOTE
from notifyonce._ledger.side_tables import build_cap_table, default_cap_table

__all__ = ["CAPPED", "CapCheck", "CapSeats", "FrequencyCap", "Seat", "insert_new", "inserted"]

logger = logging.getLogger("notifyonce.caps")
T = TypeVar("T")
#: The reason of a notification skipped by a cap (``Result.reason``, ``Report.skips``),
#: and the error its released slot keeps (what the stats and the console count).
CAPPED = CAPPED_NOTE
_RETRIES = 3
_MAX_SEATS = 1000  # a cap is a handful a week, not a rate limit


@dataclass(frozen=True, slots=True)
class FrequencyCap:
    """At most ``n`` notifications of ``category`` per recipient in any ``window``.

    Checked at claim time by every [`Notifier`][notifyonce.Notifier] given it, across
    campaigns, reminder chains and digests of that category: a notification over the
    cap is ``Outcome.SKIPPED`` with the reason ``"capped"``, before its claim and its
    request. Runs side by side cannot exceed it. The window is rolling (any span of that
    length, not calendar weeks). Transactional runs (``transactional=True``) are exempt,
    as they are from opt-outs.

    Args:
        category: The category capped (a notification's category is its action's name
            unless ``send_many(category=...)`` names another).
        n: How many per window, at least 1.
        window: How long the window is: a positive ``timedelta``.

    Raises:
        ValidationError: ``n`` below 1 or above 1000, a window of zero or less, a bad
            category; each names its field.

    Examples:
        >>> import datetime as dt
        >>> FrequencyCap("promo", 2, dt.timedelta(days=7))
        FrequencyCap(category='promo', n=2, window=datetime.timedelta(days=7))
    """

    category: str
    n: int
    window: dt.timedelta

    def __post_init__(self) -> None:
        normalize_category(self.category)
        if isinstance(self.n, bool) or not isinstance(self.n, int):
            raise ValidationTypeError("n", f"must be an int, got {type(self.n).__name__}")
        if not 1 <= self.n <= _MAX_SEATS:
            raise ValidationError("n", f"must be between 1 and {_MAX_SEATS}, got {self.n}")
        if not isinstance(self.window, dt.timedelta):
            raise ValidationTypeError(
                "window", f"must be a timedelta, got {type(self.window).__name__}"
            )
        if self.window <= dt.timedelta(0):
            raise ValidationError("window", f"must be positive, got {self.window}")


@dataclass(frozen=True, slots=True)
class Seat:
    """A seat taken for one notification: given back only by its taker (its token)."""

    category: str
    recipient: str
    seat: int
    token: int
    #: The time the seat held before (None: this take made the row).
    previous: dt.datetime | None


class CapSeats:
    """The seats of every cap, in the table beside a ledger's (see the module's docs)."""

    def __init__(self, engine: AsyncEngine, table: sa.Table) -> None:
        self.engine = engine
        self.table = table
        self._driver: Driver = driver_for(engine)

    @classmethod
    def beside(cls, ledger: Any) -> CapSeats:
        """The seats beside ``ledger``'s table (an ``AsyncLedger``), on its engine."""
        t = ledger.table
        table = build_cap_table(sa.MetaData(), default_cap_table(t.name), t.schema)
        return cls(ledger.engine, table)

    async def take(self, cap: FrequencyCap, recipient: str, now: dt.datetime) -> Seat | None:
        """A seat of ``cap`` for ``recipient`` at ``now``, or None: the recipient is capped."""
        return await self._driver.run(lambda engine: self._take(engine, cap, recipient, now))

    async def give_back(self, seat: Seat) -> bool:
        """Give ``seat`` back (its send certainly did not happen); whether it was still ours."""
        return await self._driver.run(self._in_transaction(lambda conn: self._give(conn, seat)))

    async def used(self, cap: FrequencyCap, recipient: str, now: dt.datetime) -> int:
        """How many of ``recipient``'s seats of ``cap`` were taken within its window."""
        t = self.table
        query = (
            sa.select(sa.func.count())
            .select_from(t)
            .where(
                t.c.category == cap.category,
                t.c.recipient == recipient,
                t.c.seat < cap.n,
                t.c.used_at > now - cap.window,
            )
        )
        return await self._driver.run(
            self._in_transaction(lambda conn: int(conn.execute(query).scalar_one()))
        )

    # -- the work, sync, on the engine's facade ------------------------------------------

    def _take(
        self, engine: sa.Engine, cap: FrequencyCap, recipient: str, now: dt.datetime
    ) -> Seat | None:
        t = self.table
        mine = sa.and_(t.c.category == cap.category, t.c.recipient == recipient)
        cutoff = now - cap.window
        rows = self._in_transaction(
            lambda conn: conn.execute(
                sa.select(t.c.seat, t.c.used_at).where(mine, t.c.seat < cap.n)
            ).all()
        )(engine)
        present = {int(seat): used_at for seat, used_at in rows}
        free = sorted((at, s) for s, at in present.items() if at <= cutoff)
        token = secrets.randbits(62) + 1
        # The seat free longest first, then the seats never taken. Each attempt is one
        # atomic write that checks again what the read saw; the first that lands wins.
        for _, number in free:
            seat = Seat(cap.category, recipient, number, token, present[number])
            update = (
                sa.update(t)
                .where(mine, t.c.seat == number, t.c.used_at <= cutoff)
                # MySQL assigns left to right: previous_at reads used_at before it changes.
                .ordered_values(
                    (t.c.previous_at, t.c.used_at), (t.c.used_at, now), (t.c.token, token)
                )
            )
            if self._in_transaction(partial(_wrote, update))(engine):
                return seat
        for number in range(cap.n):
            if number in present:
                continue
            row = {
                "category": cap.category,
                "recipient": recipient,
                "seat": number,
                "used_at": now,
                "previous_at": None,
                "token": token,
            }
            insert = insert_new(self._driver, t, row)
            if self._in_transaction(partial(inserted, self._driver, insert=insert))(engine):
                return Seat(cap.category, recipient, number, token, None)
        return None

    def _give(self, conn: sa.Connection, seat: Seat) -> bool:
        t = self.table
        where = sa.and_(
            t.c.category == seat.category,
            t.c.recipient == seat.recipient,
            t.c.seat == seat.seat,
            t.c.token == seat.token,
        )
        if seat.previous is None:
            return _count(conn.execute(sa.delete(t).where(where))) > 0
        update = (
            sa.update(t)
            .where(where)
            .ordered_values((t.c.used_at, seat.previous), (t.c.previous_at, None), (t.c.token, 0))
        )
        return _count(conn.execute(update)) > 0

    def _in_transaction(self, body: Callable[[sa.Connection], T]) -> Callable[[sa.Engine], T]:
        return in_transaction(self._driver, body, _RETRIES)


def _count(result: Any) -> int:
    return int(result.rowcount or 0)


def _wrote(statement: Any, conn: sa.Connection) -> bool:
    return _count(conn.execute(statement)) > 0


def insert_new(driver: Driver, table: sa.Table, row: dict[str, Any]) -> Any:
    """An INSERT of ``row`` that does nothing when its key is there (two writers of one
    key: one row), saying whether it wrote (see `inserted`)."""
    insert = driver.insert(table).values(row)
    if driver.upsert_returning:  # PostgreSQL and SQLite: ON CONFLICT, and RETURNING
        # psycopg gives no row count for an INSERT (-1): the returned row says it.
        first = next(iter(table.primary_key.columns))
        return insert.on_conflict_do_nothing().returning(first)
    return insert.prefix_with("IGNORE")  # MySQL and MariaDB: the row count says it


def inserted(driver: Driver, conn: sa.Connection, *, insert: Any) -> bool:
    """Run an `insert_new`; whether it wrote its row."""
    result = conn.execute(insert)
    if driver.upsert_returning:
        return result.first() is not None
    return _count(result) > 0


@dataclass(frozen=True, slots=True)
class CapCheck:
    """How one run takes the seats of its category's cap (given to the run by the notifier)."""

    seats: CapSeats
    cap: FrequencyCap

    async def take(self, recipient: str, now: dt.datetime) -> Seat | None:
        return await self.seats.take(self.cap, recipient, now)

    async def give_back(self, seat: Seat) -> None:
        """A best effort: a seat not given back costs a send of the window, never adds one."""
        try:
            await self.seats.give_back(seat)
        except Exception as exc:  # the run goes on; the seat frees itself after the window
            logger.warning(
                "could not give back a seat of the %s cap (%s); it frees itself after the "
                "cap's window",
                seat.category,
                type(exc).__name__,
            )
