"""Every statement on the send path is an index look-up bounded by the keys it touches.

A campaign of 100,000 rows (one action, one cycle) sits in the table, beside another
action's rows. Each ledger call below runs against it while an engine listener records the
statements the ledger sends; each recorded statement is then explained by the database
itself, with the same parameters, through the same driver:

- PostgreSQL: ``EXPLAIN (ANALYZE, FORMAT JSON)``, both with the plan PostgreSQL makes for
  the values (a custom plan) and with the plan a driver's prepared statement gets after a
  few runs (a generic plan: the one that turned a look-up into a scan of the campaign);
- MariaDB: ``ANALYZE FORMAT=JSON``;
- SQLite: ``EXPLAIN QUERY PLAN``.

Each scan of the ledger table must go through an index whose condition holds the key's
columns (or the row id), and on PostgreSQL and MariaDB the rows it examined must stay within
a small multiple of the keys asked, whatever the size of the campaign. Statements that
change rows are explained inside a transaction that is rolled back.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, DeliveryMode, Ledger, SlotStatus, make_key

from ._databases import Backend, backend_params, drop_table, make_backend

pytestmark = pytest.mark.slow

CAMPAIGN = "campaign"
CYCLE = "2026-12-tariff"
ROWS = 100_000
NOISE = 20_000  # rows of another action beside the campaign
UNKNOWN_EVERY = 200  # every 200th row of the campaign is unknown, the next one claimed
ASKED = 200  # keys one call asks about: existing subjects and new ones
YOUNG = 2000  # rows of a campaign in its first seconds
# Short key parts, as a monthly reminder has: with these, PostgreSQL's estimates for a
# never-analyzed table put an index on (action, sent_at) level with the key.
YOUNG_ACTION, YOUNG_CYCLE = "bench", "2026-12"
# Rows (index entries) a scan may examine per key asked: a few versions of each row, as a
# row just claimed, renewed and marked leaves dead entries behind until vacuum; and a few
# more in all.
PER_KEY, SLACK = 4, 10


@dataclass
class Campaign:
    """The filled table, and how to reach it."""

    backend: Backend
    table: str
    recorded: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def dialect(self) -> str:
        return self.backend.dialect


def _fill(backend: Backend, table: str, rows: int = ROWS, noise: int = NOISE) -> None:
    """The campaign and the other action's rows, written by the database itself."""
    # An empty ledger first (with statistics of an empty table, as a new campaign has),
    # then the rows without ANALYZE: the plans must not depend on fresh statistics.
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        Ledger(engine, table_name=table).create_schema()
        digits = " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10))
        numbers = (
            f"SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n "
            f"FROM ({digits}) a, ({digits}) b, ({digits}) c, ({digits}) e, ({digits}) f,"
            f" ({digits}) g"
        )
        text = "CAST(n AS CHAR)" if backend.dialect == "mysql" else "CAST(n AS TEXT)"
        past = {
            "postgresql": "now() - interval '1 hour'",
            "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
            "sqlite": "'2026-01-01 00:00:00.000000'",
        }[backend.dialect]
        mod = f"n % {UNKNOWN_EVERY}" if backend.dialect == "sqlite" else f"MOD(n, {UNKNOWN_EVERY})"
        status = f"CASE WHEN {mod} = 0 THEN 'unknown' WHEN {mod} = 1 THEN 'claimed' ELSE 'sent' END"
        columns = "action, subject, cycle, status, attempt, token, lease_until, created_at,"
        columns += " updated_at, sent_at"
        with engine.begin() as conn:
            if backend.dialect == "postgresql":
                # Statistics stay those of the empty table for the whole module, as they
                # lag behind a campaign that grows (autovacuum would refresh them at a
                # moment of its own choosing).
                conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            conn.exec_driver_sql(
                f"INSERT INTO {table} ({columns}) SELECT '{CAMPAIGN}', {text}, '{CYCLE}',"
                f" {status}, 1, n, {past}, {past}, {past}, {past}"
                f" FROM ({numbers}) numbers WHERE n BETWEEN 1 AND {rows - 1}"
            )
            conn.exec_driver_sql(
                f"INSERT INTO {table} ({columns}) SELECT 'other', {text}, 'c-other', 'sent', 1,"
                f" n, {past}, {past}, {past}, {past} FROM ({numbers}) numbers WHERE n < {noise}"
            )
    finally:
        engine.dispose()


