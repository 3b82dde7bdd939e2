"""A claim whose answer is lost: the server claimed the rows, the connection dropped before
the client heard of it. The claim's fencing tokens are made on the client, so the ledger
releases those rows by token on a fresh connection: nothing is left ``claimed`` for the
sweep to make ``unknown``, and the next run sends them.

The database is reached through a proxy on 127.0.0.1 that cuts the connection instead of
passing the claim's answer on. SQLite has no connection to lose and is not run here.
"""

from __future__ import annotations

import datetime as dt
import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncLedger,
    DeliveryMode,
    Ledger,
    LedgerError,
    Message,
    Notification,
    Notifier,
    Outcome,
    SlotStatus,
)
from notifyonce.testing import FakeSender

from ._databases import Backend, drop_table, make_backend
from ._proxy import FaultProxy

CYCLE = dt.datetime(2026, 12, 1, 9, tzinfo=dt.timezone.utc)
NETWORKED = ["postgres-asyncpg", "postgres-psycopg", "mariadb"]


@pytest.fixture(params=NETWORKED)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def proxy(backend: Backend) -> Iterator[FaultProxy]:
    url = make_url(backend.sync_url)
    with FaultProxy(url.host or "127.0.0.1", url.port or 0) as proxy:
        yield proxy


@pytest.fixture
def table(backend: Backend) -> Iterator[str]:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)


def through(proxy: FaultProxy, url: str) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)


def drop_the_claims_answer(proxy: FaultProxy, backend: Backend) -> None:
    """PostgreSQL claims in one statement: its answer (``INSERT 0 n``) is cut. MySQL
    claims in a transaction: the answer to its COMMIT is cut, after the server committed."""
    if backend.dialect == "postgresql":
        proxy.drop_answer(containing=b"INSERT 0 ")
    else:
        proxy.drop_answer(after=(b"INSERT INTO", b"COMMIT"))


def drop_the_writes_answer(proxy: FaultProxy, backend: Backend) -> None:
    """A run's write of outcomes with its next claims. PostgreSQL makes it one statement,
    whose answer alone carries rows of the kind "claimed": it is cut. MySQL makes it one
    transaction (the marks' lock, the claim, its read back): the answer to its COMMIT is."""
    if backend.dialect == "postgresql":
        proxy.drop_answer(containing=b"claimed")
    else:
        proxy.drop_answer(after=(b"FOR UPDATE", b"INSERT INTO", b"COMMIT"))


def statuses(backend: Backend, table: str) -> dict[str, int]:
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT status, count(*) FROM {table} GROUP BY status"))
            return {status: count for status, count in rows.all()}  # noqa: C416 (Rows)
    finally:
        engine.dispose()


async def test_a_claim_slot_whose_answer_is_lost_leaves_its_slot_released(
    backend: Backend, proxy: FaultProxy, table: str
) -> None:
    """``claim_slot`` raises, and the row it won is released (not left claimed): the next
    claim wins it, as the same attempt."""
    engine = create_async_engine(through(proxy, backend.async_url))
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        drop_the_claims_answer(proxy, backend)
        with pytest.raises(LedgerError):
            await ledger.claim_slot("trial_6h", 42, CYCLE)
        assert 1 == proxy.cut
        record = await ledger.get("trial_6h", 42, CYCLE)
        assert record is not None
        assert (SlotStatus.RELEASED, 0) == (record.status, record.attempt)
        again = await ledger.claim_slot("trial_6h", 42, CYCLE)
        assert again is not None
        assert 1 == again.attempt
    finally:
        await engine.dispose()


def test_the_sync_ledger_releases_a_claim_whose_answer_is_lost(
    backend: Backend, proxy: FaultProxy, table: str
) -> None:
    engine = sa.create_engine(through(proxy, backend.sync_url))
    try:
        ledger = Ledger(engine, table_name=table)
        ledger.create_schema()
        drop_the_claims_answer(proxy, backend)
        with pytest.raises(LedgerError):
            ledger.claim_many("a", [(n, CYCLE) for n in range(300)])
        assert 1 == proxy.cut
        assert {"released": 300} == statuses(backend, table)
    finally:
        engine.dispose()


@pytest.mark.parametrize("mode", list(DeliveryMode))
async def test_a_run_whose_claim_answer_is_lost_loses_nothing(
    backend: Backend, proxy: FaultProxy, table: str, mode: DeliveryMode
) -> None:
    """1,000 notifications; the answer of one of the run's claim statements is cut. With
    no patience for outages the run stops with the ledger's error, nothing stays claimed
    (the sweep would have made those rows unknown, never sent), and the next run sends
    every chat not yet sent, once."""
    engine = create_async_engine(through(proxy, backend.async_url), pool_size=10)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        sender = FakeSender()
        batch = [Notification(n, CYCLE, Message("hi")) for n in range(1000)]
        notifier = Notifier(
            ledger, sender, mode=mode, concurrency=32, outage_patience=dt.timedelta(0)
        )
        drop_the_claims_answer(proxy, backend)
        with pytest.raises(LedgerError):
            await notifier.send_many("news", batch)
        assert 1 == proxy.cut
        after = statuses(backend, table)
        assert "claimed" not in after
        assert "unknown" not in after
        report = await notifier.send_many("news", batch)
        assert report.counts[Outcome.SENT] == 1000 - after.get("sent", 0)
        assert sorted(r.recipient for r in sender.sent) == sorted(str(n) for n in range(1000))
    finally:
        await engine.dispose()


