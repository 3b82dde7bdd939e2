"""Benchmark the rate stores: turns per second, and the limiter's added latency per message.

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_ratestores.py [--turns 2000]

1. Turns per second: each store answers ``take_turn`` for distinct chats on limits so high
   that nothing is ever paced, one caller at a time (the round trip) and 16 at once (how
   far the store scales when many senders of one bot ask together).
2. Added latency per message: sequential sends through TelegramSender to the local Bot API
   server (in this process, no simulated latency), with the limiter off (the baseline of
   the same run), in memory, and on each shared store. The difference to the baseline is
   what the limiter costs a message when it does not have to wait.

PostgreSQL, MariaDB and Redis are skipped when their URLs are not set. Bounded: under a
minute per store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import Message
from notifyonce.ratelimit import (
    MemoryRateStore,
    RateLimit,
    RateStore,
    RedisRateStore,
    SQLRateStore,
    TurnRequest,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

UNPACED = RateLimit(bot_per_second=1e6, private_chat_per_second=None, group_per_minute=None)
TOKEN = "123456:BENCH-token"


def _async_url(env: str, driver: str) -> str | None:
    url = os.environ.get(env)
    if not url:
        return None
    return make_url(url).set(drivername=driver).render_as_string(hide_password=False)


@asynccontextmanager
async def open_store(name: str) -> AsyncIterator[RateStore | None]:
    """The store called ``name`` on a fresh table or prefix; None when it is not set up."""
    if name == "memory":
        yield MemoryRateStore()
        return
    if name == "redis":
        url = os.environ.get("NOTIFYONCE_TEST_REDIS_URL")
        if not url:
            yield None
            return
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url)
        prefix = f"bench_{uuid.uuid4().hex[:8]}:"
        try:
            yield RedisRateStore(client, prefix=prefix)
        finally:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()
        return
    with tempfile.TemporaryDirectory() as folder:
        url = {
            "sqlite": f"sqlite+aiosqlite:///{folder}/bench.sqlite3",
            "postgresql": _async_url("NOTIFYONCE_TEST_POSTGRES_URL", "postgresql+asyncpg"),
            "mariadb": _async_url("NOTIFYONCE_TEST_MYSQL_URL", "mysql+asyncmy"),
        }[name]
        if url is None:
            yield None
            return
        options: dict[str, Any] = {} if name == "sqlite" else {"pool_size": 20}
        engine = create_async_engine(url, **options)
        store = SQLRateStore(engine, table_name=f"bench_rate_{uuid.uuid4().hex[:8]}")
        await store.create_schema()
        try:
            yield store
        finally:
            async with engine.begin() as conn:
                await conn.run_sync(store.metadata.drop_all)
            await engine.dispose()


async def turns_per_second(store: RateStore, turns: int, concurrency: int) -> float:
    counter = iter(range(turns))

    async def caller() -> None:
        for n in counter:
            request = TurnRequest(
                bot="1", chat=str(n + 1), lane="bot", limit=UNPACED, max_wait=60.0
            )
            await store.take_turn(request)

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return turns / (time.perf_counter() - start)


async def latency_ms(server: BotAPIServer, sends: int, **options: Any) -> float:
    """The median milliseconds of one send, one after another."""
    times = []
    async with TelegramSender(TOKEN, base_url=server.url, **options) as sender:
        await sender.send("1", Message("warm up"))
        for n in range(sends):
            start = time.perf_counter()
            await sender.send(str(n + 2), Message("x"))
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def main(turns: int, sends: int) -> None:
    names = ["memory", "sqlite", "postgresql", "mariadb", "redis"]
    print(f"turns per second ({turns} turns, limits never reached)")
    print(f"{'store':<12}{'1 caller':>12}{'16 callers':>12}")
    for name in names:
        async with open_store(name) as store:
            if store is None:
                print(f"{name:<12}{'skipped (no URL)':>24}")
                continue
            one = await turns_per_second(store, turns, 1)
            many = await turns_per_second(store, turns, 16)
            print(f"{name:<12}{one:>12,.0f}{many:>12,.0f}")

    print(f"\nmedian latency of one send, {sends} sequential sends (local server)")
    with BotAPIServer() as server:
        await latency_ms(server, sends, rate_limit=None)  # warm up the process
        base = await latency_ms(server, sends, rate_limit=None)
        print(f"{'limiter off':<12}{base:>9.2f} ms  (baseline)")
        for name in names:
            async with open_store(name) as store:
                if store is None:
                    continue
                options: dict[str, Callable[[], Any] | Any] = {"rate_limit": UNPACED}
                options["rate_store"] = store
                ms = await latency_ms(server, sends, **options)
                print(f"{name:<12}{ms:>9.2f} ms  (+{ms - base:.2f} ms, {ms / base:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--sends", type=int, default=500)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.turns, arguments.sends))
