"""The Notifier's outcome table, on every database, with FakeSender scripting the failures."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from notifyonce import (
    AsyncLedger,
    Claim,
    DeliveryMode,
    Message,
    Notification,
    Notifier,
    Outcome,
    PermanentSendError,
    Receipt,
    SlotStatus,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    make_key,
)
from notifyonce.testing import FakeSender

from ._clocks import WallClock
from ._ledger_seams import ApartLedger

UTC = dt.timezone.utc
CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
SECRET_TEXT = "secret-text-7f3a: your trial ends soon"
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender()


def fresh(ledger: AsyncLedger, clock: WallClock) -> AsyncLedger:
    """A new ledger object on the same table: what a restarted process has."""
    return AsyncLedger(ledger.engine, table_name=ledger.table_name, clock=clock)


def msg(text: str = SECRET_TEXT) -> Message:
    return Message(text)


async def status_of(ledger: AsyncLedger, subject: object, action: str = "trial_6h") -> SlotStatus:
    record = await ledger.get(action, subject, CYCLE)
    assert record is not None
    return record.status


async def test_sent_once_then_duplicate(ledger: AsyncLedger, sender: FakeSender) -> None:
    """The first send of a slot is SENT; every later one is DUPLICATE and sends nothing."""
    notifier = Notifier(ledger, sender)
    assert Outcome.SENT == await notifier.send_once("trial_6h", 42, CYCLE, msg())
    assert Outcome.DUPLICATE == await notifier.send_once("trial_6h", 42, CYCLE, msg())
    assert 1 == len(sender.sent)
    assert SlotStatus.SENT == await status_of(ledger, 42)


async def test_restart_does_not_resend(
    ledger: AsyncLedger, sender: FakeSender, clock: WallClock
) -> None:
    """A restarted process (fresh ledger and notifier objects) never re-sends a slot."""
    assert Outcome.SENT == await Notifier(ledger, sender).send_once("trial_6h", 1, CYCLE, msg())
    for _ in range(3):
        restarted = Notifier(fresh(ledger, clock), sender)
        assert Outcome.DUPLICATE == await restarted.send_once("trial_6h", 1, CYCLE, msg())
    assert 1 == len(sender.sent)


async def test_new_cycle_sends_again(ledger: AsyncLedger, sender: FakeSender) -> None:
    """A renewed user (a new cycle) gets the reminder again."""
    notifier = Notifier(ledger, sender)
    assert Outcome.SENT == await notifier.send_once("trial_6h", 1, CYCLE, msg())
    later = CYCLE + dt.timedelta(days=30)
    assert Outcome.SENT == await notifier.send_once("trial_6h", 1, later, msg())
    assert 2 == len(sender.sent)


@pytest.mark.parametrize("mode", [AMO, ALO])
async def test_permanent_refusal_is_failed_for_good(
    ledger: AsyncLedger, sender: FakeSender, mode: DeliveryMode
) -> None:
    """A permanent refusal is recorded as failed and never retried, in both modes."""
    notifier = Notifier(ledger, sender, mode=mode)
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked by the user", code=403))
    assert Outcome.FAILED == await notifier.send_once("trial_6h", 5, CYCLE, msg())
    assert Outcome.DUPLICATE == await notifier.send_once("trial_6h", 5, CYCLE, msg())
    record = await ledger.get("trial_6h", 5, CYCLE)
    assert record is not None
    assert SlotStatus.FAILED == record.status
    assert "bot was blocked" in (record.last_error or "")
    assert 0 == len(sender.sent)


@pytest.mark.parametrize("mode", [AMO, ALO])
async def test_transient_failure_releases_for_a_later_run(
    ledger: AsyncLedger, sender: FakeSender, mode: DeliveryMode
) -> None:
    """A failure that certainly did not deliver releases the slot; the next run sends it."""
    notifier = Notifier(ledger, sender, mode=mode)
    sender.fail_next(TransientSendError("Too Many Requests", code=429, retry_after=3))
    assert Outcome.RETRY == await notifier.send_once("trial_6h", 6, CYCLE, msg())
    assert SlotStatus.RELEASED == await status_of(ledger, 6)
    assert Outcome.SENT == await notifier.send_once("trial_6h", 6, CYCLE, msg())
    assert 1 == len(sender.sent)


async def test_uncertain_at_most_once_is_unknown_and_never_repeated(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """At most once: an uncertain send becomes UNKNOWN and is not sent again."""
    notifier = Notifier(ledger, sender, mode=AMO)
    sender.fail_next(UncertainSendError("read timeout"), delivered=True)
    assert Outcome.UNKNOWN == await notifier.send_once("trial_6h", 7, CYCLE, msg())
    assert Outcome.DUPLICATE == await notifier.send_once("trial_6h", 7, CYCLE, msg())
    assert SlotStatus.UNKNOWN == await status_of(ledger, 7)
    assert 1 == len(sender.sent)  # delivered once, as the uncertain reply hid


async def test_uncertain_at_least_once_retries_until_max_attempts(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """At least once: uncertain sends are retried until max_attempts, then UNKNOWN."""
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    sender.script("8", [UncertainSendError("read timeout")] * 3, delivered=True)
    outcomes = [await notifier.send_once("trial_6h", 8, CYCLE, msg()) for _ in range(4)]
    assert [Outcome.RETRY, Outcome.RETRY, Outcome.UNKNOWN, Outcome.DUPLICATE] == outcomes
    record = await ledger.get("trial_6h", 8, CYCLE)
    assert record is not None
    assert (SlotStatus.UNKNOWN, 3) == (record.status, record.attempt)
    assert 3 == len(sender.sent)  # duplicates bounded by max_attempts


async def test_uncertain_then_delivered_at_least_once(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """At least once: an uncertain send that was not delivered is delivered on the retry."""
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    sender.fail_next(UncertainSendError("connection reset"), delivered=False)
    assert Outcome.RETRY == await notifier.send_once("trial_6h", 9, CYCLE, msg())
    assert Outcome.SENT == await notifier.send_once("trial_6h", 9, CYCLE, msg())
    assert 1 == len(sender.sent)


class BrokenSender:
    """A sender with a bug: its exception message quotes the message text."""

    def __init__(self) -> None:
        self.calls = 0

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.calls += 1
        raise RuntimeError(f"could not send {message.text!r}")


async def test_foreign_exception_is_uncertain_and_text_not_logged(
    ledger: AsyncLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-SendError from a sender is uncertain; its message (quoting the text) is not logged."""
    broken = BrokenSender()
    notifier = Notifier(ledger, broken)
    with caplog.at_level(logging.DEBUG, logger="notifyonce"):
        assert Outcome.UNKNOWN == await notifier.send_once("trial_6h", 10, CYCLE, msg())
        assert Outcome.DUPLICATE == await notifier.send_once("trial_6h", 10, CYCLE, msg())
    assert 1 == broken.calls
    record = await ledger.get("trial_6h", 10, CYCLE)
    assert record is not None
    assert "RuntimeError" == record.last_error
    assert SECRET_TEXT not in caplog.text
    assert "RuntimeError" in caplog.text


