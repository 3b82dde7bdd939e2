"""The digest storm: a simulated day of events for many subjects, flushed by two worker
processes at once that are SIGKILLed mid-flush: each (subject, window) with events gets
at most one digest, each event is in at most one delivered digest, and what is in none
is exactly the digests cut off mid-send (``unknown``, at most once), on every database.

Its size comes from the environment (``NOTIFYONCE_DIGEST_STORM=subjects,events,kills``).
The default, 300 subjects, 3,000 events and 3 kills, keeps it to seconds per database in
the suite; the full storm (``10000,200000,5``: about 35 minutes per database at the ~80
digests a second two killed flushers manage on a 2-core machine) is run by hand.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Digest, SlotStatus
from notifyonce._ledger.side_tables import build_digest_table, default_digest_table

from ._databases import backend_params, drop_table, make_backend

WORKER = Path(__file__).with_name("_digest_worker.py")
ACTION = "storm_digest"
DAY = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
END = DAY + dt.timedelta(days=1, minutes=1)  # every hourly window of the day is closed


def _size() -> tuple[int, int, int]:
    raw = os.environ.get("NOTIFYONCE_DIGEST_STORM", "300,3000,3")
    subjects, events, kills = (int(part) for part in raw.split(","))
    return subjects, events, kills


def _seed(sync_url: str, table: str, subjects: int, events: int, seed: int) -> dict[str, str]:
    """The day's events, written as ``Digest.add`` writes them (in bulk: the storm is about
    the flush); each event key -> its subject and window, as ``"subject@window"``."""
    rng = random.Random(seed)
    digest = Digest.__new__(Digest)
    digest.every, digest.at_local, digest.max_wait = dt.timedelta(hours=1), None, None
    rows: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    for n in range(events):
        subject = str(rng.randrange(subjects))
        at = DAY + dt.timedelta(seconds=rng.randrange(86_400))
        start, end = digest.window(at)
        key = f"e{n}"
        where[key] = f"{subject}@{start.isoformat()}"
        rows.append(
            {
                "action": ACTION,
                "subject": subject,
                "event_key": key,
                "window_start": start,
                "window_end": end,
                "due_at": end,
                "at": at,
                "tz": None,
                "data": "null",
                "slot_id": None,
                "created_at": at,
            }
        )
    engine = sa.create_engine(sync_url)
    try:
        events_table = build_digest_table(sa.MetaData(), default_digest_table(table))
        with engine.begin() as conn:
            for start in range(0, len(rows), 5000):
                conn.execute(sa.insert(events_table), rows[start : start + 5000])
    finally:
        engine.dispose()
    return where


async def _spawn(config: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, str(WORKER), str(config))


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.parametrize("name", backend_params(("sqlite", "postgres-asyncpg", "mariadb")))
async def test_two_flushers_killed_mid_flush_send_each_event_at_most_once(
    name: str, tmp_path: Path
) -> None:
    """Two flushers, SIGKILLed mid-flush and restarted: no digest twice, no event twice,
    and the events in no digest are exactly those of digests left unknown by a kill."""
    subjects, events, kills = _size()
    backend = make_backend(name, tmp_path)
    table = backend.unique_table()
    engine = create_async_engine(backend.async_url)
    try:
        await AsyncLedger(engine, table_name=table).create_schema()
    finally:
        await engine.dispose()
    try:
        where = _seed(backend.sync_url, table, subjects, events, seed=49)
        journal = tmp_path / "journal.jsonl"
        configs = []
        for worker in range(2):
            config = tmp_path / f"worker{worker}.json"
            config.write_text(
                json.dumps(
                    {
                        "db_url": backend.async_url,
                        "table": table,
                        "lease": 2.0,
                        "journal": str(journal),
                        "latency": 0.0005,
                        "now": END.isoformat(),
                        "seconds": 900,
                    }
                )
            )
            configs.append(config)
        procs = [await _spawn(c) for c in configs]
        rng = random.Random(7)
        killed = 0
        deadline = time.monotonic() + 1200
        while killed < kills and time.monotonic() < deadline:
            # Long enough for a restarted worker to be flushing again (its imports and
            # connections take about a second), so that kills land mid-flush.
            await asyncio.sleep(rng.uniform(1.5, 4.0))
            victim = rng.randrange(2)
            if procs[victim].returncode is not None:
                break  # the flush ended before every kill was made
            procs[victim].send_signal(signal.SIGKILL)
            await procs[victim].wait()
            killed += 1
            procs[victim] = await _spawn(configs[victim])
        codes = [await asyncio.wait_for(p.wait(), timeout=1200) for p in procs]
        assert [0, 0] == codes

        delivered = [json.loads(line) for line in journal.read_text().splitlines()]
        keys = Counter(k for digest in delivered for k in digest["keys"])
        assert [] == [k for k, n in keys.items() if n > 1]  # no event in two digests
        windows = Counter(where[digest["keys"][0]] for digest in delivered)
        assert [] == [w for w, n in windows.items() if n > 1]  # no digest twice
        # Every digest holds the events of one subject and window.
        assert all(len({where[k] for k in d["keys"]}) == 1 for d in delivered)
        unknown = await _unknown_windows(backend.async_url, table)
        missing = {where[k] for k in where if k not in keys}
        assert set() == missing - unknown
        assert len(unknown) <= killed * 16  # at most what a worker had in flight, per kill
        print(
            f"digest storm {name}: {len(delivered)} digests, {killed} kills, {len(unknown)} unknown"
        )
    finally:
        drop_table(backend, table)


async def _unknown_windows(url: str, table: str) -> set[str]:
    """The (subject, window) pairs whose digest's slot is unknown (cut off mid-send)."""
    engine = create_async_engine(url)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        slots = ledger.table
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(slots.c.subject, slots.c.cycle).where(
                        slots.c.action == ACTION, slots.c.status == SlotStatus.UNKNOWN.value
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    return {
        f"{subject}@{dt.datetime.fromisoformat(cycle.replace('Z', '+00:00')).isoformat()}"
        for subject, cycle in rows
    }