@pytest.fixture(
    scope="module",
    params=backend_params(["sqlite", "postgres-asyncpg", "postgres-psycopg", "mariadb"]),
)
def campaign(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Campaign]:
    """A ledger table holding a campaign of 100,000 rows, shared by this module's tests."""
    backend = make_backend(request.param, tmp_path_factory.mktemp("plans"))
    table = backend.unique_table()
    _fill(backend, table)
    yield Campaign(backend, table)
    drop_table(backend, table)


@pytest.fixture
async def ledger(campaign: Campaign) -> AsyncIterator[AsyncLedger | Ledger]:
    """A ledger on the campaign's table whose statements are recorded as sent.

    SQLite gets the sync ``Ledger``: the async one runs the same statements on the same
    driver (sqlite3), in a worker thread.
    """
    campaign.recorded.clear()

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        campaign.recorded.append((statement, parameters))

    if campaign.dialect == "sqlite":
        engine = sa.create_engine(campaign.backend.sync_url)
        sa.event.listen(engine, "before_cursor_execute", record)
        yield Ledger(engine, table_name=campaign.table)
        engine.dispose()
        return
    async_engine: AsyncEngine = create_async_engine(campaign.backend.async_url)
    sa.event.listen(async_engine.sync_engine, "before_cursor_execute", record)
    yield AsyncLedger(async_engine, table_name=campaign.table)
    await async_engine.dispose()


async def call(ledger: AsyncLedger | Ledger, method: str, *args: Any, **kwargs: Any) -> Any:
    result = getattr(ledger, method)(*args, **kwargs)
    return await result if isinstance(ledger, AsyncLedger) else result


