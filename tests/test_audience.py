"""The audience: recipients that are gone or opted out, remembered in the database and
asked by every run before it claims, on every database."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

import notifyonce
from notifyonce import (
    AsyncAudience,
    AsyncLedger,
    Audience,
    GoneReason,
    LedgerError,
    Message,
    Notification,
    Notifier,
    Outcome,
    PermanentSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._audience import skip_reason
from notifyonce.testing import FakeSender

from ._databases import Backend

UTC = dt.timezone.utc
WORKERS = 12


@pytest.fixture
async def audience(async_engine: AsyncEngine, async_table: str) -> AsyncAudience:
    """An AsyncAudience beside a fresh ledger table (made by the ledger's create_schema)."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    return AsyncAudience.beside(ledger)


@pytest.fixture
def sync_audience(sync_engine: sa.Engine, sync_table: str) -> Audience:
    """A sync Audience on its own table."""
    made = Audience(sync_engine, table_name=f"{sync_table}_recipients")
    made.create_schema()
    return made


async def test_gone_opt_out_come_back_and_forget(audience: AsyncAudience) -> None:
    """Each write reads back as written; coming back keeps opt-outs; forget drops all."""
    await audience.mark_gone(42, GoneReason.BLOCKED, source="update")
    await audience.mark_gone("-1001234567890", "kicked", detail="[403] Forbidden: bot was kicked")
    await audience.opt_out(42, "promo", how="button")
    await audience.opt_out(7, "promo", how="command")
    await audience.opt_out(7, "digest")
    states = await audience.states([42, "-1001234567890", 7, 8])
    assert ["42", "-1001234567890", "7", "8"] == list(states)
    first = states["42"]
    assert first.gone is not None
    assert (GoneReason.BLOCKED, "update") == (first.gone.reason, first.gone.source)
    assert "gone: blocked" == first.skip_reason("trial_6h")
    group = states["-1001234567890"].gone
    assert group is not None
    assert (GoneReason.KICKED, "[403] Forbidden: bot was kicked") == (group.reason, group.detail)
    assert {"promo", "digest"} == set(states["7"].opted_out)
    assert "command" == states["7"].opted_out["promo"].how
    assert "opted out of promo" == states["7"].skip_reason("promo")
    assert None is states["7"].skip_reason("promo", transactional=True)
    assert None is states["8"].skip_reason("promo")
    counts = await audience.counts()
    assert ({"blocked": 1, "kicked": 1}, {"digest": 1, "promo": 2}) == (
        counts.gone,
        counts.opted_out,
    )

    assert await audience.come_back(42)
    assert not await audience.come_back(42)  # not gone any more
    again = await audience.state(42)
    assert (None, ["promo"]) == (again.gone, list(again.opted_out))
    assert await audience.opt_in(7, "digest")
    assert not await audience.opt_in(7, "digest")
    assert 2 == await audience.forget(42, "-1001234567890")
    assert {} == (await audience.counts()).gone
    assert {"promo": 1} == (await audience.counts()).opted_out


async def test_learning_twice_keeps_one_row_and_the_first_since(audience: AsyncAudience) -> None:
    """A block learned again updates its reason, keeps one row and its first ``since``."""
    await audience.mark_gone(5, "chat_not_found")
    first = await audience.state(5)
    await asyncio.sleep(1.1)  # since is kept to the second
    await audience.mark_gone(5, "blocked", source="refusal")
    second = await audience.state(5)
    assert first.gone is not None
    assert second.gone is not None
    assert (GoneReason.BLOCKED, "refusal", first.gone.since) == (
        second.gone.reason,
        second.gone.source,
        second.gone.since,
    )
    rows = await audience.rows()
    assert 1 == len(rows)


async def test_rows_page_in_recipient_order_and_filter(audience: AsyncAudience) -> None:
    """Listing pages through every row once, by keyset, and filters by kind and source."""
    await audience.mark_gone_many([f"u{i:03}" for i in range(25)], "blocked", source="import")
    await audience.mark_gone_many(["z1", "z2"], "deactivated", source="api")
    await audience.opt_out("u001", "promo")
    seen: list[tuple[str, str | None]] = []
    page = await audience.rows(limit=7)
    while page:
        seen += [(r.recipient, r.category) for r in page]
        page = await audience.rows(limit=7, after=page[-1])
    assert 28 == len(seen) == len(set(seen))
    assert sorted(seen, key=lambda p: (p[0], p[1] or "")) == seen
    imported = await audience.rows(source="import", limit=100)
    assert 25 == len(imported)
    assert all(r.gone for r in imported)
    assert ["u001"] == [r.recipient for r in await audience.rows(gone=False)]
    assert 2 == len(await audience.rows(reason="deactivated"))


async def test_a_mistaken_import_is_one_call_to_undo(audience: AsyncAudience) -> None:
    """forget_gone(source=..., since=...) removes what an import marked, nothing else."""
    await audience.mark_gone(1, "blocked", source="refusal")
    before = dt.datetime.now(UTC).replace(microsecond=0)
    assert 3 == await audience.mark_gone_many([10, 11, 12, 11], "chat_not_found")
    await audience.opt_out(10, "promo")
    assert 3 == await audience.forget_gone(source="import", since=before)
    assert {"blocked": 1} == (await audience.counts()).gone
    assert {"promo": 1} == (await audience.counts()).opted_out
    with pytest.raises(ValidationError, match="source"):
        await audience.forget_gone()


async def test_forget_gone_since_a_moment_forgets_the_recipients_gone_at_it(
    audience: AsyncAudience,
) -> None:
    """forget_gone(since=t) forgets a recipient gone at t itself (the boundary is in),
    and not one gone an hour before."""
    await audience.mark_gone(1, "blocked", source="import")
    await audience.mark_gone(2, "blocked", source="import")
    t = audience.table
    async with audience.engine.begin() as conn:
        earlier = dt.datetime.now(UTC) - dt.timedelta(hours=1)
        await conn.execute(sa.update(t).where(t.c.recipient == "1").values(since=earlier))
    rows = {row.recipient: row for row in await audience.rows()}
    forgotten = await audience.forget_gone(source="import", since=rows["2"].since)
    left = [row.recipient for row in await audience.rows()]
    assert (1, ["1"]) == (forgotten, left)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda a: a.mark_gone(True), "recipient"),
        (lambda a: a.mark_gone(1.5), "recipient"),
        (lambda a: a.mark_gone(""), "recipient"),
        (lambda a: a.mark_gone(" 42"), "recipient"),
        (lambda a: a.mark_gone("x" * 129), "recipient"),
        (lambda a: a.mark_gone("4\x002"), "recipient"),
        (lambda a: a.mark_gone(42, "angry"), "reason"),
        (lambda a: a.mark_gone(42, source=""), "source"),
        (lambda a: a.mark_gone(42, source="x" * 33), "source"),
        (lambda a: a.mark_gone(42, detail=5), "detail"),
        (lambda a: a.mark_gone_many([1, 2, None]), "recipient"),
        (lambda a: a.opt_out(42, ""), "category"),
        (lambda a: a.opt_out(42, "   "), "category"),
        (lambda a: a.opt_out(42, 7), "category"),
        (lambda a: a.opt_out(42, "c" * 65), "category"),
        (lambda a: a.opt_out(42, "promo", how=""), "how"),
        (lambda a: a.opt_in(42, ""), "category"),
        (lambda a: a.forget(42, None), "recipient"),
        (lambda a: a.forget_gone(since=dt.datetime(2026, 1, 1)), "since"),
        (lambda a: a.rows(limit=0), "limit"),
        (lambda a: a.rows(reason="angry"), "reason"),
    ],
)
async def test_bad_input_names_the_field_and_writes_nothing(
    audience: AsyncAudience, call: object, field: str
) -> None:
    """Every bad value is refused before any row is written, naming its field."""
    with pytest.raises(ValidationError) as refused:
        await call(audience)  # type: ignore[operator]
    assert field == refused.value.field
    assert [] == await audience.rows()


