"""The rules a Schedule must satisfy; each broken rule becomes one sentence a user understands."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from collections.abc import Sequence

from notifyonce._schedule.durations import format_duration as fd
from notifyonce._schedule.window import Window

__all__ = ["find_problems", "sort_windows"]

ZERO = dt.timedelta(0)


def sort_windows(windows: Sequence[Window]) -> tuple[Window, ...]:
    """Earliest touch first: by ``opens_before`` descending, then ``closes_before``, then action."""
    return tuple(sorted(windows, key=lambda w: (-w.opens_before, -w.closes_before, w.action)))


def _why(period: dt.timedelta, max_downtime: dt.timedelta) -> str:
    return f"a run every {fd(period)} with up to {fd(max_downtime)} of downtime can miss it"


def find_problems(
    windows: Sequence[Window],
    *,
    period: dt.timedelta,
    max_downtime: dt.timedelta,
    min_gap: dt.timedelta,
) -> list[str]:
    """Return one sentence per broken rule; an empty list means the schedule is valid.

    Rules that depend on another value (the width needs a valid period) are skipped
    while that value is itself invalid, so each sentence is about a real cause.
    """
    problems: list[str] = []
    if not windows:
        problems.append("no windows: a schedule needs at least one Window")
    if period <= ZERO:
        problems.append(f"period is {fd(period)}: it must be positive (how often the job runs)")
    if max_downtime < ZERO:
        problems.append(
            f"max_downtime is {fd(max_downtime)}: it must be 0 or more "
            "(how long the job may be down on top of one period)"
        )
    if min_gap < ZERO:
        problems.append(f"min_gap is {fd(min_gap)}: it must be 0 or more")
    timing_ok = period > ZERO and max_downtime >= ZERO
    required = period + max_downtime

    for action, count in sorted(Counter(w.action for w in windows).items()):
        if count > 1:
            problems.append(
                f"action {action!r} is used by {count} windows: each window needs its own "
                "action, because the action is part of the slot key"
            )

    usable: list[Window] = []
    for w in sort_windows(windows):
        negative = [
            f"{name} ({fd(value)})"
            for name, value in (
                ("opens_before", w.opens_before),
                ("closes_before", w.closes_before),
            )
            if value < ZERO
        ]
        if negative:
            problems.append(
                f"window {w.action!r} has a negative {' and '.join(negative)}: bounds count "
                "back from the deadline and must be 0 or more"
            )
        if w.opens_before <= w.closes_before:
            hint = (
                f" (with a run every {fd(period)} and up to {fd(max_downtime)} of downtime "
                f"it should be at least {fd(required)} wide)"
                if timing_ok
                else ""
            )
            problems.append(
                f"window {w.action!r} opens {fd(w.opens_before)} and closes "
                f"{fd(w.closes_before)} before the deadline, so it is never open: "
                f"opens_before must be greater than closes_before{hint}"
            )
            continue
        usable.append(w)
        if timing_ok and w.width < required:
            problems.append(
                f"window {w.describe()} is {fd(w.width)} wide but needs at least "
                f"{fd(required)} (period {fd(period)} + max_downtime {fd(max_downtime)}): "
                f"{_why(period, max_downtime)}"
            )

    for i, a in enumerate(usable):
        for b in usable[i + 1 :]:
            # In "time before the deadline" a window covers (closes_before, opens_before].
            shared = min(a.opens_before, b.opens_before) - max(a.closes_before, b.closes_before)
            if shared > ZERO:
                problems.append(
                    f"windows {a.describe()} and {b.describe()} overlap for {fd(shared)}: "
                    "a deadline would be in both at once and get two reminders back to back"
                )
    if min_gap > ZERO:
        for a, b in itertools.pairwise(usable):
            gap = a.closes_before - b.opens_before
            if ZERO <= gap < min_gap:
                problems.append(
                    f"the gap between windows {a.action!r} (closes {fd(a.closes_before)} "
                    f"before the deadline) and {b.action!r} (opens {fd(b.opens_before)} "
                    f"before) is {fd(gap)}, below min_gap {fd(min_gap)}: the two reminders "
                    "could arrive almost back to back"
                )
    return problems
