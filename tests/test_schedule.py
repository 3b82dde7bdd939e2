"""Send windows and schedules: validation, window_at, deadline ranges and missed windows."""

from __future__ import annotations

import datetime as dt
import itertools
import pickle
import re
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import notifyonce
from notifyonce import (
    DeadlineRange,
    Schedule,
    ScheduleError,
    ValidationError,
    ValidationTypeError,
    Window,
)
from notifyonce._schedule.durations import format_duration

UTC = dt.timezone.utc
MSK = dt.timezone(dt.timedelta(hours=3))
td = dt.timedelta
H, M, S = td(hours=1), td(minutes=1), td(seconds=1)
US = td(microseconds=1)
D = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)


def trial_schedule() -> Schedule:
    """The trial chain of the incident: 6.5-5.0 h, 3.5-2.2 h, 1.2-0.4 h, a job every 5 min."""
    return Schedule(
        [
            Window("trial_6h", opens_before=td(hours=6.5), closes_before=td(hours=5)),
            Window("trial_3h", opens_before=td(hours=3.5), closes_before=td(hours=2.2)),
            Window("trial_1h", opens_before=td(hours=1.2), closes_before=td(hours=0.4)),
        ],
        period=td(minutes=5),
    )


# --- strategies -------------------------------------------------------------------------


@st.composite
def valid_schedules(draw: st.DrawFn) -> Schedule:
    """Any valid schedule: widths >= period + max_downtime, gaps >= min_gap, in seconds."""
    period = draw(st.integers(1, 900)) * S
    max_downtime = draw(st.integers(0, 1800)) * S
    min_gap = draw(st.integers(0, 1800)) * S
    required = period + max_downtime
    count = draw(st.integers(1, 5))
    closes = draw(st.integers(0, 3600)) * S
    windows = []
    for index in range(count):
        width = required + draw(st.integers(0, 3)) * required + draw(st.integers(0, 59)) * S
        opens = closes + width
        windows.append(Window(f"w{index}", opens_before=opens, closes_before=closes))
        closes = opens + min_gap + draw(st.integers(0, 2)) * required
    draw(st.randoms()).shuffle(windows)
    return Schedule(windows, period=period, max_downtime=max_downtime, min_gap=min_gap)


aware_nows = st.datetimes(
    min_value=dt.datetime(2000, 1, 1),
    max_value=dt.datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, MSK, dt.timezone(td(hours=-9, minutes=-30))]),
)


# --- validation: the independent model of every rule ------------------------------------

# Which phrase of a problem sentence names which rule.
RULE_PHRASES = {
    "empty": "no windows",
    "period": "period is",
    "max_downtime": "max_downtime is",
    "min_gap": "min_gap is",
    "duplicate": "is used by",
    "negative": "has a negative",
    "never_open": "so it is never open",
    "narrow": "wide but needs at least",
    "overlap": "overlap for",
    "gap": "below min_gap",
}


def rule_of(problem: str) -> str:
    matches = [rule for rule, phrase in RULE_PHRASES.items() if phrase in problem]
    assert 1 == len(matches), problem
    return matches[0]


def expected_violations(
    windows: list[tuple[str, int, int]], period: int, max_downtime: int | None, min_gap: int
) -> Counter[tuple[str, tuple[str, ...]]]:
    """Each violated rule with the windows it names, computed the plainest way (in minutes)."""
    downtime = max(period, 0) if max_downtime is None else max_downtime
    found: Counter[tuple[str, tuple[str, ...]]] = Counter()
    if not windows:
        found["empty", ()] += 1
    if period <= 0:
        found["period", ()] += 1
    if downtime < 0:
        found["max_downtime", ()] += 1
    if min_gap < 0:
        found["min_gap", ()] += 1
    for action, count in Counter(a for a, _, _ in windows).items():
        if count > 1:
            found["duplicate", (action,)] += 1
    usable = []
    for action, opens, closes in windows:
        if opens < 0 or closes < 0:
            found["negative", (action,)] += 1
        if opens <= closes:
            found["never_open", (action,)] += 1
            continue
        usable.append((action, opens, closes))
        if period > 0 and downtime >= 0 and opens - closes < period + downtime:
            found["narrow", (action,)] += 1
    # Overlap by brute force: a whole minute m before the deadline that both windows cover.
    for (a, oa, ca), (b, ob, cb) in itertools.combinations(usable, 2):
        if any(ca < m <= oa and cb < m <= ob for m in range(-60, 700)):
            found["overlap", tuple(sorted((a, b)))] += 1
    if min_gap > 0:
        ordered = sorted(usable, key=lambda w: (-w[1], -w[2], w[0]))
        for (a, _, ca), (b, ob, _) in itertools.pairwise(ordered):
            if 0 <= ca - ob < min_gap:
                found["gap", tuple(sorted((a, b)))] += 1
    return found


