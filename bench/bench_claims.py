"""Claim throughput of AsyncLedger on PostgreSQL (asyncpg) against the raw driver's limit.

Run by hand:  .venv/bin/python bench/bench_claims.py [postgresql://root@127.0.0.1:5432/test]
                  [--json bench/results/claims.json]

The driver's limit is one prepared statement on a connection held for the whole run: no
pool, no statement built per call. In one run, on tables of the same shape, it measures:

* ``claim_slot`` one key at a time against a held connection's prepared ``INSERT ... ON
  CONFLICT DO NOTHING RETURNING`` (autocommit), sequentially and with 16 workers (each
  worker its own held connection on the raw side);
* ``claim_many`` (its default chunks) against a held connection's prepared ``INSERT ...
  SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING``, in chunks of 500 and 10,000.

Each case runs ``ROUNDS`` times, raw and ledger alternating, and the median round is
reported: the machine is shared, so a load spike should not land on one side only. With
each rate it prints the client CPU per claim, the median of the rounds (user + system time
of this process, as the OS charged it), which a busy machine disturbs far less.

It also counts what SQLAlchemy compiles for the claims: through an engine with ``echo``
(where the ledger's statements go through the Connection, so they are logged) it runs 200
claims and counts the log's ``[no key]`` and ``[generated`` markers per claim (0: nothing is
compiled per call). Run it with SQLAlchemy 2.0 and 2.1 (for example in a venv with
``pip install 'sqlalchemy==2.0.47'``) to compare them.

Goals: claim_slot >= 0.7x and claim_many >= 0.7x the held connection's rate, on both.

``--json PATH`` also writes the figures there (``bench/plot_benchmarks.py`` draws them).

``--single`` measures only the one-key calls with 16 workers, each against its held
connections on a table of the same shape: ``claim_slot`` against the prepared INSERT above,
and ``mark_sent`` against a prepared ``UPDATE ... WHERE id = $4 AND token = $5 AND status =
$6`` (the status bound, as the ledger's; the rows to mark are claimed before each timed
round, untimed), ``--rounds`` rounds (default 5),
raw and ledger alternating, each round's ratio printed. Two trees are compared by running
it alternately with each on ``PYTHONPATH``, on the same database, one run after the other.

``--indexes`` measures instead what each of the table's indexes costs a claim: the
ledger's ``claim_many`` and ``claim_slot`` (16 workers) on scratch tables, one with every
index, one without each secondary index in turn, and a bare one (the primary key and the
unique key the claim's ``ON CONFLICT`` needs), alternating, the median of ``ROUNDS``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import io
import logging
import os
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger

UTC = dt.timezone.utc
ROUNDS = 5
SINGLE = 1000
WORKERS = 16
# The workers' rounds are longer: at ~15,000 claims/s a round of 1,000 took 70 ms, within
# the reach of any hiccup of two shared cores.
PARALLEL = 4000
BULK = 40_000
CHUNK = 500
RAW_CHUNK = 10_000

RAW_SINGLE = """
INSERT INTO {t} (action, subject, cycle, cycle_at, status, attempt, token, lease_until,
                 created_at, updated_at)
VALUES ($1, $2, $3, $4, 'claimed', 1, $5, $6, $7, $7)
ON CONFLICT (action, cycle, subject) DO NOTHING
RETURNING id
"""
Prepared = asyncpg.prepared_stmt.PreparedStatement
RAW_MARK = """
UPDATE {t} SET status = $1, updated_at = $2, sent_at = $2, message_id = $3
WHERE id = $4 AND token = $5 AND status = $6
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


#: Client CPU per claim (user + system time of this process, us) of each timed run, by
#: the label of its case: what the OS charged the side that ran.
CPU: dict[str, list[float]] = {}


async def timed(count: int, work: Callable[[], Awaitable[object]], label: str = "") -> float:
    """Claims per second of one run of ``work`` (its CPU per claim kept in `CPU`)."""
    before = os.times()
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    after = os.times()
    cpu = (after.user - before.user) + (after.system - before.system)
    CPU.setdefault(label, []).append(1e6 * cpu / count)
    return count / elapsed


