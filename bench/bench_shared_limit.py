"""Benchmark a bot's limit shared by worker processes: how close 4 workers come to 30 msg/s.

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_shared_limit.py [--rounds 3]

Four worker processes (``tests/_rate_worker.py``, the same workers as
``tests/test_rate_shared.py``) each send 150 messages to distinct chats through one
``TelegramSender`` per process, sharing one rate store: the SQL store on PostgreSQL and on
SQLite, and Redis. The local Bot API server enforces 30 deliveries a second the way Telegram
does (429 above it). Per store and round it prints the mean delivery rate (first to last
delivery), the busiest second, and the share of requests answered 429.

The goal (a bot's budget used, not exceeded): a mean of at least 27 msg/s, at most 30 in any
second, at most 1 % answered 429. The test suite asserts only what holds whatever the
machine's speed (each message delivered once, at most 30 in any second as the server
counts, a chat answered 429 not tried again before its retry_after); the rate and the
share of 429s, which a busy machine's delays move, are measured here.
Stores whose URL is not set (``NOTIFYONCE_TEST_POSTGRES_URL``, ``NOTIFYONCE_TEST_REDIS_URL``)
are skipped. Bounded: about 25 s per store and round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce.ratelimit import SQLRateStore
from notifyonce.testing import BotAPIServer

WORKER = Path(__file__).resolve().parent.parent / "tests" / "_rate_worker.py"
WORKERS = 4
MESSAGES = 150


async def sql_store(url: str) -> tuple[dict[str, Any], Any]:
    """A fresh rate-store table at ``url``; the worker config and a cleanup coroutine."""
    table = f"nfo_bench_{uuid.uuid4().hex[:10]}"
    engine = create_async_engine(url)
    await SQLRateStore(engine, table_name=table).create_schema()

    async def drop() -> None:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        await engine.dispose()

    return {"store": "sql", "url": url, "table": table}, drop


async def redis_store(url: str) -> tuple[dict[str, Any], Any]:
    import redis.asyncio

    prefix = f"nfo_bench_{uuid.uuid4().hex[:10]}:"

    async def drop() -> None:
        client = redis.asyncio.Redis.from_url(url)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()

    return {"store": "redis", "url": url, "prefix": prefix}, drop


async def one_round(config: dict[str, Any]) -> dict[str, float]:
    async with BotAPIServer(bot_per_second=30, flood_retry_after=1) as server:
        start_at = time.time() + 4.0  # past every worker's imports
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(WORKER),
                json.dumps(
                    {
                        **config,
                        "server": server.url,
                        "worker": worker,
                        "count": MESSAGES,
                        "start_at": start_at,
                        "budget": 60.0,
                    }
                ),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for worker in range(WORKERS)
        ]
        for process in processes:
            out, err = await asyncio.wait_for(process.communicate(), timeout=120)
            if process.returncode != 0:
                raise RuntimeError(err.decode()[-2000:])
            report = json.loads(out.decode().strip().splitlines()[-1])
            if report["errors"]:
                raise RuntimeError(f"worker errors: {report['errors'][:3]}")
        times = sorted(d.at for d in server.deliveries)
        requests = server.requests
        floods = sum(1 for r in requests if r.reply.status == 429)
        return {
            "delivered": len(times),
            "rate": (len(times) - 1) / (times[-1] - times[0]),
            "busiest": server.busiest_window(1.0),
            "flood_share": floods / len(requests),
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stores: list[tuple[str, Any]] = []
    pg = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL")
    if pg:
        url = make_url(pg).set(drivername="postgresql+asyncpg").render_as_string(False)
        stores.append(("SQL store, PostgreSQL", lambda: sql_store(url)))
    scratch = tempfile.mkdtemp(prefix="nfo-bench-")
    sqlite_url = f"sqlite+aiosqlite:///{scratch}/rates.sqlite3"
    stores.append(("SQL store, SQLite", lambda: sql_store(sqlite_url)))
    redis_url = os.environ.get("NOTIFYONCE_TEST_REDIS_URL")
    if redis_url:
        stores.append(("Redis", lambda: redis_store(redis_url)))
    print(f"{WORKERS} workers x {MESSAGES} messages, server limit 30/s, {args.rounds} rounds")
    print(f"{'store':<24} {'mean msg/s':>11} {'busiest s':>10} {'429 share':>10}")
    for name, make in stores:
        rates: list[float] = []
        for _ in range(args.rounds):
            config, drop = await make()
            try:
                result = await one_round(config)
            finally:
                await drop()
            rates.append(result["rate"])
            print(
                f"{name:<24} {result['rate']:>11.1f} {result['busiest']:>10.0f}"
                f" {result['flood_share']:>10.1%}"
            )
        print(f"{name:<24} median {statistics.median(rates):.1f} msg/s (goal >= 27)")


if __name__ == "__main__":
    asyncio.run(main())
