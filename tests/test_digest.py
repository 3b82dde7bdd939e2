"""Digests: many events for a subject, one message per window, each window a slot claimed
before its send, each event in exactly one delivered digest, on every database."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notifyonce import (
    AsyncLedger,
    Digest,
    DigestEvent,
    Message,
    Notifier,
    Outcome,
    PermanentSendError,
    SlotStatus,
    ValidationError,
    ValidationTypeError,
)
from notifyonce.testing import FakeSender

from ._clocks import START, WallClock

UTC = dt.timezone.utc
HOUR = dt.timedelta(hours=1)


def render(subject: str, events: list[DigestEvent]) -> Message:
    """One line per event key, so a test can read back which events a digest held."""
    return Message("\n".join(e.key for e in events))


def delivered(sender: FakeSender) -> list[tuple[str, list[str]]]:
    """Each delivered digest: its recipient and its event keys."""
    return [(r.recipient, r.message.text.split("\n")) for r in sender.sent]


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "every"),
        ({"every": HOUR, "at_local": dt.time(9)}, "every"),
        ({"every": dt.timedelta(0)}, "every"),
        ({"every": -HOUR}, "every"),
        ({"every": dt.timedelta(milliseconds=1500)}, "every"),
        ({"at_local": dt.time(9, tzinfo=UTC)}, "at_local"),
        ({"at_local": dt.time(9), "default_tz": "Mars/Olympus"}, "default_tz"),
        ({"every": HOUR, "max_wait": dt.timedelta(0)}, "max_wait"),
        ({"every": HOUR, "flush_at": 0}, "flush_at"),
        ({"every": HOUR, "keep": -HOUR}, "keep"),
    ],
)
def test_a_bad_digest_is_refused_naming_its_field(
    sqlite_ledger: AsyncLedger, kwargs: dict[str, Any], field: str
) -> None:
    """Neither or both of every and at_local, a period of zero or less, a bad zone or
    option: refused, the field named."""
    with pytest.raises(ValidationError) as info:
        Digest(sqlite_ledger, "replies", **kwargs)
    assert field == info.value.field


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        ((1, "k" * 129), {}, "event_key"),
        ((1, ""), {}, "event_key"),
        ((1, "a\x00b"), {}, "event_key"),
        ((1, 2.5), {}, "event_key"),
        ((True, "k"), {}, "subject"),
        ((1, "k", object()), {}, "data"),
        ((1, "k"), {"at": dt.datetime(2026, 12, 1)}, "at"),
        ((1, "k"), {"tz": "Nowhere/Land"}, "tz"),
    ],
)
async def test_a_bad_event_is_refused_and_nothing_is_stored(
    sqlite_ledger: AsyncLedger, args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    """An event key over the key limits, a bad subject, data JSON cannot hold, a naive
    time, a bad zone: refused naming the field, and the table stays empty."""
    digest = Digest(sqlite_ledger, "replies", every=HOUR)
    with pytest.raises((ValidationError, ValidationTypeError)) as info:
        await digest.add(*args, **kwargs)
    assert field == info.value.field
    assert [] == await digest.events(1)


# -- windows -------------------------------------------------------------------------


@given(st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)))
def test_an_interval_window_holds_its_time_and_is_aligned(naive: dt.datetime) -> None:
    """Every time falls in exactly the window [start, start + every) aligned to the epoch."""
    digest = Digest.__new__(Digest)
    digest.every, digest.at_local = dt.timedelta(minutes=90), None
    at = naive.replace(tzinfo=UTC)
    start, end = digest.window(at)
    assert start <= at < end
    assert dt.timedelta(minutes=90) == end - start
    assert dt.timedelta(0) == (start - dt.datetime(1970, 1, 1, tzinfo=UTC)) % dt.timedelta(
        minutes=90
    )


@given(
    st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2030, 1, 1)),
    st.sampled_from(["Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC"]),
)
def test_a_local_day_window_ends_at_the_local_hour(naive: dt.datetime, tz: str) -> None:
    """A daily digest's window holds its time and ends at 09:00 on the recipient's clock,
    across DST changes."""
    import zoneinfo

    digest = Digest.__new__(Digest)
    digest.every, digest.at_local, digest.default_tz = None, dt.time(9), "UTC"
    at = naive.replace(tzinfo=UTC)
    start, end = digest.window(at, tz)
    assert start <= at < end
    local_end = end.astimezone(zoneinfo.ZoneInfo(tz))
    assert (9, 0) == (local_end.hour, local_end.minute)
    assert dt.timedelta(hours=22) <= end - start <= dt.timedelta(hours=26)


# -- add and flush -------------------------------------------------------------------


async def test_events_of_a_closed_window_go_out_once_as_one_message(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """Five events in an hour give one message after the hour; an event key added twice
    is stored once; a second flush sends nothing; an open window waits."""
    digest = Digest(ledger, "replies", every=HOUR)
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    for i in range(5):
        stored = await digest.add(42, f"reply:{i}", {"n": i}, at=START + dt.timedelta(minutes=i))
        assert stored
    assert not await digest.add(42, "reply:0", {"n": 0}, at=START)
    early = await digest.flush(notifier, render, now=START + dt.timedelta(minutes=30))
    assert 0 == early.windows
    report = await digest.flush(notifier, render, now=START + HOUR)
    assert 1 == report.sent
    assert 5 == report.events_sent
    assert [("42", [f"reply:{i}" for i in range(5)])] == delivered(sender)
    again = await digest.flush(notifier, render, now=START + 2 * HOUR)
    assert 0 == again.windows
    assert 1 == len(sender.sent)
    record = await ledger.get("replies", 42, START)
    assert record is not None


async def test_render_gets_the_data_and_windows_without_events_send_nothing(
    ledger: AsyncLedger,
) -> None:
    """render(subject, events) gets each event's data and time in order; subjects with
    no events get no digest."""
    digest = Digest(ledger, "replies", every=HOUR)
    seen: list[tuple[str, list[Any]]] = []

    async def keep(subject: str, events: list[DigestEvent]) -> Message:
        seen.append((subject, [(e.key, e.data, e.at) for e in events]))
        return Message("x")

    at = START + dt.timedelta(minutes=5)
    await digest.add("ann", "b", {"price": 3}, at=at + dt.timedelta(minutes=1))
    await digest.add("ann", "a", ["x", 1], at=at)
    report = await digest.flush(Notifier(ledger, FakeSender()), keep, now=START + 3 * HOUR)
    assert [
        ("ann", [("a", ["x", 1], at), ("b", {"price": 3}, at + dt.timedelta(minutes=1))])
    ] == seen
    assert 1 == report.windows


async def test_an_event_added_while_its_digest_is_made_goes_to_the_next_window(
    ledger: AsyncLedger,
) -> None:
    """A flush held between its claim and its send: an event added to that window then is
    not in that digest; it is moved to the next window and sent in its digest, once."""
    digest = Digest(ledger, "replies", every=HOUR)
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    await digest.add(1, "first", at=START + dt.timedelta(minutes=10))
    holding, go_on = asyncio.Event(), asyncio.Event()

    async def held(subject: str, events: list[DigestEvent]) -> Message:
        holding.set()
        await go_on.wait()
        return render(subject, events)

    flushing = asyncio.ensure_future(digest.flush(notifier, held, now=START + HOUR))
    await holding.wait()
    await digest.add(1, "late", at=START + dt.timedelta(minutes=20))
    go_on.set()
    first = await flushing
    assert (1, 1) == (first.sent, first.events_sent)
    second = await digest.flush(notifier, render, now=START + HOUR + dt.timedelta(minutes=5))
    assert (0, 1) == (second.sent, second.moved)
    third = await digest.flush(notifier, render, now=START + 2 * HOUR)
    assert (1, 1) == (third.sent, third.events_sent)
    assert [("1", ["first"]), ("1", ["late"])] == delivered(sender)
    windows = [w for _, w, _ in await digest.events(1)]
    assert [START, START + HOUR] == windows


async def test_two_flushers_at_once_send_each_digest_once(ledger: AsyncLedger) -> None:
    """Two flushes side by side over 200 subjects: each subject gets one digest, each
    event is in exactly one delivered digest."""
    digest = Digest(ledger, "replies", every=HOUR)
    events = {f"s{n}": [f"s{n}-e{i}" for i in range(n % 4 + 1)] for n in range(200)}
    for subject, keys in events.items():
        for i, key in enumerate(keys):
            await digest.add(subject, key, at=START + dt.timedelta(minutes=i))
    senders = [FakeSender(), FakeSender()]
    reports = await asyncio.gather(
        *(digest.flush(Notifier(ledger, s), render, now=START + HOUR) for s in senders)
    )
    sent = [d for s in senders for d in delivered(s)]
    assert sorted(events) == sorted(recipient for recipient, _ in sent)
    assert Counter(k for keys in events.values() for k in keys) == Counter(
        k for _, keys in sent for k in keys
    )
    assert 200 == sum(r.sent for r in reports)


async def test_a_flush_killed_mid_run_resumes_without_sending_twice(
    ledger: AsyncLedger,
) -> None:
    """A flush cancelled while sending: the next flush sends what was never claimed and
    nothing twice; in at-most-once mode a digest cut off mid-send is never repeated."""
    digest = Digest(ledger, "replies", every=HOUR)
    for n in range(30):
        await digest.add(n, f"e{n}", at=START)
    sender = FakeSender(latency=0.05)
    notifier = Notifier(ledger, sender, concurrency=4)
    flushing = asyncio.ensure_future(digest.flush(notifier, render, now=START + HOUR))
    for _ in range(1000):  # bounded: 10 s
        if len(sender.sent) >= 5:
            break
        await asyncio.sleep(0.01)
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    second = FakeSender()
    await digest.flush(Notifier(ledger, second), render, now=START + HOUR)
    sent = [k for s in (sender, second) for _, keys in delivered(s) for k in keys]
    assert len(set(sent)) == len(sent)
    unknown = []
    for n in range(30):
        record = await ledger.get("replies", n, START)
        assert record is not None
        if record.status is SlotStatus.UNKNOWN:
            unknown.append(f"e{n}")
    assert sorted(f"e{n}" for n in range(30)) == sorted(sent + unknown)
    assert 0 == (await digest.flush(Notifier(ledger, second), render, now=START + HOUR)).sent


async def test_a_gone_recipients_digest_is_skipped_and_its_events_dropped(
    ledger: AsyncLedger,
) -> None:
    """The audience applies: a recipient known gone is skipped before any claim, its
    window's events dropped; an opted-out one likewise."""
    digest = Digest(ledger, "replies", every=HOUR)
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    await notifier.audience.mark_gone(1, "blocked")
    await notifier.audience.opt_out(2, "replies")
    for subject in (1, 2, 3):
        await digest.add(subject, "e", at=START)
    report = await digest.flush(notifier, render, now=START + HOUR)
    assert (1, 2, 2) == (report.sent, report.counts[Outcome.SKIPPED], report.dropped)
    assert [("3", ["e"])] == delivered(sender)
    assert None is await ledger.get("replies", 1, START)


