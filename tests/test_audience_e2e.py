"""The audience end to end, against the local Bot API server: a campaign learns who blocked
the bot, every later campaign and reminder skips them without a request, a user who comes
back (their bot's aiogram Dispatcher or python-telegram-bot Application, polling, records
it) is reached again, and an unsubscribe button stops one category and not another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncAudience,
    AsyncLedger,
    Broadcast,
    BroadcastReport,
    Message,
    Notification,
    Notifier,
    Outcome,
    Report,
    inline_keyboard,
    unsubscribe_button,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

from ._optional import require

require("aiogram", "aiogram")
require("telegram", "ptb")

from aiogram import Bot, Dispatcher  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from telegram.ext import Application  # noqa: E402

from notifyonce.aiogram import audience_router  # noqa: E402
from notifyonce.ptb import audience_handlers  # noqa: E402

# aiohttp's sockets are aiogram's to close (start_polling closes its session).
pytestmark = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")

TOKEN = "123456:AUDIENCE-E2E-token"
NEWS = Message("The December tariff is out")
REMINDER = Message("6 hours of your trial left")
CONCURRENCY = 64


def chats(count: int, blocked_share: float) -> tuple[list[int], list[int]]:
    """``count`` private chats, and the first ``blocked_share`` of every ten of them:
    the users who blocked the bot."""
    every = [1_000_000 + n for n in range(count)]
    blocked = [chat for n, chat in enumerate(every) if n % 10 < round(blocked_share * 10)]
    return every, blocked


def requests_per_chat(server: BotAPIServer, since: int) -> Counter[str]:
    """How many send requests each chat got from the server's ``since``-th on."""
    return Counter(r.chat_id for r in server.requests[since:] if r.chat_id is not None)


async def campaign(
    notifier: Notifier, name: str, recipients: Sequence[int], **options: object
) -> BroadcastReport:
    """The ``news`` campaign ``name`` to ``recipients``, run to its end."""
    return await Broadcast(notifier, "news", name, NEWS, recipients, **options).run()  # type: ignore[arg-type]


