"""Flood waits the sender does not wait out: one chat's gives that notification back, the
bot's stops the run with a report, and neither holds a job past its next run.

Telegram answers 429 with a ``retry_after`` that can be minutes long. Each run here is
bounded by a timeout far below the flood wait it meets: a run that waited it out fails by
timing out, not by a rate or a duration measured against the clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from notifyonce import (
    AsyncLedger,
    FloodWaitError,
    Message,
    Notification,
    Notifier,
    Outcome,
    TransientSendError,
    ValidationError,
)
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, Reply

TOKEN = "424242:FLOOD-secret"
CYCLE = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
# The flood waits the server asks for, against the runs' timeout: a run that waits one out
# cannot finish in time.
FLOOD = 60
RUN_TIMEOUT = 30.0
# Loose per-chat pacing, so that a run's own sends take no time worth counting.
FAST = RateLimit(bot_per_second=200.0, private_chat_per_second=50.0)


def notifications(chats: range | list[int], text: str = "window closes soon") -> list[Notification]:
    return [Notification(chat, CYCLE, Message(text)) for chat in chats]


async def statuses(ledger: AsyncLedger) -> dict[str, int]:
    table = ledger.table
    async with ledger.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(table.c.status, sa.func.count()).group_by(table.c.status)
        )
        return {status: count for status, count in rows.all()}  # noqa: C416 (Rows, not pairs)


async def test_one_chats_long_flood_wait_gives_it_back_and_the_others_go(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Chat 5 is answered 429 with retry_after 60 s. The next run, with chat 5 and 29
    others, sends the 29 at once and gives chat 5 back as RETRY without claiming it or
    asking Telegram: its slot is as the first run left it."""
    bot_api_server.script("5", [Reply.flood(FLOOD)])
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender)
        first = await asyncio.wait_for(
            notifier.send_many("remind", notifications([5])), RUN_TIMEOUT
        )
        assert 1 == first.counts[Outcome.RETRY]
        second = await asyncio.wait_for(
            notifier.send_many("remind", notifications([5, *range(100, 129)])), RUN_TIMEOUT
        )
    assert (29, 1) == (second.counts[Outcome.SENT], second.counts[Outcome.RETRY])
    (back,) = second[Outcome.RETRY]
    assert ("5", None) == (back.key.subject, back.attempt)
    assert "flood wait" in str(back.error)
    assert second.stopped is None
    assert 1 == sum(1 for r in bot_api_server.requests if r.chat_id == "5")
    assert {"sent": 29, "released": 1} == await statuses(ledger)


async def test_a_send_answered_with_a_long_flood_wait_is_given_back_at_once(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A send of a claimed slot answered 429 for longer than ``max_flood_wait`` (here 10 s
    within a 30 s budget) is released at once, not held for the wait."""
    bot_api_server.script("7", [Reply.flood(10)])
    async with TelegramSender(
        TOKEN, base_url=bot_api_server.url, rate_limit=FAST, max_flood_wait=2.0
    ) as sender:
        report = await asyncio.wait_for(
            Notifier(ledger, sender).send_many("remind", notifications([7])), 8.0
        )
    assert 1 == report.counts[Outcome.RETRY]
    assert {"released": 1} == await statuses(ledger)


async def test_a_bot_wide_flood_wait_stops_the_run_with_a_report(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Two chats answered 429 make the flood bot-wide. A run of 300 then stops at its first
    turn: nothing is claimed or sent, all 300 come back as RETRY, and the report says why.
    Once the flood has passed (a new sender), the same 300 go out once each."""
    bot_api_server.script("1", [Reply.flood(FLOOD)])
    bot_api_server.script("2", [Reply.flood(FLOOD)])
    batch = notifications(range(1000, 1300))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender, concurrency=8)
        await asyncio.wait_for(notifier.send_many("remind", notifications([1, 2])), RUN_TIMEOUT)
        sent_before = len(bot_api_server.deliveries)
        report = await asyncio.wait_for(notifier.send_many("remind", batch), RUN_TIMEOUT)
    assert "bot's flood wait" in str(report.stopped)
    assert (300, 300) == (report.total, report.counts[Outcome.RETRY])
    assert [] == [r for r in report.results if r.attempt is not None]
    assert sent_before == len(bot_api_server.deliveries)
    assert {"released": 2} == await statuses(ledger)
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        again = await asyncio.wait_for(
            Notifier(ledger, sender).send_many("remind", batch), RUN_TIMEOUT
        )
    assert 300 == again.counts[Outcome.SENT]
    assert {"sent": 300, "released": 2} == await statuses(ledger)