async def test_a_refused_digest_keeps_its_events_out_of_later_digests(
    ledger: AsyncLedger,
) -> None:
    """A digest refused for good is FAILED; its events are in no later digest."""
    digest = Digest(ledger, "replies", every=HOUR)
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Bad Request: message is too long", code=400))
    notifier = Notifier(ledger, sender)
    await digest.add(5, "e1", at=START)
    report = await digest.flush(notifier, render, now=START + HOUR)
    assert 1 == report.counts[Outcome.FAILED]
    again = await digest.flush(notifier, render, now=START + 3 * HOUR)
    assert 0 == again.windows
    assert [] == delivered(sender)


async def test_early_flush_max_wait_and_critical_events(ledger: AsyncLedger) -> None:
    """flush_at N makes a window due at its Nth event, max_wait after its first, a critical
    event at once; events after an early digest go to the next window."""
    digest = Digest(ledger, "day", every=dt.timedelta(days=1), flush_at=3, max_wait=4 * HOUR)
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    day = dt.datetime(2026, 12, 1, tzinfo=UTC)
    for i in range(3):
        await digest.add("a", f"a{i}", at=day + dt.timedelta(minutes=i))
    await digest.add("b", "b0", at=day + HOUR)
    await digest.add("c", "c0", at=day + HOUR, critical=True)
    first = await digest.flush(notifier, render, now=day + HOUR)
    assert {"a": ["a0", "a1", "a2"], "c": ["c0"]} == dict(delivered(sender))
    assert 2 == first.sent
    second = await digest.flush(notifier, render, now=day + 5 * HOUR)
    assert ("b", ["b0"]) == delivered(sender)[-1]
    assert 1 == second.sent
    await digest.add("a", "a3", at=day + 6 * HOUR)
    third = await digest.flush(notifier, render, now=day + dt.timedelta(days=1, hours=1))
    assert 1 == third.moved
    fourth = await digest.flush(notifier, render, now=day + dt.timedelta(days=1, hours=5))
    assert ("a", ["a3"]) == delivered(sender)[-1]
    assert 1 == fourth.sent


