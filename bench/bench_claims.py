"""Claim throughput of AsyncLedger on PostgreSQL (asyncpg) against the raw driver.

Run by hand:  .venv/bin/python bench/bench_claims.py [postgresql://root@127.0.0.1:5432/test]

It measures, in one run and on tables of the same shape:

* ``claim_slot`` one key at a time vs raw asyncpg ``INSERT ... ON CONFLICT DO NOTHING
  RETURNING`` (a prepared statement in autocommit), sequentially and with 16 workers;
* ``claim_many`` with its default chunk size vs raw asyncpg ``INSERT ... SELECT FROM
  unnest(...) ON CONFLICT DO NOTHING RETURNING``, both in chunks of 500 (the same chunks)
  and in chunks of 10,000 (fewer round trips for the raw side).

Goals: claim_slot >= 0.7x the raw single-row insert, claim_many >= 0.6x the faster of the
two raw unnest runs (0.8x the stretch goal). Bounded: five rounds of 1,000 single claims
(sequential and with 16 workers) and 40,000 bulk keys per case.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import secrets
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger

UTC = dt.timezone.utc
ROUNDS = 5
SINGLE = 1000
WORKERS = 16
BULK = 40_000
CHUNK = 500  # the ledger's default chunk_size
RAW_CHUNK = 10_000

RAW_SINGLE = """
INSERT INTO {t} (action, subject, cycle, cycle_at, status, attempt, token, lease_until,
                 created_at, updated_at)
VALUES ($1, $2, $3, $4, 'claimed', 1, $5, $6, $7, $7)
ON CONFLICT (action, cycle, subject) DO NOTHING
RETURNING id
"""
RAW_BULK = """
INSERT INTO {t} (action, subject, cycle, cycle_at, status, attempt, token, lease_until,
                 created_at, updated_at)
