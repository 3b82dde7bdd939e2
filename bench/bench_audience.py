"""Benchmark a campaign whose audience has gone in part: do the gone chats cost anything?

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_audience.py \\
          [--notifications 1000000] [--gone 0.3] [--concurrency 64] [--databases ...] \\
          [--json bench/results/audience.json]

For each database (PostgreSQL with asyncpg, MariaDB with asyncmy, SQLite with aiosqlite;
those whose URL is not set are skipped) it sends three campaigns of ``--notifications``
through ``Notifier.send_many`` with ``FakeSender``, each on a fresh ledger table, streamed:

- **no table**: without the recipients table (a database not migrated since 0.2): nobody
  is looked up, nobody skipped;
- **none gone**: with the table, empty: every batch pays its look-up and finds nobody;
- **gone**: with ``--gone`` of the recipients (scattered: every subject whose last digit
  is below ``10 * gone``) marked gone before the campaign (bulk, not timed).

and prints for each the sends per second (sent messages over the whole campaign's time)
and the gone campaign's against the none-gone one (the goal: >= 0.9), the requests made to
gone chats (the goal: 0), and the raw driver's claims and marks per second in the same
run (one held connection: ``bench_campaign.py``'s physical limit).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from bench_campaign import ACTION, CYCLE, DATABASES, RAW_KEYS, databases
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncAudience, AsyncLedger, Message, Notification, Notifier, Outcome, Result
from notifyonce.testing import FakeSender

KINDS = ("no table", "none gone", "gone")


def is_gone(subject: int, gone: float) -> bool:
    """The recipients marked gone: a tenth of them per tenth of ``gone``, scattered."""
    return subject % 10 < round(gone * 10)


async def run(
    engine: AsyncEngine, kind: str, notifications: int, gone: float, concurrency: int
) -> dict[str, Any]:
    table = f"nfo_bench_{uuid.uuid4().hex[:10]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    audience = AsyncAudience.beside(ledger)
    if kind == "no table":
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE {audience.table.name}")
    elif kind == "gone":
        marked = [s for s in range(notifications) if is_gone(s, gone)]
        for start in range(0, len(marked), 50_000):
            await audience.mark_gone_many(marked[start : start + 50_000], "blocked")
    sender = FakeSender()
    to_gone = 0
    message = Message("The tariff changes on December 24")

    def on_result(result: Result) -> None:
        nonlocal to_gone
        if len(sender.records) >= 10_000:
            to_gone += sum(1 for r in sender.records if is_gone(int(r.recipient), gone))
            sender.records.clear()  # FakeSender keeps every send; a bench needs none

    async def source() -> AsyncIterator[Notification]:
        for subject in range(notifications):
            yield Notification(subject, CYCLE, message)

    notifier = Notifier(ledger, sender, concurrency=concurrency, on_result=on_result)
    try:
        started = time.perf_counter()
        report = await notifier.send_many(ACTION, source())
        elapsed = time.perf_counter() - started
    finally:
        async with engine.begin() as conn:
            for name in (table, audience.table.name):
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
    to_gone += sum(1 for r in sender.records if is_gone(int(r.recipient), gone))
    sent, skipped = report.counts[Outcome.SENT], report.counts[Outcome.SKIPPED]
    expected_skips = sum(1 for s in range(notifications) if is_gone(s, gone))
    if kind == "gone" and (skipped != expected_skips or to_gone):
        raise RuntimeError(f"{report}: {to_gone} requests to gone chats")
    if sent + skipped != notifications:
        raise RuntimeError(f"{report}")
    return {
        "sent": sent,
        "skipped": skipped,
        "to_gone": to_gone,
        "seconds": elapsed,
        "sent_per_second": sent / elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notifications", type=int, default=1_000_000)
    parser.add_argument("--gone", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--databases", default=",".join(DATABASES))
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    wanted = set(args.databases.split(","))
    if unknown := wanted.difference(DATABASES):
        parser.error(f"--databases: {', '.join(sorted(unknown))} is not one of {DATABASES}")
    if not 0 < args.gone < 1:
        parser.error("--gone must be between 0 and 1")
    targets = databases(wanted, "audience.sqlite3")
    print(
        f"campaigns of {args.notifications:,} notifications, {args.gone:.0%} of the chats gone"
        f" in the third, FakeSender, concurrency {args.concurrency}"
    )
    figures: list[dict[str, Any]] = []
    for name, url, raw in targets:
        engine = create_async_engine(url)
        results: dict[str, dict[str, Any]] = {}
        try:
            for kind in KINDS:
                results[kind] = await run(
                    engine, kind, args.notifications, args.gone, args.concurrency
                )
        finally:
            await engine.dispose()
        limit = await raw(url, min(RAW_KEYS, args.notifications), args.concurrency)
        print(f"\n{name}")
        for kind in KINDS:
            r = results[kind]
            print(
                f"  {kind:<9}  {r['sent']:>9,} sent, {r['skipped']:>9,} skipped in"
                f" {r['seconds']:6.1f} s: {r['sent_per_second']:8,.0f} sent/s"
                f"  ({r['to_gone']} requests to gone chats)"
            )
        base = results["none gone"]["sent_per_second"]
        print(
            f"  gone/none gone, per sent message: {results['gone']['sent_per_second'] / base:.2f}"
            f"   none gone/no table: {base / results['no table']['sent_per_second']:.2f}"
        )
        print(f"  raw driver, same claims and marks (held connection): {limit:,.0f}/s")
        figures.append({"name": name, **results, "raw": limit})
    if args.json:
        from _results import write

        settings = {k: getattr(args, k) for k in ("notifications", "gone", "concurrency")}
        write(args.json, "audience", {"settings": settings, "databases": figures})


if __name__ == "__main__":
    asyncio.run(main())
