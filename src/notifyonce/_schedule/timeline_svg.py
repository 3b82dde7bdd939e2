"""Draw a Schedule's timeline as an SVG picture, with the runs of its job.

The windows, gaps and notes are the text timeline's (`timeline.layout`); below them, the
runs of a job every ``period`` for one deadline, each placed by ``Schedule.window_at``
(the code a run itself asks): the run that sends each window's reminder, the later runs
that find its slot taken, and the runs missed while the job was down. The outage is put
at the worst moment: the runs it takes are the first ones after the narrowest window
opens, so the picture shows the next run still landing inside it.

The output depends only on the schedule (no clock, no randomness), so a picture kept in
the docs can be compared with a fresh one.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from notifyonce._schedule.durations import format_duration as fd
from notifyonce._schedule.timeline import STEPS, label, layout

if TYPE_CHECKING:
    from notifyonce._schedule.schedule import Schedule

__all__ = ["JobRun", "RunKind", "job_runs", "render_timeline_svg"]

# Any deadline does: the picture counts back from it.
_DEADLINE = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

# Geometry, in pixels.
_WIDTH = 760  # about the width of the docs' text column, so the text keeps its size
_CHAR = 7.6  # the width of a character of the labels, about (14 px sans-serif)
_RIGHT = 30
_ROW = 30
_BAR = 20
_TOP = 62
# Colours chosen to read on the picture's own light background in either docs palette.
_INK = "#212121"
_MUTED = "#616161"
_WINDOW = "#3f51b5"
_GAP = "#eeeeee"
_SENDS = "#2e7d32"
_TAKEN = "#9e9e9e"
_MISSED = "#c62828"
_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


class RunKind(enum.Enum):
    """What one run of the job does for the deadline drawn."""

    SENDS = "sends"  # the first run in a window: it claims the slot and sends
    TAKEN = "taken"  # a later run in the same window: the slot is taken (DUPLICATE)
    IDLE = "idle"  # no window open: nothing to do
    MISSED = "missed"  # the job was down


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of the job, ``before`` the deadline, and what it does."""

    before: dt.timedelta
    kind: RunKind
    action: str | None  # the window open at that run, if any


