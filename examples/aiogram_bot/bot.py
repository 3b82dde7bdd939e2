"""An aiogram 3 bot whose trial reminders go out once each, however often it restarts.

- ``/start`` begins a trial for the chat and welcomes it once: the welcome is a
  notifyonce slot sent through ``AiogramSender``, so a second ``/start`` (or the same
  update handed out again after a restart) gets a plain reply instead of a second welcome.
- A reminder job runs next to polling, started by the Dispatcher's startup hook and
  stopped by its shutdown hook: every ``--job-every`` seconds it sends the reminders of
  the windows open now (6.5-5.0 h, 3.5-2.2 h and 1.2-0.4 h before the trial ends).

    python examples/aiogram_bot/bot.py --token 123456:ABC
    python examples/aiogram_bot/bot.py --token 123456:ABC --database-url postgresql+asyncpg://app@db/app
    python examples/aiogram_bot/bot.py --token 123456:ABC --api-url http://127.0.0.1:8081

(the last one against ``notifyonce serve-test-api``, a local Bot API server).

The bot keeps its state in tables of its own (``notifyonce_aiogram_trials`` and the ledger
``notifyonce_aiogram_slots``), so it never touches your application's tables. The test
suite runs it against notifyonce.testing.BotAPIServer (``--api-url``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.filters import CommandStart
from aiogram.types import Message as TelegramMessage
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    DeadlineRange,
    Message,
    Notification,
    Notifier,
    Outcome,
    Schedule,
    Window,
    deadline_filter,
)
from notifyonce.aiogram import AiogramSender

UTC = dt.timezone.utc
HERE = Path(__file__).resolve().parent
logger = logging.getLogger("aiogram_bot")

# Tables of the example's own: pointed at your database, it never touches your tables.
TRIALS_TABLE = "notifyonce_aiogram_trials"
LEDGER_TABLE = "notifyonce_aiogram_slots"
metadata = sa.MetaData()
trials = sa.Table(
    TRIALS_TABLE,
    metadata,
    sa.Column("chat_id", sa.BigInteger, primary_key=True),
    sa.Column("trial_ends_at", sa.DateTime, nullable=False),  # naive UTC
)

TEXTS = {
    "trial_6h": "Your trial ends in about 6 hours.",
    "trial_3h": "Your trial ends in about 3 hours.",
    "trial_1h": "Last call: your trial ends within the hour.",
}
WELCOME = "Welcome! Your trial has started; you will hear from me before it ends."


@dataclass(frozen=True)
class Settings:
    """What the command line decides."""

    token: str
    database_url: str
    api_url: str | None = None
    trial: dt.timedelta = dt.timedelta(hours=72)
    job_every: dt.timedelta = dt.timedelta(minutes=5)


def trial_schedule(job_every: dt.timedelta) -> Schedule:
    """The reminder windows, checked against how often the job runs."""
    hours = dt.timedelta(hours=1)
    return Schedule(
        [
            Window("trial_6h", opens_before=6.5 * hours, closes_before=5 * hours),
            Window("trial_3h", opens_before=3.5 * hours, closes_before=2.2 * hours),
            Window("trial_1h", opens_before=1.2 * hours, closes_before=0.4 * hours),
        ],
        period=job_every,
    )


def due_trials(engine: AsyncEngine):  # type: ignore[no-untyped-def]
    """The selector ``Notifier.tick`` calls for each open window."""

    async def select(window: Window, deadlines: DeadlineRange) -> list[Notification]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(trials.c.chat_id, trials.c.trial_ends_at).where(
                    deadline_filter(trials.c.trial_ends_at, deadlines)
                )
            )
            return [
                Notification(
                    row.chat_id,
                    row.trial_ends_at.replace(tzinfo=UTC),  # the cycle: this trial's end
                    Message(TEXTS[window.action]),
                )
                for row in rows
            ]

    return select


async def reminder_job(notifier: Notifier, schedule: Schedule, engine: AsyncEngine) -> None:
    """Run the schedule every period until cancelled; a failed run does not end the job."""
    select = due_trials(engine)
    while True:
        try:
            report = await notifier.tick(schedule, select)
            logger.info("reminders: %r", report)
        except Exception:
            logger.exception("reminder run failed; the next run picks up what it left")
        await asyncio.sleep(schedule.period.total_seconds())


async def on_startup(dispatcher: Dispatcher, bot: Bot, settings: Settings) -> None:
    """Open the database, build the Notifier on the bot's own session, start the job."""
    engine = create_async_engine(settings.database_url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    ledger = AsyncLedger(engine, table_name=LEDGER_TABLE)
    await ledger.create_schema()
    notifier = Notifier(ledger, AiogramSender(bot, request_timeout=10))
    schedule = trial_schedule(settings.job_every)
    dispatcher["engine"] = engine
    dispatcher["notifier"] = notifier
    dispatcher["job"] = asyncio.create_task(reminder_job(notifier, schedule, engine))


async def on_shutdown(dispatcher: Dispatcher) -> None:
    """Stop the job, then close the database (aiogram closes the bot's session)."""
    job: asyncio.Task[None] = dispatcher["job"]
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
    engine: AsyncEngine = dispatcher["engine"]
    await engine.dispose()


async def start(
    message: TelegramMessage, notifier: Notifier, engine: AsyncEngine, settings: Settings
) -> None:
    """/start: begin a trial (once per chat) and welcome the chat once."""
    chat_id = message.chat.id
    ends = (dt.datetime.now(UTC) + settings.trial).replace(tzinfo=None, microsecond=0)
    async with engine.begin() as conn:
        known = await conn.scalar(
            sa.select(trials.c.trial_ends_at).where(trials.c.chat_id == chat_id)
        )
        if known is None:
            await conn.execute(trials.insert().values(chat_id=chat_id, trial_ends_at=ends))
    outcome = await notifier.send_once("welcome", chat_id, "trial", Message(WELCOME))
    if outcome is Outcome.DUPLICATE:
        await message.answer(f"Your trial is running until {known or ends:%Y-%m-%d %H:%M} UTC.")


def create_bot(settings: Settings) -> Bot:
    """The bot, on Telegram or on the server at ``settings.api_url``."""
    if settings.api_url is None:
        return Bot(settings.token)
    api = TelegramAPIServer.from_base(settings.api_url)
    return Bot(settings.token, session=AiohttpSession(api=api))


def create_dispatcher(settings: Settings) -> Dispatcher:
    """The Dispatcher with its startup and shutdown hooks and the /start handler."""
    dispatcher = Dispatcher(settings=settings)
    dispatcher.startup.register(on_startup)
    dispatcher.shutdown.register(on_shutdown)
    dispatcher.message.register(start, CommandStart())
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
        "--database-url",
        default=os.environ.get("NOTIFYONCE_DATABASE_URL"),
        metavar="URL",
        help="SQLAlchemy async URL, e.g. postgresql+asyncpg://user@host/db "
        "(default: $NOTIFYONCE_DATABASE_URL, else a SQLite file next to this script); "
        f"the bot uses only its own tables {TRIALS_TABLE} and {LEDGER_TABLE}",
    )
    parser.add_argument(
        "--api-url",
        metavar="URL",
        default=os.environ.get("NOTIFYONCE_BOT_API_URL"),
        help="a Bot API server other than Telegram's, e.g. the local one of "
        "`notifyonce serve-test-api` (default: $NOTIFYONCE_BOT_API_URL, else Telegram)",
    )
    parser.add_argument(
        "--trial-hours",
        type=float,
        default=72.0,
        help="how long a trial started by /start lasts, in hours (default: 72)",
    )
    parser.add_argument(
        "--job-every",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how often the reminder job runs (default: 300)",
    )
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token is needed (or set NOTIFYONCE_BOT_TOKEN)")
    return Settings(
        token=args.token,
        database_url=args.database_url or f"sqlite+aiosqlite:///{HERE / 'aiogram_bot.sqlite3'}",
        api_url=args.api_url,
        trial=dt.timedelta(hours=args.trial_hours),
        job_every=dt.timedelta(seconds=args.job_every),
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    bot = create_bot(settings)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(create_dispatcher(settings).start_polling(bot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