def test_the_wrong_engine_is_named() -> None:
    """An Engine for the async audience (and the reverse) says which class fits."""
    engine = sa.create_engine("sqlite://")
    with pytest.raises(ValidationTypeError, match="use Audience for a sync Engine"):
        AsyncAudience(engine)  # type: ignore[arg-type]
    engine.dispose()


def test_sync_audience_does_what_the_async_one_does(sync_audience: Audience) -> None:
    """The sync front door: the same writes, reads and counts."""
    sync_audience.mark_gone(1, "deactivated")
    sync_audience.opt_out(2, "promo")
    assert 2 == sync_audience.mark_gone_many([3, 4], "blocked")
    assert {"blocked": 2, "deactivated": 1} == sync_audience.counts().gone
    assert "gone: deactivated" == sync_audience.state(1).skip_reason("x")
    assert sync_audience.come_back(1)
    assert sync_audience.opt_in(2, "promo")
    assert 2 == sync_audience.forget(3, 4)
    assert [] == sync_audience.rows()


def test_racing_writers_of_the_same_recipients_leave_one_row_each(
    sync_audience: Audience, sync_engine: sa.Engine
) -> None:
    """12 threads, each on its own connection, learn the same 40 blocks (in different
    orders) and each opts the 40 out of a category of its own, released together: 40
    gone rows and 12 x 40 opt-outs, none lost, none twice."""
    recipients = [str(1000 + i) for i in range(40)]
    barrier = threading.Barrier(WORKERS)

    def work(index: int) -> None:
        mine = Audience(sync_engine, table_name=sync_audience.table.name)
        order = recipients[:]
        random.Random(index).shuffle(order)
        barrier.wait()
        mine.mark_gone_many(order, "blocked", source="refusal")
        for recipient in order:
            mine.opt_out(recipient, f"cat{index}")

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(work, range(WORKERS)))
    counts = sync_audience.counts()
    assert {"blocked": 40} == counts.gone
    assert {f"cat{i}": 40 for i in range(WORKERS)} == counts.opted_out
    assert 40 + WORKERS * 40 == len(sync_audience.rows(limit=10_000))


