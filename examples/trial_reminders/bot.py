"""A trial-reminder bot: three reminders before a user's trial ends, each sent once.

A job runs every 5 minutes, picks the users whose trial ends in 6.5-5.0 h, 3.5-2.2 h or
1.2-0.4 h, and reminds them, once per trial (the cycle is the trial's end, so a user who
starts a new trial gets the chain again).

    python examples/trial_reminders/bot.py --simulate        # hours of simulated time, in seconds
    python examples/trial_reminders/bot.py                   # the job every 5 min, console sender
    python examples/trial_reminders/bot.py --token 123:ABC   # send through Telegram for real
    python examples/trial_reminders/bot.py --database-url postgresql+asyncpg://user@host/db

Defaults: a SQLite file next to this script, and a console sender that prints what would
reach Telegram. ``NOTIFYONCE_BOT_TOKEN`` and ``NOTIFYONCE_DATABASE_URL`` work too.

The bot keeps its demo users and its ledger in tables of its own (``notifyonce_demo_users``,
``notifyonce_demo_slots``), so it never reads or writes your application's tables; the
simulation refuses a database where its tables already exist and drops them when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    DeadlineRange,
    DeliveryMode,
    Message,
    Notification,
    Notifier,
    Receipt,
    Schedule,
    Sender,
    Window,
    window_filter,
)

UTC = dt.timezone.utc
HERE = Path(__file__).resolve().parent

# Windows wider than the job period, with gaps between them.
TRIAL = Schedule(
    [
        Window(
            "trial_6h", opens_before=dt.timedelta(hours=6.5), closes_before=dt.timedelta(hours=5)
        ),
        Window(
            "trial_3h", opens_before=dt.timedelta(hours=3.5), closes_before=dt.timedelta(hours=2.2)
        ),
        Window(
            "trial_1h", opens_before=dt.timedelta(hours=1.2), closes_before=dt.timedelta(hours=0.4)
        ),
    ],
    period=dt.timedelta(minutes=5),
)

TEXTS = {
    "trial_6h": "Your trial ends in about 6 hours.",
    "trial_3h": "Your trial ends in about 3 hours. Subscribe to keep your data.",
    "trial_1h": "Last call: your trial ends within the hour.",
}

# Tables of the example's own: pointed at your database, it never touches your tables.
USERS_TABLE = "notifyonce_demo_users"
LEDGER_TABLE = "notifyonce_demo_slots"
# The ledger's create_schema() makes tables beside its own: the recipients (who blocked the
# bot), a digest's events and the frequency caps' seats.
RECIPIENTS_TABLE = f"{LEDGER_TABLE}_recipients"
BESIDE_TABLES = (RECIPIENTS_TABLE, f"{LEDGER_TABLE}_digest_events", f"{LEDGER_TABLE}_cap_seats")


def drop_ledger_tables(conn: sa.Connection) -> None:
    """Drop the ledger's table and the tables beside it, if they are there (their indexes
    go with them)."""
    for name in (LEDGER_TABLE, *BESIDE_TABLES):
        sa.Table(name, sa.MetaData()).drop(conn, checkfirst=True)


metadata = sa.MetaData()
users = sa.Table(
    USERS_TABLE,
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("chat_id", sa.BigInteger, nullable=False),
    # Stored as naive UTC, which is what window_filter binds for a plain DateTime column.
    sa.Column("trial_ends_at", sa.DateTime, nullable=False),
)


class ConsoleSender:
    """Prints what would reach Telegram instead of sending it."""

    def __init__(self, clock: Callable[[], dt.datetime], quiet: bool = False) -> None:
        self.clock = clock
        self.quiet = quiet
        self.delivered: Counter[tuple[str, str]] = Counter()
        self._next_id = 0

    async def send(self, recipient: str, message: Message) -> Receipt:
        self._next_id += 1
        self.delivered[(recipient, message.text)] += 1
        if not self.quiet:
            print(f"  {self.clock():%H:%M} -> chat {recipient}: {message.text}")
        return Receipt(recipient, message_id=self._next_id)


def as_utc(value: dt.datetime) -> dt.datetime:
    """A deadline read from the database as an aware datetime.

    SQLite and MySQL read a DateTime column back naive: it holds UTC. PostgreSQL reads a
    timestamptz back aware, in the session's zone: its offset is kept, never replaced.
    """
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def make_selector(engine: AsyncEngine, now: dt.datetime) -> Callable[..., object]:
    async def select(window: Window, deadlines: DeadlineRange) -> list[Notification]:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(users.c.id, users.c.chat_id, users.c.trial_ends_at).where(
                    window_filter(users.c.trial_ends_at, window, now)
                )
            )
            return [
                Notification(
                    subject=row.id,
                    cycle=as_utc(row.trial_ends_at),  # the cycle: this trial's end
                    message=Message(TEXTS[window.action]),
                    recipient=str(row.chat_id),
                )
                for row in rows
            ]

    return select


class TablesExistError(RuntimeError):
    """The simulation's tables are already in the database: it will not write into them."""


