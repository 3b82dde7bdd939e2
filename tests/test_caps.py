"""Frequency caps: at most n notifications of a category per recipient per window, taken at
claim time, exact under runs side by side, on every database."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    FrequencyCap,
    Message,
    Notification,
    Notifier,
    Outcome,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._caps import CapSeats
from notifyonce.testing import FakeSender

from ._clocks import WallClock
from ._databases import Backend

WEEK = dt.timedelta(days=7)
PROMO = FrequencyCap("promo", 2, WEEK)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("promo", 0, WEEK), "n"),
        (("promo", -1, WEEK), "n"),
        (("promo", 2, dt.timedelta(0)), "window"),
        (("promo", 2, -WEEK), "window"),
        (("", 2, WEEK), "category"),
        (("x" * 65, 2, WEEK), "category"),
    ],
)
def test_a_bad_cap_is_refused_naming_its_field(args: tuple[Any, ...], field: str) -> None:
    """A cap of n < 1, a window of zero or less, a bad category: refused, the field named."""
    with pytest.raises(ValidationError) as info:
        FrequencyCap(*args)
    assert field == info.value.field


def test_a_cap_of_the_wrong_type_is_refused(sqlite_ledger: AsyncLedger) -> None:
    """A cap's n that is not an int, a caps list of other things, two caps of one category."""
    with pytest.raises(ValidationTypeError) as info:
        FrequencyCap("promo", 2.0, WEEK)  # type: ignore[arg-type]
    assert "n" == info.value.field
    with pytest.raises(ValidationTypeError) as info:
        Notifier(sqlite_ledger, FakeSender(), caps=["promo"])  # type: ignore[list-item]
    assert "caps" == info.value.field
    with pytest.raises(ValidationError) as info:
        Notifier(sqlite_ledger, FakeSender(), caps=[PROMO, PROMO])
    assert "caps" == info.value.field


