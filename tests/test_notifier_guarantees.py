"""The Notifier's guarantees at their edges, through the public API only, on every database.

Each test here pins one promise that a plausible bug in the dispatch pipeline would break
without any other test noticing: a cancelled send that was already delivered, take-overs
of expired claims with and without the automatic sweep, max_attempts on take-overs, and a
ledger that fails while the outcomes are recorded. Leases expire in real time (a fraction
of a second), so the tests hold whichever clock the ledger measures leases on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any, NoReturn

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Claim,
    DeliveryMode,
    LedgerError,
    Message,
    Notification,
    Notifier,
    Outcome,
    SlotStatus,
)
from notifyonce.testing import FakeSender

from ._ledger_seams import ApartLedger

ACTION = "trial_6h"
CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=dt.timezone.utc)
SHORT = dt.timedelta(milliseconds=300)
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE


@pytest.fixture
async def ledger(async_engine: AsyncEngine, async_table: str) -> AsyncLedger:
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    return ledger


async def status_of(ledger: AsyncLedger, subject: int | str) -> SlotStatus | None:
    record = await ledger.get(ACTION, subject, CYCLE)
    return None if record is None else record.status


async def dead_worker_claim(ledger: AsyncLedger, subject: int | str, *, takeover: bool) -> Claim:
    """Claim a slot as a worker that then dies: the claim is left to expire (really)."""
    claim = await ledger.claim_slot(ACTION, subject, CYCLE, lease=SHORT, take_expired=takeover)
    assert claim is not None
    # Past the lease by the wall clock, with a margin: on any clock the lease is gone.
    left = (claim.lease_until - dt.datetime.now(dt.timezone.utc)).total_seconds()
    await asyncio.sleep(max(left, 0.0) + 0.15)
    return claim


# -- cancellation --------------------------------------------------------------------------


async def test_cancel_while_answers_are_in_flight_never_resends(ledger: AsyncLedger) -> None:
    """At most once: sends delivered but unanswered when the run is cancelled become
    UNKNOWN, so the next run never delivers them again; the rest are sent once."""
    sender = FakeSender()
    sender.hold_answers()
    items = [Notification(s, CYCLE, Message(f"reminder {s}")) for s in range(10)]
    run = asyncio.create_task(Notifier(ledger, sender, concurrency=4).send_many(ACTION, items))
    await sender.wait_in_flight(3)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    sender.release_answers()
    delivered = {r.recipient for r in sender.sent}
    assert len(delivered) >= 3
    statuses = {s: await status_of(ledger, s) for s in range(10)}
    assert dict.fromkeys(sorted(map(int, delivered)), SlotStatus.UNKNOWN) == {
        s: st for s, st in statuses.items() if str(s) in delivered
    }
    assert [] == [s for s, st in statuses.items() if st is SlotStatus.CLAIMED]

    again = await Notifier(ledger, sender).send_many(ACTION, items)
    assert 10 - len(delivered) == again.counts[Outcome.SENT]
    assert {str(s): 1 for s in range(10)} == dict(Counter(r.recipient for r in sender.sent))


# -- take-overs of expired claims ------------------------------------------------------------


async def test_at_least_once_takes_over_without_the_sweep(ledger: AsyncLedger) -> None:
    """At least once with sweep_every=None: a dead worker's expired claim is taken over
    by the next run and sent, as attempt 2 (the message is not lost)."""
    await dead_worker_claim(ledger, 1, takeover=False)
    sender = FakeSender()
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3, sweep_every=None)
    report = await notifier.send_many(ACTION, [Notification(1, CYCLE, Message("hi"))])
    assert [(Outcome.SENT, 2)] == [(r.outcome, r.attempt) for r in report.results]
    assert ["1"] == [r.recipient for r in sender.sent]
    assert SlotStatus.SENT == await status_of(ledger, 1)


async def test_at_least_once_take_over_stops_at_max_attempts(ledger: AsyncLedger) -> None:
    """At least once: a slot whose expired claim already used max_attempts is not taken
    over again (duplicates stay bounded by max_attempts), with or without the sweep."""
    await dead_worker_claim(ledger, 1, takeover=False)
    second = await dead_worker_claim(ledger, 1, takeover=True)
    assert 2 == second.attempt
    sender = FakeSender()
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=2, sweep_every=None)
    assert Outcome.DUPLICATE == await notifier.send_once(ACTION, 1, CYCLE, Message("hi"))
    assert [] == sender.records
    assert SlotStatus.CLAIMED == await status_of(ledger, 1)


@pytest.mark.parametrize("sweep_every", [None, dt.timedelta(seconds=1)], ids=["no-sweep", "sweep"])
async def test_at_most_once_never_takes_over_an_expired_claim(
    ledger: AsyncLedger, sweep_every: dt.timedelta | None
) -> None:
    """At most once: a dead worker's expired claim may have been sent, so no later run
    sends it; the sweep (when on) records it UNKNOWN, otherwise it stays CLAIMED."""
    await dead_worker_claim(ledger, 1, takeover=False)
    sender = FakeSender()
    notifier = Notifier(ledger, sender, mode=AMO, sweep_every=sweep_every)
    assert Outcome.DUPLICATE == await notifier.send_once(ACTION, 1, CYCLE, Message("hi"))
    assert [] == sender.records
    expected = SlotStatus.CLAIMED if sweep_every is None else SlotStatus.UNKNOWN
    assert expected == await status_of(ledger, 1)


# -- the ledger failing while outcomes are recorded ----------------------------------------


class MarksFail(ApartLedger):
    """Claims work; every way of recording an outcome fails as a database outage would."""

    def _outage(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise LedgerError("the database went away while recording outcomes")

    async def _mark_checked(self, *args: Any, **kwargs: Any) -> list[bool]:
        self._outage()

    async def mark_sent(self, *args: Any, **kwargs: Any) -> bool:
        self._outage()

    async def mark_failed(self, *args: Any, **kwargs: Any) -> bool:
        self._outage()

    async def mark_unknown(self, *args: Any, **kwargs: Any) -> bool:
        self._outage()

    async def release(self, *args: Any, **kwargs: Any) -> bool:
        self._outage()


@pytest.mark.parametrize("mode", [AMO, ALO])
async def test_ledger_failure_while_recording_is_never_reported_recorded(
    ledger: AsyncLedger, mode: DeliveryMode
) -> None:
    """Delivered, but the outcome could not be stored: the run reports UNKNOWN (never
    SENT), and the slot stays claimed for the sweep to settle."""
    failing = MarksFail(ledger.engine, table_name=ledger.table_name)
    sender = FakeSender()
    items = [Notification(s, CYCLE, Message("hi")) for s in (1, 2)]
    report = await Notifier(failing, sender, mode=mode, sweep_every=None).send_many(ACTION, items)
    assert [Outcome.UNKNOWN, Outcome.UNKNOWN] == [r.outcome for r in report.results]
    assert all("ledger" in (r.error or "") for r in report.results)
    assert ["1", "2"] == sorted(r.recipient for r in sender.sent)
    assert [SlotStatus.CLAIMED] * 2 == [await status_of(ledger, s) for s in (1, 2)]


# -- what counts as an attempt -------------------------------------------------------------


async def test_at_least_once_counts_only_attempts_that_may_have_delivered(
    ledger: AsyncLedger,
) -> None:
    """max_attempts=3: two 429s and a timeout that did not deliver, then success. Only the
    timeout may have delivered, so the fourth run still sends: once, as attempt 2. (Every
    claim used to count: retry, retry, unknown, then a duplicate for ever, 0 delivered.)"""
    from notifyonce import TransientSendError, UncertainSendError

    sender = FakeSender()
    sender.script(
        "1",
        [
            TransientSendError("Too Many Requests", code=429, retry_after=1),
            TransientSendError("Too Many Requests", code=429, retry_after=1),
            UncertainSendError("read timeout"),
        ],
    )
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    seen = []
    for _ in range(5):
        report = await notifier.send_many(ACTION, [Notification(1, CYCLE, Message("hi"))])
        seen += [(r.outcome, r.attempt) for r in report.results]
    assert [
        (Outcome.RETRY, 1),
        (Outcome.RETRY, 1),
        (Outcome.RETRY, 1),
        (Outcome.SENT, 2),
        (Outcome.DUPLICATE, None),
    ] == seen
    assert 1 == len(sender.sent)
    record = await ledger.get(ACTION, 1, CYCLE)
    assert record is not None
    assert (SlotStatus.SENT, 2) == (record.status, record.attempt)


async def test_uncertain_attempts_still_stop_at_max_attempts(ledger: AsyncLedger) -> None:
    """The other side of the count: three timeouts that may each have delivered use up
    max_attempts=3, whatever certain failures came between them."""
    from notifyonce import TransientSendError, UncertainSendError

    timeout = UncertainSendError("read timeout")
    flood = TransientSendError("Too Many Requests", code=429, retry_after=1)
    sender = FakeSender()
    sender.script("1", [timeout, flood, timeout, flood, timeout])
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    outcomes = []
    for _ in range(6):
        report = await notifier.send_many(ACTION, [Notification(1, CYCLE, Message("hi"))])
        outcomes += [r.outcome for r in report.results]
    assert [*[Outcome.RETRY] * 4, Outcome.UNKNOWN, Outcome.DUPLICATE] == outcomes
    assert 5 == len(sender.records)


async def test_a_release_gives_its_attempt_back_unless_it_may_have_delivered(
    ledger: AsyncLedger,
) -> None:
    """``release`` (and a RELEASED entry of ``mark_many``) gives the attempt back;
    ``release(..., may_have_delivered=True)`` keeps it."""
    first = await ledger.claim_slot(ACTION, 1, CYCLE)
    assert first is not None
    assert await ledger.release(first, "429")
    second = await ledger.claim_slot(ACTION, 1, CYCLE)
    assert second is not None
    assert (1, 1) == (first.attempt, second.attempt)
    assert [True] == await ledger.mark_many([(second, SlotStatus.RELEASED, "429")])
    third = await ledger.claim_slot(ACTION, 1, CYCLE)
    assert third is not None
    assert await ledger.release(third, "read timeout", may_have_delivered=True)
    fourth = await ledger.claim_slot(ACTION, 1, CYCLE)
    assert (1, 2) == (third.attempt, fourth.attempt if fourth else None)