async def create_tables(engine: AsyncEngine) -> None:
    """Create the simulation's own tables; refuse if any of them already exists."""
    async with engine.begin() as conn:
        existing = await conn.run_sync(lambda c: set(sa.inspect(c).get_table_names()))
        taken = sorted(existing & {USERS_TABLE, LEDGER_TABLE, *BESIDE_TABLES})
        if taken:
            raise TablesExistError(
                f"the database already has {', '.join(taken)}: the simulation creates and "
                "drops its own tables, and writes into no table it did not create. Drop "
                "them (a simulation that was interrupted leaves them) or use another database."
            )
        await conn.run_sync(metadata.create_all)


async def drop_tables(engine: AsyncEngine) -> None:
    """Drop the tables the simulation created (the ledger's and the demo users')."""
    async with engine.begin() as conn:
        await conn.run_sync(drop_ledger_tables)
        await conn.run_sync(metadata.drop_all)


async def create_users(
    engine: AsyncEngine, count: int, start: dt.datetime, random_state: int
) -> None:
    rng = random.Random(random_state)
    async with engine.begin() as conn:
        await conn.execute(
            users.insert(),
            [
                {
                    "id": i,
                    "chat_id": 100_000 + i,
                    "trial_ends_at": (
                        start
                        + dt.timedelta(hours=6.6)
                        + dt.timedelta(minutes=rng.randrange(0, 120))
                    ).replace(tzinfo=None),
                }
                for i in range(1, count + 1)
            ],
        )


async def simulate(database_url: str, *, users_count: int, workers: int, random_state: int) -> int:
    """Run 8 simulated hours with restarts inside open windows; return the duplicates seen."""
    start = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    engine = create_async_engine(database_url)
    try:
        await create_tables(engine)
    except BaseException:
        await engine.dispose()
        raise
    try:
        return await _simulate(engine, start, users_count, workers, random_state)
    finally:
        await drop_tables(engine)
        await engine.dispose()