def keys_asked(seed: int, count: int = ASKED) -> list[tuple[str, str]]:
    """Existing subjects of the campaign and new ones, ``count`` in all, shuffled."""
    rng = random.Random(seed)
    existing = rng.sample(range(1, ROWS), count - count // 4)
    new = range(ROWS + seed * ASKED, ROWS + seed * ASKED + count // 4)
    subjects = [str(s) for s in [*existing, *new]]
    rng.shuffle(subjects)
    return [(s, CYCLE) for s in subjects]


# -- reading the plans --------------------------------------------------------------------


@dataclass
class Scan:
    """One access to the ledger table in a plan."""

    how: str  # the database's words: "Index Scan", "range", "SEARCH", ...
    index: str | None
    condition: str  # the index condition, as the database prints it
    examined: float  # rows read from the table or index (all loops); -1 if not reported


def _pg_scans(node: dict[str, Any], table: str) -> Iterator[Scan]:
    """The reads of ``table`` in a PostgreSQL plan: each index (or heap) scan, with the
    rows it read over all its loops."""
    kind = node["Node Type"]
    # ModifyTable is the write itself: its rows come from the scans below it (an
    # ON CONFLICT's arbiter is the unique index by definition).
    if node.get("Relation Name") == table and kind not in {"ModifyTable", "Bitmap Heap Scan"}:
        loops = node.get("Actual Loops", 1)
        read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        yield Scan(kind, node.get("Index Name"), node.get("Index Cond", ""), read * loops)
    if kind == "Bitmap Heap Scan" and node.get("Relation Name") == table:
        # The heap is read for the rows the bitmap index scans below it found.
        for child in _descendants(node):
            if child["Node Type"] == "Bitmap Index Scan":
                loops = child.get("Actual Loops", 1)
                found = child.get("Actual Rows", 0) * loops
                yield Scan(
                    "Bitmap Index Scan", child.get("Index Name"), child.get("Index Cond", ""), found
                )
        return
    for child in node.get("Plans", []):
        yield from _pg_scans(child, table)


def _descendants(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for child in node.get("Plans", []):
        yield child
        yield from _descendants(child)


def _maria_scans(node: Any, table: str) -> Iterator[Scan]:
    if isinstance(node, dict):
        if node.get("table_name") == table:
            loops = node.get("r_loops", 1)
            yield Scan(
                node.get("access_type", ""),
                node.get("key"),
                ",".join(node.get("used_key_parts", [])),
                float(node.get("r_rows", 0) or 0) * loops,
            )
        for value in node.values():
            yield from _maria_scans(value, table)
    elif isinstance(node, list):
        for value in node:
            yield from _maria_scans(value, table)


def explain(campaign: Campaign, statement: str, parameters: Any) -> list[list[Scan]]:
    """The scans of the ledger table in each plan of ``statement`` (custom and generic
    on PostgreSQL; the one plan elsewhere)."""
    engine = sa.create_engine(campaign.backend.sync_url, poolclass=sa.pool.NullPool)
    table = campaign.table
    plans: list[list[Scan]] = []
    try:
        if campaign.dialect == "sqlite":
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
            scans = []
            for row in rows:
                detail = str(row[-1])
                words = detail.split()
                if len(words) > 1 and words[1] == table:
                    index = detail.split(" USING ")[1] if " USING " in detail else None
                    scans.append(Scan(words[0], index, detail, -1))
            return [scans]
        if campaign.dialect == "mysql":
            if statement.lstrip().upper().startswith("INSERT"):
                # INSERT ... VALUES reads nothing but the unique index its duplicate-key
                # check probes, once per row; MariaDB prints no access for it.
                return [[]]
            with engine.connect() as conn:
                raw = conn.exec_driver_sql(f"ANALYZE FORMAT=JSON {statement}", parameters)
                plan = json.loads(raw.scalar_one())
                conn.rollback()
            return [list(_maria_scans(plan, table))]
        # A prepared statement, executed as a driver runs it: with the plan made for the
        # values, then with the generic plan the driver's statement cache ends up using.
        from psycopg import sql as pgsql

        statement, values = parameters
        for mode in ("force_custom_plan", "force_generic_plan"):
            with engine.connect() as conn:
                raw_connection = conn.connection.dbapi_connection
                literals = [pgsql.Literal(v).as_string(raw_connection) for v in values]
                args = f"({', '.join(literals)})" if literals else ""
                conn.exec_driver_sql(f"SET LOCAL plan_cache_mode = {mode}")
                conn.exec_driver_sql(f"PREPARE nfo_plan AS {statement}".replace("%", "%%"))
                raw = conn.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE nfo_plan{args}".replace("%", "%%")
                ).scalar_one()
                conn.rollback()
            plan = raw if isinstance(raw, list) else json.loads(raw)
            plans.append(list(_pg_scans(plan[0]["Plan"], table)))
        return plans
    finally:
        engine.dispose()


def _sync_parameters(campaign: Campaign, statement: str, parameters: Any) -> tuple[str, Any]:
    """A recorded statement and its parameters, as `explain` takes them.

    On PostgreSQL: the statement with numbered parameters (``$1``, as asyncpg sends it;
    psycopg's ``%(name)s`` renumbered in order of appearance) and ``(sql, values)``.
    """
    if campaign.dialect != "postgresql":
        return statement, parameters
    if isinstance(parameters, dict):
        order: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in order:
                order.append(match.group(1))
            return f"${order.index(match.group(1)) + 1}"

        statement = re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%")
        values = [parameters[name] for name in order]
    else:
        values = list(parameters)
    return statement, (statement, values)


def check_bounded(
    campaign: Campaign,
    asked: int,
    *,
    key: tuple[str, ...],
    what: str,
    limit: float | None = None,
    or_by_id: bool = False,
) -> int:
    """Every recorded statement's scans of the ledger table: by index, on ``key``'s
    columns (or by row id, with ``or_by_id``), examining at most ``limit`` rows (default:
    a small multiple of ``asked``). Returns how many statements were checked."""
    bound = PER_KEY * asked + SLACK if limit is None else limit
    checked = 0
    for statement, parameters in campaign.recorded:
        if (
            not statement.lstrip()
            .upper()
            .startswith(("SELECT", "UPDATE", "INSERT", "DELETE", "WITH"))
        ):
            continue  # BEGIN, PRAGMA, the server clock
        sql, params = _sync_parameters(campaign, statement, parameters)
        for scans in explain(campaign, sql, params):
            for scan in scans:
                where = f"{what}: {scan.how} via {scan.index} ({scan.condition}) in {sql[:200]}"
                assert scan.index is not None, f"no index used: {where}"
                assert scan.how not in {"Seq Scan", "SCAN", "ALL", "index"}, where
                by_id = or_by_id and "id" in scan.condition.replace("_id", "")
                for column in () if by_id else key:
                    assert column in scan.condition, f"{column} not in the index condition: {where}"
                assert scan.examined <= bound, (
                    f"{scan.examined} rows examined (bound {bound}): {where}"
                )
        checked += 1
    return checked


# -- the statements of the send path --------------------------------------------------------


async def test_look_up_reads_only_the_keys_asked(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """not_claimable (the run's screening of each batch): one index search per key."""
    asked = keys_asked(1)
    taken = await call(ledger, "not_claimable", CAMPAIGN, asked)
    assert ASKED - ASKED // 4 == len(taken)  # every existing row: sent, unknown or held
    assert check_bounded(campaign, len(asked), key=("cycle", "subject"), what="look-up")


@pytest.fixture(params=backend_params(["sqlite", "postgres-asyncpg", "mariadb"]))
async def young(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Campaign]:
    """A campaign's first 2,000 rows, written by a run as they are (claimed, then marked
    sent) and never analyzed: what the first seconds of a broadcast look up against."""
    from notifyonce import Message, Notification, Notifier
    from notifyonce.testing import FakeSender

    backend = make_backend(request.param, tmp_path)
    table = backend.unique_table()
    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        if backend.dialect == "postgresql":
            async with engine.begin() as conn:
                await conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        batch = [Notification(n, YOUNG_CYCLE, Message("hi")) for n in range(YOUNG)]
        await Notifier(ledger, FakeSender()).send_many(YOUNG_ACTION, batch)
    finally:
        await engine.dispose()
    yield Campaign(backend, table)
    drop_table(backend, table)


async def test_the_look_up_of_a_young_campaign_reads_only_the_keys_asked(
    young: Campaign,
) -> None:
    """not_claimable on a campaign's first rows, planned before any statistics exist:
    still one search of the key index per key, never a pass over the action's rows (an
    index on the action alone looked as cheap to a planner that thinks the table tiny,
    and each look-up then read the whole campaign, more with every batch)."""
    young.recorded.clear()

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        young.recorded.append((statement, parameters))

    asked = [(str(s), YOUNG_CYCLE) for s in range(YOUNG - ASKED, YOUNG)]
    if young.dialect == "sqlite":
        engine = sa.create_engine(young.backend.sync_url, poolclass=sa.pool.NullPool)
        sa.event.listen(engine, "before_cursor_execute", record)
        try:
            Ledger(engine, table_name=young.table).not_claimable(YOUNG_ACTION, asked)
        finally:
            engine.dispose()
    else:  # as a run sends it: asyncpg's typed parameters plan unlike psycopg's
        async_engine = create_async_engine(young.backend.async_url)
        sa.event.listen(async_engine.sync_engine, "before_cursor_execute", record)
        try:
            ledger = AsyncLedger(async_engine, table_name=young.table)
            await ledger.not_claimable(YOUNG_ACTION, asked)
        finally:
            await async_engine.dispose()
    # Through the key, or through the subject's own rows (its history in the console's
    # index): never through the action's.
    assert check_bounded(young, len(asked), key=("subject",), what="young look-up")


async def test_look_up_with_take_over_reads_only_the_keys_asked(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """not_claimable as at-least-once asks it (expired claims count as claimable)."""
    await call(ledger, "not_claimable", CAMPAIGN, keys_asked(2), take_expired=True, max_attempts=3)
    assert check_bounded(campaign, ASKED, key=("cycle", "subject"), what="look-up, take-over")


@pytest.mark.parametrize("count", [4, 16, 64])
async def test_a_batch_of_any_size_reads_only_its_keys(
    ledger: AsyncLedger | Ledger, campaign: Campaign, count: int
) -> None:
    """The look-up and the claim of a batch of 4, 16 or 64 keys, as a run's ready workers
    bring them: MariaDB planned some of these sizes as a read of every row of the action
    (the key's first column only, 323,400 rows for 64 keys in a campaign of a million)
    until its statements named the key's index."""
    await call(ledger, "not_claimable", CAMPAIGN, keys_asked(5 + count, count))
    await call(ledger, "claim_many", CAMPAIGN, keys_asked(6 + count, count))
    assert check_bounded(campaign, count, key=("cycle", "subject"), what=f"{count} keys") >= 2


async def test_claims_of_new_and_finished_keys_read_only_their_keys(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """claim_many over new subjects and finished ones (the conflict path), and claim_slot."""
    asked = keys_asked(3)
    won = await call(ledger, "claim_many", CAMPAIGN, asked)
    assert ASKED // 4 <= len(won) < ASKED
    await call(ledger, "claim_slot", CAMPAIGN, "new-single", CYCLE)
    await call(ledger, "claim_slot", CAMPAIGN, "1", CYCLE, take_expired=True, max_attempts=5)
    # INSERT ... ON CONFLICT has no scan of its own on PostgreSQL and SQLite (the unique
    # index arbitrates); MySQL's read-back is a SELECT by the whole key.
    assert check_bounded(campaign, ASKED, key=("cycle", "subject"), what="claim") >= 1


async def test_marks_and_renewals_find_their_rows_by_id(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """renew, mark_many and a single mark: by primary key, whatever the campaign's size."""
    claims = await call(ledger, "claim_many", CAMPAIGN, keys_asked(4)[: ASKED // 2])
    campaign.recorded.clear()
    await call(ledger, "renew", claims)
    done = [(c, SlotStatus.SENT, "42") for c in claims[1:]]
    await call(ledger, "mark_many", done)
    await call(ledger, "release", claims[0])
    assert check_bounded(campaign, len(claims), key=("id",), what="mark") >= 3


async def test_outcomes_and_the_next_claims_together_find_rows_by_id_and_key(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """A run's write: the outcomes of its last sends and the claims of its next ones in one
    round trip (one statement on PostgreSQL, one transaction elsewhere): the marks by
    primary key, the claims by the whole key."""
    claims = await call(ledger, "claim_many", CAMPAIGN, keys_asked(5)[: ASKED // 2])
    campaign.recorded.clear()
    marks = [(c, SlotStatus.SENT, "42", True) for c in claims]
    keys = [make_key(CAMPAIGN, subject, cycle) for subject, cycle in keys_asked(6)]
    plan = ledger._plan_write(marks, keys, ledger._core.claim_options(None, False, None))
    landed, won = await call(ledger, "_run", plan)
    assert all(landed)
    assert ASKED // 4 <= len(won) < ASKED
    bound = PER_KEY * (len(marks) + len(keys)) + SLACK
    checked = check_bounded(
        campaign, 0, key=("cycle", "subject"), what="write", limit=bound, or_by_id=True
    )
    assert checked >= 1


async def test_sweep_reads_only_claimed_rows(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """sweep, of every action and of the campaign's own: the claimed rows (whose leases
    expired), not the sent ones beside them."""
    await call(ledger, "sweep", DeliveryMode.AT_MOST_ONCE, limit=5)
    await call(ledger, "sweep", DeliveryMode.AT_MOST_ONCE, limit=5, actions=[CAMPAIGN])
    claimed = ROWS // UNKNOWN_EVERY + ASKED
    bound = claimed + SLACK
    assert check_bounded(campaign, 0, key=("status",), what="sweep", limit=bound, or_by_id=True)


async def test_listings_read_only_the_rows_with_that_status(
    ledger: AsyncLedger | Ledger, campaign: Campaign
) -> None:
    """The operator's list and a dry-run requeue of one action's unknown slots, and the
    broadcast's closing look at a campaign's unknown and held chats."""
    from notifyonce._broadcast import standing_query

    await call(ledger, "slots", status="unknown", action=CAMPAIGN, limit=50)
    await call(ledger, "requeue", CAMPAIGN, status="unknown", dry_run=True)
    query = standing_query(ledger.table, CAMPAIGN, CYCLE)
    engine = ledger.engine
    if isinstance(engine, AsyncEngine):
        async with engine.connect() as conn:
            await conn.execute(query)
    else:
        with engine.connect() as conn:
            conn.execute(query)
    settled = 2 * ROWS // UNKNOWN_EVERY + 2 * ASKED
    assert check_bounded(campaign, 0, key=("status",), what="listing", limit=settled + SLACK) >= 3


async def test_outcomes_on_a_young_campaign_find_rows_by_id(young: Campaign) -> None:
    """A run's write on a campaign's first rows, planned before any statistics exist: the
    marks still find their rows by primary key. (The planner took a table of a few pages for
    cheaper to scan whole and hash against the marks, and a plan made then went on scanning
    it, every row of the campaign in each statement, as the campaign grew.)"""
    if young.dialect != "postgresql":
        pytest.skip("one statement with its marks on PostgreSQL; a row's own elsewhere")
    young.recorded.clear()

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        young.recorded.append((statement, parameters))

    first = [make_key(YOUNG_ACTION, f"new-{n}", YOUNG_CYCLE) for n in range(16)]
    then = [make_key(YOUNG_ACTION, f"next-{n}", YOUNG_CYCLE) for n in range(16)]
    engine = create_async_engine(young.backend.async_url)  # as a run sends it
    try:
        ledger = AsyncLedger(engine, table_name=young.table)
        options = ledger._core.claim_options(None, False, None)
        _, claims = await ledger._run(ledger._plan_write([], first, options))
        sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
        marks = [(c, SlotStatus.SENT, "42", True) for c in claims]
        landed, won = await ledger._run(ledger._plan_write(marks, then, options))
    finally:
        await engine.dispose()
    assert all(landed)
    assert len(then) == len(won)
    bound = PER_KEY * (len(marks) + len(then)) + SLACK
    checked = check_bounded(
        young, 0, key=("cycle", "subject"), what="young write", limit=bound, or_by_id=True
    )
    assert checked >= 1
