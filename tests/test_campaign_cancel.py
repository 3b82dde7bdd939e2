"""Cancelling a campaign from outside its process: the request kept in the campaign's row,
a running broadcast stopping gently on it, later runs refusing until told to resume."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, Broadcast, Message, Notifier, ValidationError
from notifyonce import _broadcast as broadcast_module
from notifyonce._campaign import CANCEL_NOTE, cancel_requested, clear_cancel, request_cancel
from notifyonce.testing import FakeSender

from ._databases import Backend

NEWS = Message("A new tariff is out")
CHATS = 2000


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
async def ledger(async_engine: AsyncEngine, async_table: str) -> AsyncLedger:
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    return ledger


@pytest.fixture
async def other(async_backend: Backend) -> AsyncIterator[AsyncEngine]:
    """A second engine on the same database: the console's connections, not the run's."""
    engine = create_async_engine(async_backend.async_url)
    yield engine
    await engine.dispose()


async def test_a_cancel_request_is_set_read_and_cleared(
    ledger: AsyncLedger, other: AsyncEngine, async_table: str
) -> None:
    """A request lands in the campaign's own row only, keeps its first time, and is
    withdrawn by clear_cancel; the message's fingerprint beside it still guards resumes."""
    clock = Clock()
    console = AsyncLedger(other, table_name=async_table, clock=clock)
    assert not await request_cancel(console, "news", "c1")  # no run recorded it yet
    notifier = Notifier(ledger, FakeSender())
    for campaign in ("c1", "c2"):
        await Broadcast(notifier, "news", campaign, NEWS, [1, 2]).run()
    assert None is await cancel_requested(ledger, "news", "c1")

    assert await request_cancel(console, "news", "c1")
    clock.now += dt.timedelta(minutes=5)
    assert await request_cancel(console, "news", "c1")
    assert f"{CANCEL_NOTE} at 2026-12-01 12:00:00 UTC" == await cancel_requested(
        ledger, "news", "c1"
    )
    assert None is await cancel_requested(ledger, "news", "c2")
    with pytest.raises(ValidationError, match="message"):
        await Broadcast(notifier, "news", "c1", Message("other"), [3], resume_cancelled=True).run()

    assert await clear_cancel(console, "news", "c1")
    assert None is await cancel_requested(ledger, "news", "c1")
    assert not await clear_cancel(console, "news", "c1")
    assert 1 == (await Broadcast(notifier, "news", "c1", NEWS, [1, 2, 3]).run()).progress.sent


async def _statuses(ledger: AsyncLedger, campaign: str) -> Counter[str]:
    t = ledger.table
    query = sa.select(t.c.status, sa.func.count()).where(
        t.c.action == "news", t.c.cycle == campaign
    )
    async with ledger.engine.connect() as conn:
        rows = (await conn.execute(query.group_by(t.c.status))).all()
    return Counter({status: int(n) for status, n in rows})


