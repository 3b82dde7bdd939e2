"""Quiet hours: local times of day when a subject is not to be disturbed."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = ["QuietHours"]


@dataclass(frozen=True, slots=True)
class QuietHours:
    """A daily span of local time, ``[start, end)``, in which nothing is sent.

    The span may wrap midnight (22:00 to 08:00). Each notification is judged in its own
    ``Notification.timezone``, or in ``default_timezone`` when it has none. A notification
    that falls in quiet hours is skipped (``Outcome.SKIPPED``, reason ``"quiet hours"``)
    without claiming its slot, so a later run inside the same window sends it; if the
    window closes during the quiet hours, that reminder is skipped for good. Choose
    windows that reach past your quiet hours.

    Examples:
        >>> import datetime as dt
        >>> night = QuietHours(dt.time(22), dt.time(8))
        >>> msk = dt.timezone(dt.timedelta(hours=3))
        >>> night.is_quiet(dt.datetime(2026, 12, 1, 20, 30, tzinfo=dt.timezone.utc), msk)
        True
        >>> night.is_quiet(dt.datetime(2026, 12, 1, 6, 0, tzinfo=dt.timezone.utc), msk)
        False
    """

    start: dt.time
    end: dt.time
    default_timezone: dt.tzinfo = dt.timezone.utc

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if not isinstance(value, dt.time):
                raise ValidationTypeError(
                    name, f"must be a datetime.time, got {type(value).__name__}"
                )
            if value.tzinfo is not None:
                raise ValidationError(name, "must be a local time without tzinfo")
        if self.start == self.end:
            raise ValidationError("end", "must differ from start (an empty or all-day span)")
        if not isinstance(self.default_timezone, dt.tzinfo):
            raise ValidationTypeError("default_timezone", "must be a tzinfo")

    def is_quiet(self, now: dt.datetime, timezone: dt.tzinfo | None = None) -> bool:
        """Whether ``now`` (aware) falls in quiet hours in ``timezone`` (or the default)."""
        if not isinstance(now, dt.datetime) or now.utcoffset() is None:
            raise ValidationError("now", "must be an aware datetime")
        local = now.astimezone(timezone or self.default_timezone).time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end
