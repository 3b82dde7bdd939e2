"""How long each page of the operator console takes on a large PostgreSQL ledger.

Fills a table with --rows rows (10,000,000 by default) in a few INSERT ... SELECT
generate_series statements, the indexes built afterwards: three reminder actions whose
cycles are deadlines over 60 days (mostly sent, some unknown and failed), a finished
broadcast campaign of 8% of the rows and a running one of 2% (sending now at 25 a second,
under a bot's 30; some chats held, some unknown). Then renders each page through the ASGI app (no
network) --repeat times and prints the median and the slowest, in milliseconds.

    eval "$(scripts/services.sh)" && python bench/bench_web.py            # 10M rows
    python bench/bench_web.py --rows 1000000 --keep                       # keep the table

The table is dropped at the end unless --keep (a second run with --reuse skips the fill).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import httpx
import sqlalchemy as sa

from notifyonce import Ledger
from notifyonce.web import create_app

TABLE = "bench_web_slots"


def fill(engine: sa.Engine, rows: int) -> None:
    ledger = Ledger(engine, table_name=TABLE)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
    ledger.create_schema()
    t = ledger.table
    indexes = list(t.indexes)
    with engine.begin() as conn:
        for index in indexes:
            conn.execute(sa.text(f"DROP INDEX {index.name}"))
        conn.execute(sa.text(f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_key"))
    reminders = int(rows * 0.90)
    finished = int(rows * 0.08)
    running = rows - reminders - finished
    common = f"""
        INSERT INTO {TABLE} (action, subject, cycle, cycle_at, status, attempt, token, lease_until,
                         created_at, updated_at, sent_at, last_error, message_id)
    """
    started = time.monotonic()
    with engine.begin() as conn:
        # Reminders: subject g % 1M, one of three actions, a deadline per (subject, day).
        conn.execute(
            sa.text(
                common
                + """
        SELECT (ARRAY['trial_6h','trial_3h','trial_1h'])[1 + g % 3],
               (g / 3 % 1000000)::text,
               to_char(d, 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), d,
               CASE WHEN g % 1000 = 0 THEN 'unknown' WHEN g % 200 = 1 THEN 'failed'
                    ELSE 'sent' END,
               1, g, d, d - interval '6 hours', d - interval '6 hours',
               CASE WHEN g % 1000 = 0 OR g % 200 = 1 THEN NULL ELSE d - interval '6 hours' END,
               CASE WHEN g % 1000 = 0 THEN 'read timeout after the request was sent'
                    WHEN g % 200 = 1 THEN '[403] Forbidden: bot was blocked by the user'
                    END,
               NULL
        FROM (SELECT g, now() - interval '60 days'
                        + (g / 3 / 1000000) * interval '1 day'
                        + (g % 86400) * interval '1 second' AS d
              FROM generate_series(0, :n - 1) AS g) AS s
        """
            ),
            {"n": reminders},
        )
        # The finished campaign, two days ago.
        conn.execute(
            sa.text(
                common
                + """
        SELECT 'promo', g::text, '2026-11-sale', NULL,
               CASE WHEN g % 500 = 0 THEN 'failed' ELSE 'sent' END, 1, g,
               s, s, s, CASE WHEN g % 500 = 0 THEN NULL ELSE s END,
               CASE WHEN g % 500 = 0 THEN '[400] Bad Request: chat not found' END, NULL
        FROM (SELECT g, now() - interval '2 days' + g * interval '10 milliseconds' AS s
              FROM generate_series(1, :n) AS g) AS x
        """
            ),
            {"n": finished},
        )
        # The running campaign: 25 sends a second (under a bot's 30) until now, the last
        # chats held.
        conn.execute(
            sa.text(
                common
                + """
        SELECT 'promo', g::text, '2026-12-sale', NULL,
               CASE WHEN g > :n - 500 THEN 'claimed' WHEN g % 2000 = 0 THEN 'unknown'
                    ELSE 'sent' END,
               1, g, now() + interval '5 minutes', s, s,
               CASE WHEN g > :n - 500 OR g % 2000 = 0 THEN NULL ELSE s END,
               CASE WHEN g % 2000 = 0 THEN 'read timeout after the request was sent' END, NULL
        FROM (SELECT g, now() - (:n - g) * interval '40 milliseconds' AS s
              FROM generate_series(1, :n) AS g) AS x
        """
            ),
            {"n": running},
        )
        for campaign, total in (("2026-11-sale", finished), ("2026-12-sale", running + 5000)):
            conn.execute(
                sa.text(
                    common
                    + """
            VALUES ('notifyonce.campaign', 'promo', :c, NULL, 'sent', 1, :total, now(),
                    now() - interval '1 hour', now(), NULL, NULL, 'msg-sha256:0')
            """
                ),
                {"c": campaign, "total": total},
            )
    print(f"filled {rows:,} rows in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_key UNIQUE (action, cycle, subject)"
            )
        )
        for index in indexes:
            index.create(conn)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLE}"))
    print(f"indexed and analysed in {time.monotonic() - started:.0f} s", flush=True)


PAGES = [
    ("overview", "/"),
    ("subject", "/subject?subject=4242"),
    ("campaign (running)", "/campaign?action=promo&campaign=2026-12-sale"),
    ("campaign.json (running)", "/campaign.json?action=promo&campaign=2026-12-sale"),
    ("campaign (finished)", "/campaign?action=promo&campaign=2026-11-sale"),
    ("problems", "/problems"),
    ("problems: one group", "/problems?status=unknown&action=trial_6h"),
    ("leases", "/leases"),
    ("rate limits", "/rate-limits"),
]


async def time_pages(engine: sa.Engine, repeat: int) -> list[tuple[str, float, float]]:
    app = create_app(engine, table=TABLE)
    transport = httpx.ASGITransport(app=app)
    results = []
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for name, path in PAGES:
            await client.get(path)  # warm the pool and the caches once
            took = []
            for _ in range(repeat):
                started = time.perf_counter()
                response = await client.get(path)
                took.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            results.append((name, statistics.median(took), max(took)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL"))
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="time the table a --keep run left")
    parser.add_argument("--keep", action="store_true", help="do not drop the table")
    args = parser.parse_args()
    if not args.database_url:
        raise SystemExit("set NOTIFYONCE_TEST_POSTGRES_URL or pass --database-url (PostgreSQL)")
    url = sa.engine.make_url(args.database_url).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url)
    try:
        if not args.reuse:
            fill(engine, args.rows)
        with engine.connect() as conn:
            count = conn.execute(
                sa.text(f"SELECT reltuples::bigint FROM pg_class WHERE relname = '{TABLE}'")
            ).scalar_one()
        print(f"\nledger of about {count:,} rows; median and slowest of {args.repeat} renders\n")
        print(f"{'page':<26} {'median ms':>10} {'max ms':>8}")
        for name, median, worst in asyncio.run(time_pages(engine, args.repeat)):
            print(f"{name:<26} {median:>10.1f} {worst:>8.1f}")
    finally:
        if not args.keep:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
        engine.dispose()


if __name__ == "__main__":
    main()