def actual_violations(error: ScheduleError) -> Counter[tuple[str, tuple[str, ...]]]:
    found: Counter[tuple[str, tuple[str, ...]]] = Counter()
    for problem in error.problems:
        found[rule_of(problem), tuple(sorted(re.findall(r"'([^']*)'", problem)))] += 1
    return found


minutes = st.integers(-30, 600)


@settings(max_examples=300, deadline=None)  # a shared 2-core machine: no per-example timing
@given(
    st.lists(st.tuples(st.sampled_from("abcd"), minutes, minutes), max_size=4),
    st.integers(-5, 60),
    st.none() | st.integers(-5, 60),
    st.integers(-5, 60),
)
def test_every_violated_rule_is_reported(
    windows: list[tuple[str, int, int]], period: int, max_downtime: int | None, min_gap: int
) -> None:
    """An invalid schedule is always rejected, with one sentence per violated rule and window."""
    expected = expected_violations(windows, period, max_downtime, min_gap)
    build = [Window(a, opens_before=o * M, closes_before=c * M) for a, o, c in windows]

    def make() -> Schedule:
        return Schedule(
            build,
            period=period * M,
            max_downtime=None if max_downtime is None else max_downtime * M,
            min_gap=min_gap * M,
        )

    if not expected:
        assert len(windows) == len(make())
        return
    with pytest.raises(ScheduleError) as caught:
        make()
    assert expected == actual_violations(caught.value)
    assert "schedule" == caught.value.field
    for problem in caught.value.problems:
        assert problem in str(caught.value)


@given(valid_schedules())
def test_generated_valid_schedules_are_valid(schedule: Schedule) -> None:
    """The strategy's schedules are accepted and kept sorted, earliest touch first."""
    opens = [w.opens_before for w in schedule.windows]
    assert sorted(opens, reverse=True) == opens


def test_trial_schedule_validates() -> None:
    """The trial windows with a 5-minute job are valid, and max_downtime defaults to period."""
    schedule = trial_schedule()
    assert ("trial_6h", "trial_3h", "trial_1h") == schedule.actions
    assert 5 * M == schedule.max_downtime
    assert 10 * M == schedule.required_width
    assert td(0) == schedule.min_gap


def test_tight_points_are_rejected_in_plain_words() -> None:
    """The original 6 h / 3 h / 1 h points with no width: every window is reported, with
    the width it needs."""
    with pytest.raises(ScheduleError) as caught:
        Schedule(
            [Window(f"trial_{h}h", opens_before=h * H, closes_before=h * H) for h in (6, 3, 1)],
            period=5 * M,
        )
    assert (
        "window 'trial_6h' opens 6h and closes 6h before the deadline, so it is never open: "
        "opens_before must be greater than closes_before (with a run every 5m and up to 5m "
        "of downtime it should be at least 10m wide)",
        "window 'trial_3h' opens 3h and closes 3h before the deadline, so it is never open: "
        "opens_before must be greater than closes_before (with a run every 5m and up to 5m "
        "of downtime it should be at least 10m wide)",
        "window 'trial_1h' opens 1h and closes 1h before the deadline, so it is never open: "
        "opens_before must be greater than closes_before (with a run every 5m and up to 5m "
        "of downtime it should be at least 10m wide)",
    ) == caught.value.problems


