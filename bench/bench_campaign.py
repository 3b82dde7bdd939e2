"""Benchmark one campaign of a million notifications: as fast at the end as at the start?

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_campaign.py \\
          [--notifications 1000000] [--every 100000] [--concurrency 64] [--databases ...] \\
          [--json bench/results/campaign.json]

(``make bench-campaign`` runs it with the defaults.) For each database (PostgreSQL with
asyncpg, MariaDB with asyncmy, SQLite with aiosqlite; those whose URL is not set are
skipped) it sends one campaign (one action, one cycle, new subjects) through
``Notifier.send_many`` with ``FakeSender``, streamed from an async generator, on a fresh
table, and prints:

- the rate of each ``--every`` notifications, and the last one's against the first
  (the goal: >= 0.8, i.e. no statement reads more of the campaign as it grows);
- statements per notification (what the ledger sent to the driver, in all);
- the growth of the process's peak memory over the run;
- the raw driver's rate for the same claims and marks, in the same run: one held
  connection, one statement per group of ``--concurrency`` keys to claim them
  (``INSERT ... ON CONFLICT DO NOTHING RETURNING id``, or MariaDB's ``INSERT IGNORE`` and
  a read back) and one to mark them sent, on a table of its own: the physical limit the
  Notifier's rate is compared with.

``--json PATH`` also writes the figures there (``bench/plot_benchmarks.py`` draws them).

A run of a million takes minutes per database. ``--notifications 200000 --every 20000``
gives the shape in a fraction of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, Message, Notification, Notifier, Outcome, Result
from notifyonce._drivers import execute
from notifyonce.testing import FakeSender

ACTION = "campaign"
CYCLE = "2026-12-tariff"
DATABASES = ("postgres", "mariadb", "sqlite")  # what --databases names
RAW_KEYS = 100_000  # keys the raw driver claims and marks (its rate, not a million)


class StatementCounter:
    """Counts the statements the ledger runs on the driver (its send path) and through a
    Connection (everything else), without watching the engine: a listener on the engine
    would move the ledger onto its slower, observed path."""

    def __init__(self) -> None:
        self.count = 0
        self._originals: list[tuple[type, str, Any]] = []

    def __enter__(self) -> StatementCounter:
        counter = self
        # asyncpg's link sends through _call, every other driver's through _execute.
        for cls, name in ((execute.DriverLink, "_execute"), (execute.AsyncpgLink, "_call")):
            original = getattr(cls, name)

            def counted(self: Any, *args: Any, _original: Any = original) -> Any:
                counter.count += 1
                return _original(self, *args)

            self._originals.append((cls, name, original))
            setattr(cls, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, name, original in self._originals:
            setattr(cls, name, original)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_campaign(
    engine: AsyncEngine, notifications: int, every: int, concurrency: int
) -> dict[str, Any]:
    table = f"nfo_bench_{uuid.uuid4().hex[:10]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    sender = FakeSender()
    marks: list[float] = []
    done = 0
    message = Message("The tariff changes on December 24")

    def on_result(result: Result) -> None:
        nonlocal done
        done += 1
        if done % 10_000 == 0:
            sender.records.clear()  # FakeSender keeps every send; a bench needs none
        if done % every == 0:
            marks.append(time.perf_counter())

    async def source() -> AsyncIterator[Notification]:
        for subject in range(notifications):
            yield Notification(subject, CYCLE, message)

    notifier = Notifier(ledger, sender, concurrency=concurrency, on_result=on_result)
    memory = peak_mb()
    try:
        with StatementCounter() as statements:
            started = time.perf_counter()
            report = await notifier.send_many(ACTION, source())
            elapsed = time.perf_counter() - started
    finally:
        async with engine.begin() as conn:
            for name in (table, f"{table}_recipients"):
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
    if report.counts[Outcome.SENT] != notifications:
        raise RuntimeError(f"sent {report.counts[Outcome.SENT]} of {notifications}: {report}")
    rates = []
    previous = started
    for mark in marks:
        rates.append(every / (mark - previous))
        previous = mark
    return {
        "rates": rates,
        "overall": notifications / elapsed,
        "statements": statements.count / notifications,
        "memory": peak_mb() - memory,
    }


# -- the raw driver: the same claims and marks on one held connection ------------------------


async def raw_postgres(url: str, keys: int, group: int) -> float:
    import asyncpg

    conn = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    table = f"nfo_bench_raw_{uuid.uuid4().hex[:8]}"
    try:
        await conn.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, action varchar(64) NOT NULL,"
            " subject varchar(128) NOT NULL, cycle varchar(128) NOT NULL, status varchar(16)"
            " NOT NULL, token bigint NOT NULL, lease_until timestamptz NOT NULL,"
            " updated_at timestamptz NOT NULL, sent_at timestamptz, message_id varchar(128),"
            " UNIQUE (action, cycle, subject))"
        )
        claim = await conn.prepare(
            f"INSERT INTO {table} (action, subject, cycle, status, token, lease_until,"
            " updated_at) SELECT $1, s, $2, 'claimed', t, now(), now()"
            " FROM unnest($3::text[], $4::bigint[]) AS u(s, t)"
            " ON CONFLICT (action, cycle, subject) DO NOTHING RETURNING id"
        )
        mark = await conn.prepare(
            f"UPDATE {table} SET status = 'sent', sent_at = now(), updated_at = now()"
            " WHERE id = ANY($1::bigint[]) AND status = 'claimed'"
        )
        started = time.perf_counter()
        for start in range(0, keys, group):
            subjects = [str(s) for s in range(start, min(start + group, keys))]
            tokens = [secrets.randbits(63) for _ in subjects]
            ids = [row[0] for row in await claim.fetch(ACTION, CYCLE, subjects, tokens)]
            await mark.fetch(ids)
        return keys / (time.perf_counter() - started)
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()


async def raw_mariadb(url: str, keys: int, group: int) -> float:
    import asyncmy

    parts = make_url(url)
    conn = await asyncmy.connect(
        host=parts.host,
        port=parts.port or 3306,
        user=parts.username,
        password=parts.password or "",
        database=parts.database,
        autocommit=False,
    )
    table = f"nfo_bench_raw_{uuid.uuid4().hex[:8]}"
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                f"CREATE TABLE {table} (id bigint AUTO_INCREMENT PRIMARY KEY, action"
                " varbinary(256) NOT NULL, subject varbinary(512) NOT NULL, cycle varbinary(512)"
                " NOT NULL, status varchar(16) NOT NULL, token bigint NOT NULL, lease_until"
                " datetime(6) NOT NULL, updated_at datetime(6) NOT NULL, sent_at datetime(6),"
                " message_id varchar(128), UNIQUE KEY k (action, cycle, subject))"
            )
            started = time.perf_counter()
            for start in range(0, keys, group):
                subjects = [str(s) for s in range(start, min(start + group, keys))]
                tokens = [secrets.randbits(63) for _ in subjects]
                rows = ", ".join(
                    ["(%s, %s, %s, 'claimed', %s, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"]
                    * len(subjects)
                )
                args: list[Any] = []
                for subject, token in zip(subjects, tokens, strict=True):
                    args += [ACTION, subject, CYCLE, token]
                await cur.execute(
                    f"INSERT IGNORE INTO {table} (action, subject, cycle, status, token,"
                    f" lease_until, updated_at) VALUES {rows}",
                    args,
                )
                marks = ", ".join(["%s"] * len(tokens))
                await cur.execute(
                    f"SELECT id FROM {table} WHERE action = %s AND cycle = %s"
                    f" AND token IN ({marks})",
                    [ACTION, CYCLE, *tokens],
                )
                ids = [row[0] for row in await cur.fetchall()]
                await conn.commit()
                await cur.execute(
                    f"UPDATE {table} SET status = 'sent', sent_at = UTC_TIMESTAMP(6),"
                    f" updated_at = UTC_TIMESTAMP(6) WHERE id IN ({', '.join(['%s'] * len(ids))})"
                    " AND status = 'claimed'",
                    ids,
                )
                await conn.commit()
            return keys / (time.perf_counter() - started)
    finally:
        async with conn.cursor() as cur:
            await cur.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.commit()
        conn.close()


async def raw_sqlite(url: str, keys: int, group: int) -> float:
    import sqlite3

    path = make_url(url).database
    assert path is not None

    def work() -> float:
        conn = sqlite3.connect(path, isolation_level=None)
        table = f"nfo_bench_raw_{uuid.uuid4().hex[:8]}"
        try:
            conn.execute(
                f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, action TEXT NOT NULL, subject"
                " TEXT NOT NULL, cycle TEXT NOT NULL, status TEXT NOT NULL, token INTEGER NOT"
                " NULL, lease_until TEXT NOT NULL, updated_at TEXT NOT NULL, sent_at TEXT,"
                " message_id TEXT, UNIQUE (action, cycle, subject))"
            )
            claim = (
                f"INSERT INTO {table} (action, subject, cycle, status, token, lease_until,"
                " updated_at) VALUES (?, ?, ?, 'claimed', ?, datetime('now'), datetime('now'))"
                " ON CONFLICT DO NOTHING RETURNING id"
            )
            mark = (
                f"UPDATE {table} SET status = 'sent', sent_at = datetime('now'),"
                " updated_at = datetime('now') WHERE id = ? AND status = 'claimed'"
            )
            started = time.perf_counter()
            for start in range(0, keys, group):
                conn.execute("BEGIN IMMEDIATE")
                ids = []
                for subject in range(start, min(start + group, keys)):
                    row = conn.execute(claim, (ACTION, str(subject), CYCLE, secrets.randbits(63)))
                    ids += [r[0] for r in row.fetchall()]
                conn.execute("COMMIT")
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(mark, [(i,) for i in ids])
                conn.execute("COMMIT")
            return keys / (time.perf_counter() - started)
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.close()

    return await asyncio.to_thread(work)


Target = tuple[str, str, Callable[[str, int, int], Awaitable[float]]]


def databases(wanted: set[str], sqlite_file: str) -> list[Target]:
    """(name, async URL, raw driver benchmark) of each database in ``wanted`` whose URL is
    set (SQLite: a new file named ``sqlite_file``)."""
    targets: list[Target] = []
    pg = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL")
    if pg and "postgres" in wanted:
        url = make_url(pg).set(drivername="postgresql+asyncpg").render_as_string(False)
        targets.append(("PostgreSQL (asyncpg)", url, raw_postgres))
    my = os.environ.get("NOTIFYONCE_TEST_MYSQL_URL")
    if my and "mariadb" in wanted:
        url = make_url(my).set(drivername="mysql+asyncmy").render_as_string(False)
        targets.append(("MariaDB (asyncmy)", url, raw_mariadb))
    if "sqlite" in wanted:
        path = os.path.join(tempfile.mkdtemp(prefix="nfo-bench-"), sqlite_file)
        targets.append(("SQLite (aiosqlite)", f"sqlite+aiosqlite:///{path}", raw_sqlite))
    return targets


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notifications", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--databases", default=",".join(DATABASES))
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    figures: list[dict[str, Any]] = []
    wanted = set(args.databases.split(","))
    if unknown := wanted.difference(DATABASES):
        parser.error(f"--databases: {', '.join(sorted(unknown))} is not one of {DATABASES}")
    targets = databases(wanted, "campaign.sqlite3")
    print(
        f"one campaign of {args.notifications:,} notifications, FakeSender, concurrency"
        f" {args.concurrency}; rates per {args.every:,}"
    )
    for name, url, raw in targets:
        engine = create_async_engine(url)
        try:
            result = await run_campaign(engine, args.notifications, args.every, args.concurrency)
        finally:
            await engine.dispose()
        limit = await raw(url, min(RAW_KEYS, args.notifications), args.concurrency)
        rates = result["rates"]
        print(f"\n{name}")
        print("  per chunk:  " + "  ".join(f"{r:,.0f}/s" for r in rates))
        print(f"  last/first: {rates[-1] / rates[0]:.2f}   overall: {result['overall']:,.0f}/s")
        print(
            f"  statements per notification: {result['statements']:.3f}   peak memory:"
            f" +{result['memory']:.0f} MB"
        )
        print(
            f"  raw driver, same claims and marks (held connection, groups of"
            f" {args.concurrency}): {limit:,.0f}/s; the Notifier at"
            f" {result['overall'] / limit:.2f}x"
        )
        figures.append({"name": name, **result, "raw": limit})
    if args.json:
        from _results import write

        settings = {k: getattr(args, k) for k in ("notifications", "every", "concurrency")}
        write(args.json, "campaign", {"settings": settings, "databases": figures})


if __name__ == "__main__":
    asyncio.run(main())
