"""Scheduled runs: Notifier.tick over the trial windows, restarts, and missed windows."""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections import Counter

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    DeadlineRange,
    Message,
    Notification,
    Notifier,
    Outcome,
    Schedule,
    Window,
)
from notifyonce.testing import FakeSender

UTC = dt.timezone.utc
H = dt.timedelta(hours=1)
TRIAL = Schedule(
    [
        Window("trial_6h", opens_before=6.5 * H, closes_before=5 * H),
        Window("trial_3h", opens_before=3.5 * H, closes_before=2.2 * H),
        Window("trial_1h", opens_before=1.2 * H, closes_before=0.4 * H),
    ],
    period=dt.timedelta(minutes=5),
)
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def trial_ends(count: int, random_state: int = 1) -> dict[int, dt.datetime]:
    """Users whose trials end 6.6 to 8.6 hours after START, at odd seconds."""
    rng = random.Random(random_state)
    return {
        user: START + 6.6 * H + dt.timedelta(seconds=rng.randrange(0, 7200))
        for user in range(1, count + 1)
    }


def selector(deadlines_by_user: dict[int, dt.datetime]):  # type: ignore[no-untyped-def]
    def select(window: Window, deadlines: DeadlineRange) -> list[Notification]:
        return [
            Notification(user, end, Message(f"{window.action} for {user}"))
            for user, end in deadlines_by_user.items()
            if end in deadlines
        ]

    return select


async def test_incident_replayed_with_restarts(async_engine: AsyncEngine, async_table: str) -> None:
    """The incident: a 5-minute job, three restarts inside open windows, each reminder once.

    The control is the incident's original in-memory set in the same scenario: it sends
    duplicates, which is what the library exists to prevent.
    """
    now = START

    def clock() -> dt.datetime:
        return now

    users = trial_ends(25)
    select = selector(users)
    sender = FakeSender()
    await AsyncLedger(async_engine, table_name=async_table, clock=clock).create_schema()

    def restart() -> Notifier:
        return Notifier(AsyncLedger(async_engine, table_name=async_table, clock=clock), sender)

    # Restarts 15, 30 and 45 minutes in: each inside the open trial_6h windows of
    # the users whose deadlines came first, all within one hour.
    restarts = {START + dt.timedelta(minutes=m) for m in (15, 30, 45)}
    naive_sent: set[tuple[int, str]] = set()
    naive = Counter[tuple[int, str]]()
    notifier = restart()
    while now <= START + 9 * H:
        if now in restarts:
            notifier = restart()
            naive_sent = set()
        await notifier.tick(TRIAL, select, now=now)
        for window, deadlines in TRIAL.open_windows(now):
            for item in select(window, deadlines):
                key = (int(item.subject), window.action)
                if key not in naive_sent:
                    naive_sent.add(key)
                    naive[key] += 1
        now += TRIAL.period

    per_reminder = Counter(record.message.text for record in sender.sent)
    expected = {f"{w.action} for {u}" for u in users for w in TRIAL.windows}
    assert expected == set(per_reminder)
    assert {1} == set(per_reminder.values())
    assert sum(naive.values()) > len(expected)  # the control really duplicates


async def test_tick_sends_each_open_window_under_its_action(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """One tick sends every window's subjects under that window's action."""
    now = START
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: now)
    await ledger.create_schema()
    users = {1: now + 6 * H, 2: now + 3 * H, 3: now + 1 * H, 4: now + 4 * H}
    sender = FakeSender()
    report = await Notifier(ledger, sender).tick(TRIAL, selector(users), now=now)
    assert {"trial_6h": [1], "trial_3h": [2], "trial_1h": [3]} == {
        action: [r.notification.subject for r in rep.results]
        for action, rep in report.reports.items()
    }
    assert 3 == report.counts[Outcome.SENT]
    assert [] == report.missed


async def test_tick_accepts_async_selectors(async_engine: AsyncEngine, async_table: str) -> None:
    """select may be a coroutine function."""
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: START)
    await ledger.create_schema()
    sync_select = selector({1: START + 6 * H})

    async def select(window: Window, deadlines: DeadlineRange) -> list[Notification]:
        return sync_select(window, deadlines)

    report = await Notifier(ledger, FakeSender()).tick(TRIAL, select, now=START)
    assert 1 == report.counts[Outcome.SENT]


async def test_missed_windows_are_reported_not_silent(
    async_engine: AsyncEngine, async_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After downtime longer than a window, the tick reports the skipped window and logs it."""
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: START)
    await ledger.create_schema()
    notifier = Notifier(ledger, FakeSender())
    await notifier.tick(TRIAL, selector({}), now=START)
    with caplog.at_level(logging.WARNING, logger="notifyonce"):
        report = await notifier.tick(TRIAL, selector({}), now=START + 2 * H)
    assert {"trial_6h", "trial_3h", "trial_1h"} == {w.action for w, _ in report.missed}
    missed_1h = next(r for w, r in report.missed if w.action == "trial_1h")
    assert (START + 1.2 * H, START + 2 * H + 0.4 * H) == (missed_1h.after, missed_1h.until)
    assert 3 == sum("missed window" in r.getMessage() for r in caplog.records)


async def test_a_naive_datetime_from_the_selector_names_its_subject_and_spares_the_other_windows(
    async_engine: AsyncEngine, async_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One naive deadline in one window: that window sends nothing, the error names the
    subject and the action, the other windows still send, then the tick raises."""
    from notifyonce import ValidationError

    now = START
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: now)
    await ledger.create_schema()
    users = {1: now + 6 * H, 2: now + 3 * H, 3: now + 1 * H, 7: now + 3 * H}

    def select(window: Window, deadlines: DeadlineRange) -> list[Notification]:
        rows = selector(users)(window, deadlines)
        # user 7's row came back naive (a column without a time zone)
        return [
            Notification(n.subject, n.cycle.replace(tzinfo=None), n.message)  # type: ignore[union-attr]
            if n.subject == 7
            else n
            for n in rows
        ]

    sender = FakeSender()
    with (
        caplog.at_level(logging.ERROR, logger="notifyonce"),
        pytest.raises(ValidationError) as info,
    ):
        await Notifier(ledger, sender).tick(TRIAL, select, now=now)
    assert "cycle" == info.value.field
    assert "in the notification for subject 7 (action 'trial_3h'): naive datetime" in str(
        info.value
    )
    assert ["1", "3"] == sorted(r.recipient for r in sender.sent)  # trial_6h and trial_1h
    assert any(
        "window trial_3h: its notifications were refused" in r.getMessage() for r in caplog.records
    )