def test_tight_windows_one_period_wide_are_too_narrow() -> None:
    """Windows exactly one job period wide are rejected: one missed run skips them."""
    with pytest.raises(ScheduleError) as caught:
        Schedule(
            [
                Window(f"trial_{h}h", opens_before=h * H + 5 * M, closes_before=h * H)
                for h in (6, 3)
            ],
            period=5 * M,
        )
    assert (
        "window 'trial_6h' (6h5m to 6h before the deadline) is 5m wide but needs at least 10m "
        "(period 5m + max_downtime 5m): a run every 5m with up to 5m of downtime can miss it",
        "window 'trial_3h' (3h5m to 3h before the deadline) is 5m wide but needs at least 10m "
        "(period 5m + max_downtime 5m): a run every 5m with up to 5m of downtime can miss it",
    ) == caught.value.problems


def test_overlap_and_gap_messages_name_windows_and_numbers() -> None:
    """Overlaps say by how much; gaps say the gap and the minimum."""
    with pytest.raises(ScheduleError) as caught:
        Schedule(
            [
                Window("a", opens_before=6 * H, closes_before=4 * H),
                Window("b", opens_before=4 * H + 30 * M, closes_before=3 * H),
                Window("c", opens_before=2 * H + 50 * M, closes_before=2 * H),
            ],
            period=5 * M,
            min_gap=15 * M,
        )
    assert (
        "windows 'a' (6h to 4h before the deadline) and 'b' (4h30m to 3h before the "
        "deadline) overlap for 30m: a deadline would be in both at once and get two "
        "reminders back to back",
        "the gap between windows 'b' (closes 3h before the deadline) and 'c' (opens 2h50m "
        "before) is 10m, below min_gap 15m: the two reminders could arrive almost back to back",
    ) == caught.value.problems


@pytest.mark.parametrize("overlap", [td(seconds=1), td(minutes=1), td(minutes=1, seconds=1)])
def test_any_overlap_is_refused(overlap: td) -> None:
    """Windows sharing even a second (or a minute) of time before the deadline overlap."""
    with pytest.raises(ScheduleError, match=f"overlap for {format_duration(overlap)}:"):
        Schedule(
            [
                Window("a", opens_before=2 * H, closes_before=H - overlap),
                Window("b", opens_before=H, closes_before=td(0)),
            ],
            period=5 * M,
        )


def test_touching_windows_do_not_overlap() -> None:
    """A window may close exactly when the next opens (half-open), unless min_gap forbids it."""
    windows = [
        Window("a", opens_before=2 * H, closes_before=H),
        Window("b", opens_before=H, closes_before=td(0)),
    ]
    assert 2 == len(Schedule(windows, period=5 * M))
    with pytest.raises(ScheduleError, match="is 0s, below min_gap 1m"):
        Schedule(windows, period=5 * M, min_gap=M)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"windows": "trial", "period": M}, "windows"),
        ({"windows": Window("a", H, td(0)), "period": M}, "windows"),
        ({"windows": [("a", H, td(0))], "period": M}, "windows"),
        ({"windows": [], "period": 5}, "period"),
        ({"windows": [], "period": M, "max_downtime": 60}, "max_downtime"),
        ({"windows": [], "period": M, "min_gap": 0}, "min_gap"),
    ],
)
def test_schedule_argument_types(kwargs: dict[str, object], field: str) -> None:
    """A wrong type is a ValidationTypeError naming the argument."""
    windows = kwargs.pop("windows")
    with pytest.raises(ValidationTypeError) as caught:
        Schedule(windows, **kwargs)  # type: ignore[arg-type]
    assert field == caught.value.field


@pytest.mark.parametrize(
    ("args", "field", "error"),
    [
        ((1, H, td(0)), "action", ValidationTypeError),
        (("", H, td(0)), "action", ValidationError),
        (("a", 60, td(0)), "opens_before", ValidationTypeError),
        (("a", H, None), "closes_before", ValidationTypeError),
    ],
)
def test_window_field_types(args: tuple[object, ...], field: str, error: type[Exception]) -> None:
    """Window checks its field types and action at construction, naming the field."""
    with pytest.raises(error) as caught:
        Window(*args)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValidationError)
    assert field == caught.value.field