async def test_a_cancel_from_another_connection_stops_the_run_gently_until_resumed(
    ledger: AsyncLedger,
    other: AsyncEngine,
    async_table: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2,000 chats: a cancel written on another engine mid-run stops it with every row sent
    or never claimed (none claimed, none unknown); a second run refuses, a dry run too; a
    run with resume_cancelled sends the rest, each chat once in all."""
    monkeypatch.setattr(broadcast_module, "_CANCEL_POLL", 0.05)
    sender = FakeSender(latency=0.02)
    notifier = Notifier(ledger, sender, concurrency=16)
    console = AsyncLedger(other, table_name=async_table)

    async def cancel_after_200() -> None:
        for _ in range(6000):  # at most a minute
            if len(sender.sent) >= 200:
                break
            await asyncio.sleep(0.01)
        assert await request_cancel(console, "news", "big")

    canceller = asyncio.ensure_future(cancel_after_200())
    report = await asyncio.wait_for(
        Broadcast(notifier, "news", "big", NEWS, range(CHATS)).run(), 120
    )
    await canceller

    assert report.cancelled
    assert report.report.stopped is not None
    assert report.report.stopped.startswith(CANCEL_NOTE)
    p = report.progress
    assert 200 <= p.sent < CHATS
    assert (0, [], []) == (p.unknown, report.unknown, report.held)
    assert Counter({"sent": p.sent}) == await _statuses(ledger, "big")
    assert p.sent == len(sender.sent)

    with pytest.raises(ValidationError) as refused:
        await Broadcast(notifier, "news", "big", NEWS, range(CHATS)).run()
    assert "campaign" == refused.value.field
    assert "news/big" in refused.value.problem
    assert "resume_cancelled=True" in refused.value.problem
    dry = Notifier(ledger, sender, dry_run=True)
    with pytest.raises(ValidationError, match="news/big"):
        await Broadcast(dry, "news", "big", NEWS, range(CHATS)).run()
    looked = await Broadcast(dry, "news", "big", NEWS, range(CHATS), resume_cancelled=True).run()
    assert CHATS - p.sent == looked.progress.skipped  # would send the rest
    assert await cancel_requested(ledger, "news", "big") is not None  # a dry run keeps it
    assert p.sent == len(sender.sent)

    resumed = await Broadcast(
        notifier, "news", "big", NEWS, range(CHATS), resume_cancelled=True
    ).run()
    assert not resumed.cancelled
    assert (CHATS - p.sent, p.sent) == (resumed.progress.sent, resumed.progress.duplicate)
    assert Counter({str(c): 1 for c in range(CHATS)}) == Counter(r.recipient for r in sender.sent)
    assert None is await cancel_requested(ledger, "news", "big")
    assert Counter({"sent": CHATS}) == await _statuses(ledger, "big")


async def test_a_resumed_run_stops_again_on_a_new_request(
    ledger: AsyncLedger, other: AsyncEngine, async_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resume_cancelled withdraws only the request it found: a new one made while the
    resumed run streams its chats stops that run too, the chats read and not tried
    reported as to retry."""
    monkeypatch.setattr(broadcast_module, "_CANCEL_POLL", 0.01)
    notifier = Notifier(ledger, FakeSender())
    await Broadcast(notifier, "news", "c1", NEWS, [1]).run()
    console = AsyncLedger(other, table_name=async_table)
    assert await request_cancel(console, "news", "c1")
    slow = FakeSender(latency=0.05)
    running = Notifier(ledger, slow, concurrency=1)

    async def chats() -> AsyncIterator[int]:
        for chat in range(2, 200):
            if chat == 3:
                assert await request_cancel(console, "news", "c1")  # again, mid-run
            yield chat

    report = await asyncio.wait_for(
        Broadcast(running, "news", "c1", NEWS, chats(), resume_cancelled=True).run(), 60
    )
    assert report.cancelled
    assert 0 < report.progress.retry
    assert report.progress.sent < 198
    assert report.progress.sent == len(slow.sent)
    assert Counter({"sent": 1 + report.progress.sent}) == await _statuses(ledger, "c1")


async def test_chats_read_into_a_batch_not_handed_on_yet_come_back_as_to_retry(
    ledger: AsyncLedger, other: AsyncEngine, async_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream is read in batches: a stop while a batch is still being read (here the
    source waits for ever after 10 chats) reports those 10 as to retry, not nothing."""
    monkeypatch.setattr(broadcast_module, "_CANCEL_POLL", 0.01)
    await Broadcast(Notifier(ledger, FakeSender()), "news", "c1", NEWS, [0]).run()
    console = AsyncLedger(other, table_name=async_table)
    never = asyncio.Event()

    async def chats() -> AsyncIterator[int]:
        for chat in range(1, 11):
            yield chat
        assert await request_cancel(console, "news", "c1")
        await never.wait()  # a source stalled mid-batch
        yield 11  # pragma: no cover - never reached

    sender = FakeSender()
    report = await asyncio.wait_for(
        Broadcast(Notifier(ledger, sender), "news", "c1", NEWS, chats()).run(), 60
    )
    assert report.cancelled
    assert (0, 10) == (report.progress.sent, report.progress.retry)
    assert [] == sender.sent
    assert Counter({"sent": 1}) == await _statuses(ledger, "c1")
