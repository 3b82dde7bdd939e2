"""A ledger an operator would look at: a reminder action, a finished campaign and a running
one, with unknown, failed, released and held slots, campaigns in every other state (of the
action ``news``: scheduled, never started, stopped, cancelled), and an audience of gone and
opted-out chats beside it; for the console's tests."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncAudience, AsyncLedger, GoneReason, Ledger, Message
from notifyonce._campaign import check_message

from ._databases import Backend, drop_table

UTC = dt.timezone.utc
DEADLINE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
LATER = dt.datetime(2026, 12, 31, 18, 0, tzinfo=UTC)
#: Texts that must never reach a page: the campaigns' messages and a bot token.
MESSAGE_TEXT = "Secret sale text 7c1e: 50% off until Sunday"
BOT_TOKEN = "123456789:AAHsecretsecretsecretsecretsecret0123"
EVIL_SUBJECT = '<script>alert("x")</script>'


@dataclass(frozen=True)
class Seeded:
    """What the seeded ledger holds, for the assertions."""

    table: str
    reminder: str = "trial_6h"
    broadcast: str = "promo"
    finished: str = "2026-11-sale"
    running: str = "2026-12-sale"
    running_total: int = 10
    #: Campaigns of the action ``news``, one per state, by the state they are in.
    news: str = "news"
    scheduled: str = "n-scheduled"
    never_started: str = "n-never"
    stopped: str = "n-stopped"
    cancelled: str = "n-cancelled"
    #: Chats imported as gone (deactivated): more than one page of the recipients page.
    imported: range = range(300, 530)


async def seed(backend: Backend) -> Seeded:
    """Fill a fresh table on ``backend`` (`unseed` drops it)."""
    seeded = Seeded(backend.unique_table())
    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=seeded.table)
        await ledger.create_schema()
        await _fill(ledger, seeded)
        await _fill_audience(AsyncAudience.beside(ledger), seeded)
    finally:
        await engine.dispose()
    return seeded


def unseed(backend: Backend, seeded: Seeded) -> None:
    """Drop the seeded table and the rate table beside it."""
    drop_table(backend, seeded.table)
    drop_table(backend, f"{seeded.table}_rate_limits")


@asynccontextmanager
async def seeded_ledger(backend: Backend) -> AsyncIterator[Seeded]:
    """A seeded table on ``backend`` while the block runs."""
    seeded = await seed(backend)
    try:
        yield seeded
    finally:
        unseed(backend, seeded)


async def _fill(ledger: AsyncLedger, s: Seeded) -> None:
    # The reminder: two sent, one unknown, one failed, one held, and subject 3 again in
    # the next cycle (failed), so a requeue of one cycle must leave the other alone.
    for subject in (1, 2):
        claim = await ledger.claim_slot(s.reminder, subject, DEADLINE)
        assert claim is not None
        await ledger.mark_sent(claim, message_id=subject * 10)
    claim = await ledger.claim_slot(s.reminder, 3, DEADLINE)
    assert claim is not None
    await ledger.mark_unknown(claim, "read timeout after the request was sent")
    claim = await ledger.claim_slot(s.reminder, 3, LATER)
    assert claim is not None
    await ledger.mark_failed(claim, "[403] Forbidden: bot was blocked by the user")
    claim = await ledger.claim_slot(s.reminder, 4, DEADLINE)
    assert claim is not None
    # A token in an error written by other code: the pages must hide it.
    await ledger.mark_failed(claim, f"[401] Unauthorized at /bot{BOT_TOKEN}/sendMessage")
    claim = await ledger.claim_slot(s.reminder, EVIL_SUBJECT, DEADLINE)
    assert claim is not None
    await ledger.mark_unknown(claim, "connection reset")
    await ledger.claim_slot(s.reminder, 5, DEADLINE)  # held now

    message = Message(MESSAGE_TEXT)
    # The finished campaign: every chat handled.
    await check_message(
        ledger, s.broadcast, s.finished, message, allow_changed=False, dry_run=False
    )
    for chat in range(100, 106):
        claim = await ledger.claim_slot(s.broadcast, chat, s.finished)
        assert claim is not None
        if chat == 105:
            await ledger.mark_failed(claim, "[400] Bad Request: chat not found")
        else:
            await ledger.mark_sent(claim)
    # Its total is known and its sends are minutes old: no run is sending it.
    await _record_total(ledger, s.broadcast, s.finished, 6)
    await _age_sends(ledger, s.broadcast, s.finished, dt.timedelta(minutes=2))
    # The running campaign: some sent, one released after a 429, some held.
    await check_message(ledger, s.broadcast, s.running, message, allow_changed=False, dry_run=False)
    await _record_total(ledger, s.broadcast, s.running, s.running_total)
    await _keep_progress_message(ledger, s.broadcast, s.running)
    for chat in range(200, 206):
        claim = await ledger.claim_slot(s.broadcast, chat, s.running)
        assert claim is not None
        if chat < 203:
            await ledger.mark_sent(claim)
        elif chat == 203:
            await ledger.release(claim, "[429] Too Many Requests: retry after 7")
        elif chat == 204:
            await ledger.mark_unknown(claim, "read timeout after the request was sent")

    await _fill_news(ledger, s, message)


async def _fill_news(ledger: AsyncLedger, s: Seeded, message: Message) -> None:
    """A campaign in each state the console names besides running and finished."""
    from notifyonce._campaign import request_cancel

    for campaign in (s.scheduled, s.never_started, s.stopped, s.cancelled):
        await check_message(ledger, s.news, campaign, message, allow_changed=False, dry_run=False)
    # Waiting for its start time (--at): its row has the time, no chat has a slot.
    t = ledger.table
    async with ledger.engine.begin() as conn:
        await conn.execute(
            sa.update(t)
            .where(t.c.subject == s.news, t.c.cycle == s.scheduled)
            .values(cycle_at=ledger.now() + dt.timedelta(days=1))
        )
    # Stopped: 2 of 4 sent five minutes ago, nothing held; cancelled: 1 of 4, then cancelled.
    for campaign, chats in ((s.stopped, (400, 401)), (s.cancelled, (410,))):
        await _record_total(ledger, s.news, campaign, 4)
        for chat in chats:
            claim = await ledger.claim_slot(s.news, chat, campaign)
            assert claim is not None
            await ledger.mark_sent(claim)
        await _age_sends(ledger, s.news, campaign, dt.timedelta(minutes=5))
    assert await request_cancel(ledger, s.news, s.cancelled)


async def _age_sends(ledger: AsyncLedger, action: str, campaign: str, ago: dt.timedelta) -> None:
    """Move the campaign's sends ``ago`` into the past (a run that ended that long ago)."""
    t = ledger.table
    async with ledger.engine.begin() as conn:
        await conn.execute(
            sa.update(t)
            .where(t.c.action == action, t.c.cycle == campaign, t.c.sent_at.is_not(None))
            .values(sent_at=ledger.now() - ago)
        )


