"""Durations written the way people say them (``6h30m``, ``5m``), for messages and timelines."""

from __future__ import annotations

import datetime as dt

__all__ = ["format_duration"]

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
