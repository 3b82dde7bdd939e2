"""Draw a Schedule as an ASCII timeline for terminals and docs.

`layout` says what a timeline shows (its rows, its notes); `render_timeline` draws it in
text, and ``timeline_svg`` draws the same layout as a picture.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._schedule.durations import format_duration as fd

if TYPE_CHECKING:
    from notifyonce._schedule.window import Window

__all__ = [
    "MIN_WIDTH",
    "STEPS",
    "Drawable",
    "Layout",
    "Row",
    "label",
    "layout",
    "render_timeline",
]


class Drawable(Protocol):
    """What a timeline reads of a ``Schedule``: named here rather than imported, since
    ``Schedule.render`` imports this module (no import circle, not even one for the type
    checker)."""

    @property
    def windows(self) -> tuple[Window, ...]: ...
    @property
    def period(self) -> dt.timedelta: ...
    @property
    def max_downtime(self) -> dt.timedelta: ...
    @property
    def min_gap(self) -> dt.timedelta: ...
    @property
    def required_width(self) -> dt.timedelta: ...


MIN_WIDTH = 48
_MIN_BAR = 16

# Candidate tick steps for the axis, smallest first.
STEPS = [
    dt.timedelta(**{unit: n})
    for unit, ns in (
        ("seconds", (1, 5, 10, 15, 30)),
        ("minutes", (1, 5, 10, 15, 30)),
        ("hours", (1, 2, 3, 6, 12)),
        ("days", (1, 2, 7, 14, 28, 56, 112, 364)),
    )
    for n in ns
]


def label(before: dt.timedelta) -> str:
    """How the axis names a moment ``before`` the deadline: ``-6h``, or ``D`` itself."""
    return "D" if before == dt.timedelta(0) else "-" + fd(before)


@dataclass(frozen=True, slots=True)
class Row:
    """One bar of a timeline: a window, or the gap after one.

    Attributes:
        text: The row's label (``trial_6h  6h30m..5h``, ``  gap 1h30m``).
        opens: Where the bar starts, counted back from the deadline.
        closes: Where it ends, counted back from the deadline.
        window: The window drawn, or None for a gap.
    """

    text: str
    opens: dt.timedelta
    closes: dt.timedelta
    window: Window | None


@dataclass(frozen=True, slots=True)
class Layout:
    """What a timeline of a schedule shows, whatever draws it.

    Attributes:
        title: What is drawn (``3 windows before the deadline D``).
        span: From the earliest window's opening to the deadline: the axis.
        rows: The windows, each followed by the gap after it (if any), in time order.
        notes: One sentence each: the job's period, the narrowest window, the smallest gap.
        narrowest: The narrowest window (the first such, by action, on a tie).
    """

    title: str
    span: dt.timedelta
    rows: tuple[Row, ...]
    notes: tuple[str, ...]
    narrowest: Window


def layout(schedule: Drawable) -> Layout:
    """The rows and notes of the timeline of ``schedule``."""
    windows = schedule.windows
    rows: list[Row] = []
    gaps: list[tuple[dt.timedelta, str, str]] = []
    for index, w in enumerate(windows):
        bounds = f"{fd(w.opens_before)}..{fd(w.closes_before)}"
        rows.append(Row(f"{w.action}  {bounds}", w.opens_before, w.closes_before, w))
        if index + 1 < len(windows):
            nxt = windows[index + 1]
            gap = w.closes_before - nxt.opens_before
            gaps.append((gap, w.action, nxt.action))
            if gap > dt.timedelta(0):
                rows.append(Row(f"  gap {fd(gap)}", w.closes_before, nxt.opens_before, None))
    notes = [
        f"job every {fd(schedule.period)}, up to {fd(schedule.max_downtime)} more downtime: "
        f"runs at most {fd(schedule.required_width)} apart"
    ]
    narrow = min(windows, key=lambda w: (w.width, w.action))
    notes.append(
        f"narrowest window {narrow.action!r}: {fd(narrow.width)} wide, "
        f"needs >= {fd(schedule.required_width)} (ok)"
    )
    if gaps:
        gap, a, b = min(gaps)
        notes.append(
            f"smallest gap {fd(gap)} between {a!r} and {b!r}, min_gap {fd(schedule.min_gap)} (ok)"
        )
    title = f"{len(windows)} window{'s' if len(windows) != 1 else ''} before the deadline D"
    # The earliest touch is the left end of the axis.
    return Layout(title, windows[0].opens_before, tuple(rows), tuple(notes), narrow)


def render_timeline(schedule: Drawable, *, width: int = 72) -> str:
    """Return the timeline of ``schedule``; each line is at most ``width`` characters."""
    if isinstance(width, bool) or not isinstance(width, int):
        raise ValidationTypeError("width", f"must be an int, got {type(width).__name__}")
    if width < MIN_WIDTH:
        raise ValidationError("width", f"is {width}, must be at least {MIN_WIDTH}")
    drawn = layout(schedule)
    span = drawn.span
    label_width = max(len(row.text) for row in drawn.rows) + 2
    label_width = min(label_width, width - _MIN_BAR - 2)
    cells = width - label_width - 2

    def pos(before: dt.timedelta) -> float:
        return (span - before) / span * cells

    gaps = any(row.window is None for row in drawn.rows)
    lines = _wrap(f"{drawn.title} (# open{', . gap' if gaps else ''})", width)
    head = label(span)
    lines.append(" " * label_width + head + " " * max(1, cells + 2 - len(head) - 1) + "D")
    for row in drawn.rows:
        mark = "." if row.window is None else "#"
        line = [" "] * cells
        start = min(round(pos(row.opens)), cells - 1)
        stop = max(round(pos(row.closes)), start + 1)  # never draw a window invisible
        line[start : min(stop, cells)] = mark * (min(stop, cells) - start)
        text = row.text if len(row.text) < label_width else row.text[: label_width - 2] + "~"
        lines.append(text.ljust(label_width) + "|" + "".join(line) + "|")
    axis, tick_labels = _axis(span, cells)
    lines.append(" " * label_width + axis)
    lines.append(" " * label_width + tick_labels)
    for note in drawn.notes:
        lines.extend(_wrap(note, width))
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def _axis(span: dt.timedelta, cells: int) -> tuple[str, str]:
    """The axis with a ``+`` on every tick, and the tick labels under it."""
    room = cells + 2  # the two "|" of the bar rows are the ends of the axis
    # The first step whose labels fit side by side (a label is at most 7 characters).
    step = next((s for s in STEPS if span / s * 8 <= room), span)
    axis = ["-"] * room
    axis[0] = axis[-1] = "+"
    labels = [" "] * room
    free_from = 0
    for k in range(span // step, -1, -1):
        before = step * k
        index = round((span - before) / span * (room - 1))
        axis[index] = "+"
        text = label(before)
        start = max(0, min(index - len(text) // 2, room - len(text)))
        if start >= free_from:
            labels[start : start + len(text)] = text
            free_from = start + len(text) + 1
    return "".join(axis), "".join(labels).rstrip()
