"""A send window counted back from a deadline, and the deadlines it covers at a given moment."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import normalize_action
from notifyonce._schedule.durations import check_duration, format_duration

__all__ = ["DeadlineRange", "Window", "shift", "to_utc"]

UTC = dt.timezone.utc
_FIRST = dt.datetime.min.replace(tzinfo=UTC)
_LAST = dt.datetime.max.replace(tzinfo=UTC)


def to_utc(field: str, value: object) -> dt.datetime:
    """Return an aware datetime converted to UTC.

    Arithmetic between two aware datetimes that share a ``ZoneInfo`` is wall-clock
    arithmetic in Python, which is off by an hour across a DST change; converting to UTC
    first makes "5 hours before the deadline" mean 5 real hours.

    Raises:
        ValidationTypeError: ``value`` is not a datetime.
        ValidationError: ``value`` is naive, or has no UTC value within the years 1 to
            9999 (the first hours of year 1 east of Greenwich, the last of 9999 west).
    """
    if not isinstance(value, dt.datetime):
        raise ValidationTypeError(field, f"must be an aware datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise ValidationError(
            field,
            "naive datetime; pass an aware one, e.g. datetime.now(timezone.utc) "
            "or value.replace(tzinfo=timezone.utc) for a UTC value read from the database",
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(
            field, "is too close to datetime.min or datetime.max to have a UTC value"
        ) from None


def shift(at: dt.datetime, by: dt.timedelta) -> dt.datetime:
    """``at + by`` (UTC), held at the first or the last moment a datetime holds.

    No deadline lies beyond them, so a range of deadlines that would reach past one ends
    there and holds exactly the deadlines it would have held.
    """
    try:
        return at + by
    except OverflowError:
        return _LAST if by > dt.timedelta(0) else _FIRST


@dataclass(frozen=True, slots=True)
class DeadlineRange:
    """The deadlines ``D`` with ``after < D <= until``: open at the start, closed at the end.

    That orientation follows from the window being half-open in time: a window
    ``[D - opens_before, D - closes_before)`` is open at ``now`` exactly when
    ``now + closes_before < D <= now + opens_before``.

    Examples:
        >>> import datetime as dt
        >>> t = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
        >>> r = DeadlineRange(t, t + dt.timedelta(hours=1))
        >>> (t in r, t + dt.timedelta(hours=1) in r)
        (False, True)

    Attributes:
        after: Deadlines must be later than this (UTC).
        until: Deadlines must be at or before this (UTC).
    """

    after: dt.datetime
    until: dt.datetime

    def __contains__(self, deadline: object) -> bool:
        return self.after < to_utc("deadline", deadline) <= self.until

    @property
    def empty(self) -> bool:
        """True when no deadline fits (``until <= after``)."""
        return self.until <= self.after


@dataclass(frozen=True, slots=True)
class Window:
    """A send window: open from ``opens_before`` until ``closes_before`` before a deadline.

    For a deadline ``D`` the window is open during the half-open interval
    ``[D - opens_before, D - closes_before)``: a run exactly ``opens_before`` before the
    deadline is inside, a run exactly ``closes_before`` before it is not, so two windows
    that touch never are open at the same instant.

    Only types, and that each bound is within 100 years (36,525 days) either way, are
    checked here; how the bounds fit together is checked by
    [`Schedule`][notifyonce.Schedule], which reports every problem of every window at once.

    Examples:
        >>> import datetime as dt
        >>> w = Window("trial_6h", opens_before=dt.timedelta(hours=6.5),
        ...            closes_before=dt.timedelta(hours=5))
        >>> str(w.width)
        '1:30:00'

    Attributes:
        action: The action of the reminder sent in this window (part of the slot key).
        opens_before: How long before the deadline the window opens.
        closes_before: How long before the deadline the window closes (0: at the deadline).

    Raises:
        ValidationTypeError: a field has the wrong type (its ``field`` names it).
        ValidationError: ``action`` is empty, blank, too long or has control characters;
            a bound is longer than 100 years either way (``field`` names it).
    """

    action: str
    opens_before: dt.timedelta
    closes_before: dt.timedelta

    def __post_init__(self) -> None:
        normalize_action(self.action)
        for field in ("opens_before", "closes_before"):
            value = getattr(self, field)
            if not isinstance(value, dt.timedelta):
                raise ValidationTypeError(
                    field, f"must be a datetime.timedelta, got {type(value).__name__}"
                )
            check_duration(field, value)

    @property
    def width(self) -> dt.timedelta:
        """How long the window stays open: ``opens_before - closes_before``."""
        return self.opens_before - self.closes_before

    def is_open(self, deadline: dt.datetime, now: dt.datetime) -> bool:
        """Whether the window is open for ``deadline`` at ``now`` (both aware).

        Raises:
            ValidationError: ``deadline`` or ``now`` is naive (or not a datetime).
        """
        before = to_utc("deadline", deadline) - to_utc("now", now)
        return self.closes_before < before <= self.opens_before

    def deadline_range(self, now: dt.datetime) -> DeadlineRange:
        """The deadlines for which this window is open at ``now``.

        Examples:
            >>> import datetime as dt
            >>> now = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
            >>> w = Window("trial_1h", opens_before=dt.timedelta(hours=1.2),
            ...            closes_before=dt.timedelta(hours=0.4))
            >>> r = w.deadline_range(now)
            >>> (r.after.time().isoformat(), r.until.time().isoformat())
            ('12:24:00', '13:12:00')

        Raises:
            ValidationError: ``now`` is naive (or not a datetime).
        """
        at = to_utc("now", now)
        return DeadlineRange(shift(at, self.closes_before), shift(at, self.opens_before))

    def describe(self) -> str:
        """``'trial_6h' (6h30m to 5h before the deadline)``: how messages name a window."""
        return (
            f"{self.action!r} ({format_duration(self.opens_before)} to "
            f"{format_duration(self.closes_before)} before the deadline)"
        )