async def test_a_daily_digest_goes_at_nine_local(ledger: AsyncLedger) -> None:
    """A daily digest at 09:00 local: a Berlin recipient's closes at 08:00 UTC, a New York
    one's at 14:00 UTC (December), each with its day's events, the window's start its cycle."""
    digest = Digest(ledger, "daily", at_local=dt.time(9, 0), default_tz="UTC")
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    afternoon = dt.datetime(2026, 12, 1, 15, 0, tzinfo=UTC)
    await digest.add("berlin", "e1", at=afternoon, tz="Europe/Berlin")
    await digest.add("ny", "e1", at=afternoon, tz="America/New_York")
    await digest.add("utc", "e1", at=afternoon)
    next_day = dt.datetime(2026, 12, 2, tzinfo=UTC)
    at_eight = await digest.flush(notifier, render, now=next_day + dt.timedelta(hours=8))
    assert ["berlin"] == [r for r, _ in delivered(sender)]
    assert 1 == at_eight.sent
    await digest.flush(notifier, render, now=next_day + dt.timedelta(hours=14))
    assert ["berlin", "ny", "utc"] == sorted(r for r, _ in delivered(sender))
    record = await ledger.get("daily", "berlin", dt.datetime(2026, 12, 1, 8, tzinfo=UTC))
    assert record is not None