async def _fill_audience(audience: AsyncAudience, s: Seeded) -> None:
    # Subject 3 blocked the bot (its failed slot of the next cycle says so), chat 105 of
    # the finished campaign was not found; a token in words written by other code.
    await audience.mark_gone(
        3,
        GoneReason.BLOCKED,
        source="refusal",
        detail="[403] Forbidden: bot was blocked by the user",
    )
    await audience.mark_gone(105, GoneReason.CHAT_NOT_FOUND, source="refusal")
    await audience.mark_gone(4, GoneReason.OTHER, detail=f"[401] at /bot{BOT_TOKEN}/getChat")
    await audience.opt_out(7, "promo", how="button", source="update")
    await audience.opt_out(EVIL_SUBJECT, "promo", how="command", source="update")
    await audience.mark_gone_many(s.imported, GoneReason.DEACTIVATED, source="import")


async def _record_total(ledger: AsyncLedger, action: str, campaign: str, total: int) -> None:
    from notifyonce._campaign import record_total

    await record_total(ledger, action, campaign, total)


async def _keep_progress_message(ledger: AsyncLedger, action: str, campaign: str) -> None:
    """The running campaign shows its progress in an admin chat (its own ledger row)."""
    from notifyonce._campaign import keep_progress_message

    await keep_progress_message(ledger, action, campaign, "777", 12)


def insert_rows(ledger: Ledger, rows: list[dict[str, Any]]) -> None:
    """Rows written straight into the ledger table (quicker than a claim each): each
    names its key and status, and any column it sets otherwise."""
    now = ledger.now()
    base = {
        "cycle_at": None,
        "attempt": 1,
        "token": 1,
        "lease_until": now,
        "created_at": now,
        "updated_at": now,
        "sent_at": None,
        "last_error": None,
        "message_id": None,
    }
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(ledger.table), [{**base, **row} for row in rows])


def sync_engine_for(backend: Backend) -> sa.Engine:
    return sa.create_engine(backend.sync_url)
