"""Benchmark a personalised campaign's recipients file: does a million rows fit in bounded memory?

Run:  .venv/bin/python bench/bench_personal.py [--rows 1000000] [--json bench/results/personal.json]

Writes a CSV file of ``--rows`` recipients (``chat_id,name,language,tz``: half English,
half Russian, over five time zones, every seventh name written as HTML markup), then runs
each phase below in a fresh Python process and prints the peak resident memory of that
process (``ru_maxrss``) and its time:

- **imports**: the interpreter with notifyonce, SQLAlchemy and aiosqlite imported and
  nothing read: the floor every other phase stands on;
- **read**: every row read with ``recipients_from_file(...).rows()`` (parsed, its ``tz``
  looked up);
- **check**: the check ``Broadcast.run`` makes before its first claim: every row read,
  its chat checked and its message filled in (an HTML template in two languages) and
  checked as ``TelegramSender`` checks it;
- **dry run**: ``Broadcast.run`` of that campaign at 10:00 in each row's own zone, with a
  dry-run Notifier on a SQLite ledger: the check pass, then the pass over every row that
  would be sent (a dry run waits for no hour). Nothing is claimed.

The goal: each phase under 150 MB, and no phase growing with the rows (compare
``--rows 100000``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZONES = ("UTC", "Europe/Berlin", "Europe/Moscow", "America/New_York", "Asia/Tokyo")
PHASES = ("imports", "read", "check", "dry run")
GOAL_MB = 150

# What one phase runs in its own process: prints a JSON object of its figures.
CHILD = r"""
import asyncio, datetime as dt, json, resource, sys, tempfile, time
from sqlalchemy.ext.asyncio import create_async_engine
from notifyonce import AsyncLedger, Broadcast, Message, Notifier, recipients_from_file
from notifyonce.testing import FakeSender
from notifyonce.telegram import TelegramSender

phase, path = sys.argv[1], sys.argv[2]
HELLO = Message("<b>Hello</b>, $name!", parse_mode="HTML")
VARIANTS = {"ru": Message("<b>Привет</b>, $name!", parse_mode="HTML")}


def campaign(notifier, name):
    return Broadcast(
        notifier, "news", name, HELLO, recipients_from_file(path),
        template=True, variants=VARIANTS,
        start_at_local=dt.time(10), default_tz="Europe/Berlin",
    )


async def main():
    figures = {}
    if phase == "read":
        rows = 0
        async for _ in recipients_from_file(path).rows():
            rows += 1
        figures["rows"] = rows
    elif phase in ("check", "dry run"):
        with tempfile.TemporaryDirectory() as directory:
            engine = create_async_engine(f"sqlite+aiosqlite:///{directory}/ledger.db")
            ledger = AsyncLedger(engine)
            await ledger.create_schema()
            sender = TelegramSender("12345:bench") if phase == "check" else FakeSender()
            notifier = Notifier(ledger, sender, dry_run=phase == "dry run")
            job = campaign(notifier, "bench")
            if phase == "check":
                figures["rows"] = await job._checked_total(None)
                await sender.aclose()
            else:
                report = await job.run()
                figures["rows"] = report.progress.done
            await engine.dispose()
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(figures))


asyncio.run(main())
"""


def write_rows(path: Path, rows: int) -> None:
    """``rows`` recipients: a name (every seventh one as markup), a language, a zone."""
    with path.open("w", encoding="utf-8") as file:
        file.write("chat_id,name,language,tz\n")
        for chat in range(1, rows + 1):
            name = f"<b>User {chat}</b>" if chat % 7 == 0 else f"User_{chat}"
            language = "ru" if chat % 2 else "en"
            file.write(f"{chat},{name},{language},{ZONES[chat % len(ZONES)]}\n")


def run_phase(phase: str, path: Path) -> dict[str, float]:
    """One phase in a fresh process: its figures and its wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, phase, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["seconds"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "people.csv")
        write_rows(path, args.rows)
        size = path.stat().st_size / 2**20
        print(f"{args.rows:,} rows, {size:.0f} MB of CSV")
        results: dict[str, dict[str, float]] = {}
        for phase in PHASES:
            figures = run_phase(phase, path)
            results[phase] = figures
            rows = f"{int(figures['rows']):,} rows" if "rows" in figures else ""
            print(
                f"{phase:>8}: peak RSS {figures['peak_rss_mb']:6.1f} MB "
                f"(goal < {GOAL_MB}), {figures['seconds']:6.1f} s {rows}"
            )
    if args.json:
        sys.path.insert(0, str(Path(__file__).parent))
        from _results import write

        write(args.json, "personal", {"rows": args.rows, "csv_mb": size, "phases": results})


if __name__ == "__main__":
    main()