async def test_a_capped_send_is_skipped_and_a_transactional_one_still_goes(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """Two promos in a week go; the third is SKIPPED "capped" (counted in the report),
    a transactional send of the category still goes, and a week later the cap allows again."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender, caps=[PROMO])
    outcomes = []
    for campaign in ("promo_a", "promo_b", "promo_c"):
        outcomes.append(
            await notifier.send_once(campaign, 42, "2026-12", Message("hi"), category="promo")
        )
    assert [Outcome.SENT, Outcome.SENT, Outcome.SKIPPED] == outcomes
    report = await notifier.send_many(
        "promo_d", [Notification(42, "2026-12", Message("hi"))], category="promo"
    )
    assert {"capped": 1} == report.skips
    assert 1 == report.counts[Outcome.SKIPPED]
    receipt = await notifier.send_once(
        "promo_e", 42, "2026-12", Message("receipt"), category="promo", transactional=True
    )
    assert Outcome.SENT == receipt
    other = await notifier.send_once("trial_6h", 42, "2026-12", Message("other category"))
    assert Outcome.SENT == other
    clock.advance(WEEK)
    later = await notifier.send_once("promo_f", 42, "2026-12", Message("hi"), category="promo")
    assert Outcome.SENT == later
    assert 5 == len(sender.sent)


async def test_a_send_that_certainly_failed_gives_its_seat_back(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """A send refused with a transient error (certainly not delivered) costs no seat; a
    duplicate of a slot already sent takes none."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender, caps=[FrequencyCap("promo", 1, WEEK)])
    sender.fail_next(TransientSendError("503", retry_after=None))
    first = await notifier.send_once("promo_a", 7, "c", Message("hi"), category="promo")
    assert Outcome.RETRY == first
    again = await notifier.send_once("promo_a", 7, "c", Message("hi"), category="promo")
    assert Outcome.SENT == again
    duplicate = await notifier.send_once("promo_a", 7, "c", Message("hi"), category="promo")
    assert Outcome.DUPLICATE == duplicate
    seats = CapSeats.beside(ledger)
    assert 1 == await seats.used(FrequencyCap("promo", 1, WEEK), "7", clock())


async def test_runs_without_caps_take_no_seat(ledger: AsyncLedger, clock: WallClock) -> None:
    """A Notifier without caps, a category without one, or a transactional run sends no
    statement to the seats at all: the claim path costs what it cost before caps."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    engine = ledger.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        notifier = Notifier(ledger, FakeSender(), caps=[PROMO])
        await notifier.send_once("news", 1, "c", Message("hi"), category="news")
        await notifier.send_once(
            "receipt", 1, "c", Message("hi"), category="promo", transactional=True
        )
        await Notifier(ledger, FakeSender()).send_once("promo_x", 1, "c", Message("hi"))
        sent = len(seen)
        await notifier.send_once("promo_y", 1, "c", Message("hi"), category="promo")
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert [] == [s for s in seen[:sent] if "cap_seats" in s]
    assert [] != [s for s in seen[sent:] if "cap_seats" in s]  # the capped run does take one
    assert 1 == await CapSeats.beside(ledger).used(PROMO, "1", clock())


def _racer(
    backend: Backend, table: str, clock: WallClock, barrier: threading.Barrier, name: str
) -> list[Outcome]:
    """One process's worth: its own engine and loop, sending three campaigns to chat 1
    once every racer is ready."""

    async def main() -> list[Outcome]:
        engine = create_async_engine(backend.async_url)
        try:
            ledger = AsyncLedger(engine, table_name=table, clock=clock)
            notifier = Notifier(ledger, FakeSender(), caps=[PROMO], sweep_every=None)
            await asyncio.to_thread(barrier.wait)
            return [
                await notifier.send_once(f"{name}_{i}", 1, "c", Message("hi"), category="promo")
                for i in range(3)
            ]
        finally:
            await engine.dispose()

    return asyncio.run(main())


async def test_racing_connections_never_exceed_the_cap(
    async_backend: Backend, async_table: str, clock: WallClock
) -> None:
    """Eight connections behind a barrier, each sending three promos to one chat: exactly
    two are sent in all, the other 22 are SKIPPED capped."""
    engine = create_async_engine(async_backend.async_url)
    try:
        await AsyncLedger(engine, table_name=async_table).create_schema()
    finally:
        await engine.dispose()
    racers = 8
    barrier = threading.Barrier(racers, timeout=60)
    results: list[list[Outcome]] = [[] for _ in range(racers)]

    def run(index: int) -> None:
        results[index] = _racer(async_backend, async_table, clock, barrier, f"r{index}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    counted = Counter(outcome for outcomes in results for outcome in outcomes)
    assert {Outcome.SENT: 2, Outcome.SKIPPED: 22} == dict(counted)


async def test_three_campaigns_side_by_side_send_each_chat_at_most_two(
    async_engine: AsyncEngine, async_backend: Backend, async_table: str, clock: WallClock
) -> None:
    """Three campaigns to the same 500 chats at once, on engines of their own, with a cap
    of 2 promos a week: every chat gets exactly 2, the rest are SKIPPED capped, and the
    reports' counts match what the sender delivered."""
    await AsyncLedger(async_engine, table_name=async_table, clock=clock).create_schema()
    chats = range(1, 501)
    engines = [create_async_engine(async_backend.async_url) for _ in range(3)]
    senders = [FakeSender() for _ in range(3)]
    try:
        notifiers = [
            Notifier(AsyncLedger(e, table_name=async_table, clock=clock), s, caps=[PROMO])
            for e, s in zip(engines, senders, strict=True)
        ]
        reports = await asyncio.gather(
            *(
                notifier.send_many(
                    f"promo_{n}",
                    [Notification(chat, "2026-12", Message("sale")) for chat in chats],
                    category="promo",
                )
                for n, notifier in enumerate(notifiers)
            )
        )
    finally:
        for engine in engines:
            await engine.dispose()
    per_chat = Counter(record.recipient for s in senders for record in s.sent)
    assert {str(chat): 2 for chat in chats} == dict(per_chat)
    assert 1000 == sum(r.counts[Outcome.SENT] for r in reports)
    assert 500 == sum(r.counts[Outcome.SKIPPED] for r in reports)
    assert 500 == sum(r.skips.get("capped", 0) for r in reports)