SELECT $1, u.s, u.c, u.ca, 'claimed', 1, u.tok, $2, $3, $3
FROM unnest($4::text[], $5::text[], $6::timestamptz[], $7::bigint[]) AS u(s, c, ca, tok)
ON CONFLICT (action, cycle, subject) DO NOTHING
RETURNING id
"""


def keys(prefix: str, count: int) -> list[tuple[str, dt.datetime]]:
    """Distinct (subject, cycle) pairs whose cycles fall in a narrow range, like a window run."""
    base = dt.datetime(2026, 12, 1, tzinfo=UTC)
    return [(f"{prefix}{i}", base + dt.timedelta(minutes=i % 90)) for i in range(count)]


async def timed(count: int, work: Callable[[], Awaitable[object]]) -> float:
    """Claims per second of one run of ``work``."""
    start = time.perf_counter()
    await work()
    return count / (time.perf_counter() - start)


async def in_workers(
    items: list[tuple[str, dt.datetime]], one: Callable[..., Awaitable[object]]
) -> None:
    """Claim ``items`` one at a time, spread over WORKERS concurrent tasks."""

    async def worker(part: list[tuple[str, dt.datetime]]) -> None:
        for subject, cycle in part:
            await one(subject, cycle)

    await asyncio.gather(*(worker(items[i::WORKERS]) for i in range(WORKERS)))


async def main(url: str) -> int:
    sa_url = sa.make_url(url).set(drivername="postgresql+asyncpg")
    raw_dsn = sa_url.set(drivername="postgresql").render_as_string(hide_password=False)
    engine = create_async_engine(sa_url, pool_size=WORKERS, max_overflow=0)
    suffix = uuid.uuid4().hex[:8]
    ledger_table, raw_table = f"bench_ledger_{suffix}", f"bench_raw_{suffix}"
    ledger = AsyncLedger(engine, table_name=ledger_table)
    await ledger.create_schema()
    await AsyncLedger(engine, table_name=raw_table).create_schema()
    pool = await asyncpg.create_pool(raw_dsn, min_size=WORKERS, max_size=WORKERS)
    lease = dt.timedelta(minutes=5)
    try:
        single = RAW_SINGLE.format(t=raw_table)

        async def raw_one(subject: str, cycle: dt.datetime) -> None:
            now = dt.datetime.now(UTC)
            async with pool.acquire() as conn:
                await conn.fetchrow(
                    single,
                    "s",
                    subject,
                    cycle.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    cycle,
                    secrets.randbits(63),
                    now + lease,
                    now,
                )

        async def ledger_one(subject: str, cycle: dt.datetime) -> None:
            assert await ledger.claim_slot("s", subject, cycle) is not None

        async def sequential(
            one: Callable[..., Awaitable[None]], items: list[tuple[str, dt.datetime]]
        ) -> None:
            for subject, cycle in items:
                await one(subject, cycle)

        # Warm up both paths (connections, prepared statements, SQLAlchemy's cache).
        await sequential(raw_one, keys("warm", 200))
        await sequential(ledger_one, keys("warm", 200))

        bulk = RAW_BULK.format(t=raw_table)

        async def raw_bulk(items: list[tuple[str, dt.datetime]], size: int) -> None:
            async with pool.acquire() as conn:
                for start in range(0, len(items), size):
                    chunk = sorted(items[start : start + size], key=lambda k: (k[1], k[0]))
                    now = dt.datetime.now(UTC)
                    rows = await conn.fetch(
                        bulk,
                        "m",
                        now + lease,
                        now,
                        [s for s, _ in chunk],
                        [c.strftime("%Y-%m-%dT%H:%M:%SZ") for _, c in chunk],
                        [c for _, c in chunk],
                        [secrets.randbits(63) for _ in chunk],
                    )
                    assert len(rows) == len(chunk)

        async def ledger_bulk(items: list[tuple[str, dt.datetime]]) -> None:
            won = await ledger.claim_many("m", items)  # its default chunk_size
            assert len(won) == len(items)

        await raw_bulk(keys("warm", 2 * CHUNK), CHUNK)
        await raw_bulk(keys("warm-big", RAW_CHUNK), RAW_CHUNK)
        await ledger_bulk(keys("warm", 2 * CHUNK))

        # Raw and ledger alternate, round after round, and each keeps its best round: the
        # machine is shared, so a load spike should not land on one side only.
        cases: dict[str, tuple[int, Callable[[str], Awaitable[object]]]] = {
            "raw asyncpg INSERT ON CONFLICT, sequential": (
                SINGLE,
                lambda p: sequential(raw_one, keys(p, SINGLE)),
            ),
            "AsyncLedger.claim_slot, sequential": (
                SINGLE,
                lambda p: sequential(ledger_one, keys(p, SINGLE)),
            ),
            f"raw asyncpg, {WORKERS} workers": (
                SINGLE,
                lambda p: in_workers(keys(p, SINGLE), raw_one),
            ),
            f"AsyncLedger.claim_slot, {WORKERS} workers": (
                SINGLE,
                lambda p: in_workers(keys(p, SINGLE), ledger_one),
            ),
            f"raw asyncpg unnest, chunks of {CHUNK}": (
                BULK,
                lambda p: raw_bulk(keys(p, BULK), CHUNK),
            ),
            f"raw asyncpg unnest, chunks of {RAW_CHUNK:,}": (
                BULK,
                lambda p: raw_bulk(keys(p, BULK), RAW_CHUNK),
            ),
            f"AsyncLedger.claim_many, default chunks ({CHUNK})": (
                BULK,
                lambda p: ledger_bulk(keys(p, BULK)),
            ),
        }
        best: dict[str, float] = dict.fromkeys(cases, 0.0)
        for round_number in range(ROUNDS):
            for index, (label, (count, work)) in enumerate(cases.items()):
                prefix = f"r{round_number}c{index}-"
                rate = await timed(count, partial(work, prefix))
                best[label] = max(best[label], rate)
        print(
            f"best of {ROUNDS} alternating rounds ({SINGLE} single claims, {BULK:,} bulk keys each)"
        )
        for label, rate in best.items():
            print(f"  {label:<46} {rate:>10,.0f} claims/s")
        raw_seq, led_seq, raw_par, led_par, raw_many, raw_big, led_many = best.values()

        print(
            "ratios (ledger / raw; goals: claim_slot >= 0.7, claim_many >= 0.6 of the faster raw)"
        )
        print(f"  claim_slot, sequential                      {led_seq / raw_seq:.2f}")
        print(f"  claim_slot, {WORKERS} workers                      {led_par / raw_par:.2f}")
        print(f"  claim_many / raw unnest, chunks of {RAW_CHUNK:,}     {led_many / raw_big:.2f}")
        print(f"  claim_many / raw unnest, chunks of {CHUNK}        {led_many / raw_many:.2f}")
        print(
            f"  claim_many / the faster of the two raw runs {led_many / max(raw_big, raw_many):.2f}"
        )
    finally:
        await pool.close()
        async with engine.begin() as conn:
            for table in (ledger_table, raw_table):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        await engine.dispose()
    return 0


if __name__ == "__main__":
    default = os.environ.get(
        "NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test"
    )
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else default)))
