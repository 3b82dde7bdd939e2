"""A chain of send windows before a deadline, validated against how often the job runs."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

from notifyonce._errors import ScheduleError, ValidationTypeError
from notifyonce._schedule.durations import check_duration
from notifyonce._schedule.rules import find_problems, sort_windows
from notifyonce._schedule.window import DeadlineRange, Window, shift, to_utc

__all__ = ["Schedule"]


def _timedelta(field: str, value: object) -> dt.timedelta:
    if not isinstance(value, dt.timedelta):
        raise ValidationTypeError(
            field, f"must be a datetime.timedelta, got {type(value).__name__}"
        )
    return check_duration(field, value)


def _windows(value: object) -> tuple[Window, ...]:
    if isinstance(value, (str, bytes, Window)) or not isinstance(value, Iterable):
        raise ValidationTypeError(
            "windows", f"must be an iterable of Window, got {type(value).__name__}"
        )
    items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, Window):
            raise ValidationTypeError(
                "windows", f"item {index} is a {type(item).__name__}, expected a Window"
            )
    return items


class Schedule:
    """Send windows before a deadline, checked against the period of the job that sends them.

    The job runs every ``period`` and may be down for up to ``max_downtime`` on top of
    that (a restart, a deploy), so two consecutive runs can be up to
    ``period + max_downtime`` apart. A window narrower than that can fall between two runs
    and its reminder is never sent, so every window must be at least that wide. Windows
    must not overlap (a deadline would be in two windows at once) and must be at least
    ``min_gap`` apart (two reminders back to back read as spam).

    Every problem is collected, and one [`ScheduleError`][notifyonce.ScheduleError] lists
    them all. A valid schedule is immutable and can be shared; each chain of reminders
    (trial, unpaid invoice, win-back) gets its own ``Schedule``.

    Examples:
        >>> from datetime import timedelta as td
        >>> trial = Schedule(
        ...     [Window("trial_6h", opens_before=td(hours=6.5), closes_before=td(hours=5)),
        ...      Window("trial_3h", opens_before=td(hours=3.5), closes_before=td(hours=2.2)),
        ...      Window("trial_1h", opens_before=td(hours=1.2), closes_before=td(hours=0.4))],
        ...     period=td(minutes=5),
        ... )
        >>> [w.action for w in trial.windows]
        ['trial_6h', 'trial_3h', 'trial_1h']
        >>> import textwrap
        >>> try:
        ...     Schedule([Window("trial_6h", opens_before=td(hours=6), closes_before=td(hours=6))],
        ...              period=td(minutes=5))
        ... except ScheduleError as error:
        ...     print(textwrap.fill(error.problems[0], 80))
        window 'trial_6h' opens 6h and closes 6h before the deadline, so it is never
        open: opens_before must be greater than closes_before (with a run every 5m and
        up to 5m of downtime it should be at least 10m wide)

    Args:
        windows: The windows, in any order.
        period: How often the job runs. Must be positive.
        max_downtime: How much later than ``period`` a run may come (restarts, deploys).
            Defaults to ``period``: one missed run.
        min_gap: The smallest allowed gap between two windows. Defaults to 0.

    Raises:
        ValidationTypeError: an argument has the wrong type (its ``field`` names it).
        ValidationError: ``period``, ``max_downtime`` or ``min_gap`` is longer than 100
            years (36,525 days) either way; ``field`` names it.
        ScheduleError: the values break one or more rules; ``problems`` has a sentence each.
    """

    __slots__ = ("_max_downtime", "_min_gap", "_period", "_windows")

    _windows: tuple[Window, ...]
    _period: dt.timedelta
    _max_downtime: dt.timedelta
    _min_gap: dt.timedelta

    def __init__(
        self,
        windows: Iterable[Window],
        *,
        period: dt.timedelta,
        max_downtime: dt.timedelta | None = None,
        min_gap: dt.timedelta = dt.timedelta(0),
    ) -> None:
        items = _windows(windows)
        period = _timedelta("period", period)
        if max_downtime is None:
            # Defaulting to a negative period would report a max_downtime nobody passed.
            max_downtime = max(period, dt.timedelta(0))
        else:
            max_downtime = _timedelta("max_downtime", max_downtime)
        min_gap = _timedelta("min_gap", min_gap)
        problems = find_problems(items, period=period, max_downtime=max_downtime, min_gap=min_gap)
        if problems:
            raise ScheduleError(problems)
        object.__setattr__(self, "_windows", sort_windows(items))
        object.__setattr__(self, "_period", period)
        object.__setattr__(self, "_max_downtime", max_downtime)
        object.__setattr__(self, "_min_gap", min_gap)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Schedule is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Schedule is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, tuple[tuple[Window, ...]]]:
        rebuild = functools.partial(
            Schedule, period=self._period, max_downtime=self._max_downtime, min_gap=self._min_gap
        )
        return (rebuild, (self._windows,))

    def _parts(self) -> tuple[object, ...]:
        return (self._windows, self._period, self._max_downtime, self._min_gap)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return self._parts() == other._parts()

    def __hash__(self) -> int:
        return hash(self._parts())

    def __repr__(self) -> str:
        return (
            f"Schedule({list(self._windows)!r}, period={self._period!r}, "
            f"max_downtime={self._max_downtime!r}, min_gap={self._min_gap!r})"
        )

    def __iter__(self) -> Iterator[Window]:
        return iter(self._windows)

    def __len__(self) -> int:
        return len(self._windows)

    @property
    def windows(self) -> tuple[Window, ...]:
        """The windows, earliest touch first (``opens_before`` descending)."""
        return self._windows

    @property
    def actions(self) -> tuple[str, ...]:
        """The actions of the windows, earliest touch first."""
        return tuple(w.action for w in self._windows)

    @property
    def period(self) -> dt.timedelta:
        """How often the job runs."""
        return self._period

    @property
    def max_downtime(self) -> dt.timedelta:
        """How much later than ``period`` a run may come."""
        return self._max_downtime

    @property
    def min_gap(self) -> dt.timedelta:
        """The smallest allowed gap between two windows."""
        return self._min_gap

    @property
    def required_width(self) -> dt.timedelta:
        """``period + max_downtime``: the narrowest a window may be."""
        return self._period + self._max_downtime

    def window(self, action: str) -> Window:
        """The window whose action is ``action``.

        Raises:
            KeyError: no window has that action.
        """
        for w in self._windows:
            if w.action == action:
                return w
        raise KeyError(action)

    def window_at(self, deadline: dt.datetime, now: dt.datetime) -> Window | None:
        """The window open for ``deadline`` at ``now``, or None between and outside windows.

        A window is open during ``[deadline - opens_before, deadline - closes_before)``.

        Examples:
            >>> from datetime import datetime, timedelta as td, timezone
            >>> s = Schedule([Window("trial_1h", opens_before=td(hours=1),
            ...                      closes_before=td(minutes=20))], period=td(minutes=5))
            >>> end = datetime(2026, 12, 1, 18, 0, tzinfo=timezone.utc)
            >>> s.window_at(end, end - td(hours=1)).action
            'trial_1h'
            >>> s.window_at(end, end - td(minutes=20)) is None
            True

        Raises:
            ValidationError: ``deadline`` or ``now`` is naive (or not a datetime); the
                ``field`` says which.
        """
        before = to_utc("deadline", deadline) - to_utc("now", now)
        for w in self._windows:
            if w.closes_before < before <= w.opens_before:
                return w
        return None

    def open_windows(self, now: dt.datetime) -> list[tuple[Window, DeadlineRange]]:
        """Each window with the deadlines it is open for at ``now``, earliest touch first.

        A deadline ``D`` is in a window's range exactly when ``window_at(D, now)`` returns
        that window. Select the subjects with [`window_filter`][notifyonce.window_filter]
        or compare against ``range.after`` / ``range.until`` yourself.

        Raises:
            ValidationError: ``now`` is naive (or not a datetime).
        """
        at = to_utc("now", now)
        return [(w, w.deadline_range(at)) for w in self._windows]

    def missed_windows(
        self, deadline: dt.datetime, last_run: dt.datetime, now: dt.datetime
    ) -> list[Window]:
        """The windows of ``deadline`` that opened after ``last_run`` and closed by ``now``.

        No run saw them: the job was down for longer than the window. With runs never
        more than ``period + max_downtime`` apart this is always empty.

        Raises:
            ValidationError: a datetime is naive (or not a datetime); ``field`` says which.
        """
        end = to_utc("deadline", deadline)
        last = to_utc("last_run", last_run)
        at = to_utc("now", now)
        return [
            w
            for w in self._windows
            if last < shift(end, -w.opens_before) and shift(end, -w.closes_before) <= at
        ]

    def missed(
        self, last_run: dt.datetime | None, now: dt.datetime
    ) -> list[tuple[Window, DeadlineRange]]:
        """For each window, the deadlines whose whole window fell between two runs.

        The default policy of notifyonce is to skip a missed reminder and let the next
        window of the chain fire; call this at the start of each run with the time of the
        previous run to report what was skipped (a log line, a metric, a catch-up send of
        your own). Only windows with a non-empty range are returned.

        Examples:
            >>> from datetime import datetime, timedelta as td, timezone
            >>> s = Schedule([Window("trial_1h", opens_before=td(hours=1),
            ...                      closes_before=td(minutes=20))], period=td(minutes=5))
            >>> t = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
            >>> s.missed(t, t + td(minutes=10))
            []
            >>> [(w.action, str(r.after.time()), str(r.until.time()))
            ...  for w, r in s.missed(t, t + td(hours=2))]
            [('trial_1h', '13:00:00', '14:20:00')]

        Args:
            last_run: When the previous run started, or None for the first run (nothing
                can be known to be missed then).
            now: When this run started.

        Raises:
            ValidationError: a datetime is naive (or not a datetime); ``field`` says which.
        """
        at = to_utc("now", now)
        if last_run is None:
            return []
        last = to_utc("last_run", last_run)
        # Missed iff last < D - opens_before and D - closes_before <= now.
        found = [
            (w, DeadlineRange(shift(last, w.opens_before), shift(at, w.closes_before)))
            for w in self._windows
        ]
        return [(w, r) for w, r in found if not r.empty]

    def render(self, width: int = 72) -> str:
        """Draw the schedule as an ASCII timeline, ``width`` columns wide.

        See [Send windows](../concepts/windows.md) for an example.
        """
        from notifyonce._schedule.timeline import (
            render_timeline,  # the drawing code is only needed here
        )

        return render_timeline(self, width=width)