async def compiled_per_claim(url: sa.URL) -> float:
    """``[no key]`` and ``[generated`` markers in the engine log, per claim, over 200 claims."""
    engine = create_async_engine(url, echo=True)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    engine_logger = logging.getLogger("sqlalchemy.engine.Engine")
    engine_logger.handlers, saved = [handler], engine_logger.handlers
    table = f"bench_echo_{uuid.uuid4().hex[:8]}"
    ledger = AsyncLedger(engine, table_name=table)
    try:
        await ledger.create_schema()
        log.truncate(0)
        log.seek(0)
        for subject, cycle in keys("echo", 200):
            await ledger.claim_slot("s", subject, cycle)
        text = log.getvalue()
        return (text.count("[no key") + text.count("[generated")) / 200
    finally:
        engine_logger.handlers = saved
        async with engine.begin() as conn:
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}, {table}_recipients"))
        await engine.dispose()


@contextlib.asynccontextmanager
async def _side_by_side(
    url: str,
) -> AsyncIterator[tuple[AsyncEngine, AsyncLedger, str, str, list[asyncpg.Connection]]]:
    """The ledger's table and the raw side's, of one shape, an engine of ``WORKERS``
    connections and ``WORKERS`` held asyncpg connections; all dropped and closed after."""
    sa_url = sa.make_url(url).set(drivername="postgresql+asyncpg")
    raw_dsn = sa_url.set(drivername="postgresql").render_as_string(hide_password=False)
    engine = create_async_engine(sa_url, pool_size=WORKERS, max_overflow=0)
    suffix = uuid.uuid4().hex[:8]
    ledger_table, raw_table = f"bench_ledger_{suffix}", f"bench_raw_{suffix}"
    ledger = AsyncLedger(engine, table_name=ledger_table)
    await ledger.create_schema()
    await AsyncLedger(engine, table_name=raw_table).create_schema()
    held = [await asyncpg.connect(raw_dsn) for _ in range(WORKERS)]
    try:
        yield engine, ledger, ledger_table, raw_table, held
    finally:
        for conn in held:
            await conn.close()
        async with engine.begin() as conn:
            for table in (ledger_table, raw_table):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}, {table}_recipients"))
        await engine.dispose()


