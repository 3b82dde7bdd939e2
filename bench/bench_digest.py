"""Benchmark a digest as its events table grows: does adding an event or a flush cost more?

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_digest.py \\
          [--sizes 10000,100000,1000000,10000000] [--adds 500] [--subjects 200] [--rounds 3] \\
          [--json bench/results/digest.json]

On PostgreSQL (``$NOTIFYONCE_TEST_POSTGRES_URL``, through asyncpg), for each size a fresh
ledger table and its digest events table, filled with that many events by one
``INSERT ... SELECT generate_series`` (not timed, not through ``add``): nine in ten
belong to digests already made (their windows ended a day before, within ``keep``, so the
flush's purge leaves them), one in ten waits in a window a month ahead. Then, timed, each
of ``--rounds`` rounds:

- **add**: ``--adds`` events by ``Digest.add``, one after the other, for ``--subjects``
  subjects in the round's hour;
- **flush**: ``Digest.flush`` at the end of that hour (``FakeSender``), which sends one
  digest per subject, binds its events, and runs the retention purge.

A first round, untimed, warms the connections and the statements' caches up. It prints
the median time of one add and of one flush at each size, and each against the
same operation at the smallest size of the run (a ratio: the goal is about 1, whatever the
table holds besides). Timings, never asserted: run by hand, not in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import time
import uuid
from typing import Any

from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, Digest, DigestEvent, Message, Notifier
from notifyonce.testing import FakeSender

ACTION = "bench_digest"
HOUR = dt.timedelta(hours=1)
#: The bench's clock: rounds are the hours after it.
START = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)

# Nine in ten rows: events of digests made (due_at NULL, a slot id), their window a day
# before START; the tenth: pending in a window a month after START (due then).
FILL = """
INSERT INTO {table} (action, subject, event_key, window_start, window_end, due_at, at, tz,
                     data, slot_id, created_at)
SELECT CAST(:action AS text),
       's' || (g % 100000),
       'fill-' || g,
       CASE WHEN g % 10 = 0 THEN CAST(:later AS timestamptz) ELSE CAST(:before AS timestamptz) END,
       CASE WHEN g % 10 = 0 THEN CAST(:later_end AS timestamptz)
            ELSE CAST(:before_end AS timestamptz) END,
       CASE WHEN g % 10 = 0 THEN CAST(:later_end AS timestamptz) END,
       CASE WHEN g % 10 = 0 THEN CAST(:later AS timestamptz) ELSE CAST(:before AS timestamptz) END,
       NULL,
       '{{"n": 1}}',
       CASE WHEN g % 10 = 0 THEN NULL ELSE g END,
       CAST(:before AS timestamptz)
FROM generate_series(1, CAST(:rows AS bigint)) AS g
"""


def render(subject: str, events: list[DigestEvent]) -> Message:
    return Message(f"{len(events)} new events")


async def one_size(engine: AsyncEngine, size: int, args: argparse.Namespace) -> dict[str, Any]:
    table = f"nfo_bench_{uuid.uuid4().hex[:10]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    digest = Digest(ledger, ACTION, every=HOUR)
    events = digest.table.name
    try:
        started = time.perf_counter()
        before = START - dt.timedelta(days=1)
        later = START + dt.timedelta(days=30)
        async with engine.begin() as conn:
            await conn.execute(
                text(FILL.format(table=events)),
                {
                    "action": ACTION,
                    "before": before,
                    "before_end": before + HOUR,
                    "later": later,
                    "later_end": later + HOUR,
                    "rows": size,
                },
            )
            await conn.exec_driver_sql(f"ANALYZE {events}")
        filled = time.perf_counter() - started
        notifier = Notifier(ledger, FakeSender(), sweep_every=None)
        adds: list[float] = []
        flushes: list[float] = []
        for round_ in range(-1, args.rounds):  # round -1 warms up, untimed
            hour = START + (round_ + 1) * HOUR
            for i in range(args.adds):
                at = hour + dt.timedelta(seconds=i % 3600)
                subject = f"r{i % args.subjects}"
                t0 = time.perf_counter()
                await digest.add(subject, f"round{round_}-{i}", {"i": i}, at=at)
                if round_ >= 0:
                    adds.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            report = await digest.flush(notifier, render, now=hour + HOUR)
            if round_ >= 0:
                flushes.append(time.perf_counter() - t0)
            if report.sent != args.subjects or report.events_sent != args.adds:
                raise SystemExit(f"flush at {size:,} sent {report!r}")
        return {
            "size": size,
            "fill_s": round(filled, 1),
            "add_ms": statistics.median(adds) * 1000,
            "flush_ms": statistics.median(flushes) * 1000,
        }
    finally:
        async with engine.begin() as conn:
            for name in (events, f"{table}_cap_seats", f"{table}_recipients", table):
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--adds", type=int, default=500)
    parser.add_argument("--subjects", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pg = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL")
    if not pg:
        raise SystemExit('set NOTIFYONCE_TEST_POSTGRES_URL (eval "$(scripts/services.sh)")')
    url = make_url(pg).set(drivername="postgresql+asyncpg").render_as_string(False)
    engine = create_async_engine(url)
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            rows.append(await one_size(engine, size, args))
            row = rows[-1]
            first = rows[0]
            print(
                f"{size:>11,} events (filled in {row['fill_s']:.1f} s): "
                f"add {row['add_ms']:.2f} ms (x{row['add_ms'] / first['add_ms']:.2f}), "
                f"flush {row['flush_ms']:.0f} ms (x{row['flush_ms'] / first['flush_ms']:.2f})",
                flush=True,
            )
    finally:
        await engine.dispose()
    if args.json:
        from _results import write

        write(args.json, "digest", {"database": "PostgreSQL (asyncpg)", "rows": rows})


if __name__ == "__main__":
    asyncio.run(main())
