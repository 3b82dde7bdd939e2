"""Local times at daylight-saving changes: windows, deadlines read from local times, quiet hours.

The rule is Python's (PEP 495), kept unchanged: a local time that happens twice (the clocks
go back) is its first occurrence, or its second with ``fold=1``; a local time that does not
exist (the clocks go forward) is read with the offset in force before the change (with
``fold=1``, the offset after it). Everything after that is counted in UTC, in real hours.

The oracle here does not ask the zone what a local time means: it finds each change of a
zone's offset by scanning the zone once, and works the expected UTC moment out from the
offsets before and after, so a slip in how a fold or a gap is read shows as a difference.
"""

from __future__ import annotations

import datetime as dt
import functools
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Outcome,
    QuietHours,
    Schedule,
    Window,
    make_key,
)
from notifyonce._keys import KeyMaker
from notifyonce.testing import FakeSender

UTC = dt.timezone.utc
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "America/Santiago",
    "Europe/London",
)
YEARS = range(2024, 2031)


@functools.cache
def changes(zone: str, year: int) -> tuple[tuple[dt.datetime, dt.timedelta, dt.timedelta], ...]:
    """Each change of ``zone``'s offset in ``year``: (the UTC moment, offset before, after)."""
    tz = ZoneInfo(zone)

    def offset(at: dt.datetime) -> dt.timedelta:
        value = at.astimezone(tz).utcoffset()
        assert value is not None
        return value

    found = []
    at = dt.datetime(year, 1, 1, tzinfo=UTC)
    while at.year == year:
        step = at + dt.timedelta(hours=1)
        if offset(at) != offset(step):
            low, high = at, step  # the change lies in (low, high]: halve to the minute
            while high - low > dt.timedelta(minutes=1):
                mid = low + (high - low) / 2
                low, high = (mid, high) if offset(mid) == offset(at) else (low, mid)
            found.append((high, offset(at), offset(step)))
        at = step
    return tuple(found)


@st.composite
def a_change(draw: st.DrawFn) -> tuple[str, dt.datetime, dt.timedelta, dt.timedelta]:
    """A zone and one of its daylight-saving changes: (zone, UTC moment, before, after)."""
    zone = draw(st.sampled_from(ZONES))
    moment, before, after = draw(st.sampled_from(changes(zone, draw(st.sampled_from(YEARS)))))
    return zone, moment, before, after


@st.composite
def an_odd_local_time(draw: st.DrawFn) -> tuple[str, dt.datetime, int, dt.datetime]:
    """A local time that happens twice or never, with a fold, and the UTC moment it names."""
    zone, moment, before, after = draw(a_change())
    # The wall times that are skipped (forward) or repeated (back): [moment + min, + max).
    first = (moment + min(before, after)).replace(tzinfo=None)
    span = abs(after - before) // dt.timedelta(minutes=1)
    wall = first + dt.timedelta(minutes=draw(st.integers(0, span - 1)))
    fold = draw(st.sampled_from((0, 1)))
    expected = (wall - (before if fold == 0 else after)).replace(tzinfo=UTC)
    return zone, wall.replace(tzinfo=ZoneInfo(zone), fold=fold), fold, expected


def test_the_zones_change_twice_a_year() -> None:
    """The scan finds the two changes of each zone each year, an hour each way."""
    for zone in ZONES:
        for year in YEARS:
            found = changes(zone, year)
            assert 2 == len(found), (zone, year)
            assert [dt.timedelta(hours=1)] * 2 == [abs(a - b) for _, b, a in found], zone


@settings(max_examples=300, deadline=None)
@given(an_odd_local_time())
def test_a_deadline_at_an_odd_local_time_names_one_moment(
    odd: tuple[str, dt.datetime, int, dt.datetime],
) -> None:
    """A deadline at a local time that happens twice is its first occurrence (the second
    with fold=1); one that does not exist is read with the offset before the change: the
    slot key names that moment, made one at a time or by a KeyMaker in any order."""
    _, local, fold, expected = odd
    assert expected == make_key("trial_1h", 1, local).cycle_at
    other = local.replace(fold=1 - fold)
    keys = KeyMaker("trial_1h")
    assert (make_key("trial_1h", 1, other), make_key("trial_1h", 1, local)) == (
        keys(1, other),
        keys(1, local),
    )


