"""What a crash, a cancellation or one bad row costs a send_many run: only what was in flight."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Claim,
    DeliveryMode,
    Ledger,
    LedgerError,
    LedgerUnavailableError,
    Message,
    Notification,
    Notifier,
    Outcome,
    Receipt,
    SenderConfigError,
    SlotStatus,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
    _dispatch,
)
from notifyonce.ratelimit import MemoryRateStore, Turn, TurnRequest
from notifyonce.testing import FakeSender

from ._clocks import WallClock
from ._fakes import CountedTurns
from ._ledger_seams import ApartLedger, write_apart

UTC = dt.timezone.utc
CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE
ACTION = "trial_6h"


def items(count: int, start: int = 0) -> list[Notification]:
    return [Notification(s, CYCLE, Message("reminder")) for s in range(start, start + count)]


async def statuses(ledger: AsyncLedger) -> Counter[str]:
    async with ledger.engine.connect() as conn:
        rows = await conn.execute(sa.select(ledger.table.c.status))
        return Counter(row.status for row in rows)


class Courier:
    """A sender that records a delivery the moment it happens, then answers after a delay.

    ``delivered`` counts real deliveries per recipient (what a person would receive),
    ``handed`` every recipient ever given to ``send``, ``in_flight`` the sends under way.
    """

    def __init__(self, *, before: float = 0.0, after: float = 0.0) -> None:
        self.before = before  # the request travelling: not delivered yet
        self.after = after  # delivered, the answer travelling back
        self.delivered: Counter[str] = Counter()
        self.handed: list[str] = []
        self.in_flight = 0
        self.raise_for: dict[str, BaseException] = {}

    def on_delivery(self) -> None:
        """Called the moment a message is delivered, before its answer travels back."""

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.handed.append(recipient)
        self.in_flight += 1
        try:
            await asyncio.sleep(self.before)
            if recipient in self.raise_for:
                raise self.raise_for[recipient]
            self.delivered[recipient] += 1
            self.on_delivery()
            await asyncio.sleep(self.after)
            return Receipt(recipient, message_id=len(self.handed))
        finally:
            self.in_flight -= 1


# -- just in time: what a crash can cost --------------------------------------------------------


async def test_claims_held_without_a_send_never_exceed_concurrency(ledger: AsyncLedger) -> None:
    """With 1,000 notifications and every send hanging, only `concurrency` slots are claimed."""
    sender = Courier(before=3600)
    notifier = Notifier(ledger, sender, concurrency=8, batch_size=500)
    task = asyncio.create_task(notifier.send_many(ACTION, items(1000)))
    for _ in range(500):  # bounded: 5 s
        if len(sender.handed) >= 8:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # would more be claimed given the time?
    assert 8 == len(sender.handed)
    assert {"claimed": 8} == dict(await statuses(ledger))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The hanging sends may have gone out: recorded uncertain; nothing else was touched.
    assert {"unknown": 8} == dict(await statuses(ledger))
    assert 0 == sender.in_flight


class Turnstile:
    """A sender with a rate-limit turn: one turn granted per `release()`."""

    def __init__(self) -> None:
        self.turns: asyncio.Queue[None] = asyncio.Queue()
        self.sent: list[str] = []

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self.turns.put_nowait(None)

    @contextlib.asynccontextmanager
    async def turn(self, recipient: str) -> AsyncIterator[None]:
        await self.turns.get()
        yield

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.sent.append(recipient)
        return Receipt(recipient)


async def test_a_slot_is_claimed_only_after_its_rate_limit_turn(ledger: AsyncLedger) -> None:
    """A sender's turn() gates the claim: slots waiting for a turn are not claimed."""
    sender = Turnstile()
    task = asyncio.create_task(Notifier(ledger, sender).send_many(ACTION, items(50)))
    await asyncio.sleep(0.2)
    assert {} == dict(await statuses(ledger))  # 16 workers wait for turns, none claimed
    sender.release(3)
    for _ in range(500):  # bounded: 5 s
        if (await statuses(ledger))["sent"] == 3:
            break
        await asyncio.sleep(0.01)
    assert {"sent": 3} == dict(await statuses(ledger))
    sender.release(47)
    report = await asyncio.wait_for(task, 30)
    assert 50 == report.counts[Outcome.SENT]