async def main(url: str, json_path: str | None = None) -> int:
    sa_url = sa.make_url(url).set(drivername="postgresql+asyncpg")
    lease = dt.timedelta(minutes=5)
    async with _side_by_side(url) as (_, ledger, _, raw_table, held):
        singles = [await conn.prepare(RAW_SINGLE.format(t=raw_table)) for conn in held]
        bulk = await held[0].prepare(RAW_BULK.format(t=raw_table))

        async def raw_one(statement: asyncpg.prepared_stmt.PreparedStatement, subject: str,
                          cycle: dt.datetime) -> None:  # fmt: skip
            now = dt.datetime.now(UTC)
            await statement.fetchrow(
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

        async def raw_workers(items: list[tuple[str, dt.datetime]]) -> None:
            await asyncio.gather(
                *(
                    sequential(partial(raw_one, singles[i]), items[i::WORKERS])
                    for i in range(WORKERS)
                )
            )

        async def ledger_workers(items: list[tuple[str, dt.datetime]]) -> None:
            await asyncio.gather(
                *(sequential(ledger_one, items[i::WORKERS]) for i in range(WORKERS))
            )

        async def raw_bulk(items: list[tuple[str, dt.datetime]], size: int) -> None:
            for start in range(0, len(items), size):
                chunk = sorted(items[start : start + size], key=lambda k: (k[1], k[0]))
                now = dt.datetime.now(UTC)
                rows = await bulk.fetch(
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

        # Warm up both paths (connections, prepared statements, the ledger's statements).
        await sequential(partial(raw_one, singles[0]), keys("warm", 200))
        await sequential(ledger_one, keys("warm", 200))
        await raw_bulk(keys("warm-b", 2 * CHUNK), CHUNK)
        await raw_bulk(keys("warm-big", RAW_CHUNK), RAW_CHUNK)
        await ledger_bulk(keys("warm-m", 2 * CHUNK))
        # Both worker cases on all their connections: the ledger's pool opens its other 15
        # here, not in its first round (the raw side holds its 16 open from the start).
        await raw_workers(keys("warm-w", 20 * WORKERS))
        await ledger_workers(keys("warm-lw", 20 * WORKERS))

        cases: dict[str, tuple[int, Callable[[str], Awaitable[object]]]] = {
            "raw, held connection, sequential": (
                SINGLE,
                lambda p: sequential(partial(raw_one, singles[0]), keys(p, SINGLE)),
            ),
            "AsyncLedger.claim_slot, sequential": (
                SINGLE,
                lambda p: sequential(ledger_one, keys(p, SINGLE)),
            ),
            f"raw, {WORKERS} held connections": (
                PARALLEL,
                lambda p: raw_workers(keys(p, PARALLEL)),
            ),
            f"AsyncLedger.claim_slot, {WORKERS} workers": (
                PARALLEL,
                lambda p: ledger_workers(keys(p, PARALLEL)),
            ),
            f"raw unnest, chunks of {CHUNK}": (BULK, lambda p: raw_bulk(keys(p, BULK), CHUNK)),
            f"raw unnest, chunks of {RAW_CHUNK:,}": (
                BULK,
                lambda p: raw_bulk(keys(p, BULK), RAW_CHUNK),
            ),
            "AsyncLedger.claim_many, default chunks": (BULK, lambda p: ledger_bulk(keys(p, BULK))),
        }
        rates: dict[str, list[float]] = {label: [] for label in cases}
        for round_number in range(ROUNDS):
            for index, (label, (count, work)) in enumerate(cases.items()):
                prefix = f"r{round_number}c{index}-"
                rates[label].append(await timed(count, partial(work, prefix), label))
        median = {label: statistics.median(values) for label, values in rates.items()}
        print(
            f"SQLAlchemy {sa.__version__}, asyncpg {asyncpg.__version__}: median of {ROUNDS}"
            f" alternating rounds ({SINGLE} single claims, {PARALLEL:,} with {WORKERS} workers,"
            f" {BULK:,} bulk keys each)"
        )
        for label, rate in median.items():
            spread = ", ".join(f"{r:,.0f}" for r in rates[label])
            cpu = statistics.median(CPU[label])
            print(f"  {label:<40} {rate:>9,.0f} claims/s   ({spread}), CPU {cpu:,.1f} us/claim")
        raw_seq, led_seq, raw_par, led_par, raw_many, raw_big, led_many = median.values()
        print("ratios (ledger / the held connection; goals: >= 0.7)")
        print(f"  claim_slot, sequential                      {led_seq / raw_seq:.2f}")
        print(f"  claim_slot, {WORKERS} workers                      {led_par / raw_par:.2f}")
        best_raw = max(raw_big, raw_many)
        print(f"  claim_many / the faster raw unnest          {led_many / best_raw:.2f}")
        per_claim = await compiled_per_claim(sa_url)
        print(f"statements compiled per claim (the engine log's [no key], [generated): {per_claim}")
        if json_path:
            from _results import write

            write(json_path, "claims", results(rates, per_claim))
    return 0


async def single_calls(url: str, rounds: int) -> int:
    """``claim_slot`` and ``mark_sent`` with 16 workers against the held connections."""
    lease = dt.timedelta(minutes=5)
    async with _side_by_side(url) as (engine, ledger, ledger_table, raw_table, held):
        claims = [await conn.prepare(RAW_SINGLE.format(t=raw_table)) for conn in held]
        bulk = await held[0].prepare(
            RAW_BULK.format(t=raw_table).replace("RETURNING id", "RETURNING id, token")
        )

        async def raw_claims(items: list[tuple[str, dt.datetime]]) -> None:
            async def worker(stmt: Prepared, part: list[tuple[str, dt.datetime]]) -> None:
                for subject, cycle in part:
                    now = dt.datetime.now(UTC)
                    await stmt.fetchrow(
                        "s", subject, cycle.strftime("%Y-%m-%dT%H:%M:%SZ"), cycle,
                        secrets.randbits(63), now + lease, now,
                    )  # fmt: skip

            await asyncio.gather(*(worker(claims[i], items[i::WORKERS]) for i in range(WORKERS)))

        async def ledger_claims(items: list[tuple[str, dt.datetime]]) -> None:
            async def worker(part: list[tuple[str, dt.datetime]]) -> None:
                for subject, cycle in part:
                    assert await ledger.claim_slot("s", subject, cycle) is not None

            await asyncio.gather(*(worker(items[i::WORKERS]) for i in range(WORKERS)))

        async def raw_claimed(items: list[tuple[str, dt.datetime]]) -> list[tuple[int, int]]:
            now = dt.datetime.now(UTC)
            rows = await bulk.fetch(
                "k", now + lease, now, [s for s, _ in items],
                [c.strftime("%Y-%m-%dT%H:%M:%SZ") for _, c in items], [c for _, c in items],
                [secrets.randbits(63) for _ in items],
            )  # fmt: skip
            return [(row["id"], row["token"]) for row in rows]

        async def raw_marks(rows: list[tuple[int, int]]) -> None:
            async def worker(stmt: Prepared, part: list[tuple[int, int]]) -> None:
                for row_id, token in part:
                    await stmt.fetch("sent", dt.datetime.now(UTC), "1", row_id, token, "claimed")
                    assert stmt.get_statusmsg() == "UPDATE 1"

            await asyncio.gather(*(worker(marks[i], rows[i::WORKERS]) for i in range(WORKERS)))

        async def ledger_marks(won: list[Any]) -> None:
            async def worker(part: list[Any]) -> None:
                for claim in part:
                    assert await ledger.mark_sent(claim, message_id="1")

            await asyncio.gather(*(worker(won[i::WORKERS]) for i in range(WORKERS)))

        # Warm up: every connection of both sides, every statement. The marks are prepared
        # once the table has rows and statistics: prepared on an empty table, PostgreSQL's
        # generic plan scans it whole (the ledger makes its statements' plans again as a
        # table grows, see PostgreSQL in notifyonce/_ledger/dialects.py).
        await raw_claims(keys("warm", 20 * WORKERS))
        await ledger_claims(keys("warm-l", 20 * WORKERS))
        async with engine.begin() as conn:
            for table in (ledger_table, raw_table):
                await conn.execute(sa.text(f"ANALYZE {table}"))
        marks = [await conn.prepare(RAW_MARK.format(t=raw_table)) for conn in held]
        await raw_marks(await raw_claimed(keys("warm-m", 20 * WORKERS)))
        await ledger_marks(await ledger.claim_many("k", keys("warm-lm", 20 * WORKERS)))
        labels = (
            f"raw claim, {WORKERS} held connections",
            f"AsyncLedger.claim_slot, {WORKERS} workers",
            f"raw mark, {WORKERS} held connections",
            f"AsyncLedger.mark_sent, {WORKERS} workers",
        )
        rates: dict[str, list[float]] = {label: [] for label in labels}
        for number in range(rounds):
            p = f"r{number}-"
            rates[labels[0]].append(
                await timed(PARALLEL, partial(raw_claims, keys(p + "rc", PARALLEL)), labels[0])
            )
            rates[labels[1]].append(
                await timed(PARALLEL, partial(ledger_claims, keys(p + "lc", PARALLEL)), labels[1])
            )
            rows = await raw_claimed(keys(p + "rm", PARALLEL))
            rates[labels[2]].append(await timed(PARALLEL, partial(raw_marks, rows), labels[2]))
            won = await ledger.claim_many("k", keys(p + "lm", PARALLEL))
            rates[labels[3]].append(await timed(PARALLEL, partial(ledger_marks, won), labels[3]))
        print(
            f"SQLAlchemy {sa.__version__}, asyncpg {asyncpg.__version__}: {rounds} alternating"
            f" rounds of {PARALLEL:,} calls with {WORKERS} workers"
        )
        for label in labels:
            spread = ", ".join(f"{r:,.0f}" for r in rates[label])
            cpu = statistics.median(CPU[label])
            print(
                f"  {label:<40} {statistics.median(rates[label]):>9,.0f}/s   ({spread}),"
                f" CPU {cpu:,.1f} us/call"
            )
        for name, raw, led in (("claim_slot", *labels[:2]), ("mark_sent", *labels[2:])):
            ratios = [b / a for a, b in zip(rates[raw], rates[led], strict=True)]
            each = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"ratio {name}: median {statistics.median(ratios):.3f} ({each})")
    return 0


async def index_costs(url: str) -> int:
    """Claims per second with each secondary index of the table dropped in turn."""
    from notifyonce._ledger.table import index_names

    sa_url = sa.make_url(url).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(sa_url, pool_size=WORKERS, max_overflow=0)
    suffix = uuid.uuid4().hex[:8]
    secondary = [kind for kind in index_names("t") if kind not in ("pk", "key")]
    variants: dict[str, list[str]] = {"every index": []}
    variants.update({f"without {kind}": [kind] for kind in secondary})
    variants["bare (primary key and unique key)"] = secondary
    ledgers: dict[str, AsyncLedger] = {}
    try:
        for number, (label, dropped) in enumerate(variants.items()):
            table = f"bench_idx{number}_{suffix}"
            ledger = ledgers[label] = AsyncLedger(engine, table_name=table)
            await ledger.create_schema()
            names = index_names(table)
            async with engine.begin() as conn:
                for kind in dropped:
                    await conn.execute(sa.text(f"DROP INDEX {names[kind]}"))

        async def bulk(ledger: AsyncLedger, prefix: str) -> None:
            await ledger.claim_many("m", keys(prefix, BULK))

        async def single(ledger: AsyncLedger, prefix: str) -> None:
            items = keys(prefix, SINGLE)

            async def worker(part: list[tuple[str, dt.datetime]]) -> None:
                for subject, cycle in part:
                    await ledger.claim_slot("s", subject, cycle)

            await asyncio.gather(*(worker(items[i::WORKERS]) for i in range(WORKERS)))

        for ledger in ledgers.values():  # warm up
            await bulk(ledger, "warm")
            await single(ledger, "warm")
        rates: dict[tuple[str, str], list[float]] = {}
        for round_number in range(ROUNDS):
            for label, ledger in ledgers.items():
                for case, count, work in (("bulk", BULK, bulk), ("single", SINGLE, single)):
                    prefix = f"r{round_number}{case}-"
                    rate = await timed(count, partial(work, ledger, prefix))
                    rates.setdefault((label, case), []).append(rate)
        median = {key: statistics.median(values) for key, values in rates.items()}
        full_bulk, full_single = median["every index", "bulk"], median["every index", "single"]
        print(
            f"SQLAlchemy {sa.__version__}, asyncpg {asyncpg.__version__}: median of {ROUNDS}"
            f" alternating rounds; claim_many {BULK:,} keys, claim_slot {SINGLE} with"
            f" {WORKERS} workers; the table holds about {ROUNDS * BULK + BULK:,} rows at the end"
        )
        print(
            f"  {'table':<36} {'claim_many':>12} {'vs every':>9} {'claim_slot':>11} {'vs every':>9}"
        )
        for label in variants:
            b, s1 = median[label, "bulk"], median[label, "single"]
            print(
                f"  {label:<36} {b:>10,.0f}/s {b / full_bulk:>8.2f}x"
                f" {s1:>9,.0f}/s {s1 / full_single:>8.2f}x"
            )
    finally:
        async with engine.begin() as conn:
            for ledger in ledgers.values():
                await conn.execute(
                    sa.text(
                        f"DROP TABLE IF EXISTS {ledger.table_name}, {ledger.table_name}_recipients"
                    )
                )
        await engine.dispose()
    return 0


def results(rates: dict[str, list[float]], per_claim: float) -> dict[str, object]:
    """What ``--json`` writes: each case's median and rounds (claims/s), as printed."""
    return {
        "settings": {
            "rounds": ROUNDS,
            "single": SINGLE,
            "parallel": PARALLEL,
            "workers": WORKERS,
            "bulk": BULK,
        },
        "versions": {"sqlalchemy": sa.__version__, "asyncpg": asyncpg.__version__},
        "cases": [
            {"label": label, "rate": statistics.median(values), "rounds": values}
            for label, values in rates.items()
        ],
        "compiled_per_claim": per_claim,
    }


if __name__ == "__main__":
    default = os.environ.get(
        "NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test"
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=default)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    parser.add_argument(
        "--indexes", action="store_true", help="measure what each index costs a claim instead"
    )
    parser.add_argument(
        "--single", action="store_true", help="measure only claim_slot and mark_sent, 16 workers"
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of --single")
    args = parser.parse_args()
    if args.single:
        sys.exit(asyncio.run(single_calls(args.url, args.rounds)))
    if args.indexes:
        sys.exit(asyncio.run(index_costs(args.url)))
    sys.exit(asyncio.run(main(args.url, args.json)))
