"""Do the paid lane's turns still come together when the CPU is short? Claims per statement.

Run (PostgreSQL from ``scripts/services.sh``, a local Bot API server first, e.g.
``notifyonce serve-test-api --port PORT --latency 0``):

    eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_turns_together.py \\
        --url http://127.0.0.1:PORT [--chats 5000] [--grid 0.01 0] [--busy 0 0.5]

``Notifier.send_many`` on ``TelegramSender(allow_paid_broadcast=True)`` (the paid lane's
limiter, 1,000 msg/s) to ``--chats`` new chats, 64 workers, with the ledger on PostgreSQL.
For each ``--grid`` (the step turns are handed over on; 0.01 is the sender's, 0 hands
each turn over at its own start) and each ``--busy`` (the share of the process's time a
thread of its own spends spinning in Python, holding the interpreter lock: 0.5 leaves
the event loop half of it, a process short of CPU), it prints the claims per claim
statement (their mean and how many claims went in statements of one), the sending rate,
the turns taken again (a send that could not leave within the limiter's tolerance of its
start gives its turn back and takes a new one) and the event loop's CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import threading
import time
import uuid
from datetime import datetime, timezone

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Message, Notification, Notifier, Observer, Outcome
from notifyonce._senders.rate import stores
from notifyonce._senders.telegram import sender as telegram_sender
from notifyonce.telegram import RateLimit, TelegramSender

TOKEN = "123456:BENCH-token"
CYCLE = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)


class Statements(Observer):
    """How many claims each claim statement asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def claimed(self, action: str, seconds: float, asked: int, won: int) -> None:
        self.asked.append(asked)


def spin(share: float, stop: threading.Event) -> None:
    """Hold the interpreter lock ``share`` of the time (the interpreter switches threads
    every 5 ms; the rest of each 10 ms this thread sleeps)."""
    while not stop.is_set():
        end = time.perf_counter() + 0.01 * share
        while time.perf_counter() < end:
            pass
        time.sleep(0.01 * (1 - share))


async def run(url: str, chats: int, grid: float, busy: float) -> dict[str, float]:
    telegram_sender._TOGETHER = grid  # the sender's grid, read by each turn
    taken = [0]
    take_turn = stores.MemoryRateStore.take_turn

    async def counted(self: stores.MemoryRateStore, request: stores.TurnRequest) -> stores.Turn:
        taken[0] += 1
        return await take_turn(self, request)

    stores.MemoryRateStore.take_turn = counted  # type: ignore[method-assign]
    pg = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
    engine = create_async_engine(make_url(pg).set(drivername="postgresql+asyncpg"))
    table = f"bench_{uuid.uuid4().hex[:8]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    observer = Statements()
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=(busy, stop), daemon=True)
    first = 10_000_000 + int(time.time()) % 1000 * 100_000
    try:
        sender = TelegramSender(
            TOKEN, base_url=url, allow_paid_broadcast=True, rate_limit=RateLimit()
        )
        async with sender:
            notifier = Notifier(ledger, sender, concurrency=64, observer=observer)
            items = [
                Notification(chat, CYCLE, Message("Monday")) for chat in range(first, first + chats)
            ]
            if busy > 0:
                spinner.start()
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            report = await notifier.send_many("together", items)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        stop.set()
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE {table}")
        await engine.dispose()
        stores.MemoryRateStore.take_turn = take_turn  # type: ignore[method-assign]
    assert chats == report.counts[Outcome.SENT], report
    used = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    return {
        "claims per statement": statistics.mean(observer.asked),
        "claims alone (%)": 100 * observer.asked.count(1) / chats,
        "msg/s": chats / wall,
        "turns taken again (%)": 100 * (taken[0] - chats) / chats,
        "CPU us per message (both threads)": used / chats * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--chats", type=int, default=5000)
    parser.add_argument("--grid", type=float, nargs="+", default=[0.01, 0.0])
    parser.add_argument("--busy", type=float, nargs="+", default=[0.0, 0.5])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for round_ in range(1, args.rounds + 1):
        for busy in args.busy:
            for grid in args.grid:
                figures = asyncio.run(run(args.url, args.chats, grid, busy))
                shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                print(f"round {round_}, busy {busy:.0%}, grid {grid * 1000:g} ms: {shown}")


if __name__ == "__main__":
    main()
