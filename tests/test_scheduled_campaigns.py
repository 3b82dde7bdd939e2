"""Scheduled campaigns: a broadcast waits for its start time, and two schedulers starting
it at that moment send each chat once (each chat's slot is won by one of them)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Broadcast, Message, Notifier, ValidationError
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender

from ._clocks import WallClock
from ._fakes import StampingSender

TOKEN = "424242:SCHEDULE-secret"
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
RUN_TIMEOUT = 60.0
# How long the runs are watched waiting before the clock is moved to their start.
WAITED = 0.5


def test_a_naive_or_wrongly_typed_start_is_refused() -> None:
    """start_at must be an aware datetime; the error names the field."""
    notifier = Notifier.__new__(Notifier)  # not used: the check comes first
    for value in (datetime(2026, 12, 24, 10), "2026-12-24T10:00+01:00"):
        with pytest.raises(ValidationError) as caught:
            Broadcast(notifier, "news", "c", Message("hi"), [1], start_at=value)  # type: ignore[arg-type]
        assert "start_at" == caught.value.field


async def test_two_schedulers_starting_a_campaign_at_once_send_it_once(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, clock: WallClock
) -> None:
    """Two runs of one campaign scheduled an hour ahead wait (nothing is sent while the
    ledger's clock stands still), then, once the clock reaches the start, send to the 400
    chats together: each chat gets one message, from one run or the other."""
    start = ledger.now() + timedelta(hours=1)
    chats = list(range(5000, 5400))
    message = Message("Merry Christmas")
    # The second scheduler has its own engine, as another process would (on SQLite, one
    # engine: one writer at a time is SQLite's own rule).
    sqlite = ledger.engine.dialect.name == "sqlite"
    engine = ledger.engine if sqlite else create_async_engine(ledger.engine.url)
    other = AsyncLedger(engine, table_name=ledger.table_name, clock=clock)
    try:
        async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as inner:
            ledgers = [ledger, other]
            senders = [StampingSender(inner, each.now) for each in ledgers]
            runs = [
                Broadcast(
                    Notifier(each, sender, concurrency=8),
                    "xmas",
                    "2026",
                    message,
                    chats,
                    start_at=start,
                )
                for each, sender in zip(ledgers, senders, strict=True)
            ]
            both = asyncio.gather(*(run.run() for run in runs))
            await asyncio.sleep(WAITED)
            assert [] == bot_api_server.requests
            assert not both.done()
            clock.advance(hours=1)
            reports = await asyncio.wait_for(both, RUN_TIMEOUT)
    finally:
        if not sqlite:
            await engine.dispose()
    assert all(start <= stamp for sender in senders for stamp in sender.started)
    assert Counter({str(chat): 1 for chat in chats}) == Counter(
        d.chat_id for d in bot_api_server.deliveries
    )
    assert 400 == sum(report.progress.sent for report in reports)
    # Each chat was one run's to send and the other's to find done.
    assert 800 == sum(report.progress.sent + report.progress.duplicate for report in reports)


async def test_cancel_ends_the_wait(ledger: AsyncLedger) -> None:
    """A run scheduled an hour ahead, cancelled while it waits, returns a cancelled report
    at once and sends nothing."""
    sender = FakeSender()
    broadcast = Broadcast(
        Notifier(ledger, sender),
        "news",
        "later",
        Message("hi"),
        [1, 2, 3],
        start_at=ledger.now() + timedelta(hours=1),
    )
    running = asyncio.ensure_future(broadcast.run())
    await asyncio.sleep(0.05)
    broadcast.cancel()
    report = await asyncio.wait_for(running, RUN_TIMEOUT)
    assert report.cancelled
    assert [] == sender.sent