CENTURY = td(days=36_525)  # the longest a bound, a period, a downtime or a gap may be


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Window("a", td(days=999_999_999), td(0)), "opens_before"),
        (lambda: Window("a", CENTURY + US, td(0)), "opens_before"),
        (lambda: Window("a", H, -CENTURY - US), "closes_before"),
        (lambda: Window("a", td.max, td.min), "opens_before"),
        (lambda: Schedule([Window("a", H, td(0))], period=td.max), "period"),
        (lambda: Schedule([Window("a", H, td(0))], period=M, max_downtime=td.max), "max_downtime"),
        (lambda: Schedule([Window("a", H, td(0))], period=M, min_gap=CENTURY * 2), "min_gap"),
    ],
)
def test_a_duration_longer_than_a_century_is_refused_naming_its_field(
    make: Callable[[], object], field: str
) -> None:
    """A bound, a period, a downtime or a gap past 100 years either way is refused when it
    is given, naming the field (999,999,999 days was accepted, then open_windows raised a
    bare OverflowError)."""
    with pytest.raises(ValidationError) as caught:
        make()
    assert field == caught.value.field
    assert "100 years" in caught.value.problem


@st.composite
def wide_schedules(draw: st.DrawFn) -> Schedule:
    """One window anywhere up to a century before its deadline, with any period and
    downtime it allows."""
    micros = st.integers(0, CENTURY // US)
    closes = draw(micros.filter(lambda n: n < CENTURY // US)) * US
    opens = closes + draw(st.integers(1, (CENTURY - closes) // US)) * US
    period = draw(st.integers(1, (opens - closes) // US)) * US
    max_downtime = opens - closes - period
    window = Window("wide", opens_before=opens, closes_before=closes)
    return Schedule([window], period=period, max_downtime=max_downtime)


FIRST = dt.datetime.min.replace(tzinfo=UTC)
LAST = dt.datetime.max.replace(tzinfo=UTC)
# Any moment, and often one within a century of the first or the last a datetime holds.
any_utc = (
    st.datetimes(timezones=st.just(UTC))
    | st.integers(0, 2 * CENTURY // US).map(lambda n: FIRST + n * US)
    | st.integers(0, 2 * CENTURY // US).map(lambda n: LAST - n * US)
)


@settings(max_examples=300, deadline=None)
@given(wide_schedules(), any_utc, any_utc)
def test_windows_up_to_a_century_answer_at_any_moment_a_datetime_holds(
    schedule: Schedule, now: dt.datetime, other: dt.datetime
) -> None:
    """Near the first or last moment a datetime holds, every question to a wide schedule
    is answered (a range that would reach past them ends there), never with
    OverflowError, and the ranges still agree with window_at."""
    (window,) = schedule.windows
    (pair,) = schedule.open_windows(now)
    deadlines = pair[1]
    assert deadlines == window.deadline_range(now)
    assert (other in deadlines) == (schedule.window_at(other, now) is window)
    missed = dict(schedule.missed(other, now))
    assert (window in missed and other in missed[window]) == (
        window in schedule.missed_windows(other, other, now)
    )
    assert window.is_open(other, now) == (schedule.window_at(other, now) is window)
    assert schedule.render()


def test_a_time_that_leaves_the_datetime_range_in_utc_is_refused_naming_it() -> None:
    """The first day of year 1 east of Greenwich has no UTC value: a ValidationError
    naming ``now``, not OverflowError."""
    first = dt.datetime(1, 1, 1, tzinfo=MSK)
    with pytest.raises(ValidationError) as caught:
        trial_schedule().open_windows(first)
    assert "now" == caught.value.field


# --- window_at and deadline ranges ------------------------------------------------------


def test_window_at_half_open_boundaries() -> None:
    """Open from exactly opens_before before the deadline, closed from exactly closes_before."""
    schedule = trial_schedule()
    six = schedule.window("trial_6h")
    assert six is schedule.window_at(D, D - td(hours=6.5))
    assert schedule.window_at(D, D - td(hours=6.5) - US) is None
    assert six is schedule.window_at(D, D - 5 * H - US)
    assert schedule.window_at(D, D - 5 * H) is None
    assert schedule.window_at(D, D) is None
    assert schedule.window_at(D, D - 10 * H) is None


def test_window_at_converts_zones_before_subtracting() -> None:
    """The same instants in different zones give the same window."""
    schedule = trial_schedule()
    now = D - 6 * H
    assert schedule.window_at(D, now) is schedule.window_at(D.astimezone(MSK), now)
    assert "trial_6h" == getattr(schedule.window_at(D.astimezone(MSK), now), "action", None)


@pytest.mark.parametrize("bad", ["deadline", "now"])
def test_naive_datetimes_are_rejected(bad: str) -> None:
    """A naive deadline or now is a ValidationError naming it."""
    args = {"deadline": D, "now": D - 6 * H}
    args[bad] = args[bad].replace(tzinfo=None)
    with pytest.raises(ValidationError, match="naive") as caught:
        trial_schedule().window_at(**args)
    assert bad == caught.value.field


def test_non_datetimes_are_type_errors() -> None:
    """A timestamp instead of a datetime is a ValidationTypeError naming the argument."""
    schedule = trial_schedule()
    with pytest.raises(ValidationTypeError) as caught:
        schedule.window_at(D.timestamp(), D)  # type: ignore[arg-type]
    assert "deadline" == caught.value.field
    with pytest.raises(ValidationError) as naive:
        schedule.open_windows(dt.datetime(2026, 1, 1))
    assert "now" == naive.value.field
    with pytest.raises(ValidationError) as missed:
        schedule.missed(dt.datetime(2026, 1, 1), D)
    assert "last_run" == missed.value.field


@given(valid_schedules(), aware_nows, st.data())
def test_at_most_one_window_open_and_ranges_agree(
    schedule: Schedule, now: dt.datetime, data: st.DataObject
) -> None:
    """For one deadline at most one window is open, and it is the one whose deadline range
    (open_windows) contains the deadline, boundaries included."""
    window = data.draw(st.sampled_from(schedule.windows))
    near_boundary = st.sampled_from([window.opens_before, window.closes_before]).flatmap(
        lambda bound: st.sampled_from([bound - US, bound, bound + US])
    )
    anywhere = st.integers(-30 * 3600, 30 * 3600).map(lambda seconds: seconds * S)
    offset = data.draw(near_boundary | anywhere)
    deadline = now + offset
    open_now = [w for w in schedule if w.is_open(deadline, now)]
    assert len(open_now) <= 1
    assert (open_now[0] if open_now else None) == schedule.window_at(deadline, now)
    by_range = [w for w, r in schedule.open_windows(now) if deadline in r]
    assert open_now == by_range


@st.composite
def schedules_and_runs(draw: st.DrawFn) -> tuple[Schedule, list[dt.datetime], dt.datetime]:
    schedule = draw(valid_schedules())
    most = schedule.required_width // S
    # Gaps below a tenth of the limit only make the property easier and the test slower.
    gaps = draw(st.lists(st.integers(max(1, most // 10), most), min_size=1, max_size=50))
    deadline = draw(aware_nows)
    start = deadline - schedule.windows[0].opens_before - draw(st.integers(0, most)) * S
    runs, at = [], start.astimezone(MSK)
    for gap in itertools.cycle(gaps):
        runs.append(at)
        if at > deadline:
            break
        at += gap * S
    return schedule, runs, deadline


@settings(max_examples=200, deadline=None)  # a shared 2-core machine: no per-example timing
@given(schedules_and_runs())
def test_runs_within_period_plus_downtime_hit_every_window(
    case: tuple[Schedule, list[dt.datetime], dt.datetime],
) -> None:
    """Runs never more than period + max_downtime apart see every window of the deadline,
    and nothing is ever reported missed."""
    schedule, runs, deadline = case
    hit = {schedule.window_at(deadline, run) for run in runs} - {None}
    assert set(schedule.windows) == hit
    for last, now in itertools.pairwise(runs):
        assert [] == schedule.missed_windows(deadline, last, now)
        assert [] == schedule.missed(last, now)


@given(valid_schedules(), aware_nows, st.integers(1, 10**6))
def test_missed_ranges_match_missed_windows(
    schedule: Schedule, last: dt.datetime, seconds: int
) -> None:
    """A deadline is in a window's missed range exactly when missed_windows lists that window
    for it, and the window was open at neither run."""
    now = last + seconds * S
    missed = dict(schedule.missed(last, now))
    for window in schedule:
        for deadline in (last + window.opens_before + US, now + window.closes_before):
            in_range = window in missed and deadline in missed[window]
            assert in_range == (window in schedule.missed_windows(deadline, last, now))
            if in_range:
                assert not window.is_open(deadline, last)
                assert not window.is_open(deadline, now)


def test_downtime_longer_than_a_window_reports_it() -> None:
    """After 2 h of downtime every trial window (all narrower than 2 h) is reported missed,
    each with the deadlines it skipped; the first run reports nothing."""
    schedule = trial_schedule()
    last = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    now = last + 2 * H
    assert [] == schedule.missed(None, now)
    assert [
        (w, DeadlineRange(last + w.opens_before, now + w.closes_before)) for w in schedule
    ] == schedule.missed(last, now)
    assert [] == schedule.missed(last, last + 48 * M)  # trial_1h, the narrowest, is 48m wide
    assert [schedule.window("trial_1h")] == [w for w, _ in schedule.missed(last, last + 49 * M)]
    deadline = last + 90 * M
    assert [schedule.window("trial_1h")] == schedule.missed_windows(deadline, last, now)
    assert schedule.window_at(deadline, now) is None
    assert [] == schedule.missed(now, last)  # a clock going backwards misses nothing


def test_deadline_range_is_open_at_the_start_and_closed_at_the_end() -> None:
    """DeadlineRange(after, until) holds after < D <= until, and rejects naive deadlines."""
    deadlines = DeadlineRange(D, D + H)
    assert (False, True, True, False) == tuple(
        d in deadlines for d in (D, D + US, D + H, D + H + US)
    )
    assert DeadlineRange(D, D).empty
    with pytest.raises(ValidationError):
        _ = D.replace(tzinfo=None) in deadlines


# --- several chains, immutability -------------------------------------------------------


def test_independent_chains_each_have_their_own_schedule() -> None:
    """Trial, unpaid-invoice and win-back chains coexist; their windows may overlap each
    other's and they may even reuse an action name, because nothing is global."""
    trial = trial_schedule()
    invoice = Schedule(
        [
            Window("invoice_3d", opens_before=td(days=3), closes_before=td(days=2)),
            Window("invoice_1d", opens_before=td(days=1), closes_before=4 * H),
        ],
        period=15 * M,
        min_gap=12 * H,
    )
    winback = Schedule(
        [Window("trial_6h", opens_before=7 * H, closes_before=td(0))],
        period=H,
        max_downtime=td(0),
    )
    now = D - 6 * H
    assert "trial_6h" == getattr(trial.window_at(D, now), "action", None)
    assert "invoice_1d" == getattr(invoice.window_at(D, now), "action", None)
    assert 7 * H == getattr(winback.window_at(D, now), "opens_before", None)
    assert (15 * M, 15 * M) == (invoice.period, invoice.max_downtime)
    assert trial_schedule() == trial


def test_schedule_is_immutable_hashable_and_picklable() -> None:
    """A Schedule cannot be changed after validation, and survives pickling."""
    schedule = trial_schedule()
    with pytest.raises(AttributeError):
        schedule._period = M  # type: ignore[misc]
    with pytest.raises(AttributeError):
        schedule.period = M  # type: ignore[misc]
    with pytest.raises(AttributeError):
        schedule.windows[0].opens_before = H  # type: ignore[misc]
    assert schedule == pickle.loads(pickle.dumps(schedule))
    assert hash(trial_schedule()) == hash(schedule)
    assert "Schedule([Window(action='trial_6h'" in repr(schedule)
    with pytest.raises(KeyError):
        schedule.window("nope")


def test_format_duration_examples() -> None:
    """Durations in messages read like people write them."""
    values = [td(hours=6.5), td(hours=1.2), td(days=1, minutes=5), 90 * S, td(seconds=1.5)]
    assert ["6h30m", "1h12m", "1d5m", "1m30s", "1.5s"] == [format_duration(v) for v in values]


def test_public_names_are_exported_and_sorted() -> None:
    """The schedule names are importable from notifyonce and __all__ stays sorted."""
    for name in ("Window", "Schedule", "DeadlineRange", "window_filter", "schedule_filter"):
        assert name in notifyonce.__all__
    assert sorted(notifyonce.__all__) == notifyonce.__all__