class TakeoverSender:
    """While 'sending', the lease expires and another worker takes the slot over."""

    def __init__(self, rival: AsyncLedger, clock: WallClock) -> None:
        self.rival = rival
        self.clock = clock
        self.taken = None

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.clock.advance(minutes=10)
        self.taken = await self.rival.claim_slot(
            "trial_6h", int(recipient), CYCLE, take_expired=True
        )
        return Receipt(recipient, message_id=1)


async def test_lease_lost_overwrites_nothing(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose lease was taken over reports LEASE_LOST, loudly, and leaves the row alone."""
    sender = TakeoverSender(fresh(ledger, clock), clock)
    notifier = Notifier(ledger, sender, mode=ALO)
    with caplog.at_level(logging.ERROR, logger="notifyonce"):
        assert Outcome.LEASE_LOST == await notifier.send_once("trial_6h", 11, CYCLE, msg())
    record = await ledger.get("trial_6h", 11, CYCLE)
    assert sender.taken is not None
    assert record is not None
    assert (SlotStatus.CLAIMED, sender.taken.token, 2) == (
        record.status,
        record.token,
        record.attempt,
    )
    assert any(
        r.levelno == logging.ERROR and "lease_lost" in r.getMessage() for r in caplog.records
    )


async def test_send_many_reports_every_outcome_in_input_order(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """send_many returns one result per input, in order, with counts per outcome."""
    notifier = Notifier(ledger, sender, concurrency=4)
    await notifier.send_once("trial_6h", 1, CYCLE, msg())  # already sent
    sender.fail_next(PermanentSendError("Bad Request: chat not found", code=400), recipient="2")
    sender.fail_next(TransientSendError("connect error"), recipient="3")
    sender.fail_next(UncertainSendError("read timeout"), recipient="4")
    items = [Notification(s, CYCLE, msg()) for s in (1, 2, 3, 4, 5, 5)]
    report = await notifier.send_many("trial_6h", items)
    expected = [Outcome.DUPLICATE, Outcome.FAILED, Outcome.RETRY, Outcome.UNKNOWN,
                Outcome.SENT, Outcome.DUPLICATE]  # fmt: skip
    assert expected == [r.outcome for r in report.results]
    assert [1, 2, 3, 4, 5, 5] == [r.notification.subject for r in report.results]
    assert {Outcome.DUPLICATE: 2, Outcome.FAILED: 1, Outcome.RETRY: 1, Outcome.UNKNOWN: 1,
            Outcome.SENT: 1} == {o: n for o, n in report.counts.items() if n}  # fmt: skip
    assert 6 == report.total
    assert [5] == [r.notification.subject for r in report[Outcome.SENT]]


async def test_send_many_streams_an_async_iterable(ledger: AsyncLedger, sender: FakeSender) -> None:
    """An async iterable is consumed batch by batch and every item is handled."""
    notifier = Notifier(ledger, sender, batch_size=3, keep_results=False)
    pulled: list[int] = []

    async def stream() -> AsyncIterator[Notification]:
        for subject in range(10):
            pulled.append(subject)
            yield Notification(subject, CYCLE, msg(), recipient=f"chat-{subject}")

    report = await notifier.send_many("trial_6h", stream())
    assert 10 == report.counts[Outcome.SENT]
    assert [] == report.results
    assert {f"chat-{s}" for s in range(10)} == {r.recipient for r in sender.sent}


async def test_bad_input_writes_nothing(ledger: AsyncLedger, sender: FakeSender) -> None:
    """A bad item anywhere in a list is rejected before any claim or send."""
    notifier = Notifier(ledger, sender)
    items = [Notification(1, CYCLE, msg()), Notification(2, dt.datetime(2026, 12, 1), msg())]
    with pytest.raises(ValidationError) as info:
        await notifier.send_many("trial_6h", items)
    assert "cycle" == info.value.field
    assert await ledger.get("trial_6h", 1, CYCLE) is None
    assert [] == sender.records
    with pytest.raises(ValidationError, match="action"):
        await notifier.send_once("", 1, CYCLE, msg())


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
async def test_a_blank_recipient_is_refused_before_anything_is_written(
    ledger: AsyncLedger, sender: FakeSender, blank: str
) -> None:
    """A recipient of only whitespace is refused naming ``recipient``, in a list, in a
    stream and in send_once, before any claim or send (it was sent and recorded sent)."""
    notifier = Notifier(ledger, sender)

    async def stream() -> AsyncIterator[Notification]:
        yield Notification(2, CYCLE, msg(), recipient=blank)

    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: notifier.send_many("trial_6h", [Notification(1, CYCLE, msg(), recipient=blank)]),
        lambda: notifier.send_many("trial_6h", stream()),
        lambda: notifier.send_once("trial_6h", 3, CYCLE, msg(), recipient=blank),
    ]
    for attempt in attempts:
        with pytest.raises(ValidationError) as info:
            await attempt()
        assert "recipient" == info.value.field
    assert [None, None, None] == [await ledger.get("trial_6h", s, CYCLE) for s in (1, 2, 3)]
    assert [] == sender.records


def test_bad_options_are_rejected() -> None:
    """Notifier options are checked at construction and name the option."""
    with pytest.raises(ValidationError, match="max_attempts"):
        Notifier(None, FakeSender(), max_attempts=0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="concurrency"):
        Notifier(None, FakeSender(), concurrency=0)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="mode"):
        Notifier(None, FakeSender(), mode="at_most_once")  # type: ignore[arg-type]


async def test_dry_run_claims_sends_and_records_nothing(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """A dry run reports what would happen and writes nothing."""
    await Notifier(ledger, sender).send_once("trial_6h", 1, CYCLE, msg())
    dry = Notifier(ledger, sender, dry_run=True)
    report = await dry.send_many("trial_6h", [Notification(s, CYCLE, msg()) for s in (1, 2)])
    assert report.dry_run
    assert [Outcome.DUPLICATE, Outcome.SKIPPED] == [r.outcome for r in report.results]
    assert "dry run: would send" == report.results[1].reason
    assert await ledger.get("trial_6h", 2, CYCLE) is None
    assert 1 == len(sender.sent)


async def test_min_spacing_across_actions(
    ledger: AsyncLedger, sender: FakeSender, clock: WallClock
) -> None:
    """A subject sent anything within min_spacing is skipped, under any action."""
    notifier = Notifier(ledger, sender, min_spacing=dt.timedelta(hours=1))
    assert Outcome.SENT == await notifier.send_once("invoice_due", 1, CYCLE, msg())
    assert Outcome.SKIPPED == await notifier.send_once("trial_6h", 1, CYCLE, msg())
    assert await ledger.get("trial_6h", 1, CYCLE) is None  # nothing claimed
    report = await notifier.send_many(
        "trial_3h",
        [Notification(2, CYCLE, msg()), Notification(2, CYCLE + dt.timedelta(days=1), msg())],
    )
    assert [Outcome.SENT, Outcome.SKIPPED] == [r.outcome for r in report.results]
    clock.advance(hours=1, seconds=1)
    assert Outcome.SENT == await notifier.send_once("trial_6h", 1, CYCLE, msg())


async def test_sweep_after_crash_at_most_once(
    ledger: AsyncLedger, sender: FakeSender, clock: WallClock
) -> None:
    """At most once: a claim left by a crashed worker becomes UNKNOWN and is not sent."""
    crashed = await fresh(ledger, clock).claim_slot("trial_6h", 1, CYCLE)
    assert crashed is not None
    clock.advance(minutes=6)
    notifier = Notifier(ledger, sender, mode=AMO)
    report = await notifier.send_many("trial_6h", [Notification(1, CYCLE, msg())])
    assert report.swept is not None
    assert ["trial_6h/1/2026-12-01T18:00:00Z"] == [str(k) for k in report.swept.unknown]
    assert [Outcome.DUPLICATE] == [r.outcome for r in report.results]
    assert SlotStatus.UNKNOWN == await status_of(ledger, 1)
    assert [] == sender.records


async def test_sweep_after_crash_at_least_once(
    ledger: AsyncLedger, sender: FakeSender, clock: WallClock
) -> None:
    """At least once: a claim left by a crashed worker is claimed again and sent."""
    await fresh(ledger, clock).claim_slot("trial_6h", 1, CYCLE)
    clock.advance(minutes=6)
    notifier = Notifier(ledger, sender, mode=ALO)
    report = await notifier.send_many("trial_6h", [Notification(1, CYCLE, msg())])
    assert [(Outcome.SENT, 2)] == [(r.outcome, r.attempt) for r in report.results]
    assert 1 == len(sender.sent)


async def test_racing_notifiers_send_each_slot_once(ledger: AsyncLedger, clock: WallClock) -> None:
    """Several notifiers over the same notifications at once: each slot is sent once."""
    sender = FakeSender(latency=0.001)
    items = [Notification(s, CYCLE, msg()) for s in range(40)]
    notifiers = [Notifier(fresh(ledger, clock), sender, batch_size=16) for _ in range(4)]
    reports = await asyncio.gather(*(n.send_many("trial_6h", items) for n in notifiers))
    assert 40 == sum(r.counts[Outcome.SENT] for r in reports)
    assert 120 == sum(r.counts[Outcome.DUPLICATE] for r in reports)
    assert Counter(str(s) for s in range(40)) == Counter(r.recipient for r in sender.sent)


async def test_results_logged_and_reported_without_text(
    ledger: AsyncLedger, sender: FakeSender, caplog: pytest.LogCaptureFixture
) -> None:
    """Every result reaches on_result and a structured log record; the text never does."""
    seen = []
    notifier = Notifier(ledger, sender, on_result=seen.append)
    with caplog.at_level(logging.DEBUG, logger="notifyonce"):
        await notifier.send_once("trial_6h", 77, CYCLE, msg())
    assert [(Outcome.SENT, 1)] == [(r.outcome, r.attempt) for r in seen]
    sent_records = [
        r for r in caplog.records if getattr(r, "notifyonce", {}).get("outcome") == "sent"
    ]
    assert 1 == len(sent_records)
    fields = sent_records[0].notifyonce  # type: ignore[attr-defined]
    assert ("trial_6h", "77", "2026-12-01T18:00:00Z", 1) == (
        fields["action"],
        fields["subject"],
        fields["cycle"],
        fields["attempt"],
    )
    assert SECRET_TEXT not in caplog.text
    assert SECRET_TEXT not in repr(seen)


def notifications(subjects: Iterator[int]) -> list[Notification]:
    return [Notification(s, CYCLE, msg()) for s in subjects]


async def test_every_attempt_carries_the_slot_idempotency_key(ledger: AsyncLedger) -> None:
    """Each send carries the slot's idempotency key, the same on every attempt of the slot."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    sender.fail_next(UncertainSendError("read timeout"), recipient="1")
    await notifier.send_once("trial_6h", 1, CYCLE, msg())
    await notifier.send_once("trial_6h", 1, CYCLE, msg())
    await notifier.send_once("trial_6h", 2, CYCLE, msg())
    keys = [r.message.idempotency_key for r in sender.records]
    expected = [make_key("trial_6h", s, CYCLE).idempotency_key for s in (1, 1, 2)]
    assert expected == keys
    assert keys[0] != keys[2]


async def test_sweep_touches_only_its_own_actions(
    ledger: AsyncLedger, sender: FakeSender, clock: WallClock
) -> None:
    """An at-least-once job never re-sends the expired claims of an at-most-once job."""
    other = await fresh(ledger, clock).claim_slot("relay", 1, CYCLE)  # another job's claim
    mine = await fresh(ledger, clock).claim_slot("trial_6h", 1, CYCLE)
    assert other is not None
    assert mine is not None
    clock.advance(minutes=6)
    report = await Notifier(ledger, sender, mode=ALO).send_many(
        "trial_6h", [Notification(1, CYCLE, msg())]
    )
    assert report.swept is not None
    assert [] == report.swept.unknown
    assert ["trial_6h/1/2026-12-01T18:00:00Z"] == [str(k) for k in report.swept.released]
    assert SlotStatus.CLAIMED == await status_of(ledger, 1, action="relay")


async def test_transient_failures_never_exhaust_at_least_once(
    ledger: AsyncLedger, sender: FakeSender
) -> None:
    """At least once: certain non-deliveries do not use up max_attempts; the slot is sent."""
    notifier = Notifier(ledger, sender, mode=ALO, max_attempts=3)
    sender.script("1", [TransientSendError("Too Many Requests", code=429)] * 4)
    outcomes = [await notifier.send_once("trial_6h", 1, CYCLE, msg()) for _ in range(5)]
    assert [Outcome.RETRY] * 4 + [Outcome.SENT] == outcomes
    assert 1 == len(sender.sent)


async def test_cancelled_run_settles_every_claim(ledger: AsyncLedger, clock: WallClock) -> None:
    """A run cancelled mid-batch leaves no claim behind: sent ones are recorded, unsent released."""
    sender = FakeSender(latency=0.05)
    notifier = Notifier(ledger, sender, concurrency=2)
    items = [Notification(s, CYCLE, msg()) for s in range(10)]
    task = asyncio.create_task(notifier.send_many("trial_6h", items))
    for _ in range(500):  # until a few sends are under way (bounded: 5 s)
        if len(sender.records) >= 3:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail(f"only {len(sender.records)} sends started within 5 s")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    records = [await ledger.get("trial_6h", s, CYCLE) for s in range(10)]
    statuses = Counter(None if r is None else r.status for r in records)
    assert 0 == statuses[SlotStatus.CLAIMED]
    assert len(sender.sent) == statuses[SlotStatus.SENT]
    # Never started: never claimed (claims are made just before the send), or released.
    untouched = statuses[None] + statuses[SlotStatus.RELEASED]
    assert untouched > 0
    again = await Notifier(fresh(ledger, clock), sender).send_many("trial_6h", items)
    assert untouched == again.counts[Outcome.SENT]
    assert 1 == max(Counter(r.recipient for r in sender.sent).values())


class ClockEatingSender(FakeSender):
    """Each send takes longer than the whole lease (by the test clock)."""

    def __init__(self, clock: WallClock) -> None:
        super().__init__()
        self.clock = clock

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.clock.advance(minutes=10)
        return await super().send(recipient, message)


async def test_claims_are_made_just_before_their_send(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """Slow sends do not age the claims of later ones: each slot is claimed when its send starts."""
    sender = ClockEatingSender(clock)
    notifier = Notifier(ledger, sender, concurrency=1)
    items = [Notification(s, CYCLE, msg()) for s in (1, 2, 3)]
    report = await notifier.send_many("trial_6h", items)
    assert [Outcome.SENT] * 3 == [r.outcome for r in report.results]
    records = [await ledger.get("trial_6h", s, CYCLE) for s in (1, 2, 3)]
    created = [r.created_at for r in records if r is not None]
    assert [dt.timedelta(minutes=10)] * 2 == [created[1] - created[0], created[2] - created[1]]


class LateClaimLedger(ApartLedger):
    """Its claims come back ``late`` after they were made (a stalled database); by default
    after their lease (5 minutes) has already run out."""

    def __init__(
        self, *args: Any, clock: WallClock, late: dt.timedelta = MINUTE * 6, **kwargs: Any
    ) -> None:
        super().__init__(*args, clock=clock, **kwargs)
        self.test_clock = clock
        self.late = late

    async def _claim_keys(self, *args: Any, **kwargs: Any) -> list[Claim]:
        claims = await super()._claim_keys(*args, **kwargs)
        self.test_clock.advance(self.late)
        return claims


async def test_no_send_after_the_lease_expired(ledger: AsyncLedger, clock: WallClock) -> None:
    """A claim whose lease ran out before its send could start is released, not sent."""
    late = LateClaimLedger(ledger.engine, table_name=ledger.table_name, clock=clock)
    sender = FakeSender()
    report = await Notifier(late, sender).send_many("trial_6h", [Notification(1, CYCLE, msg())])
    assert [Outcome.RETRY] == [r.outcome for r in report.results]
    assert "lease expired before send" == report.results[0].error
    assert [] == sender.records
    assert SlotStatus.RELEASED == await status_of(ledger, 1)


@pytest.mark.parametrize(
    ("used", "outcome"), [(0.89, Outcome.SENT), (0.91, Outcome.RETRY)], ids=["89%", "91%"]
)
async def test_a_send_starts_only_with_a_tenth_of_the_lease_left(
    ledger: AsyncLedger, clock: WallClock, used: float, outcome: Outcome
) -> None:
    """A claim with 11 % of its lease left is sent; one with 9 % left is released unsent
    (another worker may take the slot over before the send ends)."""
    lease = dt.timedelta(seconds=100)
    late = LateClaimLedger(
        ledger.engine, table_name=ledger.table_name, clock=clock, lease=lease, late=lease * used
    )
    sender = FakeSender()
    report = await Notifier(late, sender).send_many("trial_6h", [Notification(1, CYCLE, msg())])
    assert [outcome] == [r.outcome for r in report.results]
    if outcome is Outcome.SENT:
        assert (1, SlotStatus.SENT) == (len(sender.records), await status_of(ledger, 1))
    else:
        assert "lease nearly over" == report.results[0].error
        assert (0, SlotStatus.RELEASED) == (len(sender.records), await status_of(ledger, 1))


class SlowToReturnLedger(ApartLedger):
    """Commits its claims, then takes a moment to return them (the window a shutdown hits)."""

    async def _claim_keys(self, *args: Any, **kwargs: Any) -> list[Claim]:
        claims = await super()._claim_keys(*args, **kwargs)
        await asyncio.sleep(0.2)
        return claims


async def test_cancelled_while_claiming_frees_the_batch(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """A run cancelled after its claims committed but before they returned frees them all."""
    sender = FakeSender()
    slow = SlowToReturnLedger(ledger.engine, table_name=ledger.table_name, clock=clock)
    items = [Notification(s, CYCLE, msg()) for s in range(10)]
    task = asyncio.create_task(
        Notifier(slow, sender, sweep_every=None).send_many("trial_6h", items)
    )
    for _ in range(500):  # until the claims are committed (bounded: 5 s)
        if await ledger.get("trial_6h", 9, CYCLE) is not None:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the batch's claims were not committed within 5 s")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    statuses = {(await status_of(ledger, s)) for s in range(10)}
    assert {SlotStatus.RELEASED} == statuses
    assert [] == sender.records
    again = await Notifier(fresh(ledger, clock), sender).send_many("trial_6h", items)
    assert 10 == again.counts[Outcome.SENT]
