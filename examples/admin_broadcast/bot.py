"""An aiogram 3 bot whose admin broadcasts a post by replying to it with /broadcast.

- ``/start`` from anyone records the chat in the bot's users table.
- An admin (``--admin``, repeatable) composes the post in the bot's chat as Telegram
  allows (formatted text, a photo, an album's first photo, a poll, buttons), then replies
  to it with ``/broadcast``. The bot copies the post to every user with ``copyMessage``
  as a notifyonce campaign named after the post, and shows the progress in the admin's
  chat: one message, edited in place, ending with the summary.
- A campaign sends each user the post once: replying ``/broadcast`` again, or restarting
  the bot while it runs and replying again, sends only to the users not handled yet, and
  edits the same progress message.

    python examples/admin_broadcast/bot.py --token 123456:ABC --admin 777
    python examples/admin_broadcast/bot.py --token 123456:ABC --admin 777 --api-url http://127.0.0.1:8081

(the last one against ``notifyonce serve-test-api``, a local Bot API server).

The bot keeps its state in tables of its own (``notifyonce_broadcast_users`` and the
ledger ``notifyonce_broadcast_slots``). The test suite runs it against
notifyonce.testing.BotAPIServer (``--api-url``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.filters import Command, CommandStart
from aiogram.types import Message as TelegramMessage
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    Broadcast,
    BroadcastReport,
    Message,
    Notifier,
    ProgressMessage,
    recipients_from_query,
)
from notifyonce.telegram import RateLimit, TelegramSender

HERE = Path(__file__).resolve().parent
logger = logging.getLogger("admin_broadcast")

USERS_TABLE = "notifyonce_broadcast_users"
LEDGER_TABLE = "notifyonce_broadcast_slots"
metadata = sa.MetaData()
users = sa.Table(USERS_TABLE, metadata, sa.Column("chat_id", sa.BigInteger, primary_key=True))


@dataclass(frozen=True)
class Settings:
    token: str
    database_url: str
    admins: frozenset[int]
    api_url: str | None = None


async def on_startup(dispatcher: Dispatcher, settings: Settings) -> None:
    """Open the database and the sender the campaigns go through (one rate limit)."""
    engine = create_async_engine(settings.database_url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    ledger = AsyncLedger(engine, table_name=LEDGER_TABLE)
    await ledger.create_schema()
    where = {} if settings.api_url is None else {"base_url": settings.api_url}
    sender = TelegramSender(settings.token, rate_limit=RateLimit(), **where)
    dispatcher["engine"] = engine
    dispatcher["sender"] = sender
    dispatcher["notifier"] = Notifier(ledger, sender)
    dispatcher["campaigns"] = set()  # running campaign tasks, kept until they end


async def on_shutdown(dispatcher: Dispatcher) -> None:
    """Stop running campaigns (a later /broadcast resumes them), close what was opened."""
    campaigns: set[asyncio.Task[BroadcastReport]] = dispatcher["campaigns"]
    for task in campaigns:
        task.cancel()
    await asyncio.gather(*campaigns, return_exceptions=True)
    sender: TelegramSender = dispatcher["sender"]
    await sender.aclose()
    engine: AsyncEngine = dispatcher["engine"]
    await engine.dispose()


async def start(message: TelegramMessage, engine: AsyncEngine) -> None:
    """/start: remember the chat (once)."""
    async with engine.begin() as conn:
        known = await conn.scalar(
            sa.select(users.c.chat_id).where(users.c.chat_id == message.chat.id)
        )
        if known is None:
            await conn.execute(users.insert().values(chat_id=message.chat.id))
    await message.answer("Welcome! You will get our news here.")


async def broadcast(
    message: TelegramMessage,
    settings: Settings,
    engine: AsyncEngine,
    sender: TelegramSender,
    notifier: Notifier,
    campaigns: set[asyncio.Task[BroadcastReport]],
) -> None:
    """/broadcast in reply to a post, from an admin: copy the post to every user."""
    if message.from_user is None or message.from_user.id not in settings.admins:
        await message.answer("Only the bot's admins can broadcast.")
        return
    post = message.reply_to_message
    if post is None:
        await message.answer("Reply with /broadcast to the post to send.")
        return
    campaign = f"post-{post.chat.id}-{post.message_id}"  # one campaign per post
    run = Broadcast(
        notifier,
        "broadcast",
        campaign,
        Message.copy(post.chat.id, post.message_id),
        recipients_from_query(engine, sa.select(users.c.chat_id).order_by(users.c.chat_id)),
        progress_chat=ProgressMessage(sender, message.chat.id),
    )
    task = asyncio.create_task(run.run())  # the handler returns; polling goes on
    campaigns.add(task)
    task.add_done_callback(lambda done: _finished(campaigns, done))


def _finished(
    campaigns: set[asyncio.Task[BroadcastReport]], task: asyncio.Task[BroadcastReport]
) -> None:
    """Forget an ended campaign; log how it ended (its summary is in the admin's chat)."""
    campaigns.discard(task)
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:  # a post deleted before the first send, a ledger failure...
        logger.error("the broadcast stopped: %s", error)
    else:
        logger.info("broadcast %s finished", task.result().campaign)


def create_bot(settings: Settings) -> Bot:
    """The bot, on Telegram or on the server at ``settings.api_url``."""
    if settings.api_url is None:
        return Bot(settings.token)
    return Bot(
        settings.token, session=AiohttpSession(api=TelegramAPIServer.from_base(settings.api_url))
    )


def create_dispatcher(settings: Settings) -> Dispatcher:
    """The Dispatcher with its startup and shutdown hooks and the two handlers."""
    dispatcher = Dispatcher(settings=settings)
    dispatcher.startup.register(on_startup)
    dispatcher.shutdown.register(on_shutdown)
    dispatcher.message.register(start, CommandStart())
    dispatcher.message.register(broadcast, Command("broadcast"))
    return dispatcher


def parse_args(argv: list[str] | None = None) -> Settings:
    """The settings from the command line and the environment."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--token",
        default=os.environ.get("NOTIFYONCE_BOT_TOKEN"),
        help="the bot's token from @BotFather (default: $NOTIFYONCE_BOT_TOKEN)",
    )
    parser.add_argument(
        "--admin",
        type=int,
        action="append",
        required=True,
        help="the Telegram user id of an admin who may broadcast (repeat for more)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("NOTIFYONCE_DATABASE_URL"),
        metavar="URL",
        help="SQLAlchemy async URL, e.g. postgresql+asyncpg://user@host/db "
        "(default: $NOTIFYONCE_DATABASE_URL, else a SQLite file next to this script); "
        f"the bot uses only its own tables {USERS_TABLE} and {LEDGER_TABLE}",
    )
    parser.add_argument(
        "--api-url",
        metavar="URL",
        default=os.environ.get("NOTIFYONCE_BOT_API_URL"),
        help="a Bot API server other than Telegram's, e.g. the local one of "
        "`notifyonce serve-test-api` (default: $NOTIFYONCE_BOT_API_URL, else Telegram)",
    )
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token is required (or set NOTIFYONCE_BOT_TOKEN)")
    database_url = args.database_url or f"sqlite+aiosqlite:///{HERE / 'broadcast.sqlite3'}"
    return Settings(args.token, database_url, frozenset(args.admin), args.api_url)


async def main() -> None:
    logging.basicConfig(level=logging.INFO)
    settings = parse_args()
    await create_dispatcher(settings).start_polling(create_bot(settings))


if __name__ == "__main__":
    asyncio.run(main())
