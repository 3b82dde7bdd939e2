"""The ASCII timeline of a schedule, for the command line and the docs."""

from __future__ import annotations

import datetime as dt
import itertools
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import Schedule, ValidationError, ValidationTypeError, Window
from notifyonce._schedule.timeline import layout
from notifyonce._schedule.timeline_svg import RunKind, job_runs, render_timeline_svg

from .test_schedule import trial_schedule, valid_schedules

TRIAL_TIMELINE = """\
3 windows before the deadline D (# open, . gap)
                        -6h30m                                         D
trial_6h  6h30m..5h     |###########                                   |
  gap 1h30m             |           ..........                         |
trial_3h  3h30m..2h12m  |                     #########                |
  gap 1h                |                              ........        |
trial_1h  1h12m..24m    |                                      #####   |
                        +---+-------------+--------------+-------------+
                           -6h           -4h            -2h            D
job every 5m, up to 5m more downtime: runs at most 10m apart
narrowest window 'trial_1h': 48m wide, needs >= 10m (ok)
smallest gap 1h between 'trial_3h' and 'trial_1h', min_gap 0s (ok)"""


def bar_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.endswith("|") and "#" in line]


def test_trial_timeline() -> None:
    """The trial schedule draws as in docs/concepts/windows.md."""
    assert TRIAL_TIMELINE == trial_schedule().render()


@given(valid_schedules(), st.integers(48, 160))
def test_timeline_fits_the_width_and_names_every_window(schedule: Schedule, width: int) -> None:
    """Every line fits the width, is ASCII, and every window gets its own bar row."""
    text = schedule.render(width)
    lines = text.splitlines()
    assert [] == [line for line in lines if len(line) > width]
    assert text.isascii()
    rows = bar_rows(text)
    assert len(schedule) == len(rows)
    for window, row in zip(schedule.windows, rows, strict=True):
        assert row.startswith(window.action[:20])


def test_bars_follow_the_time_order() -> None:
    """An earlier window's bar starts left of a later one's, and bars never share a column."""
    rows = bar_rows(trial_schedule().render(100))
    spans = [(row.index("#"), row.rindex("#")) for row in rows]
    assert sorted(spans) == spans
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end < start


def test_timeline_width_is_checked() -> None:
    """A width too small to draw, or not an int, names the field."""
    with pytest.raises(ValidationError) as small:
        trial_schedule().render(20)
    assert "width" == small.value.field
    with pytest.raises(ValidationTypeError):
        trial_schedule().render("wide")  # type: ignore[arg-type]


def test_single_window_to_the_deadline() -> None:
    """A window that closes at the deadline reaches the right end of the axis."""
    schedule = Schedule(
        [Window("last_call", opens_before=dt.timedelta(minutes=30), closes_before=dt.timedelta(0))],
        period=dt.timedelta(minutes=5),
    )
    [row] = bar_rows(schedule.render())
    assert row.endswith("#|")
    assert "gap" not in schedule.render()


# -- the SVG timeline (`notifyonce check --svg`) ----------------------------------------------


@settings(max_examples=60, deadline=None)
@given(valid_schedules())
def test_every_window_of_a_valid_schedule_gets_its_send_despite_the_outage(
    schedule: Schedule,
) -> None:
    """The picture's runs (a job every period, the outage max_downtime allows placed as the
    narrowest window opens) send each window's reminder exactly once, as validation promises."""
    runs = job_runs(schedule)
    sends = [run.action for run in runs if run.kind is RunKind.SENDS]
    assert sorted(schedule.actions) == sorted(sends)
    missed = [run for run in runs if run.kind is RunKind.MISSED]
    assert schedule.max_downtime // schedule.period == len(missed)


def test_the_trial_picture_misses_the_first_run_of_trial_1h() -> None:
    """In the trial schedule the run after trial_1h opens is missed, and the next one sends."""
    runs = job_runs(trial_schedule())
    opened = [run for run in runs if run.before < dt.timedelta(hours=1.2)]
    assert [RunKind.MISSED, RunKind.SENDS] == [run.kind for run in opened[:2]]
    assert "trial_1h" == opened[1].action
    # trial_1h opens 72 min before D; the last run before it comes a minute earlier
    assert [dt.timedelta(minutes=68), dt.timedelta(minutes=63)] == [r.before for r in opened[:2]]


def test_svg_timeline_is_an_svg_with_every_row_and_note() -> None:
    """The SVG names every window and gap, and carries the text timeline's notes."""
    schedule = trial_schedule()
    svg = render_timeline_svg(schedule)
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert svg.endswith("</svg>\n")
    for text in [*schedule.actions, "gap 1h30m", "gap 1h", *layout(schedule).notes]:
        assert escape(text) in svg