async def _simulate(
    engine: AsyncEngine, start: dt.datetime, users_count: int, workers: int, random_state: int
) -> int:
    now = start

    def clock() -> dt.datetime:
        return now

    await create_users(engine, users_count, start, random_state)
    sender = ConsoleSender(clock, quiet=True)
    restarts = {start + dt.timedelta(minutes=m) for m in (35, 60, 95)}  # inside open windows
    naive_sent: set[tuple[int, str]] = set()  # the incident's in-memory set, as the control
    naive_counts: Counter[tuple[int, str]] = Counter()

    def fresh_workers() -> list[Notifier]:
        # A restart: new ledger and notifier objects, only the database survives.
        ledgers = [
            AsyncLedger(engine, table_name=LEDGER_TABLE, clock=clock) for _ in range(workers)
        ]
        return [Notifier(ledger, sender) for ledger in ledgers]

    await AsyncLedger(engine, table_name=LEDGER_TABLE, clock=clock).create_schema()
    notifiers = fresh_workers()
    runs = restarts_done = 0
    while now <= start + dt.timedelta(hours=8, minutes=40):
        if now in restarts:
            notifiers = fresh_workers()
            naive_sent = set()  # the in-memory set does not survive a restart
            restarts_done += 1
        select = make_selector(engine, now)
        await asyncio.gather(*(n.tick(TRIAL, select, now=now) for n in notifiers))
        for window, _ in TRIAL.open_windows(now):
            for item in await select(window, _):
                key = (int(item.subject), window.action)
                if key not in naive_sent:
                    naive_sent.add(key)
                    naive_counts[key] += 1
        runs += 1
        now += TRIAL.period

    expected = users_count * len(TRIAL.windows)
    sent = sum(sender.delivered.values())
    duplicates = sum(n - 1 for n in sender.delivered.values() if n > 1)
    naive_duplicates = sum(n - 1 for n in naive_counts.values() if n > 1)
    print(f"simulated {runs} runs of a 5-minute job over 8h40m, {workers} workers each run,")
    print(f"{restarts_done} restarts while windows were open, {users_count} users in trial.")
    print()
    print(f"  reminders due            {expected}")
    print(f"  notifyonce sent          {sent}   duplicates: {duplicates}")
    print(
        f"  in-memory set would send {sum(naive_counts.values())}   duplicates: {naive_duplicates}"
    )
    print()
    print("every reminder went out once." if sent == expected and not duplicates else "MISMATCH")
    return duplicates + abs(expected - sent)


async def run_forever(database_url: str, sender: Sender, mode: DeliveryMode) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    ledger = AsyncLedger(engine, table_name=LEDGER_TABLE)
    await ledger.create_schema()
    notifier = Notifier(ledger, sender, mode=mode)
    print(TRIAL.render())
    while True:
        now = dt.datetime.now(UTC)
        report = await notifier.tick(TRIAL, make_selector(engine, now), now=now)
        print(f"{now:%H:%M:%S} {report!r}")
        await asyncio.sleep(TRIAL.period.total_seconds())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="replay 8 hours of the job in seconds (restarts, racing workers) and exit",
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
        "--token",
        default=os.environ.get("NOTIFYONCE_BOT_TOKEN"),
        help="send through Telegram with this bot token (default: $NOTIFYONCE_BOT_TOKEN, "
        "else print to the console)",
    )
    parser.add_argument(
        "--users", type=int, default=40, help="simulated users in trial (default: 40)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="workers racing each simulated run (default: 2)"
    )
    parser.add_argument(
        "--random-state",
        type=int,
        default=7,
        help="makes the simulated users' trial ends repeatable (default: 7)",
    )
    parser.add_argument(
        "--at-least-once", action="store_true", help="retry uncertain sends (default: at most once)"
    )
    args = parser.parse_args()
    default_db = (
        f"sqlite+aiosqlite:///{HERE / ('simulation.sqlite3' if args.simulate else 'bot.sqlite3')}"
    )
    url = args.database_url or default_db
    if args.simulate:
        if url == default_db:
            (HERE / "simulation.sqlite3").unlink(missing_ok=True)
        try:
            problems = asyncio.run(
                simulate(
                    url,
                    users_count=args.users,
                    workers=args.workers,
                    random_state=args.random_state,
                )
            )
        except TablesExistError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 1 if problems else 0
    mode = DeliveryMode.AT_LEAST_ONCE if args.at_least_once else DeliveryMode.AT_MOST_ONCE

    async def run() -> None:
        if args.token:
            from notifyonce.telegram import TelegramSender

            async with TelegramSender(args.token) as sender:
                await run_forever(url, sender, mode)
        else:
            await run_forever(url, ConsoleSender(lambda: dt.datetime.now(UTC)), mode)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
