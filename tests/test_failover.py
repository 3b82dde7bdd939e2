"""A campaign goes on through a PostgreSQL failover; what it costs depends on the standby.

A private primary and a streaming standby (``initdb``, ``pg_basebackup``; never the
shared server), the ledger on a URL naming both hosts with ``target_session_attrs=
read-write``, so a connection finds whichever takes writes. A campaign runs through the
Notifier (a FakeSender counts what reached the provider, outside the ledger); a third of
the way in the primary is SIGKILLed, every backend with it, and the standby promoted.
The run waits for a primary as it waits out a restart, goes on against the new one, and
the campaign is run a second time, as an operator or a scheduler would after an
incident:

- synchronous standby, the ledger made with ``synchronous_commit="on"``: every claim
  committed before the kill is on the new primary, so no chat gets the message twice and
  none is left out;
- asynchronous standby: a claim whose commit had not reached the standby is missing on
  the new primary, and the second run wins and sends it again. How many that is depends
  on the standby's lag at the instant of the kill (on one host, usually none or a few):
  the test counts them and asserts only what holds whatever the lag (every chat reached
  at least once, and twice only a chat claimed before the kill).

``NOTIFYONCE_FAILOVER_CHATS`` sets the campaign's size (default 3,000; the documented
figures come from 20,000). The campaigns are storms (``make ci`` runs them); the
two-host URL tests are not.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Ledger, Message, Notification, Notifier
from notifyonce.testing import FakeSender

from ._failover import ReplicatedPostgres

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.postgres]

CHATS = int(os.environ.get("NOTIFYONCE_FAILOVER_CHATS", "3000"))
# How far the lagging standby falls behind: sends after its link holds, or seconds.
LAG_SENDS = 300
LAG_SECONDS = 2.0
CYCLE = dt.datetime(2026, 12, 7, 18, 0, tzinfo=dt.timezone.utc)
ACTION = "news"


def items() -> list[Notification]:
    return [Notification(chat, CYCLE, Message("Maintenance tonight")) for chat in range(CHATS)]


async def campaign_through_a_failover(
    synchronous: bool, lagging: bool, caplog: pytest.LogCaptureFixture
) -> dict[str, Any]:
    """Run the campaign, fail over a third of the way, run it again; the figures.

    ``lagging``: from a third of the way the standby receives nothing more (its link to
    the primary holds what the primary sends) until the primary is killed, after
    LAG_SENDS more sends or LAG_SECONDS, whichever comes first.
    """
    caplog.set_level(logging.INFO, logger="notifyonce")
    with ReplicatedPostgres(synchronous=synchronous) as servers:
        engine = create_async_engine(servers.async_url, pool_size=20, max_overflow=0)
        try:
            option = "on" if synchronous else None
            ledger = AsyncLedger(engine, synchronous_commit=option)
            await ledger.create_schema()
            sender = FakeSender(latency=0.002)
            notifier = Notifier(
                ledger,
                sender,
                concurrency=16,
                batch_size=100,
                outage_patience=dt.timedelta(seconds=120),
            )
            run = asyncio.ensure_future(notifier.send_many(ACTION, items()))
            failed_over_at = -1
            for _ in range(6000):  # 0.02 s each: two minutes at most
                if run.done() or len(sender.records) >= CHATS // 3:
                    break
                await asyncio.sleep(0.02)
            held_at = len(sender.records)
            if lagging and not run.done():
                assert servers.link is not None
                servers.link.hold()
                for _ in range(int(LAG_SECONDS / 0.02)):
                    if run.done() or len(sender.records) >= held_at + LAG_SENDS:
                        break
                    await asyncio.sleep(0.02)
            if not run.done():
                failed_over_at = len(sender.records)
                await asyncio.to_thread(servers.fail_over)
            first = await asyncio.wait_for(run, 300)
            first_sends = len(sender.records)
            second = await asyncio.wait_for(notifier.send_many(ACTION, items()), 300)
            async with engine.connect() as conn:
                rows = (await conn.execute(sa.select(ledger.table.c.status))).all()
            line = await ledger.check_durability()
        finally:
            await engine.dispose()
    delivered = Counter(record.recipient for record in sender.records)
    figures = {
        "chats": CHATS,
        "lagging_from": held_at if lagging else None,
        "failed_over_at": failed_over_at,
        "first_run": {k.value: v for k, v in first.counts.items() if v},
        "second_run": {k.value: v for k, v in second.counts.items() if v},
        "sent_by_second_run": len(sender.records) - first_sends,
        "twice": sorted((int(chat) for chat, n in delivered.items() if n > 1)),
        "lost": CHATS - len(delivered),
        "statuses": dict(Counter(status for (status,) in rows)),
        "after": line,
        "said": [r.getMessage() for r in caplog.records if "database" in r.getMessage()],
    }
    shown = {**figures, "twice": len(figures["twice"])}
    print(f"failover, synchronous={synchronous}, lagging={lagging}: {shown}")
    return figures


@pytest.mark.storm
@pytest.mark.parametrize("lagging", [False, True], ids=["streaming", "lagging"])
async def test_a_synchronous_failover_sends_no_chat_twice_and_loses_none(
    lagging: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Synchronous standby and synchronous_commit='on': the primary killed a third of the
    way (lagging: after its standby stopped receiving), the standby promoted; the run
    goes on against it, and after a second run every chat got the message exactly once."""
    figures = await campaign_through_a_failover(True, lagging, caplog)

    assert 0 <= figures["failed_over_at"] < CHATS, "the run ended before the failover"
    assert ([], 0) == (figures["twice"], figures["lost"]), figures
    # The run said the database went away and came back: it waited, it did not end.
    assert any("database is back" in said for said in figures["said"]), figures["said"]
    # The new primary has no standby of its own: the ledger says it can lose claims now.
    assert figures["after"].startswith("a failover can lose a committed claim"), figures


