"""Send budgets are hard deadlines, and misuse of a sender never burns a slot."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Message,
    Notifier,
    Outcome,
    SlotStatus,
    UncertainSendError,
    ValidationError,
)
from notifyonce._senders.telegram.classify import MAX_RETRY_AFTER, classify_response
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "12345:deadline-secret"


class Trickle:
    """A server's address and how many body bytes it has trickled so far."""

    def __init__(self) -> None:
        self.url = ""
        self.sent = 0


@pytest.fixture
async def trickling_server() -> AsyncIterator[Trickle]:
    """Answers with headers at once, then one body byte every 0.3 s (never finishing soon)."""
    trickle = Trickle()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        try:
            for _ in range(100):
                writer.write(b" ")
                await writer.drain()
                trickle.sent += 1
                await asyncio.sleep(0.3)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    trickle.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield trickle
    server.close()


async def test_a_trickling_answer_cannot_outlast_the_budget(
    trickling_server: Trickle, http_client: httpx.AsyncClient | None
) -> None:
    """A server that trickles its answer is cut off at the budget, as an uncertain send."""
    url = trickling_server.url
    sender = TelegramSender(TOKEN, base_url=url, rate_limit=None, budget=1.0, client=http_client)
    async with sender as s:
        with pytest.raises(UncertainSendError) as info:
            await s.send("42", Message("hello"))
        trickled = trickling_server.sent
    # Measured on the server's own pace, not the wall clock: a 1 s budget ends the send
    # after about 4 of the 100 bytes (0.3 s each); any timeout that only caps each read
    # would wait for all 100. Half is a margin for a loaded machine, not a speed claim.
    assert trickled < 50, trickled
    assert TOKEN not in str(info.value)


def test_a_send_on_the_senders_own_client_sets_one_timer() -> None:
    """The sender's own client bounds an attempt with one timer, its overall deadline: no
    read timer of aiohttp's besides, set again with every chunk of the answer (two more
    timers a send, a tenth of a message's event-loop work)."""
    # asyncio's own loop, made here: its timers all go through call_at, where another
    # loop (uvloop's, the speed extra) sets them without it.
    loop = asyncio.SelectorEventLoop()
    timers: list[float] = []
    call_at = loop.call_at

    def counting(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        timers.append(when)
        return call_at(when, *args, **kwargs)

    async def sends(server: BotAPIServer) -> None:
        async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
            await sender.send("1", Message("warm"))  # the connection, the session's timers
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(loop, "call_at", counting)
                for chat in range(2, 12):
                    await sender.send(str(chat), Message("hello"))

    with BotAPIServer() as server:
        try:
            loop.run_until_complete(sends(server))
        finally:
            loop.close()
        assert 11 == len(server.deliveries)
    assert 10 == len(timers), timers


@pytest.mark.parametrize("value", [math.inf, 1e12])
def test_retry_after_is_capped(value: float) -> None:
    """An absurd retry_after cannot block a chat for the sender's lifetime."""
    body = (
        '{"ok": false, "error_code": 429, "description": "Too Many Requests", '
        f'"parameters": {{"retry_after": {"Infinity" if math.isinf(value) else value}}}}}'
    ).encode()
    error = classify_response(429, {}, body)
    assert MAX_RETRY_AFTER == error.retry_after  # type: ignore[union-attr]


async def test_closed_sender_releases_the_slot(async_engine: AsyncEngine, async_table: str) -> None:
    """A Notifier using a closed sender releases its slots (RETRY) instead of losing them."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    with BotAPIServer() as server:
        sender = TelegramSender(TOKEN, base_url=server.url, rate_limit=None)
        await sender.aclose()
        outcome = await Notifier(ledger, sender).send_once("a", 1, "c", Message("hi"))
    assert Outcome.RETRY == outcome
    record = await ledger.get("a", 1, "c")
    assert record is not None
    assert SlotStatus.RELEASED == record.status


async def test_refused_recipient_is_refused_before_the_claim(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """A recipient the sender's check refuses raises ValidationError and writes no row."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    with BotAPIServer() as server:
        async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
            with pytest.raises(ValidationError) as info:
                await Notifier(ledger, sender).send_once(
                    "a", 1, "c", Message("hi"), recipient="not a chat"
                )
        assert [] == server.deliveries
    assert "recipient" == info.value.field
    assert None is await ledger.get("a", 1, "c")