async def test_a_run_stopped_by_a_bot_wide_flood_logs_one_line_not_one_per_chat(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """300 notifications given back by a bot-wide flood wait: one warning for the stop,
    with the counts and the reason; each chat's own line is at DEBUG."""
    bot_api_server.script("1", [Reply.flood(FLOOD)])
    bot_api_server.script("2", [Reply.flood(FLOOD)])
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender, concurrency=8)
        await asyncio.wait_for(notifier.send_many("remind", notifications([1, 2])), RUN_TIMEOUT)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="notifyonce"):
            report = await asyncio.wait_for(
                notifier.send_many("remind", notifications(range(1000, 1300))), RUN_TIMEOUT
            )
    assert 300 == report.counts[Outcome.RETRY]
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [
        f"run of remind stopped ({report.stopped}): 0 sent, 0 tried and given back, 300 not tried"
    ] == loud
    assert 300 == sum(r.getMessage().startswith("released for a later run") for r in caplog.records)


async def test_a_bot_wide_flood_in_mid_run_sends_nothing_twice_and_loses_nothing(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Mid-run, chats 1050 and 1051 are answered 429 for 60 s: the sends under way finish,
    the run stops and gives back what it did not try; resumed, every chat gets one message."""
    bot_api_server.script("1050", [Reply.flood(FLOOD)])
    bot_api_server.script("1051", [Reply.flood(FLOOD)])
    batch = notifications(range(1000, 1400))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        report = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=16).send_many("remind", batch), RUN_TIMEOUT
        )
    assert report.stopped is not None
    counts = report.counts
    assert 400 == counts[Outcome.SENT] + counts[Outcome.RETRY] == report.total
    assert counts[Outcome.RETRY] >= 2
    assert "claimed" not in await statuses(ledger)
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        again = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=16).send_many("remind", batch), RUN_TIMEOUT
        )
    assert again.stopped is None
    assert counts[Outcome.RETRY] == again.counts[Outcome.SENT]
    delivered = [d.chat_id for d in bot_api_server.deliveries]
    assert sorted(delivered) == sorted(set(delivered))
    assert set(range(1000, 1400)) == {int(chat) for chat in delivered}


async def test_a_stream_stopped_by_a_bot_wide_flood_is_read_no_further(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A stream is not read to its end to report it: what was read and not tried comes
    back as RETRY, and the generator is closed."""
    bot_api_server.script("1", [Reply.flood(FLOOD)])
    bot_api_server.script("2", [Reply.flood(FLOOD)])
    read = 0

    async def stream() -> object:
        nonlocal read
        for chat in range(1000, 101_000):
            read += 1
            yield Notification(chat, CYCLE, Message("x"))

    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender, batch_size=100)
        await asyncio.wait_for(notifier.send_many("remind", notifications([1, 2])), RUN_TIMEOUT)
        report = await asyncio.wait_for(notifier.send_many("remind", stream()), RUN_TIMEOUT)
    assert report.stopped is not None
    assert read < 1000
    assert read >= report.counts[Outcome.RETRY] == report.total > 0


def test_max_flood_wait_is_checked() -> None:
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValidationError, match="max_flood_wait"):
            TelegramSender(TOKEN, max_flood_wait=bad)


async def test_the_turn_raises_a_flood_wait_error_naming_whose_wait(
    bot_api_server: BotAPIServer,
) -> None:
    """The sender's turn says whose flood wait is too long, and for how long."""
    bot_api_server.script("1", [Reply.flood(FLOOD)])
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        with pytest.raises(TransientSendError):
            await sender.send("1", Message("x"))
        with pytest.raises(FloodWaitError) as chat:
            async with sender.turn("1"):
                pass
        async with sender.turn("3"):
            pass
        bot_api_server.script("2", [Reply.flood(FLOOD)])
        with pytest.raises(TransientSendError):
            await sender.send("2", Message("x"))
        with pytest.raises(FloodWaitError) as bot:
            async with sender.turn("4"):
                pass
    assert (False, True) == (chat.value.bot_wide, bot.value.bot_wide)
    assert 50 < chat.value.retry_after <= FLOOD
    assert 429 == bot.value.code