async def test_events_are_purged_with_their_window(ledger: AsyncLedger) -> None:
    """A window's events are deleted once it ended longer ago than keep."""
    digest = Digest(ledger, "replies", every=HOUR, keep=dt.timedelta(days=1))
    await digest.add(1, "old", at=START)
    await digest.add(1, "new", at=START + dt.timedelta(days=1))
    notifier = Notifier(ledger, FakeSender())
    await digest.flush(notifier, render, now=START + 2 * HOUR)
    report = await digest.flush(notifier, render, now=START + dt.timedelta(days=1, hours=2))
    assert 1 == report.purged
    assert ["new"] == [e.key for e, _, _ in await digest.events(1)]


async def test_a_notifier_on_another_ledger_table_is_refused(
    ledger: AsyncLedger, sqlite_ledger: AsyncLedger
) -> None:
    """A flush through a Notifier whose ledger table is not the digest's is refused before
    anything is claimed."""
    digest = Digest(ledger, "replies", every=HOUR)
    await digest.add(1, "e", at=START)
    sender = FakeSender()
    with pytest.raises(ValidationError) as info:
        await digest.flush(Notifier(sqlite_ledger, sender), render, now=START + HOUR)
    assert "notifier" == info.value.field
    assert [] == sender.records


async def test_a_render_that_fails_retries_and_a_bad_message_fails_for_good(
    ledger: AsyncLedger,
) -> None:
    """A render that raises gives the slot back (the next flush sends the digest); one that
    returns no Message fails the digest for good, nothing sent."""
    digest = Digest(ledger, "replies", every=HOUR)
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    await digest.add(1, "e1", at=START)
    await digest.add(2, "e2", at=START)

    def broken(subject: str, events: list[DigestEvent]) -> Message:
        if subject == "1":
            raise RuntimeError("template missing")
        return "not a message"  # type: ignore[return-value]

    first = await digest.flush(notifier, broken, now=START + HOUR)
    assert (1, 1) == (first.counts[Outcome.RETRY], first.counts[Outcome.FAILED])
    second = await digest.flush(notifier, render, now=START + HOUR)
    assert (1, 0) == (second.sent, second.counts[Outcome.FAILED])
    assert [("1", ["e1"])] == delivered(sender)
