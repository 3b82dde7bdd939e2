"""A broadcast to all users of a bot: stopped halfway, resumed, each user reached once.

    python examples/broadcast.py                 # simulated (FakeSender, a SQLite file)
    python examples/broadcast.py --users 20000   # a bigger simulated audience
    NOTIFYONCE_BOT_TOKEN=123:ABC python examples/broadcast.py --live --chats chats.txt

The simulation builds a ``users`` table, starts the campaign, stops it at about half (as a
deploy or Ctrl-C would), starts it again and checks that every active user got the news
exactly once. ``--live`` sends the same campaign through Telegram to the chat ids of a file.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    Broadcast,
    BroadcastProgress,
    Message,
    Notifier,
    Result,
    recipients_from_file,
    recipients_from_query,
)
from notifyonce.testing import FakeSender

NEWS = Message("Our new tariff is out: twice the storage, same price.")
USERS = sa.Table(
    "users",
    sa.MetaData(),
    sa.Column("chat_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("active", sa.Boolean, nullable=False),
)


def show(progress: BroadcastProgress) -> None:
    eta = "?" if progress.eta is None else f"{progress.eta:.0f} s"
    print(
        f"  {progress.done}/{progress.total}: sent {progress.sent}, "
        f"already done {progress.duplicate}, {progress.rate:.0f}/s, ETA {eta}"
    )


async def make_users(engine: AsyncEngine, count: int) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(USERS.create)
        rows = [{"chat_id": 1000 + i, "active": i % 10 != 0} for i in range(count)]
        await conn.execute(USERS.insert(), rows)


async def simulate(users: int, directory: Path) -> int:
    engine = create_async_engine(f"sqlite+aiosqlite:///{directory / 'broadcast.sqlite3'}")
    await make_users(engine, users)
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    sender = FakeSender(latency=0.002)
    active = sa.select(USERS.c.chat_id).where(USERS.c.active).order_by(USERS.c.chat_id)
    half = (await recipients_from_query(engine, active).count()) // 2
    handled = 0

    def stop_at_half(result: Result) -> None:  # a deploy, a crash, a Ctrl-C
        nonlocal handled
        handled += 1
        if handled == half:
            first.cancel()

    def campaign(notifier: Notifier) -> Broadcast:
        source = recipients_from_query(engine, active)
        return Broadcast(
            notifier, "news", "2026-12-tariff", NEWS, source, on_progress=show, every=0.5
        )

    print(f"broadcasting to the active ones of {users} users; stopping at about half")
    first = campaign(Notifier(ledger, sender, concurrency=32, on_result=stop_at_half))
    stopped = await first.run()
    print(f"stopped: {stopped.progress.sent} sent, cancelled={stopped.cancelled}")

    print("the same campaign again: only the users not reached yet")
    second = campaign(Notifier(ledger, sender, concurrency=32))
    done = await second.run()
    print(f"resumed: {done.progress.sent} sent, {done.progress.duplicate} already done")

    per_chat = Counter(record.recipient for record in sender.sent)
    expected = done.progress.total or 0
    twice = sum(1 for n in per_chat.values() if n > 1)
    # Sends cut short by the stop are unknown (at most once): never sent again.
    missing = expected - len(per_chat)
    print(f"active users: {expected}; reached: {len(per_chat)}; twice: {twice}")
    print(f"unknown (in flight at the stop, not resent): {len(done.unknown)}")
    await engine.dispose()
    if twice or missing > len(done.unknown):
        print("some user was reached twice or missed")
        return 1
    if done.unknown:
        # At most once: a send cut short by the stop may or may not have arrived.
        print(
            f"no active user got the news twice; {len(done.unknown)} were in flight at the "
            "stop and are unknown: check them by hand before sending them again."
        )
    else:
        print("every active user got the news once.")
    return 0


async def live(chats: str, database_url: str) -> int:
    from notifyonce.telegram import TelegramSender

    token = os.environ.get("NOTIFYONCE_BOT_TOKEN")
    if not token:
        print("set NOTIFYONCE_BOT_TOKEN", file=sys.stderr)
        return 2
    engine = create_async_engine(database_url)
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    async with TelegramSender(token) as sender:
        broadcast = Broadcast(
            Notifier(ledger, sender), "news", "2026-12-tariff", NEWS, recipients_from_file(chats)
        )
        broadcast.on_progress = show
        report = await broadcast.run()
    await engine.dispose()
    print(f"sent {report.progress.sent}; unknown: {report.unknown}")
    return 0


def main() -> int:
    # The stop leaves a line per claim it frees (WARNING); the summary says it all here.
    logging.getLogger("notifyonce").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulate", action="store_true", help="the default")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--live", action="store_true", help="send through Telegram")
    parser.add_argument("--chats", help="with --live: a file of chat ids, one a line")
    parser.add_argument("--database-url", default="sqlite+aiosqlite:///broadcast.sqlite3")
    args = parser.parse_args()
    if args.live:
        if not args.chats:
            parser.error("--live needs --chats")
        return asyncio.run(live(args.chats, args.database_url))
    with tempfile.TemporaryDirectory() as directory:
        return asyncio.run(simulate(args.users, Path(directory)))


if __name__ == "__main__":
    raise SystemExit(main())
