"""Draw a Schedule as an ASCII timeline for terminals and docs."""

from __future__ import annotations

import datetime as dt
import textwrap
from typing import TYPE_CHECKING

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._schedule.durations import format_duration as fd

if TYPE_CHECKING:
    from notifyonce._schedule.schedule import Schedule

__all__ = ["MIN_WIDTH", "render_timeline"]

MIN_WIDTH = 48
_MIN_BAR = 16

# Candidate tick steps for the axis, smallest first.
_STEPS = [
    dt.timedelta(**{unit: n})
    for unit, ns in (
        ("seconds", (1, 5, 10, 15, 30)),
        ("minutes", (1, 5, 10, 15, 30)),
        ("hours", (1, 2, 3, 6, 12)),
        ("days", (1, 2, 7, 14, 28, 56, 112, 364)),
    )
    for n in ns
]


def _label(before: dt.timedelta) -> str:
    return "D" if before == dt.timedelta(0) else "-" + fd(before)


def render_timeline(schedule: Schedule, *, width: int = 72) -> str:
    """Return the timeline of ``schedule``; each line is at most ``width`` characters."""
    if isinstance(width, bool) or not isinstance(width, int):
        raise ValidationTypeError("width", f"must be an int, got {type(width).__name__}")
    if width < MIN_WIDTH:
        raise ValidationError("width", f"is {width}, must be at least {MIN_WIDTH}")
    windows = schedule.windows
    span = windows[0].opens_before  # the earliest touch: the left end of the axis

    # (label, from, to, mark) per row, "from" and "to" counted back from the deadline.
    rows: list[tuple[str, dt.timedelta, dt.timedelta, str]] = []
    gaps: list[tuple[dt.timedelta, str, str]] = []
    for index, w in enumerate(windows):
        bounds = f"{fd(w.opens_before)}..{fd(w.closes_before)}"
        rows.append((f"{w.action}  {bounds}", w.opens_before, w.closes_before, "#"))
        if index + 1 < len(windows):
            nxt = windows[index + 1]
            gap = w.closes_before - nxt.opens_before
            gaps.append((gap, w.action, nxt.action))
            if gap > dt.timedelta(0):
                rows.append((f"  gap {fd(gap)}", w.closes_before, nxt.opens_before, "."))

    label_width = max(len(row[0]) for row in rows) + 2
    label_width = min(label_width, width - _MIN_BAR - 2)
    cells = width - label_width - 2

    def pos(before: dt.timedelta) -> float:
        return (span - before) / span * cells

    lines = _wrap(
        f"{len(windows)} window{'s' if len(windows) != 1 else ''} before the deadline D "
        f"(# open{', . gap' if any(gap > dt.timedelta(0) for gap, _, _ in gaps) else ''})",
        width,
    )
    head = _label(span)
    lines.append(" " * label_width + head + " " * max(1, cells + 2 - len(head) - 1) + "D")
    for text, opens, closes, mark in rows:
        line = [" "] * cells
        start = min(round(pos(opens)), cells - 1)
        stop = max(round(pos(closes)), start + 1)  # never draw a window invisible
        line[start : min(stop, cells)] = mark * (min(stop, cells) - start)
        label = text if len(text) < label_width else text[: label_width - 2] + "~"
        lines.append(label.ljust(label_width) + "|" + "".join(line) + "|")
    axis, tick_labels = _axis(span, cells)
    lines.append(" " * label_width + axis)
    lines.append(" " * label_width + tick_labels)

    footer = [
        f"job every {fd(schedule.period)}, up to {fd(schedule.max_downtime)} more downtime: "
        f"runs at most {fd(schedule.required_width)} apart"
    ]
    narrow = min(windows, key=lambda w: (w.width, w.action))
    footer.append(
        f"narrowest window {narrow.action!r}: {fd(narrow.width)} wide, "
        f"needs >= {fd(schedule.required_width)} (ok)"
    )
    if gaps:
        gap, a, b = min(gaps)
        footer.append(
            f"smallest gap {fd(gap)} between {a!r} and {b!r}, min_gap {fd(schedule.min_gap)} (ok)"
        )
    for text in footer:
        lines.extend(_wrap(text, width))
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def _axis(span: dt.timedelta, cells: int) -> tuple[str, str]:
    """The axis with a ``+`` on every tick, and the tick labels under it."""
    room = cells + 2  # the two "|" of the bar rows are the ends of the axis
    # The first step whose labels fit side by side (a label is at most 7 characters).
    step = next((s for s in _STEPS if span / s * 8 <= room), span)
    axis = ["-"] * room
    axis[0] = axis[-1] = "+"
    labels = [" "] * room
    free_from = 0
    for k in range(span // step, -1, -1):
        before = step * k
        index = round((span - before) / span * (room - 1))
        axis[index] = "+"
        text = _label(before)
        start = max(0, min(index - len(text) // 2, room - len(text)))
        if start >= free_from:
            labels[start : start + len(text)] = text
            free_from = start + len(text) + 1
    return "".join(axis), "".join(labels).rstrip()