@pytest.mark.parametrize("mode", list(DeliveryMode))
async def test_a_run_whose_claim_answer_is_lost_waits_and_ends_the_campaign(
    backend: Backend, proxy: FaultProxy, table: str, mode: DeliveryMode
) -> None:
    """The same cut with the default patience: the claims the cut statement won are
    released by their tokens once the database answers, and claimed again; one run sends
    every chat once, nothing left claimed or unknown."""
    engine = create_async_engine(through(proxy, backend.async_url), pool_size=10)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        sender = FakeSender()
        batch = [Notification(n, CYCLE, Message("hi")) for n in range(1000)]
        notifier = Notifier(ledger, sender, mode=mode, concurrency=32)
        drop_the_claims_answer(proxy, backend)
        report = await notifier.send_many("news", batch)
        assert 1 == proxy.cut
        assert {Outcome.SENT: 1000} == {k: v for k, v in report.counts.items() if v}
        assert {"sent": 1000} == statuses(backend, table)
        assert sorted(r.recipient for r in sender.sent) == sorted(str(n) for n in range(1000))
    finally:
        await engine.dispose()


@pytest.mark.parametrize("mode", list(DeliveryMode))
async def test_a_run_whose_write_of_outcomes_and_claims_loses_its_answer_loses_nothing(
    backend: Backend, proxy: FaultProxy, table: str, mode: DeliveryMode
) -> None:
    """1,000 notifications; the answer of a write that carried outcomes and the next claims
    is cut after the server committed both. With no patience for outages the run stops
    with the ledger's error, the claims of that write are released by their tokens
    (nothing stays claimed, nothing is made unknown), and the next run sends every chat
    not yet sent, once."""
    engine = create_async_engine(through(proxy, backend.async_url), pool_size=10)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        sender = FakeSender()
        batch = [Notification(n, CYCLE, Message("hi")) for n in range(1000)]
        notifier = Notifier(
            ledger, sender, mode=mode, concurrency=32, outage_patience=dt.timedelta(0)
        )
        drop_the_writes_answer(proxy, backend)
        with pytest.raises(LedgerError):
            await notifier.send_many("news", batch)
        assert 1 == proxy.cut
        after = statuses(backend, table)
        assert "claimed" not in after
        assert "unknown" not in after
        assert after.get("released", 0) > 0  # the cut write's claims, given back
        report = await notifier.send_many("news", batch)
        assert report.counts[Outcome.SENT] == 1000 - after.get("sent", 0)
        assert sorted(r.recipient for r in sender.sent) == sorted(str(n) for n in range(1000))
    finally:
        await engine.dispose()


@pytest.mark.parametrize("mode", list(DeliveryMode))
async def test_a_run_whose_write_loses_its_answer_waits_and_ends_the_campaign(
    backend: Backend, proxy: FaultProxy, table: str, mode: DeliveryMode
) -> None:
    """The same cut with the default patience: the run waits for the database, releases
    the cut write's claims by their tokens, finds its outcomes written, and goes on: one
    run sends every chat once, nothing left claimed or unknown."""
    engine = create_async_engine(through(proxy, backend.async_url), pool_size=10)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        sender = FakeSender()
        batch = [Notification(n, CYCLE, Message("hi")) for n in range(1000)]
        notifier = Notifier(ledger, sender, mode=mode, concurrency=32)
        drop_the_writes_answer(proxy, backend)
        report = await notifier.send_many("news", batch)
        assert 1 == proxy.cut
        assert {Outcome.SENT: 1000} == {k: v for k, v in report.counts.items() if v}
        assert {"sent": 1000} == statuses(backend, table)
        assert sorted(r.recipient for r in sender.sent) == sorted(str(n) for n in range(1000))
    finally:
        await engine.dispose()


async def test_a_connection_kept_for_the_next_call_is_closed_when_the_engine_is_disposed(
    tmp_path: Path,
) -> None:
    """On asyncpg a call keeps its connection until the event loop turns, for the next call
    of the same moment. An engine disposed right after the call closes that connection: it
    used to go back to the disposed pool and stay open (a ResourceWarning at exit)."""
    backend = make_backend("postgres-asyncpg", tmp_path)
    name = backend.unique_table()
    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=name)
        await ledger.create_schema()
        assert await ledger.claim_slot("trial_6h", 42, CYCLE) is not None
        assert 1 == engine.sync_engine.pool.checkedout()  # kept, not yet back in the pool
    finally:
        await engine.dispose()
        drop_table(backend, name)
    # Kept past the dispose, it would be closed by nobody: the garbage collector warns.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [] == [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
