"""The admin-broadcast example bot, polling the local Bot API server: users /start, the
admin replies /broadcast to a post, every user gets a copy once, the admin one progress
message; a second /broadcast of the same post sends nothing more."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType

import pytest

from notifyonce.testing import BotAPIServer

from ._examples import load_module, wait_for

pytest.importorskip("aiogram")

BOT = Path(__file__).resolve().parent.parent / "examples" / "admin_broadcast" / "bot.py"
ADMIN = 777
USERS = list(range(1001, 1021))


@pytest.fixture(scope="module")
def example() -> ModuleType:
    """examples/admin_broadcast/bot.py, imported as a module."""
    return load_module("admin_broadcast_example_bot", BOT)


async def test_a_reply_broadcast_copies_the_post_to_every_user_once(
    example: ModuleType, tmp_path: Path
) -> None:
    """20 users /start; the admin replies /broadcast to a post: each user gets one copy,
    the admin chat one progress message ending with the summary. A user's /broadcast is
    refused; the admin's second /broadcast of the post sends nobody anything again."""
    db = tmp_path / "bot.sqlite3"
    with BotAPIServer() as server:
        settings = example.Settings(
            "123456:TEST", f"sqlite+aiosqlite:///{db}", frozenset({ADMIN}), server.url
        )
        dispatcher = example.create_dispatcher(settings)
        polling = asyncio.create_task(
            dispatcher.start_polling(
                example.create_bot(settings), handle_signals=False, polling_timeout=1
            )
        )

        def copies() -> list[str]:
            return [d.chat_id for d in server.deliveries if d.method == "copyMessage"]

        def admin_text(message_id: int) -> str:
            return server.message_text(ADMIN, message_id) or ""

        try:
            for user in USERS:
                server.user_says(user, "/start")
            await wait_for(lambda: len(server.deliveries) >= len(USERS))  # the welcomes
            post = server.post(ADMIN, "The winter sale starts now")
            server.user_says(USERS[0], "/broadcast")
            server.user_says(ADMIN, "/broadcast", reply_to=post)
            await wait_for(lambda: any(d.chat_id == str(ADMIN) for d in server.deliveries))
            progress = [d for d in server.deliveries if d.chat_id == str(ADMIN)]
            summary = f"Broadcast broadcast/post-{ADMIN}-{post}: finished, 20 of 20"
            await wait_for(lambda: admin_text(progress[0].message_id).startswith(summary))

            server.user_says(ADMIN, "/broadcast", reply_to=post)  # again: nothing resent
            again = f"Broadcast broadcast/post-{ADMIN}-{post}: finished, 20 of 20"
            await wait_for(lambda: "already done 20" in admin_text(progress[0].message_id))
            assert admin_text(progress[0].message_id).startswith(again)
        finally:  # stop_polling waits for the shutdown hook, which must return
            await asyncio.wait_for(dispatcher.stop_polling(), 10)
            await asyncio.wait_for(asyncio.shield(polling), 10)
            polling.cancel()
        deliveries = server.deliveries

    assert sorted(str(u) for u in USERS) == sorted(copies())
    assert {"The winter sale starts now"} == {
        d.text for d in deliveries if d.method == "copyMessage"
    }
    refused = [d for d in deliveries if d.chat_id == str(USERS[0]) and "admins" in d.text]
    assert 1 == len(refused), "a user's /broadcast is refused"
    to_admin = [d for d in deliveries if d.chat_id == str(ADMIN)]
    assert 1 == len(to_admin), "one progress message over both /broadcast replies"
