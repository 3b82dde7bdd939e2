"""Durations written the way people say them (``6h30m``, ``5m``), and how long one may be."""

from __future__ import annotations

import datetime as dt

from notifyonce._errors import ValidationError

__all__ = ["MAX_DURATION", "check_duration", "format_duration"]

MAX_DURATION = dt.timedelta(days=36_525)
"""100 years: the longest a window's bound, a job's period, its downtime or a gap may be.

Far beyond any reminder, and short enough that no sum of two of them overflows a
timedelta, and that a deadline of this century minus one stays within the years a
datetime holds (1 to 9999)."""

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60))


def format_duration(value: dt.timedelta) -> str:
    """Write a timedelta in compact human units.

    Examples:
        >>> import datetime as dt
        >>> format_duration(dt.timedelta(hours=6.5))
        '6h30m'
        >>> format_duration(dt.timedelta(minutes=-5))
        '-5m'
        >>> format_duration(dt.timedelta(0))
        '0s'
    """
    if value < dt.timedelta(0):
        return "-" + format_duration(-value)
    micros = value // dt.timedelta(microseconds=1)
    seconds, fraction = divmod(micros, 1_000_000)
    parts = []
    for suffix, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{suffix}")
    if fraction:
        parts.append(f"{seconds}.{fraction:06d}".rstrip("0") + "s")
    elif seconds or not parts:
        parts.append(f"{seconds}s")
    return "".join(parts)


def check_duration(field: str, value: dt.timedelta) -> dt.timedelta:
    """``value``, or a ValidationError naming ``field`` when it is past `MAX_DURATION`
    either way (999,999,999 days is a typo, and it overflows the arithmetic of a run)."""
    if abs(value) > MAX_DURATION:
        raise ValidationError(
            field,
            f"is {format_duration(value)}, past the 100 years ({MAX_DURATION.days:,} days) "
            "a duration may be either way",
        )
    return value
