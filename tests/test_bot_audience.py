"""The bot helpers: aiogram's audience_router and python-telegram-bot's audience_handlers
record what the bot's updates say (blocked, removed, back, /stop, the unsubscribe button)
and leave the bot's own handlers their /start and my_chat_member.

Each test runs on both libraries, fed the updates the local Bot API server queues (as
getUpdates hands them out); their replies go to that server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from notifyonce import AsyncAudience, AsyncLedger, GoneReason, ValidationError
from notifyonce.testing import BotAPIServer

from ._optional import require

require("aiogram", "aiogram")
require("telegram", "ptb")

from aiogram import Bot, Dispatcher, Router  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.filters import CommandStart  # noqa: E402
from aiogram.types import ChatMemberUpdated  # noqa: E402
from aiogram.types import Message as AiogramMessage  # noqa: E402
from telegram import Update  # noqa: E402
from telegram.ext import (  # noqa: E402
    Application,
    ChatMemberHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from notifyonce.aiogram import audience_router  # noqa: E402
from notifyonce.ptb import audience_handlers  # noqa: E402

# aiohttp's sockets are aiogram's to close (its session is closed after each test).
pytestmark = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")

TOKEN = "123456:AUDIENCE-token"
GROUP = -1001234567890
LIBRARIES = ["aiogram", "ptb"]


class BotUnderTest:
    """A bot of one library with the audience helpers first and handlers of its own after
    them: a /start that welcomes, a my_chat_member watcher and a catch-all for anything
    else. ``seen`` lists what the bot's own handlers got."""

    def __init__(self, library: str, server: BotAPIServer, audience: AsyncAudience) -> None:
        self.library = library
        self.server = server
        self.audience = audience
        self.seen: list[str] = []
        self.errors: list[BaseException] = []
        self._offset = 0

    async def start(self, **options: Any) -> BotUnderTest:
        seen = self.seen
        if self.library == "aiogram":
            api = TelegramAPIServer.from_base(self.server.url)
            self.bot = Bot(TOKEN, session=AiohttpSession(api=api))
            self.dp = Dispatcher()
            self.dp.include_router(audience_router(self.audience, **options))
            own = Router(name="own")

            @own.message(CommandStart())
            async def welcome(message: AiogramMessage) -> None:
                seen.append("start")
                await message.answer("Welcome!")

            @own.my_chat_member()
            async def member(event: ChatMemberUpdated) -> None:
                status = event.new_chat_member.status  # aiogram 3.13's enum: its name on 3.11+
                seen.append(f"member {getattr(status, 'value', status)}")

            @own.message()
            async def other(message: AiogramMessage) -> None:
                seen.append(f"other {message.text}")

            self.dp.include_router(own)
        else:
            self.app = Application.builder().token(TOKEN).base_url(f"{self.server.url}/bot")
            self.app = self.app.updater(None).build()
            self.app.add_handlers(audience_handlers(self.audience, **options))

            async def welcome_ptb(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
                seen.append("start")
                assert update.effective_message is not None
                await update.effective_message.reply_text("Welcome!")

            async def member_ptb(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
                assert update.my_chat_member is not None
                seen.append(f"member {update.my_chat_member.new_chat_member.status}")

            async def other_ptb(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
                assert update.effective_message is not None
                seen.append(f"other {update.effective_message.text}")

            async def failed(update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
                assert context.error is not None
                self.errors.append(context.error)

            self.app.add_handler(CommandHandler("start", welcome_ptb))
            self.app.add_handler(ChatMemberHandler(member_ptb, ChatMemberHandler.MY_CHAT_MEMBER))
            self.app.add_handler(MessageHandler(filters.ALL, other_ptb))
            self.app.add_error_handler(failed)
            await self.app.initialize()
        return self

    async def close(self) -> None:
        if self.library == "aiogram":
            await self.bot.session.close()
        else:
            await self.app.shutdown()

    async def feed(self) -> None:
        """Hand the bot every update the server has queued, as polling would."""
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{self.server.url}/bot{TOKEN}/getUpdates", json={"offset": self._offset}
            )
        for update in answer.json()["result"]:
            self._offset = update["update_id"] + 1
            if self.library == "aiogram":
                await self.dp.feed_raw_update(self.bot, update)
            else:
                await self.app.process_update(Update.de_json(update, self.app.bot))
        assert [] == self.errors

    def replies(self, chat_id: int) -> list[str]:
        """The texts the bot sent to ``chat_id``."""
        return [d.text for d in self.server.deliveries if d.chat_id == str(chat_id)]


@pytest.fixture
async def audience(sqlite_ledger: AsyncLedger) -> AsyncAudience:
    """The audience beside a ledger on a SQLite file."""
    return AsyncAudience.beside(sqlite_ledger)


@pytest.fixture(params=LIBRARIES)
async def bot(
    request: pytest.FixtureRequest, bot_api_server: BotAPIServer, audience: AsyncAudience
) -> AsyncIterator[BotUnderTest]:
    """The bot of each library, with the helpers for ``promo`` (the default) and ``digest``."""
    made = await BotUnderTest(request.param, bot_api_server, audience).start(categories=["digest"])
    yield made
    await made.close()


async def gone(audience: AsyncAudience, chat_id: int) -> tuple[str, str] | None:
    state = await audience.state(chat_id)
    return None if state.gone is None else (state.gone.reason.value, state.gone.source)


async def test_a_user_who_blocks_the_bot_is_gone_until_unblocking(bot: BotUnderTest) -> None:
    """my_chat_member to kicked in a private chat marks the user gone (blocked, by an
    update); back to member brings them back; the bot's own handler sees both."""
    bot.server.user_blocks(42)
    await bot.feed()
    assert ("blocked", "update") == await gone(bot.audience, 42)
    bot.server.user_unblocks(42)
    await bot.feed()
    assert None is await gone(bot.audience, 42)
    assert ["member kicked", "member member"] == bot.seen


@pytest.mark.parametrize(("chat_id", "status"), [(GROUP, "kicked"), (-42, "left"), ("@n", "left")])
async def test_a_group_that_removes_the_bot_is_gone_until_it_adds_it_back(
    bot: BotUnderTest, chat_id: int | str, status: str
) -> None:
    """Removed from a group or channel (left or kicked): gone, kicked; added back as a
    member or an administrator: back."""
    bot.server.bot_removed(chat_id, status=status)
    await bot.feed()
    recorded = -1000000000001 if chat_id == "@n" else int(chat_id)  # the channel's id
    assert ("kicked", "update") == await gone(bot.audience, recorded)
    bot.server.bot_added(chat_id, status="administrator")
    await bot.feed()
    assert None is await gone(bot.audience, recorded)


async def test_start_brings_a_user_back_and_still_reaches_the_bots_own_handler(
    bot: BotUnderTest,
) -> None:
    """/start from a user known to be gone brings them back, and the bot's own /start
    handler runs and welcomes them as before."""
    await bot.audience.mark_gone(42, GoneReason.BLOCKED, source="refusal")
    bot.server.user_says(42, "/start")
    await bot.feed()
    assert None is await gone(bot.audience, 42)
    assert ["start"] == bot.seen
    assert ["Welcome!"] == bot.replies(42)


@pytest.mark.parametrize("library", LIBRARIES)
async def test_start_leaves_a_gone_user_gone_when_told_to(
    library: str, bot_api_server: BotAPIServer, audience: AsyncAudience
) -> None:
    """start_comes_back=False: /start is the bot's own alone."""
    made = await BotUnderTest(library, bot_api_server, audience).start(start_comes_back=False)
    try:
        await audience.mark_gone(42, GoneReason.DEACTIVATED)
        bot_api_server.user_says(42, "/start")
        await made.feed()
    finally:
        await made.close()
    assert ("deactivated", "api") == await gone(audience, 42)
    assert ["start"] == made.seen


async def test_stop_and_subscribe_opt_out_and_in_with_a_reply(bot: BotUnderTest) -> None:
    """/stop opts out of the default category, /stop digest of digest, /subscribe digest
    back in; each is answered, and none reaches the bot's catch-all handler."""
    for text in ("/stop", "/stop digest", "/subscribe digest"):
        bot.server.user_says(42, text)
    await bot.feed()
    state = await bot.audience.state(42)
    assert ["promo"] == list(state.opted_out)
    assert ("command", "update") == (state.opted_out["promo"].how, state.opted_out["promo"].source)
    assert [
        "Done: no more promo messages. Send /subscribe promo to get them again.",
        "Done: no more digest messages. Send /subscribe digest to get them again.",
        "Done: you will get digest messages again.",
    ] == bot.replies(42)
    assert [] == bot.seen


async def test_a_category_the_bot_does_not_offer_writes_nothing(bot: BotUnderTest) -> None:
    """/stop with an unknown category and a forged button are answered with the list of
    categories and write nothing; the reply never repeats what the user wrote."""
    bot.server.user_says(42, "/stop <b>everything</b>")
    bot.server.user_presses(42, "notifyonce:stop:everything")
    await bot.feed()
    assert {} == (await bot.audience.state(42)).opted_out
    (reply,) = bot.replies(42)
    assert (
        "There is no such category. Send /stop or /subscribe with one of: promo, digest." == reply
    )
    assert "answerCallbackQuery" in bot.server.calls


async def test_the_unsubscribe_button_opts_out_and_answers_the_press(bot: BotUnderTest) -> None:
    """A press of unsubscribe_button("digest") under a delivered message opts the chat
    out of digest (how: button) and answers the callback query."""
    bot.server.user_says(7, "hello")  # the bot's own catch-all: not the helpers'
    bot.server.user_presses(42, "notifyonce:stop:digest")
    await bot.feed()
    state = await bot.audience.state(42)
    assert (["digest"], "button") == (list(state.opted_out), state.opted_out["digest"].how)
    assert 1 == bot.server.calls.count("answerCallbackQuery")
    assert ["other hello"] == bot.seen


@pytest.mark.parametrize("library", LIBRARIES)
async def test_commands_and_texts_of_ones_own(
    library: str, bot_api_server: BotAPIServer, audience: AsyncAudience
) -> None:
    """Renamed commands and replies are used; the default names are the bot's own again."""
    made = await BotUnderTest(library, bot_api_server, audience).start(
        default_category="news",
        stop_command="unsubscribe",
        subscribe_command="resubscribe",
        texts={"stopped": "No more {category}; /{subscribe} undoes it."},
    )
    try:
        for text in ("/unsubscribe", "/stop"):
            bot_api_server.user_says(42, text)
        await made.feed()
    finally:
        await made.close()
    assert ["news"] == list((await audience.state(42)).opted_out)
    assert ["No more news; /resubscribe undoes it."] == made.replies(42)
    assert ["other /stop"] == made.seen


@pytest.mark.parametrize("build", [audience_router, audience_handlers])
@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"stop_command": "/stop"}, "stop_command"),
        ({"subscribe_command": "Sub"}, "subscribe_command"),
        ({"subscribe_command": "stop"}, "subscribe_command"),
        ({"default_category": ""}, "category"),
        ({"categories": "promo"}, "categories"),
        ({"categories": ["ok", 3]}, "category"),
        ({"start_comes_back": "yes"}, "start_comes_back"),
        ({"texts": {"bye": "x"}}, "texts"),
        ({"texts": {"stopped": "{name} is out"}}, "texts"),
        ({"texts": {"pressed": " "}}, "texts"),
    ],
)
def test_a_bad_setting_is_refused_when_built_naming_it(
    build: Any, audience: AsyncAudience, options: dict[str, Any], field: str
) -> None:
    """Each bad argument raises a ValidationError naming it, before any update."""
    with pytest.raises(ValidationError) as caught:
        build(audience, **options)
    assert field == caught.value.field


@pytest.mark.parametrize("build", [audience_router, audience_handlers])
def test_an_audience_is_required(build: Any, sqlite_ledger: AsyncLedger) -> None:
    """A ledger (or anything else) where the audience goes is refused naming it."""
    with pytest.raises(ValidationError) as caught:
        build(sqlite_ledger)
    assert "audience" == caught.value.field
