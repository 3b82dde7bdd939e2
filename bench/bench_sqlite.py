"""SQLite under contention: 16 connections racing to claim the same 300 keys.

Run:  .venv/bin/python bench/bench_sqlite.py [--workers 16] [--keys 300] [--rounds 3] [--wal]

Every worker tries every key once, in its own shuffled order (16 x 300 = 4,800 claim
attempts, 300 wins), all on one database file, in one run of three sides that alternate
round after round (best round of each):

* 0.1.0: its ``AsyncLedger`` loaded from the git history (``git archive`` of the release
  commit into a temporary folder, run in a subprocess that imports it from there);
* this tree's ``AsyncLedger``, in a subprocess too, the same code path;
* raw ``sqlite3``: 16 threads, each with its own connection, on a table the ledger
  created (same columns and indexes), running ``BEGIN IMMEDIATE; INSERT ... ON CONFLICT
  DO NOTHING RETURNING; COMMIT`` with the same 30 s busy timeout.

Each ledger side runs 16 ``AsyncLedger`` objects on 16 engines (aiosqlite) with
``claim_slot``. Prints attempts per second for the three and the ratios. Without git (an
sdist), the 0.1.0 side is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

CYCLE = "2026-12"
LEASE = dt.timedelta(minutes=5)
RAW_CLAIM = """
INSERT INTO notifyonce_slots (action, subject, cycle, cycle_at, status, attempt, token,
                              lease_until, created_at, updated_at)
VALUES ('race', ?, ?, NULL, 'claimed', 1, ?, ?, ?, ?)
ON CONFLICT (action, cycle, subject) DO NOTHING
RETURNING id, token, attempt
"""
RELEASE_010 = "f5fe281"  # the commit that released 0.1.0
ROOT = Path(__file__).resolve().parent.parent


async def ledger_run(path: Path, workers: int, keys: int) -> float:
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger  # whichever notifyonce the subprocess imports

    engines = [create_async_engine(f"sqlite+aiosqlite:///{path}") for _ in range(workers)]
    ledgers = [AsyncLedger(e) for e in engines]
    await ledgers[0].create_schema()
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
    import sqlalchemy as sa

    from notifyonce import Ledger

    # The ledger's own table (its columns and four indexes): every commit writes as much.
    engine = sa.create_engine(f"sqlite:///{path}")
    Ledger(engine).create_schema()
    engine.dispose()
    barrier = threading.Barrier(workers + 1)
    wins = [0] * workers

    def work(index: int) -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 30000")
        order = list(range(keys))
        random.Random(index).shuffle(order)
        rng = random.Random()
        barrier.wait()
        for subject in order:
            conn.execute("BEGIN IMMEDIATE")
            now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)  # stored naive UTC
            row = conn.execute(
                RAW_CLAIM,
                (str(subject), CYCLE, rng.getrandbits(63), str(now + LEASE), str(now), str(now)),
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


def ledger_in_subprocess(path: Path, workers: int, keys: int, src: Path | None) -> float:
    """The ledger side in a fresh interpreter that imports notifyonce from ``src``."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    command = [sys.executable, __file__, "--ledger-only", str(path)]
    command += ["--workers", str(workers), "--keys", str(keys)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def release_010(folder: Path) -> Path | None:
    """0.1.0's source tree from the git history, or None without git."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", RELEASE_010, "src/notifyonce"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    folder.mkdir()
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument(
        "--wal", action="store_true", help="put all three database files in WAL mode first"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ledger-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ledger_only is not None:
        print(asyncio.run(ledger_run(args.ledger_only, args.workers, args.keys)))
        return
    attempts = args.workers * args.keys
    mode = "WAL" if args.wal else "the default rollback journal"
    print(f"{args.workers} connections racing for {args.keys} keys ({attempts:,} attempts), {mode}")
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        old_src = release_010(base / "release")
        sides: dict[str, Callable[[Path], float]] = {}
        if old_src is not None:
            sides["0.1.0 AsyncLedger"] = partial(
                ledger_in_subprocess, workers=args.workers, keys=args.keys, src=old_src
            )
        sides["AsyncLedger now"] = partial(
            ledger_in_subprocess, workers=args.workers, keys=args.keys, src=None
        )
        sides["raw sqlite3 threads"] = partial(raw_run, workers=args.workers, keys=args.keys)
        # The sides alternate, round after round, each on a fresh file, and each keeps its
        # best round: the machine is shared, so a load spike should not land on one only.
        for round_number in range(args.rounds):
            for index, (label, run) in enumerate(sides.items()):
                path = base / f"r{round_number}s{index}.db"
                if args.wal:  # a setting of the file: it stays, whoever opens it next
                    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").connection.close()
                best[label] = max(best.get(label, 0.0), run(path))
    print(f"best of {args.rounds} alternating rounds")
    if old_src is None:
        print("  0.1.0 AsyncLedger:      skipped (no git history)")
    for label, rate in best.items():
        print(f"  {label + ':':<23} {rate:>8,.0f} claim attempts/s  ({attempts / rate:.1f} s)")
    ours, raw = best["AsyncLedger now"], best["raw sqlite3 threads"]
    if old_src is not None:
        print(f"now / 0.1.0: {ours / best['0.1.0 AsyncLedger']:.1f}x")
    print(f"now / raw:   {ours / raw:.2f}x")


if __name__ == "__main__":
    main()