@pytest.mark.storm
async def test_an_asynchronous_failover_is_measured(caplog: pytest.LogCaptureFixture) -> None:
    """Asynchronous standby, streaming as fast as it can: the campaign goes on through the
    failover, a second run reaches every chat, and the chats sent twice (the claims the
    standby had not received at the kill, usually none on one host) are counted."""
    figures = await campaign_through_a_failover(False, False, caplog)

    assert 0 <= figures["failed_over_at"] < CHATS, "the run ended before the failover"
    assert 0 == figures["lost"], figures
    assert len(figures["twice"]) <= figures["failed_over_at"], figures
    assert any("database is back" in said for said in figures["said"]), figures["said"]


@pytest.mark.storm
async def test_a_lagging_asynchronous_standby_loses_claims_and_their_chats_get_it_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Asynchronous standby that stopped receiving before the kill: the claims committed
    since are not on the new primary, so the second run wins and sends them again. Some
    chats get it twice, all of them sent before the kill, and none is left out."""
    figures = await campaign_through_a_failover(False, True, caplog)

    assert 0 <= figures["failed_over_at"] < CHATS, "the run ended before the failover"
    assert 0 == figures["lost"], figures
    lag = figures["failed_over_at"] - figures["lagging_from"]
    assert lag > 16, figures  # more sends than the ones under way when it fell behind
    # Twice: only chats sent before the kill (those claimed since the standby fell behind,
    # and the few whose claims were still on their way to it then), and some of them.
    assert 0 < len(figures["twice"]) <= figures["failed_over_at"], figures


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_a_ledger_on_both_hosts_claims_on_the_promoted_standby(driver: str) -> None:
    """A URL naming both hosts with target_session_attrs=read-write: before the failover
    the ledger writes to the primary; after it, to the promoted standby, where the claims
    made before (synchronous) are held still."""
    with ReplicatedPostgres(synchronous=True) as servers:
        url = servers.url if driver == "psycopg" else servers.async_url
        if driver == "asyncpg":
            asyncio.run(_claims_across_async(servers, url))
            return
        engine = sa.create_engine(url)
        try:
            ledger = Ledger(engine, synchronous_commit="on")
            ledger.create_schema()
            before = ledger.claim_slot(ACTION, 1, CYCLE)
            servers.fail_over()
            engine.dispose()  # the pool's connections died with the primary
            assert (None, True) == (
                ledger.claim_slot(ACTION, 1, CYCLE),
                ledger.claim_slot(ACTION, 2, CYCLE) is not None,
            )
            assert before is not None
            assert ledger.mark_sent(before)
        finally:
            engine.dispose()


async def _claims_across_async(servers: ReplicatedPostgres, url: str) -> None:
    engine = create_async_engine(url)
    try:
        ledger = AsyncLedger(engine, synchronous_commit="on")
        await ledger.create_schema()
        before = await ledger.claim_slot(ACTION, 1, CYCLE)
        await asyncio.to_thread(servers.fail_over)
        await engine.dispose()
        assert (None, True) == (
            await ledger.claim_slot(ACTION, 1, CYCLE),
            await ledger.claim_slot(ACTION, 2, CYCLE) is not None,
        )
        assert before is not None
        assert await ledger.mark_sent(before)
    finally:
        await engine.dispose()