async def test_racing_async_writers_of_one_block(audience: AsyncAudience) -> None:
    """12 tasks learn the same block at once on the async engine: one row, no error."""
    start = asyncio.Event()

    async def learn(index: int) -> None:
        await start.wait()
        await audience.mark_gone(77, "blocked" if index % 2 else "deactivated")

    tasks = [asyncio.ensure_future(learn(i)) for i in range(WORKERS)]
    await asyncio.sleep(0)
    start.set()
    await asyncio.gather(*tasks)
    assert 1 == (await audience.counts()).total_gone


# -- the notifier asks it before it claims -----------------------------------------------


def _notifications(count: int, cycle: str) -> list[Notification]:
    return [Notification(i, cycle, Message("news")) for i in range(count)]


async def test_a_block_is_learned_once_and_skipped_by_every_later_run(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """A refusal that says the chat is gone marks it gone; later runs of any action skip it
    with its reason, claim nothing and send nothing; after it comes back it is reached."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    sender = FakeSender()
    blocked = [str(i) for i in range(0, 30, 3)]
    for recipient in blocked:
        sender.block(recipient)
    sender.block("1", "deactivated")
    notifier = Notifier(ledger, sender, concurrency=4)

    first = await notifier.send_many("news", _notifications(30, "2026-12"))
    assert (19, 11) == (first.counts[Outcome.SENT], first.counts[Outcome.FAILED])
    state = await notifier.audience.states(["0", "1", "2"])
    assert ["blocked", "deactivated", None] == [
        None if s.gone is None else s.gone.reason.value for s in state.values()
    ]
    refused = len(sender.records)

    second = await notifier.send_many("trial_6h", _notifications(30, "2026-12"))
    assert (19, 11, 0) == (
        second.counts[Outcome.SENT],
        second.counts[Outcome.SKIPPED],
        second.counts[Outcome.FAILED],
    )
    assert {"gone: blocked": 10, "gone: deactivated": 1} == second.skips
    assert refused + 19 == len(sender.records)  # no request to any of the 11
    skipped = [r for r in second.results if r.outcome is Outcome.SKIPPED]
    assert {"gone: blocked", "gone: deactivated"} == {r.reason for r in skipped}
    assert all(r.attempt is None for r in skipped)
    for result in skipped:  # nothing claimed: no row for the slot
        assert None is await ledger.get("trial_6h", result.key.subject, "2026-12")

    sender.unblock("3")
    assert await notifier.audience.come_back(3)
    third = await notifier.send_many("trial_1h", _notifications(30, "2026-12"))
    assert (20, 10) == (third.counts[Outcome.SENT], third.counts[Outcome.SKIPPED])


async def test_opt_outs_follow_the_category_and_transactional_ignores_them(
    sqlite_ledger: AsyncLedger,
) -> None:
    """Opted out of promo: no promo campaign, still trial_6h, and a transactional run or a
    category of its own reaches them; skip_gone=False reaches a gone recipient."""
    sender = FakeSender()
    notifier = Notifier(sqlite_ledger, sender)
    await notifier.audience.opt_out(1, "promo", how="button")
    await notifier.audience.mark_gone(2, "blocked")
    batch = _notifications(3, "c")

    promo = await notifier.send_many("promo", batch)
    assert {"opted out of promo": 1, "gone: blocked": 1} == promo.skips
    trial = await notifier.send_many("trial_6h", batch)
    assert {"gone: blocked": 1} == trial.skips
    assert Outcome.SKIPPED == await notifier.send_once(
        "sale_1", 1, "c", Message("sale"), category="promo"
    )
    receipt = await notifier.send_once(
        "receipt", 1, "c", Message("paid"), category="promo", transactional=True
    )
    assert Outcome.SENT == receipt
    assert Outcome.SENT == await notifier.send_once(
        "must", 2, "c", Message("anyway"), skip_gone=False
    )
    assert ["0", "0", "1", "1", "2"] == sorted(r.recipient for r in sender.records)


async def test_dry_run_reports_the_skips_and_writes_nothing(sqlite_ledger: AsyncLedger) -> None:
    """A dry run says who would be skipped and why."""
    notifier = Notifier(sqlite_ledger, FakeSender(), dry_run=True)
    await notifier.audience.mark_gone(0, "blocked")
    report = await notifier.send_many("news", _notifications(3, "c"))
    assert {"gone: blocked": 1, "dry run: would send": 2} == report.skips


async def test_without_the_table_nobody_is_skipped_and_a_warning_says_migrate(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A database migrated before the recipients table: runs go on as before, and one
    warning names `notifyonce migrate`."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/old.db")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    async with engine.begin() as conn:
        await conn.execute(sa.text("DROP TABLE notifyonce_recipients"))
    sender = FakeSender()
    sender.block("1")
    notifier = Notifier(ledger, sender)
    for cycle in ("a", "b"):
        report = await notifier.send_many("news", _notifications(3, cycle))
        assert (2, 1) == (report.counts[Outcome.SENT], report.counts[Outcome.FAILED])
    warnings = [r.getMessage() for r in caplog.records if "recipients table" in r.getMessage()]
    assert 1 == len(warnings)
    assert "notifyonce migrate" in warnings[0]
    await engine.dispose()


async def test_a_lesson_the_database_refuses_costs_only_the_lesson(
    sqlite_ledger: AsyncLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """When the audience cannot be written, the run still records every outcome, and says
    once that those recipients will be asked again."""
    sender = FakeSender()
    for recipient in ("0", "1"):
        sender.block(recipient)
    notifier = Notifier(sqlite_ledger, sender)
    audience = notifier.audience

    async def refuse(learned: object) -> int:
        raise LedgerError("database error (OperationalError: disk I/O error)")

    audience._learn = refuse  # type: ignore[method-assign]
    report = await notifier.send_many("news", _notifications(4, "c"))
    assert (2, 2) == (report.counts[Outcome.SENT], report.counts[Outcome.FAILED])
    said = [r.getMessage() for r in caplog.records if "found gone" in r.getMessage()]
    assert 1 == len(said)
    assert "LedgerError" in said[0]


async def test_a_permanent_refusal_that_is_not_about_the_recipient_marks_nobody(
    sqlite_ledger: AsyncLedger,
) -> None:
    """'not enough rights' is FAILED for that slot only: the chat is still there."""
    sender = FakeSender()
    sender.fail_next(
        PermanentSendError("Bad Request: not enough rights to send text messages", code=400),
        recipient="0",
    )
    notifier = Notifier(sqlite_ledger, sender)
    report = await notifier.send_many("news", _notifications(2, "c"))
    assert 1 == report.counts[Outcome.FAILED]
    assert 0 == (await notifier.audience.counts()).total_gone


@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["", "promo", "digest", "trial"]), st.sampled_from(["x", "y"])),
        max_size=6,
    ),
    category=st.sampled_from(["promo", "digest", "trial", "news"]),
    transactional=st.booleans(),
    skip_gone=st.booleans(),
)
def test_skip_reason_follows_its_rules(
    rows: list[tuple[str, str]], category: str, transactional: bool, skip_gone: bool
) -> None:
    """Gone wins when skipping the gone; an opt-out of the run's category counts unless the
    run is transactional; nothing else skips."""
    reason = skip_reason(rows, category, transactional=transactional, skip_gone=skip_gone)
    gone = [why for cat, why in rows if cat == ""]
    opted = any(cat == category for cat, _ in rows)
    if skip_gone and gone:
        assert reason == f"gone: {gone[0]}"
    elif opted and not transactional:
        assert reason == f"opted out of {category}"
    else:
        assert reason is None


# -- the look-up a run makes is an index search, even on a young table -------------------

YOUNG_GONE = 60_000  # rows of a table filled by an import a moment ago, never analyzed
ASKED = 200  # recipients one batch asks about


def _scans(plan: object, table: str) -> list[tuple[str, float]]:
    """(how, rows read) for each read of ``table`` in a PostgreSQL JSON plan."""
    found: list[tuple[str, float]] = []
    if isinstance(plan, dict):
        if plan.get("Relation Name") == table:
            rows = float(plan.get("Actual Rows", 0)) + float(plan.get("Rows Removed by Filter", 0))
            found.append((str(plan["Node Type"]), rows * float(plan.get("Actual Loops", 1))))
        for value in plan.values():
            found += _scans(value, table)
    elif isinstance(plan, list):
        for value in plan:
            found += _scans(value, table)
    return found


def test_a_young_audience_is_searched_by_its_key(
    sync_audience: Audience, sync_engine: sa.Engine
) -> None:
    """A batch's look-up among 60,000 rows written a moment ago (no statistics yet) reads
    through the primary key and only about the rows it asks for, on every database."""
    table = sync_audience.table.name
    sync_audience.mark_gone_many(range(0, YOUNG_GONE * 2, 2), "blocked")
    asked = [str(n) for n in range(10_000, 10_000 + ASKED)]
    seen: list[tuple[str, Any]] = []

    def record(conn: object, cursor: object, statement: str, params: object, *_: object) -> None:
        if "FROM" in statement and table in statement and statement.lstrip().startswith("SELECT"):
            seen.append((statement, params))

    sa.event.listen(sync_engine, "before_cursor_execute", record)
    try:
        found = sync_audience.states(asked)
    finally:
        sa.event.remove(sync_engine, "before_cursor_execute", record)
    assert ASKED // 2 == sum(1 for s in found.values() if s.gone is not None)
    assert 1 == len(seen)
    statement, params = seen[0]
    dialect = sync_engine.dialect.name
    with sync_engine.connect() as conn:
        if dialect == "postgresql":
            raw = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            scans = _scans(raw.scalar_one(), table)
            assert [] == [how for how, _ in scans if how == "Seq Scan"]
            assert sum(rows for _, rows in scans) <= ASKED * 2
        elif dialect in ("mysql", "mariadb"):
            raw = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + statement, params)
            text = str(raw.scalar_one())
            assert '"access_type": "ALL"' not in text
            read = [float(r) for r in re.findall(r'"r_rows": ([0-9.]+)', text)]
            assert sum(read) <= ASKED * 2
        else:
            raw = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)
            details = " | ".join(str(row[-1]) for row in raw)
            assert f"SCAN {table}" not in details
            assert "INDEX" in details or "PRIMARY KEY" in details


async def test_a_broadcast_skips_the_gone_and_its_categorys_opt_outs(
    sqlite_ledger: AsyncLedger,
) -> None:
    """A Broadcast learns the blocks of its first campaign; the next campaign of the
    category skips them and its opt-outs without a request; a transactional one reaches
    the opted out."""
    from notifyonce import Broadcast

    sender = FakeSender()
    for chat in ("3", "6"):
        sender.block(chat)
    notifier = Notifier(sqlite_ledger, sender)
    news = Message("news")
    first = await Broadcast(notifier, "news", "2026-12-01", news, range(10), category="promo").run()
    assert (8, 2) == (first.progress.sent, first.progress.failed)
    await notifier.audience.opt_out(5, "promo", how="button")
    sender.records.clear()
    second = await Broadcast(
        notifier, "news", "2026-12-02", news, range(10), category="promo"
    ).run()
    assert (7, 3) == (second.progress.sent, second.progress.skipped)
    assert {"gone: blocked": 2, "opted out of promo": 1} == second.report.skips
    assert set(map(str, range(10))) - {"3", "5", "6"} == {r.recipient for r in sender.records}
    notice = Broadcast(notifier, "terms", "2026-12", news, range(10), transactional=True)
    third = await notice.run()
    assert (8, {"gone: blocked": 2}) == (third.progress.sent, third.report.skips)
    with pytest.raises(ValidationError, match="category"):
        Broadcast(notifier, "news", "2026-12-03", news, range(3), category="")


async def test_a_block_learned_elsewhere_while_a_campaign_runs(
    async_engine: AsyncEngine, async_table: str, async_backend: Backend
) -> None:
    """Another process marks chats gone while a campaign runs, some of them chats the
    campaign itself finds blocked at the same moment: every chat is sent or skipped once,
    each gone chat has one row, and no write is lost or refused."""
    from sqlalchemy.ext.asyncio import create_async_engine

    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    sender = FakeSender(latency=0.002)
    for chat in range(150, 200):
        sender.block(str(chat))
    notifier = Notifier(ledger, sender, concurrency=8, batch_size=20)
    elsewhere_engine = create_async_engine(async_backend.async_url)
    elsewhere = AsyncAudience(elsewhere_engine, table_name=notifier.audience.table.name)

    async def other_process() -> None:
        await asyncio.sleep(0.05)
        for start in range(100, 200, 10):
            await elsewhere.mark_gone_many(range(start, start + 10), "blocked", source="update")

    try:
        report, _ = await asyncio.gather(
            notifier.send_many("news", _notifications(200, "c")), other_process()
        )
    finally:
        await elsewhere_engine.dispose()
    sent, skipped = report.counts[Outcome.SENT], report.counts[Outcome.SKIPPED]
    failed = report.counts[Outcome.FAILED]
    assert 200 == sent + skipped + failed
    assert 200 == len({r.key.subject for r in report.results})
    assert {"blocked": 100} == (await notifier.audience.counts()).gone
    assert 100 == len(await notifier.audience.rows(limit=1000))
    # The blocked ones were refused at most once each, and only those not yet skipped.
    refused = [r.recipient for r in sender.records if r.error is not None]
    assert len(refused) == len(set(refused)) == failed


async def test_no_audience_statement_is_compiled_per_call(
    async_backend: Backend, async_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two runs that skip and learn gone chats compile each of the audience's statements
    once: the engine's log shows no ``[no key`` but for the tables' DDL (SQLAlchemy 2.0
    compiled the learned rows' upsert on every call)."""
    import logging

    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(async_backend.async_url, echo=True)
    try:
        ledger = AsyncLedger(engine, table_name=async_table)
        await ledger.create_schema()
        sender = FakeSender()
        for chat in range(0, 300, 7):
            sender.block(str(chat))
        notifier = Notifier(ledger, sender, batch_size=50)
        with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
            caplog.clear()
            for action in ("a", "b"):
                await notifier.send_many(action, _notifications(300, "c"))
            await notifier.audience.mark_gone_many(range(1000, 1100), "blocked")
        counts = await notifier.audience.counts()
    finally:
        await engine.dispose()
    compiled_each_time = [r for r in caplog.records if "[no key" in r.getMessage()]
    assert [] == compiled_each_time
    assert {"blocked": 43 + 100} == counts.gone


# -- the unsubscribe button ---------------------------------------------------------------


def test_the_unsubscribe_button_carries_its_category_in_a_keyboard() -> None:
    """unsubscribe_button() is a callback button a Message's keyboard takes as it is,
    whose data the bot helpers read back as its category."""
    from notifyonce import unsubscribe_button
    from notifyonce._buttons import unsubscribe_category

    button = unsubscribe_button("promo")
    assert {"text": "Unsubscribe", "callback_data": "notifyonce:stop:promo"} == button
    message = Message("-20% this week", reply_markup=notifyonce.inline_keyboard([[button]]))
    assert {"inline_keyboard": [[button]]} == message.reply_markup
    assert "Stop" == unsubscribe_button("promo", text="Stop")["text"]
    assert "promo" == unsubscribe_category("notifyonce:stop:promo")
    assert None is unsubscribe_category("notifyonce:stop:")
    assert None is unsubscribe_category("pay:42")


@pytest.mark.parametrize(
    ("category", "text", "field", "problem"),
    [
        ("p" * 49, "Unsubscribe", "category", "callback_data"),
        ("é" * 25, "Unsubscribe", "category", "48 bytes"),
        ("", "Unsubscribe", "category", "empty"),
        (" promo", "Unsubscribe", "category", "spaces"),
        ("promo", " ", "text", "no text"),
        (7, "Unsubscribe", "category", "str"),
    ],
)
def test_an_unsubscribe_button_telegram_would_refuse_is_refused(
    category: object, text: str, field: str, problem: str
) -> None:
    """A category too long for Telegram's 64 bytes of callback_data (counted in bytes),
    empty or padded, or a blank text, is refused naming the argument."""
    from notifyonce import unsubscribe_button

    with pytest.raises(ValidationError) as caught:
        unsubscribe_button(category, text=text)  # type: ignore[arg-type]
    assert field == caught.value.field
    assert problem in caught.value.problem
    assert 48 == len(unsubscribe_button("p" * 48)["callback_data"]) - len("notifyonce:stop:")
