"""The aiogram example bot, polling the local Bot API server: hooks, handler and reminder job."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from notifyonce.testing import BotAPIServer

from ._examples import load_module, wait_for

pytest.importorskip("aiogram")

BOT = Path(__file__).resolve().parent.parent / "examples" / "aiogram_bot" / "bot.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    """examples/aiogram_bot/bot.py, imported as a module."""
    return load_module("aiogram_example_bot", BOT)


async def test_bot_welcomes_once_and_sends_the_open_reminder_once(
    example: ModuleType, tmp_path: Path
) -> None:
    """Polling the local server: one welcome, one reply to a second /start, one reminder."""
    db = tmp_path / "bot.sqlite3"
    settings = example.Settings(
        token="123456:TEST",
        database_url=f"sqlite+aiosqlite:///{db}",
        trial=dt.timedelta(hours=1),  # the 1.2-0.4 h window is open at once
        job_every=dt.timedelta(seconds=0.2),
    )
    with BotAPIServer() as server:
        settings = example.Settings(**{**settings.__dict__, "api_url": server.url})
        dispatcher = example.create_dispatcher(settings)
        polling = asyncio.create_task(
            dispatcher.start_polling(
                example.create_bot(settings), handle_signals=False, polling_timeout=1
            )
        )
        server.user_says(42, "/start")
        await wait_for(lambda: len(server.deliveries) >= 2)
        server.user_says(42, "/start")
        await wait_for(lambda: len(server.deliveries) >= 3)
        await asyncio.sleep(1.0)  # five more runs of the job: nothing more to send
        try:  # stop_polling waits for the shutdown hooks, which must return
            await asyncio.wait_for(dispatcher.stop_polling(), 10)
            await asyncio.wait_for(asyncio.shield(polling), 10)
        finally:
            job = dispatcher.workflow_data.get("job")
            stopped = job is None or job.done()
            if job is not None:
                job.cancel()  # bounded even when the hook failed to stop it
            polling.cancel()
        texts = sorted(d.text for d in server.deliveries)
        calls = server.calls

    replies = [text for text in texts if text.startswith("Your trial is running until")]
    assert 1 == len(replies)  # the second /start: a reply, not a second welcome
    assert sorted([example.WELCOME, example.TEXTS["trial_1h"], replies[0]]) == texts
    assert {"42"} == {d.chat_id for d in server.deliveries}
    assert "getMe" == calls[0]
    assert 3 <= calls.count("getUpdates")
    assert stopped  # the shutdown hook stopped the job
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        slots = conn.execute(sa.text("SELECT action, status FROM notifyonce_aiogram_slots"))
        assert [("trial_1h", "sent"), ("welcome", "sent")] == sorted(slots.all())
    engine.dispose()


def test_help_describes_every_option() -> None:
    """--help runs without a token and gives every option a description."""
    done = subprocess.run(
        [sys.executable, str(BOT), "--help"], capture_output=True, text=True, check=False
    )
    assert 0 == done.returncode
    for option in ("--token", "--database-url", "--api-url", "--trial-hours", "--job-every"):
        line = done.stdout.split(option, 1)[1].split("\n  -", 1)[0]
        assert len(line.split()) > 3, f"{option} has no help text"
