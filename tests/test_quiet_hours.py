"""Quiet hours: the pure rule, and the Notifier skipping without claiming."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Outcome,
    QuietHours,
    ValidationError,
)
from notifyonce.testing import FakeSender

UTC = dt.timezone.utc
NIGHT = QuietHours(dt.time(22), dt.time(8))


@given(st.times(), st.times(), st.times())
def test_quiet_is_the_half_open_span_even_across_midnight(
    start: dt.time, end: dt.time, local: dt.time
) -> None:
    """A local time is quiet exactly when it lies in [start, end), wrapping midnight."""
    if start == end:
        return
    quiet = QuietHours(start, end)
    now = dt.datetime.combine(dt.date(2026, 12, 1), local, UTC)
    minutes = [
        t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6 for t in (start, end, local)
    ]
    s, e, x = minutes
    expected = (x - s) % 86400 < (e - s) % 86400
    assert expected == quiet.is_quiet(now)


@pytest.mark.parametrize(
    ("utc_hour", "offset", "quiet"),
    [(21, 0, False), (22, 0, True), (7, 0, True), (8, 0, False), (20, 3, True), (5, 3, False)],
)
def test_each_subject_in_its_own_time_zone(utc_hour: int, offset: int, quiet: bool) -> None:
    """The same instant is quiet for one zone and not for another."""
    now = dt.datetime(2026, 12, 1, utc_hour, tzinfo=UTC)
    zone = dt.timezone(dt.timedelta(hours=offset))
    assert quiet == NIGHT.is_quiet(now, zone)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"start": dt.time(8), "end": dt.time(8)}, "end"),
        ({"start": "22:00", "end": dt.time(8)}, "start"),
        ({"start": dt.time(22, tzinfo=UTC), "end": dt.time(8)}, "start"),
        ({"start": dt.time(22), "end": dt.time(8), "default_timezone": "UTC"}, "default_timezone"),
    ],
)
def test_bad_quiet_hours_name_the_field(kwargs: dict[str, object], field: str) -> None:
    """Bad bounds raise a ValidationError naming the field."""
    with pytest.raises(ValidationError) as info:
        QuietHours(**kwargs)  # type: ignore[arg-type]
    assert field == info.value.field


async def test_notifier_defers_quiet_subjects_without_claiming(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """A subject in quiet hours is skipped unclaimed and sent by a later run."""
    now = dt.datetime(2026, 12, 1, 20, 0, tzinfo=UTC)  # 23:00 in UTC+3
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=lambda: now)
    await ledger.create_schema()
    sender = FakeSender()
    notifier = Notifier(ledger, sender, quiet_hours=NIGHT)
    items = [
        Notification(1, "c", Message("hi"), timezone=dt.timezone(dt.timedelta(hours=3))),
        Notification(2, "c", Message("hi"), timezone=dt.timezone(dt.timedelta(hours=-5))),
    ]
    report = await notifier.send_many("trial_6h", items)
    assert [Outcome.SKIPPED, Outcome.SENT] == [r.outcome for r in report.results]
    assert "quiet hours" == report.results[0].reason
    assert await ledger.get("trial_6h", 1, "c") is None
    now = dt.datetime(2026, 12, 2, 14, 0, tzinfo=UTC)  # 17:00 in UTC+3, 09:00 in UTC-5
    report = await notifier.send_many("trial_6h", items)
    assert [Outcome.SENT, Outcome.DUPLICATE] == [r.outcome for r in report.results]
    assert ["2", "1"] == [r.recipient for r in sender.sent]
