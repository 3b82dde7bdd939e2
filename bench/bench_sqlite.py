"""SQLite under contention: 16 connections racing to claim the same 300 keys.

Run:  .venv/bin/python bench/bench_sqlite.py [--workers 16] [--keys 300]

Every worker tries every key once (16 x 300 = 4,800 claim attempts, 300 wins), all on one
database file:

* notifyonce: 16 ``AsyncLedger`` objects, each on its own engine (aiosqlite), with
  ``claim_slot``;
* raw ``sqlite3``: 16 threads, each with its own connection, running the same
  ``BEGIN IMMEDIATE; INSERT ... ON CONFLICT DO NOTHING RETURNING; COMMIT`` with the same
  30 s busy timeout.

Prints attempts per second for both and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger

CYCLE = "2026-12"
WAL = False


async def ledger_run(path: Path, workers: int, keys: int) -> float:
    engines = [create_async_engine(f"sqlite+aiosqlite:///{path}") for _ in range(workers)]
    ledgers = [AsyncLedger(e) for e in engines]
    await ledgers[0].create_schema()
    if WAL:
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
    start_line = asyncio.Event()

    async def work(index: int, ledger: AsyncLedger) -> int:
        order = list(range(keys))
        random.Random(index).shuffle(order)
        await start_line.wait()
        won = 0
        for subject in order:
            won += await ledger.claim_slot("race", subject, CYCLE) is not None
        return won

    tasks = [asyncio.ensure_future(work(i, ledger)) for i, ledger in enumerate(ledgers)]
    await asyncio.sleep(0.1)
    start = time.perf_counter()
    start_line.set()
    won = sum(await asyncio.gather(*tasks))
    elapsed = time.perf_counter() - start
    for engine in engines:
        await engine.dispose()
    assert keys == won, won
    return workers * keys / elapsed


def raw_run(path: Path, workers: int, keys: int) -> float:
    setup = sqlite3.connect(path)
    setup.execute(
        "CREATE TABLE slots (id INTEGER PRIMARY KEY, action TEXT, subject TEXT, cycle TEXT, "
        "status TEXT, token INTEGER, UNIQUE (action, cycle, subject))"
    )
    setup.commit()
    if WAL:
        setup.execute("PRAGMA journal_mode=WAL")
    setup.close()
    barrier = threading.Barrier(workers + 1)
    wins = [0] * workers

    def work(index: int) -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        order = list(range(keys))
        random.Random(index).shuffle(order)
        barrier.wait()
        for subject in order:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "INSERT INTO slots (action, subject, cycle, status, token) "
                "VALUES ('race', ?, ?, 'claimed', ?) ON CONFLICT DO NOTHING RETURNING id",
                (str(subject), CYCLE, random.getrandbits(62)),
            ).fetchone()
            conn.execute("COMMIT")
            wins[index] += row is not None
        conn.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    assert keys == sum(wins), wins
    return workers * keys / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--keys", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        ours = asyncio.run(ledger_run(Path(folder) / "ledger.db", args.workers, args.keys))
        raw = raw_run(Path(folder) / "raw.db", args.workers, args.keys)
    print(f"notifyonce AsyncLedger: {ours:,.0f} claim attempts/s")
    print(f"raw sqlite3 threads:    {raw:,.0f} claim attempts/s")
    print(f"ratio: {ours / raw:.2f}x")


if __name__ == "__main__":
    main()
