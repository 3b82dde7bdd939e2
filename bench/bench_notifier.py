"""Benchmark Notifier.send_many against the naive claim-send-mark loop, on PostgreSQL.

Run:  NOTIFYONCE_TEST_POSTGRES_URL=postgresql://root@127.0.0.1:5432/test \\
      .venv/bin/python bench/bench_notifier.py [--notifications 5000] [--naive 1000]

1. No rate limit: ``send_many`` of N notifications through TelegramSender (asyncpg
   ledger, batch claims and marks, 16 sends in flight: the Notifier's default) against
   a plain loop that, one notification at a time, claims with raw asyncpg
   ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, sends with one httpx client and
   marks with an ``UPDATE``. Reports both rates and the ratio (goal >= 5x).
2. The default limiter: 300 notifications to 300 private chats; the server's busiest 1 s
   window and the mean rate against Telegram's 30 msg/s (goal: mean >= 95% of the cap,
   peak never above it).

The Bot-API-shaped server runs in its own process with 20 ms latency. Bounded: a few
minutes at most.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time
import uuid

import asyncpg
import httpx
from bench_telegram import serve, server_url  # the server process, shared with the sender benchmark
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Message, Notification, Notifier, Outcome
from notifyonce.telegram import TelegramSender

TOKEN = "123456:BENCH-token"


def base_url() -> str:
    return os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")


def chat(n: int) -> str:
    return str(2_000_000 + n)


async def bench_notifier(
    server: str, count: int, rate_limited: bool, concurrency: int = 16
) -> tuple[float, Outcome]:
    url = make_url(base_url()).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(url, pool_size=10)
    table = f"bench_{uuid.uuid4().hex[:8]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    options = {} if rate_limited else {"rate_limit": None}
    items = [Notification(n, "2026-12", Message(f"reminder {n}"), chat(n)) for n in range(count)]
    try:
        async with TelegramSender(TOKEN, base_url=server, **options) as sender:  # type: ignore[arg-type]
            notifier = Notifier(ledger, sender, concurrency=concurrency, batch_size=200)
            start = time.perf_counter()
            report = await notifier.send_many("bench", items)
            elapsed = time.perf_counter() - start
        assert count == report.counts[Outcome.SENT], report
        return elapsed, Outcome.SENT
    finally:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE {table}")
        await engine.dispose()


async def bench_naive(server: str, count: int) -> float:
    dsn = make_url(base_url()).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    table = f"naive_{uuid.uuid4().hex[:8]}"
    await conn.execute(
        f"CREATE TABLE {table} (id bigserial PRIMARY KEY, action text, subject text, "
        "cycle text, status text, UNIQUE (action, cycle, subject))"
    )
    try:
        async with httpx.AsyncClient(base_url=f"{server}/bot{TOKEN}") as client:
            start = time.perf_counter()
            for n in range(count):
                row = await conn.fetchrow(
                    f"INSERT INTO {table} (action, subject, cycle, status) "
                    "VALUES ($1, $2, $3, 'claimed') ON CONFLICT DO NOTHING RETURNING id",
                    "bench",
                    str(n),
                    "2026-12",
                )
                if row is None:
                    continue
                answer = await client.post(
                    "/sendMessage", json={"chat_id": chat(n), "text": f"reminder {n}"}
                )
                answer.raise_for_status()
                await conn.execute(f"UPDATE {table} SET status = 'sent' WHERE id = $1", row["id"])
            return time.perf_counter() - start
    finally:
        await conn.execute(f"DROP TABLE {table}")
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notifications", type=int, default=5000)
    parser.add_argument("--naive", type=int, default=1000, help="notifications for the naive loop")
    parser.add_argument("--limited", type=int, default=300)
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=serve, args=(child, 0.02), daemon=True)
    process.start()
    server = server_url(parent, process)
    try:
        fast, _ = asyncio.run(bench_notifier(server, args.notifications, rate_limited=False))
        naive = asyncio.run(bench_naive(server, args.naive))
        fast_rate, naive_rate = args.notifications / fast, args.naive / naive
        print(
            f"send_many, no rate limit: {args.notifications} in {fast:.2f} s = {fast_rate:,.0f}/s"
        )
        print(f"naive claim-send-mark:    {args.naive} in {naive:.2f} s = {naive_rate:,.0f}/s")
        print(f"ratio: {fast_rate / naive_rate:.1f}x (goal >= 5x)")

        parent.send("reset")
        parent.recv()
        limited, _ = asyncio.run(bench_notifier(server, args.limited, rate_limited=True))
        parent.send("stats")
        stats = parent.recv()
        times = sorted(stats["times"])
        mean = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        print(
            f"default limiter: {args.limited} to {args.limited} chats in {limited:.2f} s; "
            f"busiest 1 s window {stats['busiest']} (cap 30), mean {mean:.1f} msg/s "
            f"({mean / 30:.0%} of the cap)"
        )
    finally:
        parent.send("stop")
        process.join(10)


if __name__ == "__main__":
    main()