async def reminders(notifier: Notifier, recipients: Sequence[int], cycle: str) -> Report:
    """The reminder chain's ``trial_6h`` step to ``recipients``: another action, its own
    category, through send_many."""
    due = [Notification(chat, cycle, REMINDER) for chat in recipients]
    return await notifier.send_many("trial_6h", due)


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 20.0) -> None:
    """Wait until ``check()`` is true, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def polling(
    library: str, server: BotAPIServer, audience: AsyncAudience, **options: object
) -> AsyncIterator[None]:
    """The bot's own process, polling ``server`` with the audience helpers: aiogram's
    Dispatcher with audience_router, or python-telegram-bot's Application with
    audience_handlers."""
    if library == "aiogram":
        api = TelegramAPIServer.from_base(server.url)
        bot = Bot(TOKEN, session=AiohttpSession(api=api))
        dp = Dispatcher()
        dp.include_router(audience_router(audience, **options))  # type: ignore[arg-type]
        task = asyncio.create_task(dp.start_polling(bot, handle_signals=False, polling_timeout=1))
        try:
            yield
        finally:
            with contextlib.suppress(RuntimeError):  # polling never started
                await asyncio.wait_for(dp.stop_polling(), 10)
            await asyncio.wait_for(task, 10)
        return
    builder = Application.builder().token(TOKEN).base_url(f"{server.url}/bot")
    application = builder.build()
    application.add_handlers(audience_handlers(audience, **options))  # type: ignore[arg-type]
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0.0, timeout=1)
        try:
            yield
        finally:
            await application.updater.stop()
            await application.stop()


async def back(audience: AsyncAudience, chat: int) -> bool:
    return (await audience.state(chat)).gone is None


async def learn_skip_and_come_back(
    ledger: AsyncLedger, server: BotAPIServer, count: int, libraries: Sequence[str]
) -> None:
    """The scenario on ``count`` chats, three in ten of which blocked the bot: the first
    campaign learns them, a second one and a reminder skip them with no request, and one
    of them per library comes back with /start and is reached by a third campaign."""
    every, blocked = chats(count, 0.3)
    for chat in blocked:
        server.block(chat)
    reachable = len(every) - len(blocked)
    audience = AsyncAudience.beside(ledger)
    async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
        notifier = Notifier(ledger, sender, concurrency=CONCURRENCY, keep_results=False)

        first = await campaign(notifier, "2026-12", every)
        assert (reachable, len(blocked)) == (first.progress.sent, first.progress.failed)
        assert {"blocked": len(blocked)} == (await audience.counts()).gone
        assert {str(c) for c in blocked} == {
            r.recipient for r in await audience.rows(gone=True, source="refusal", limit=count)
        }

        mark = len(server.requests)
        second = await campaign(notifier, "2027-01", every)
        reminded = await reminders(notifier, every, "2027-01-15")
        asked = requests_per_chat(server, mark)
        assert 0 == sum(asked[str(chat)] for chat in blocked)
        assert {str(chat): 2 for chat in every if chat not in set(blocked)} == dict(asked)
        for report in (second.report, reminded):
            assert reachable == report.counts[Outcome.SENT]
            assert {"gone: blocked": len(blocked)} == report.skips

        # Users come back: after unblocking (my_chat_member) or with /start alone.
        returning = blocked[: len(libraries)]
        for library, chat in zip(libraries, returning, strict=True):
            async with polling(library, server, audience):
                if library == "aiogram":
                    server.user_unblocks(chat)
                else:
                    server.unblock(chat)  # Telegram's update missed: /start is enough
                server.user_says(chat, "/start")
                await eventually(lambda chat=chat: back(audience, chat))  # type: ignore[misc]

        mark = len(server.requests)
        third = await campaign(notifier, "2027-02", every)
        asked = requests_per_chat(server, mark)
    assert reachable + len(returning) == third.progress.sent
    assert {"gone: blocked": len(blocked) - len(returning)} == third.report.skips
    assert [1] * len(returning) == [asked[str(chat)] for chat in returning]
    assert 0 == sum(asked[str(chat)] for chat in blocked[len(returning) :])


@pytest.mark.slow
@pytest.mark.sqlite
async def test_ten_thousand_chats_three_thousand_blocked(tmp_path: Path) -> None:
    """10,000 chats, 3,000 blocked: the first campaign sends 7,000 and learns 3,000; a
    second campaign and a reminder send 7,000 each and none of the 3,000 gets a request;
    two users come back (aiogram, then PTB) and the third campaign reaches them."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'bot.sqlite3'}")
    try:
        ledger = AsyncLedger(engine)
        await ledger.create_schema()
        with BotAPIServer() as server:
            await learn_skip_and_come_back(ledger, server, 10_000, ["aiogram", "ptb"])
    finally:
        await engine.dispose()


async def test_the_learning_on_every_database(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """The same on 1,000 chats, on each database: learned from refusals, skipped with
    no request, and back through the aiogram router."""
    await learn_skip_and_come_back(ledger, bot_api_server, 1_000, ["aiogram"])


@pytest.mark.parametrize("library", ["aiogram", "ptb"])
async def test_the_unsubscribe_button_stops_promo_and_not_the_trial(
    library: str, sqlite_ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A press of the promo campaign's unsubscribe button, read by the polling bot, makes
    the next promo campaign skip that chat; the trial reminder still reaches it."""
    server, audience = bot_api_server, AsyncAudience.beside(sqlite_ledger)
    every = [101, 102, 103]
    offer = Message("-20% this week", reply_markup=inline_keyboard([[unsubscribe_button("promo")]]))
    async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
        notifier = Notifier(sqlite_ledger, sender)

        async def promo(name: str) -> BroadcastReport:
            return await Broadcast(notifier, "promo", name, offer, every).run()

        assert 3 == (await promo("2026-12")).progress.sent
        (pressed,) = [d for d in server.deliveries if d.chat_id == "102"]
        assert {"inline_keyboard": [[unsubscribe_button("promo")]]} == pressed.params[
            "reply_markup"
        ]
        async with polling(library, server, audience):
            data = pressed.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            server.user_presses(102, data, message_id=pressed.message_id)
            await eventually(lambda: opted_out(audience, 102))
        mark = len(server.requests)
        again = await promo("2027-01")
        reminded = await reminders(notifier, every, "2027-01-15")
    assert {"opted out of promo": 1} == again.report.skips
    assert (2, 3) == (again.progress.sent, reminded.counts[Outcome.SENT])
    assert {"101": 2, "102": 1, "103": 2} == dict(requests_per_chat(server, mark))
    assert "answerCallbackQuery" in server.calls


async def opted_out(audience: AsyncAudience, chat: int) -> bool:
    return "promo" in (await audience.state(chat)).opted_out