@settings(max_examples=300, deadline=None)
@given(an_odd_local_time(), st.integers(1, 15), st.integers(-240, 240))
def test_a_reminder_due_at_an_odd_local_time_is_open_once_in_real_hours(
    odd: tuple[str, dt.datetime, int, dt.datetime], period: int, start: int
) -> None:
    """A job every ``period`` minutes, run with local clocks across the change, finds the
    window of a deadline at an odd local time open in the runs whose real distance to the
    deadline is inside the window (at least one), and all of them name one slot."""
    zone, local, _, expected = odd
    tz = ZoneInfo(zone)
    window = Window(
        "trial_1h",
        opens_before=dt.timedelta(hours=1, minutes=30),
        closes_before=dt.timedelta(minutes=15),
    )
    schedule = Schedule([window], period=dt.timedelta(minutes=period))
    first = expected - dt.timedelta(hours=3) + dt.timedelta(minutes=start % period)
    runs = [first + dt.timedelta(minutes=period * n) for n in range(6 * 60 // period)]
    opened = [run for run in runs if schedule.window_at(local, run.astimezone(tz)) is not None]
    assert [
        run
        for run in runs
        if expected - window.opens_before <= run < expected - window.closes_before
    ] == opened
    assert opened
    assert all(local in window.deadline_range(run.astimezone(tz)) for run in opened)
    assert {make_key("trial_1h", 7, expected)} == {make_key("trial_1h", 7, local)}


@settings(max_examples=300, deadline=None)
@given(
    a_change(),
    st.integers(-240, 240),
    st.integers(0, 23 * 4 + 3),
    st.integers(1, 23 * 4 + 3),
)
def test_quiet_hours_follow_the_local_clock_across_a_change(
    change: tuple[str, dt.datetime, dt.timedelta, dt.timedelta],
    minutes: int,
    start: int,
    length: int,
) -> None:
    """Around a change, a moment is quiet exactly when the local clock then (the offset
    before the change until it, the one after from it) reads a time in [start, end): both
    occurrences of a time that happens twice alike, none of a time that never happens."""
    zone, moment, before, after = change
    begin = dt.time(start // 4, start % 4 * 15)
    end_minutes = (start + length) % (24 * 4)
    end = dt.time(end_minutes // 4, end_minutes % 4 * 15)
    quiet = QuietHours(begin, end)
    now = moment + dt.timedelta(minutes=minutes)
    wall = (now + (before if now < moment else after)).time().replace(tzinfo=None)
    expected = begin <= wall < end if begin < end else wall >= begin or wall < end
    assert expected == quiet.is_quiet(now, ZoneInfo(zone))


BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("wall", "fold", "sent"),
    # sent: the (hour, minute) UTC of the one send, with the cycle its slot key names.
    [
        # 02:30 CEST, 00:30 UTC: its whole window lies in the first quiet night.
        pytest.param(dt.datetime(2026, 10, 25, 2, 30), 0, [], id="back-first"),
        # 02:30 CET, 01:30 UTC: quiet ends at the first 02:30, and the second 02:00 to
        # 02:30 is quiet again, by then it was sent.
        pytest.param(dt.datetime(2026, 10, 25, 2, 30), 1, [(0, 30, "01:30")], id="back-second"),
        # 02:30 that never happens is 03:30 CEST, 01:30 UTC; quiet ends with 02:00 CET.
        pytest.param(dt.datetime(2026, 3, 29, 2, 30), 0, [(1, 0, "01:30")], id="forward"),
    ],
)
async def test_a_job_across_the_change_sends_a_reminder_due_at_an_odd_time_once(
    async_engine: AsyncEngine,
    async_table: str,
    wall: dt.datetime,
    fold: int,
    sent: list[tuple[int, int, str]],
) -> None:
    """Berlin, 02:30 on the nights its clocks change, quiet hours 23:00-02:30 local: a job
    every 5 minutes, reading the deadline as local time each run, sends the reminder once,
    in the first run of its 3-hour window outside quiet hours, or never when none is."""
    deadline = wall.replace(tzinfo=BERLIN, fold=fold)
    state = {"now": deadline.astimezone(UTC) - dt.timedelta(hours=4)}
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: state["now"])
    await ledger.create_schema()
    sender = FakeSender()
    night = QuietHours(dt.time(23), dt.time(2, 30), BERLIN)
    notifier = Notifier(ledger, sender, quiet_hours=night)
    window = Window("trial_3h", opens_before=dt.timedelta(hours=3), closes_before=dt.timedelta(0))
    sent_at: list[tuple[dt.datetime, str]] = []
    for _ in range(5 * 12):
        local = state["now"].astimezone(BERLIN)
        if window.is_open(wall.replace(tzinfo=BERLIN, fold=fold), local):
            item = Notification(1, deadline, Message("hi"))
            report = await notifier.send_many("trial_3h", [item])
            sent_at += [
                (state["now"], r.key.cycle) for r in report.results if r.outcome is Outcome.SENT
            ]
        state["now"] += dt.timedelta(minutes=5)
    day = deadline.astimezone(UTC).date()
    assert [
        (dt.datetime.combine(day, dt.time(h, m), UTC), f"{day}T{cycle}:00Z") for h, m, cycle in sent
    ] == sent_at
    assert len(sent) == len(sender.sent)