async def test_finished_slots_take_no_turn(ledger: AsyncLedger) -> None:
    """A re-run over slots already sent reports duplicates without waiting for any turn."""
    await Notifier(ledger, FakeSender()).send_many(ACTION, items(30))
    sender = Turnstile()  # never grants a turn
    report = await asyncio.wait_for(Notifier(ledger, sender).send_many(ACTION, items(30)), 10)
    assert 30 == report.counts[Outcome.DUPLICATE]


# -- cancellation at every moment ---------------------------------------------------------------


class ProbedLedger(ApartLedger):
    """An AsyncLedger that pauses at one named moment and says when it got there."""

    def __init__(self, *args: Any, moment: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.moment = moment
        self.reached = asyncio.Event()

    async def _at(self, moment: str) -> None:
        if moment == self.moment and not self.reached.is_set():
            self.reached.set()
            await asyncio.sleep(0.05)  # the cancellation lands here

    async def sweep(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("sweep")
        return await super().sweep(*args, **kwargs)

    # The Notifier's entry points into the ledger (input it checked itself).

    async def _not_claimable_keys(self, *args: Any, **kwargs: Any) -> Any:
        await self._at("lookup")
        return await super()._not_claimable_keys(*args, **kwargs)

    async def _claim_keys(self, *args: Any, **kwargs: Any) -> list[Claim]:
        await self._at("claiming")
        claims = await super()._claim_keys(*args, **kwargs)
        await self._at("claimed")
        return claims

    async def _mark_checked(self, *args: Any, **kwargs: Any) -> list[bool]:
        await self._at("recording")
        landed = await super()._mark_checked(*args, **kwargs)
        await self._at("recorded")
        return landed


class ProbedCourier(Courier):
    """A Courier that says when a send is under way or has delivered."""

    def __init__(self, moment: str) -> None:
        super().__init__(before=0.02, after=0.02)
        self.moment = moment
        self.reached = asyncio.Event()

    async def send(self, recipient: str, message: Message) -> Receipt:
        if self.moment == "sending" and len(self.handed) >= 5:
            self.reached.set()  # this request is travelling, not delivered yet
        receipt = await super().send(recipient, message)
        if self.moment == "answered" and sum(self.delivered.values()) >= 5:
            self.reached.set()
        return receipt

    def on_delivery(self) -> None:
        if self.moment == "delivered" and sum(self.delivered.values()) >= 5:
            self.reached.set()  # delivered, its answer still travelling


LEDGER_MOMENTS = ["sweep", "lookup", "claiming", "claimed", "recording", "recorded"]
SENDER_MOMENTS = ["sending", "delivered", "answered"]


@pytest.mark.parametrize("mode", [AMO, ALO], ids=["at-most-once", "at-least-once"])
@pytest.mark.parametrize("moment", ["start", *LEDGER_MOMENTS, *SENDER_MOMENTS, "end"])
async def test_cancellation_at_any_moment(
    ledger: AsyncLedger, clock: WallClock, moment: str, mode: DeliveryMode
) -> None:
    """Cancelled at any moment, then run again: no duplicate at most once, no unknown slot
    that was never handed to the sender, at most `concurrency` duplicates at least once."""
    concurrency = 4
    probed = ProbedLedger(ledger.engine, table_name=ledger.table_name, clock=clock, moment=moment)
    sender = ProbedCourier(moment)
    notifier = Notifier(probed, sender, mode=mode, concurrency=concurrency, max_attempts=5)
    work = items(30)
    task = asyncio.create_task(notifier.send_many(ACTION, work))
    if moment == "start":
        pass
    elif moment == "end":
        await task
    else:
        reached = sender.reached if moment in SENDER_MOMENTS else probed.reached
        await asyncio.wait_for(reached.wait(), 10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert 0 == sender.in_flight  # no send outlives the call
    left = await statuses(ledger)
    assert 0 == left["claimed"]  # every claim settled before the cancellation went on
    clock.advance(hours=1)
    again = Notifier(AsyncLedger(ledger.engine, table_name=ledger.table_name, clock=clock), sender,
                     mode=mode, concurrency=concurrency, max_attempts=5)  # fmt: skip
    await again.send_many(ACTION, work)
    final = await statuses(ledger)
    unknown = [
        str(s) for s in range(30)
        if (r := await ledger.get(ACTION, s, CYCLE)) is not None and r.status is SlotStatus.UNKNOWN
    ]  # fmt: skip
    assert [] == [s for s in unknown if s not in sender.handed]
    duplicates = sum(n - 1 for n in sender.delivered.values() if n > 1)
    if mode is AMO:
        assert 0 == duplicates
        assert 30 == final["sent"] + final["unknown"]
    else:
        assert duplicates <= concurrency
        assert {"sent": 30} == dict(final)


async def test_a_foreign_base_exception_stops_every_send(ledger: AsyncLedger) -> None:
    """A BaseException from one send stops the others before it is raised; none goes out later."""

    class Shutdown(BaseException):
        pass

    class ShutsDown(Courier):
        """Chat 3's send raises Shutdown once the 7 other sends are under way (2 s each)."""

        async def send(self, recipient: str, message: Message) -> Receipt:
            if recipient != "3":
                return await super().send(recipient, message)
            self.handed.append(recipient)
            for _ in range(1000):  # bounded: 10 s
                if self.in_flight >= 7:
                    break
                await asyncio.sleep(0.01)
            raise Shutdown

    sender = ShutsDown(before=2.0)
    with pytest.raises(Shutdown):
        await Notifier(ledger, sender, concurrency=8).send_many(ACTION, items(40))
    assert 0 == sender.in_flight
    delivered = sum(sender.delivered.values())
    await asyncio.sleep(0.4)  # a send left running would deliver now
    assert delivered == sum(sender.delivered.values())
    left = await statuses(ledger)
    assert 0 == left["claimed"]
    # The 8 sends under way may have gone out: unknown, never sent again by a later run.
    assert 8 == left["unknown"]
    report = await Notifier(ledger, Courier()).send_many(ACTION, items(40))
    assert 8 == report.counts[Outcome.DUPLICATE]


class HeldMarks(ApartLedger):
    """Its outcome writes say when they start, then wait for ``go`` (at most 2 s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marking = asyncio.Event()
        self.go = asyncio.Event()

    async def _mark_checked(self, *args: Any, **kwargs: Any) -> list[bool]:
        self.marking.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.go.wait(), 2.0)
        return await super()._mark_checked(*args, **kwargs)


async def test_a_second_cancel_while_recording_leaves_every_row_settled(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """Cancelled, then cancelled again while the outcomes are being written: when the call
    ends, every claim is settled (none is left `claimed` for a later sweep to guess at)."""
    held = HeldMarks(ledger.engine, table_name=ledger.table_name, clock=clock)
    sender = Courier(before=3600)
    notifier = Notifier(held, sender, concurrency=8, sweep_every=None)
    task = asyncio.create_task(notifier.send_many(ACTION, items(20)))
    for _ in range(1000):  # bounded: 10 s
        if len(sender.handed) >= 8:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.wait_for(held.marking.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    left = dict(await statuses(ledger))
    held.go.set()
    # The 8 sends under way may have gone out: unknown, and written before the call ended.
    assert {"unknown": 8} == left
    assert 0 == sender.in_flight


async def test_sender_config_error_frees_the_run(ledger: AsyncLedger) -> None:
    """A misconfigured sender stops the run with its error; no slot is burnt, a fixed one sends."""

    class WrongToken:
        calls = 0

        async def send(self, recipient: str, message: Message) -> Receipt:
            self.calls += 1
            await asyncio.sleep(0.01)
            raise SenderConfigError("Unauthorized: the bot token was rejected", code=401)

    wrong = WrongToken()
    with pytest.raises(SenderConfigError):
        await Notifier(ledger, wrong, concurrency=4).send_many(ACTION, items(100))
    assert wrong.calls <= 4  # the sends under way when it was found out, no more
    assert set(await statuses(ledger)) <= {"released"}
    report = await Notifier(ledger, FakeSender()).send_many(ACTION, items(100))
    assert 100 == report.counts[Outcome.SENT]


async def test_turns_that_come_after_a_stop_claim_nothing(ledger: AsyncLedger) -> None:
    """A run stopped by a misconfigured sender: the workers still waiting for their
    rate-limit turn claim and send nothing when it comes."""

    class WrongTokenTurns(Turnstile):
        async def send(self, recipient: str, message: Message) -> Receipt:
            self.sent.append(recipient)
            raise SenderConfigError("Unauthorized: the bot token was rejected", code=401)

    sender = WrongTokenTurns()
    task = asyncio.create_task(Notifier(ledger, sender, concurrency=4).send_many(ACTION, items(10)))
    sender.release(1)
    for _ in range(1000):  # bounded: 10 s
        if sender.sent:
            break
        await asyncio.sleep(0.01)
    sender.release(9)  # the turns of the 3 workers waiting, and more
    with pytest.raises(SenderConfigError):
        await asyncio.wait_for(task, 30)
    assert 1 == len(sender.sent)
    assert {"released": 1} == dict(await statuses(ledger))


# -- one bad row, one big run -----------------------------------------------------------------


class OddReceipts(FakeSender):
    """Receipts and errors the database cannot store as they are."""

    async def send(self, recipient: str, message: Message) -> Receipt:
        if recipient == "2":
            return Receipt(recipient, message_id="id\x00nul")
        if recipient == "4":
            raise UncertainSendError("reset \ud800 by peer")
        return await super().send(recipient, message)


async def test_unstorable_receipts_cost_nothing(ledger: AsyncLedger) -> None:
    """A receipt with a NUL and an error with a lone surrogate: every outcome is recorded."""
    report = await Notifier(ledger, OddReceipts()).send_many(ACTION, items(6))
    assert [Outcome.SENT] * 4 + [Outcome.UNKNOWN, Outcome.SENT] == [
        r.outcome for r in report.results
    ]
    assert {"sent": 5, "unknown": 1} == dict(await statuses(ledger))


class RefusingLedger(ApartLedger):
    """A database that refuses any write carrying one poisoned detail."""

    async def _mark_checked(self, results: Any, *args: Any) -> list[bool]:
        if any(mark[2] == "poison" for mark in results):
            raise LedgerError("database error (DataError: value refused)")
        return await super()._mark_checked(results, *args)


async def test_a_refused_row_is_isolated(ledger: AsyncLedger, clock: WallClock) -> None:
    """A batch the database refuses is written row by row: the others land, the bad one bare."""
    refusing = RefusingLedger(ledger.engine, table_name=ledger.table_name, clock=clock)
    sender = FakeSender()
    sender.fail_next(TransientSendError("poison"), recipient="3")
    blocked = asyncio.Event()

    class Gate(FakeSender):
        async def send(self, recipient: str, message: Message) -> Receipt:
            if recipient == "0":
                await blocked.wait()  # hold the first write so the others pile up behind it
            return await sender.send(recipient, message)

    task = asyncio.create_task(Notifier(refusing, Gate()).send_many(ACTION, items(10)))
    await asyncio.sleep(0.2)
    blocked.set()
    report = await task
    assert 9 == report.counts[Outcome.SENT]
    assert 1 == report.counts[Outcome.RETRY]
    assert {"sent": 9, "released": 1} == dict(await statuses(ledger))
    record = await ledger.get(ACTION, 3, CYCLE)
    assert record is not None
    assert None is record.last_error


class RefusingWrites(RefusingLedger):
    """A database whose combined write (outcomes with the next claims) fails once with
    ``fault`` when it carries the poisoned detail; marks apart refuse it as
    `RefusingLedger` does, claims apart work."""

    def __init__(self, *args: Any, fault: LedgerError, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fault = fault
        self.faults = 0

    async def _write(self, results: Any, keys: Any, *args: Any) -> Any:
        if any(mark[2] == "poison" for mark in results) and not self.faults:
            self.faults += 1
            raise self.fault
        return await AsyncLedger._write(self, results, keys, *args)


async def test_a_refused_write_of_outcomes_and_claims_costs_only_the_bad_row(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """The write carrying an unstorable outcome and the next claims is refused: the
    outcomes are written apart (the bad one bare), the claims made alone, and the run goes
    on to the end."""
    refusing = RefusingWrites(
        ledger.engine,
        table_name=ledger.table_name,
        clock=clock,
        fault=LedgerError("database error (DataError: value refused)"),
    )
    sender = FakeSender()
    sender.fail_next(TransientSendError("poison"), recipient="0")
    report = await Notifier(refusing, sender, concurrency=1).send_many(ACTION, items(5))
    assert 1 == refusing.faults
    assert (4, 1) == (report.counts[Outcome.SENT], report.counts[Outcome.RETRY])
    assert {"sent": 4, "released": 1} == dict(await statuses(ledger))
    record = await ledger.get(ACTION, 0, CYCLE)
    assert record is not None
    assert None is record.last_error


async def test_a_write_of_outcomes_and_claims_that_loses_the_database_stops_the_run(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """The database goes away during the write of an outcome with the next claim: the
    claim fails as a claim alone would (the run stops with the ledger's error, nothing
    left claimed), and the outcome gets its own retry."""
    lost = RefusingWrites(
        ledger.engine,
        table_name=ledger.table_name,
        clock=clock,
        fault=LedgerUnavailableError("database unavailable (OSError: connection reset)"),
    )
    sender = FakeSender()
    sender.fail_next(TransientSendError("poison"), recipient="0")
    with pytest.raises(LedgerUnavailableError):
        await Notifier(lost, sender, concurrency=1).send_many(ACTION, items(5))
    assert 1 == lost.faults
    assert {"released": 1} == dict(await statuses(ledger))
    assert 1 == len(sender.records)


async def test_a_lost_ledger_reports_unknown_not_recorded(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """When the outcome cannot be written, the run says UNKNOWN, never that it was recorded."""

    class Down(ApartLedger):
        async def _mark_checked(self, results: Any, *args: Any) -> list[bool]:
            raise LedgerError("database unavailable (OSError: connection refused)")

    down = Down(ledger.engine, table_name=ledger.table_name, clock=clock)
    report = await Notifier(down, FakeSender()).send_many(ACTION, items(3))
    assert [Outcome.UNKNOWN] * 3 == [r.outcome for r in report.results]
    assert {"the ledger failed while recording the outcome"} == {r.error for r in report.results}


@pytest.mark.parametrize("batch_size", [7, 200, 5000])
async def test_five_thousand_in_one_run_are_all_recorded(
    ledger: AsyncLedger, batch_size: int
) -> None:
    """5,000 notifications in one run, whatever the batch size: every outcome recorded."""
    notifier = Notifier(ledger, FakeSender(), concurrency=64, batch_size=batch_size)
    report = await notifier.send_many(ACTION, items(5000))
    assert 5000 == report.counts[Outcome.SENT]
    assert {"sent": 5000} == dict(await statuses(ledger))


async def test_outcomes_piled_up_past_one_write_are_all_recorded(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 notifications, 1,200 at once: the first claims bring more outcomes back
    together than one write takes (500). The workers take nothing new while 500 wait for
    their write, so the backlog never passes the 1,200 sends already under way, and every
    one of them is recorded."""
    concurrency, backlog = 1200, []
    statement = _dispatch._Writer._statement

    async def watched(writer: Any, live: Any, entries: Any, keeper: Any) -> Any:
        backlog.append(len(entries) + len(writer.pending))
        return await statement(writer, live, entries, keeper)

    monkeypatch.setattr(_dispatch._Writer, "_statement", watched)
    # One read of all 3,000: the queue never runs dry, so no worker is idle but for room.
    notifier = Notifier(ledger, FakeSender(), concurrency=concurrency, batch_size=3000)
    report = await notifier.send_many(ACTION, items(3000))
    assert _dispatch._RECORD_CHUNK < max(backlog) <= concurrency
    assert 3000 == report.counts[Outcome.SENT]
    assert {"sent": 3000} == dict(await statuses(ledger))


# -- one run, one send per slot; memory ---------------------------------------------------------


async def test_a_key_repeated_across_batches_is_tried_once_per_run(ledger: AsyncLedger) -> None:
    """A slot released by a run is not won again by a later copy of it in the same run."""
    sender = FakeSender()
    sender.fail_next(TransientSendError("429", retry_after=1), recipient="1")
    work = [*items(2), *items(4, start=2), *items(2)]  # 0 and 1 again, two batches later
    report = await Notifier(ledger, sender, batch_size=2, concurrency=1).send_many(ACTION, work)
    assert 1 == len([r for r in sender.records if r.recipient == "1"])
    assert [Outcome.DUPLICATE, Outcome.DUPLICATE] == [r.outcome for r in report.results[-2:]]


async def test_a_stream_keeps_only_results_that_need_attention(ledger: AsyncLedger) -> None:
    """A streamed run counts everything but keeps only FAILED/UNKNOWN/RETRY/LEASE_LOST."""
    sender = FakeSender()
    sender.fail_next(TransientSendError("429"), recipient="7")

    async def stream() -> AsyncIterator[Notification]:
        for n in items(300):
            yield n

    report = await Notifier(ledger, sender).send_many(ACTION, stream())
    assert 299 == report.counts[Outcome.SENT]
    assert [("7", Outcome.RETRY)] == [(r.key.subject, r.outcome) for r in report.results]
    listed = await Notifier(ledger, sender, keep_results=True).send_many(ACTION, items(10))
    assert 10 == len(listed.results)


# -- leases -------------------------------------------------------------------------------------


class RenewalsHeard(AsyncLedger):
    """An AsyncLedger that hands each renewal's result to the test as it lands."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renewed: asyncio.Queue[list[bool]] = asyncio.Queue()

    async def renew(self, *args: Any, **kwargs: Any) -> list[bool]:
        held = await super().renew(*args, **kwargs)
        self.renewed.put_nowait(held)
        return held


async def test_a_long_send_keeps_its_lease(async_engine: AsyncEngine, async_table: str) -> None:
    """A send that outlasts the lease is renewed: an at-least-once worker cannot take it over.

    Each take-over is tried as a renewal lands (a whole lease of margin, on any machine),
    three times, well past the first lease; without renewals it is tried after 5 s."""
    lease = dt.timedelta(seconds=1)
    ledger = RenewalsHeard(async_engine, table_name=async_table, lease=lease)
    await ledger.create_schema()
    answer = asyncio.Event()

    class AnsweredWhenTold:
        async def send(self, recipient: str, message: Message) -> Receipt:
            await answer.wait()
            return Receipt(recipient)

    sender = AnsweredWhenTold()
    task = asyncio.create_task(Notifier(ledger, sender).send_many(ACTION, items(1)))
    other = AsyncLedger(async_engine, table_name=async_table, lease=lease)
    renewals = []
    for _ in range(3):
        with contextlib.suppress(asyncio.TimeoutError):
            renewals.append(await asyncio.wait_for(ledger.renewed.get(), 5))
        assert None is await other.claim_slot(ACTION, 0, CYCLE, take_expired=True)
    assert [[True]] * 3 == renewals
    answer.set()
    report = await task
    assert [Outcome.SENT] == [r.outcome for r in report.results]


# -- refused up front ---------------------------------------------------------------------------


def test_a_sync_ledger_is_refused_with_a_hint() -> None:
    """Notifier(Ledger(...)) fails when built, saying what to use, not at the first send."""
    ledger = Ledger(sa.create_engine("sqlite://"))
    with pytest.raises(ValidationTypeError, match="AsyncLedger") as caught:
        Notifier(ledger, FakeSender())  # type: ignore[arg-type]
    assert "ledger" == caught.value.field
    assert "create_async_engine" in str(caught.value)


async def test_a_recipient_the_sender_refuses_writes_nothing(ledger: AsyncLedger) -> None:
    """The sender's check() runs before any claim: a bad recipient raises, no row is written."""

    class Checked(FakeSender):
        def check(self, recipient: str, message: Message) -> None:
            if not recipient.lstrip("-").isdigit():
                raise ValidationError("recipient", f"not a chat id: {recipient!r}")

    work = [*items(3), Notification(9, CYCLE, Message("x"), recipient="not a chat")]
    with pytest.raises(ValidationError, match="not a chat id") as caught:
        await Notifier(ledger, Checked()).send_many(ACTION, work)
    assert "recipient" == caught.value.field
    assert {} == dict(await statuses(ledger))


async def test_a_worker_with_a_fast_clock_does_not_take_over(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """Two at-least-once workers, one host clock 61 s ahead: a live 60 s claim is not taken."""
    if async_engine.dialect.name == "sqlite":
        pytest.skip("SQLite has no server: its workers share one host and so one clock")
    lease = dt.timedelta(seconds=60)
    honest = AsyncLedger(async_engine, table_name=async_table, lease=lease)
    await honest.create_schema()
    ahead = AsyncLedger(async_engine, table_name=async_table, lease=lease)
    ahead._core.local_clock = lambda: dt.datetime.now(UTC) + dt.timedelta(seconds=61)
    slow = Courier(before=1.0)
    first = asyncio.create_task(Notifier(honest, slow, mode=ALO).send_many(ACTION, items(5)))
    for _ in range(500):  # bounded: 5 s
        if len(slow.handed) == 5:
            break
        await asyncio.sleep(0.01)
    fast = Courier()
    second = await Notifier(ahead, fast, mode=ALO).send_many(ACTION, items(5))
    assert 5 == second.counts[Outcome.DUPLICATE]
    assert 5 == (await first).counts[Outcome.SENT]
    assert [] == fast.handed


@pytest.mark.parametrize("wrapper", ["alone", "fan-out", "fallback"])
async def test_telegram_sender_turns_gate_the_claims(
    async_engine: AsyncEngine, async_table: str, wrapper: str
) -> None:
    """Through TelegramSender's rate limit, alone or inside a FanoutSender or a
    FallbackSender, no slot is claimed before its turn came.

    Counted, not timed: every claim statement asks only for keys whose turn was already
    granted, however slow the machine (a claim made ahead of its turn fails this at once).
    """
    from notifyonce import FallbackSender, FanoutSender
    from notifyonce.telegram import RateLimit, TelegramSender
    from notifyonce.testing import BotAPIServer

    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    asked: list[tuple[int, int]] = []  # (keys claimed so far, turns granted) per statement
    claim_keys = ledger._claim_keys  # the Notifier's way in to claim

    async def counted_claims(keys: Any, options: Any, *args: Any) -> list[Claim]:
        before = asked[-1][0] if asked else 0
        asked.append((before + len(keys), counted.granted))
        return await claim_keys(keys, options, *args)

    ledger._claim_keys = counted_claims  # type: ignore[method-assign]
    write_apart(ledger)
    with BotAPIServer() as server:
        limit = RateLimit(bot_per_second=5)
        async with TelegramSender("123:abc", base_url=server.url, rate_limit=limit) as sender:
            counted = CountedTurns(sender)
            outer: Any = {
                "alone": counted,
                "fan-out": FanoutSender({"telegram": counted}),
                "fallback": FallbackSender({"telegram": counted, "backup": FakeSender()}),
            }[wrapper]
            report = await Notifier(ledger, outer).send_many(ACTION, items(8, start=1))
        assert 8 == len(server.deliveries)
    assert 8 == report.counts[Outcome.SENT]
    assert 8 == counted.granted
    assert asked, "no claim statement ran"
    assert [] == [(claimed, granted) for claimed, granted in asked if claimed > granted]


async def test_claims_of_turns_that_come_one_after_another_share_a_statement(
    ledger: AsyncLedger,
) -> None:
    """Through a fast rate limit (1,000 sends a second, the paid lane's), the claims of
    turns that came while a statement ran share the next one: the 200 sends need far
    fewer claim statements than sends.

    Each statement is held 20 ms (a database at a distance), so that about 20 turns come
    while one runs whatever this machine's speed: a statement that carried only the turn
    that asked for it would make one statement a send."""
    from notifyonce.telegram import RateLimit, TelegramSender
    from notifyonce.testing import BotAPIServer

    statements: list[int] = []  # claims per statement
    claim_keys, write = ledger._claim_keys, ledger._write

    async def counted_claims(keys: Any, *args: Any) -> Any:
        statements.append(len(keys))
        await asyncio.sleep(0.02)
        return await claim_keys(keys, *args)

    async def counted_writes(results: Any, keys: Any, *args: Any) -> Any:
        statements.append(len(keys))
        await asyncio.sleep(0.02)
        return await write(results, keys, *args)

    ledger._claim_keys = counted_claims  # type: ignore[method-assign]
    ledger._write = counted_writes  # type: ignore[method-assign]
    limit = RateLimit(bot_per_second=1000)
    with BotAPIServer(latency=0.02) as server:
        async with TelegramSender("123:abc", base_url=server.url, rate_limit=limit) as sender:
            counted = CountedTurns(sender)
            notifier = Notifier(ledger, counted, concurrency=64)
            report = await notifier.send_many(ACTION, items(200, start=1))
        assert 200 == len(server.deliveries)
    assert 200 == report.counts[Outcome.SENT]
    assert 200 == sum(statements)
    assert len(statements) <= 100, sorted(statements)


async def test_an_in_memory_sqlite_ledger_takes_a_whole_run() -> None:
    """One shared in-memory connection: concurrent claims and marks take turns, never nest."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine("sqlite+aiosqlite://")
    try:
        ledger = AsyncLedger(engine)
        await ledger.create_schema()
        report = await Notifier(ledger, FakeSender()).send_many(ACTION, items(1000))
        assert 1000 == report.counts[Outcome.SENT]
    finally:
        await engine.dispose()


class CountingTurns(MemoryRateStore):
    """The in-memory rate store, counting the turns it booked and those given back."""

    def __init__(self) -> None:
        super().__init__()
        self.booked = 0
        self.given_back = 0

    async def take_turn(self, request: TurnRequest) -> Turn:
        turn = await super().take_turn(request)
        self.booked += turn.booked
        return turn

    async def give_back(self, turn: Turn) -> None:
        self.given_back += 1
        await super().give_back(turn)


async def test_a_slow_claim_costs_no_second_turn(ledger: AsyncLedger) -> None:
    """Each claim statement 30 ms slower than the rate limit's tolerance (a busy
    database): every message still costs one rate-limit turn, none booked again after
    its claim."""
    from notifyonce.telegram import TelegramSender
    from notifyonce.testing import BotAPIServer

    claim_keys = ledger._claim_keys

    async def slow_claims(keys: Any, options: Any, *args: Any) -> list[Claim]:
        await asyncio.sleep(0.03)
        return await claim_keys(keys, options, *args)

    ledger._claim_keys = slow_claims  # type: ignore[method-assign]
    write_apart(ledger)
    store = CountingTurns()
    with BotAPIServer() as server:
        async with TelegramSender("123:abc", base_url=server.url, rate_store=store) as sender:
            run = Notifier(ledger, sender, concurrency=4)
            report = await run.send_many(ACTION, items(40, start=1))
        assert 40 == len(server.deliveries)
    assert 40 == report.counts[Outcome.SENT]
    assert 40 == store.booked - store.given_back
