"""Scheduled campaigns: a broadcast waits for its start time, and two schedulers starting
it at that moment send each chat once (each chat's slot is won by one of them)."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Broadcast, Document, Message, Notifier, ValidationError
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


@pytest.mark.parametrize("allowed", [False, True], ids=["refused", "allowed"])
async def test_a_file_rewritten_while_the_campaign_waits_is_the_message_it_checks(
    ledger: AsyncLedger,
    bot_api_server: BotAPIServer,
    clock: WallClock,
    tmp_path: Path,
    allowed: bool,
) -> None:
    """A campaign's file rewritten while it waits for its start: the run checks the message
    again at the start and refuses it, nothing sent; allowed to change, it sends the new
    file and records it, so a run resumed with that file is not refused."""
    path = tmp_path / "tariff.pdf"
    path.write_bytes(b"%PDF-1.7 tariff, version one")
    message = Message("", media=Document(path))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender)
        broadcast = Broadcast(
            notifier,
            "news",
            "tariff",
            message,
            [1, 2],
            start_at=ledger.now() + timedelta(hours=1),
            allow_changed_message=allowed,
        )
        # The file is rewritten only once the run waits for its start: it reaches the wait
        # after it fingerprinted and recorded the message, and on a busy machine a fixed
        # sleep ended first (the clock then passed the start before the run looked, so it
        # never waited and never checked the file again). Nothing else runs on this loop
        # between the wait's start and its first sleep, so the run has read the clock first.
        waiting = asyncio.Event()
        wait_for_start = broadcast._wait_for_start

        async def wait_noted() -> bool:
            waiting.set()
            return await wait_for_start()

        broadcast._wait_for_start = wait_noted  # type: ignore[method-assign]
        running = asyncio.ensure_future(broadcast.run())
        await asyncio.wait_for(waiting.wait(), RUN_TIMEOUT)
        await asyncio.sleep(WAITED)
        await asyncio.to_thread(path.write_bytes, b"%PDF-1.7 tariff, version two")
        clock.advance(hours=1)
        if not allowed:
            with pytest.raises(ValidationError) as caught:
                await asyncio.wait_for(running, RUN_TIMEOUT)
            assert "message" == caught.value.field
            assert [] == bot_api_server.deliveries
            return
        report = await asyncio.wait_for(running, RUN_TIMEOUT)
        again = await Broadcast(notifier, "news", "tariff", message, [1, 2]).run()
    assert (2, 2) == (report.progress.sent, again.progress.duplicate)
    two = hashlib.sha256(b"%PDF-1.7 tariff, version two").hexdigest()
    assert [two] == [u.sha256 for u in bot_api_server.uploads]