def job_runs(schedule: Schedule) -> list[JobRun]:
    """The runs of a job every ``schedule.period`` across the timeline, one outage included.

    A run comes a fifth of a period before the narrowest window opens; the
    ``max_downtime // period`` runs after it are missed.
    """
    drawn = layout(schedule)
    period = schedule.period
    anchor = drawn.narrowest.opens_before + period / 5  # counted back from the deadline
    missed = range(1, schedule.max_downtime // period + 1)
    first = -((drawn.span - anchor) // period)  # the earliest run on the axis
    runs: list[JobRun] = []
    sent: set[str] = set()
    k = first
    while anchor - k * period >= dt.timedelta(0):
        before = anchor - k * period
        window = schedule.window_at(_DEADLINE, _DEADLINE - before)
        action = None if window is None else window.action
        if k in missed:
            kind = RunKind.MISSED
        elif action is None:
            kind = RunKind.IDLE
        elif action in sent:
            kind = RunKind.TAKEN
        else:
            kind = RunKind.SENDS
            sent.add(action)
        runs.append(JobRun(before, kind, action))
        k += 1
    return runs


def render_timeline_svg(schedule: Schedule) -> str:
    """The timeline of ``schedule`` as an SVG document (a str), with a job's runs."""
    drawn = layout(schedule)
    span = drawn.span
    # The labels' column: as wide as the longest label (the ASCII timeline's texts).
    left = round(max(150, 24 + _CHAR * max(len(row.text.strip()) for row in drawn.rows)))
    plot = _WIDTH - left - _RIGHT

    def x(before: dt.timedelta) -> float:
        return left + (span - before) / span * plot

    out: list[str] = []
    add = out.append
    y: float = _TOP
    for row in drawn.rows:
        start, stop = x(row.opens), max(x(row.closes), x(row.opens) + 2)
        if row.window is None:
            add(_text(left - 12, y + 15, row.text.strip(), fill=_MUTED, anchor="end"))
            add(_rect(start, y + 3, stop - start, _BAR - 6, fill=_GAP, stroke="#bdbdbd"))
        else:
            window = row.window
            bounds = f"{fd(window.opens_before)}..{fd(window.closes_before)}"
            add(
                f'<text x="{left - 12:.1f}" y="{y + 15:.1f}" text-anchor="end">'
                f'<tspan font-weight="600">{escape(window.action)}</tspan>'
                f'<tspan fill="{_MUTED}" font-size="12">  {bounds}</tspan></text>'
            )
            add(_rect(start, y, stop - start, _BAR, fill=_WINDOW))
        y += _ROW

    # The job's runs for one deadline.
    runs = job_runs(schedule)
    y += 8
    add(_text(left - 12, y + 15, f"a run every {fd(schedule.period)}", anchor="end"))
    middle = y + _BAR / 2
    for row in drawn.rows:  # the windows again, faint, behind the runs
        if row.window is not None:
            start, stop = x(row.opens), max(x(row.closes), x(row.opens) + 2)
            add(_rect(start, y - 2, stop - start, _BAR + 4, fill="#e8eaf6"))
    add(_line(left, middle, left + plot, middle, stroke="#e0e0e0"))
    for run in runs:
        cx = x(run.before)
        if run.kind is RunKind.SENDS:
            add(f'<circle cx="{cx:.1f}" cy="{middle:.1f}" r="5.5" fill="{_SENDS}"/>')
            add(_text(cx, y - 4, f"sends {run.action}", fill=_SENDS, size=12, anchor="middle"))
        elif run.kind is RunKind.MISSED:
            for dx in (-4.5, 4.5):
                add(_line(cx - dx, middle - 4.5, cx + dx, middle + 4.5, stroke=_MISSED, width=2))
            add(_text(cx, y + _BAR + 14, "missed (down)", fill=_MISSED, size=12, anchor="middle"))
        else:
            colour = _TAKEN if run.kind is RunKind.TAKEN else "#cfd8dc"
            add(_line(cx, middle - 6, cx, middle + 6, stroke=colour, width=2))
    y += _ROW + 14

    # The axis.
    add(_line(left, y, left + plot, y, stroke=_INK))
    step = next((s for s in STEPS if span / s * 70 <= plot), span)
    k = span // step
    while k >= 0:
        tick = x(step * k)
        add(_line(tick, y, tick, y + 6, stroke=_INK))
        add(_text(tick, y + 21, label(step * k), anchor="middle", size=13))
        k -= 1
    add(_line(x(dt.timedelta(0)), _TOP - 6, x(dt.timedelta(0)), y, stroke=_INK, dash="4 3"))
    y += 46

    # The legend and the notes.
    legend = [
        (_SENDS, "circle", "claims the slot and sends"),
        (_TAKEN, "tick", "finds the slot taken: sends nothing"),
        (_MISSED, "cross", "missed: the job was down"),
    ]
    lx: float = left
    for colour, shape, text in legend:
        if lx + 16 + 6.6 * len(text) > _WIDTH - _RIGHT:  # no room left: a new line
            lx, y = left, y + 20
        if shape == "circle":
            add(f'<circle cx="{lx + 5:.1f}" cy="{y - 4:.1f}" r="5" fill="{colour}"/>')
        elif shape == "tick":
            add(_line(lx + 5, y - 10, lx + 5, y + 2, stroke=colour, width=2))
        else:
            add(_line(lx + 1, y - 8, lx + 9, y, stroke=colour, width=2))
            add(_line(lx + 9, y - 8, lx + 1, y, stroke=colour, width=2))
        add(_text(lx + 16, y, text, fill=_MUTED, size=12))
        lx += 16 + 6.6 * len(text) + 22
    y += 26
    for note in drawn.notes:
        add(_text(left, y, note, fill=_MUTED, size=13))
        y += 19
    height = y + 4

    title = f"{drawn.title}, and the runs of a job every {fd(schedule.period)}"
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {height:.0f}"'
        f' width="{_WIDTH}" height="{height:.0f}" role="img" font-family="{_FONT}"'
        f' font-size="14" fill="{_INK}">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{_WIDTH}" height="{height:.0f}" rx="8" fill="#ffffff"/>',
        _text(left, 28, drawn.title, weight="600", size=16),
        _text(x(span), _TOP - 12, label(span), fill=_MUTED, size=12, anchor="middle"),
        _text(x(dt.timedelta(0)), _TOP - 12, "D", weight="600", size=13, anchor="middle"),
    ]
    return "\n".join([*head, *out, "</svg>"]) + "\n"


def _text(
    x: float,
    y: float,
    text: str,
    *,
    fill: str | None = None,
    size: int | None = None,
    weight: str | None = None,
    anchor: str | None = None,
) -> str:
    attrs = f'x="{x:.1f}" y="{y:.1f}"'
    for name, value in (
        ("fill", fill),
        ("font-size", size),
        ("font-weight", weight),
        ("text-anchor", anchor),
    ):
        if value is not None:
            attrs += f' {name}="{value}"'
    return f"<text {attrs}>{escape(text)}</text>"


def _rect(x: float, y: float, w: float, h: float, *, fill: str, stroke: str | None = None) -> str:
    edge = "" if stroke is None else f' stroke="{stroke}"'
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="3"'
        f' fill="{fill}"{edge}/>'
    )


def _line(
    x1: float,
    y1: float,
    x2: float,
    y2: float,
    *,
    stroke: str,
    width: float = 1,
    dash: str | None = None,
) -> str:
    pattern = "" if dash is None else f' stroke-dasharray="{dash}"'
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"'
        f' stroke-width="{width}"{pattern}/>'
    )
