"""Slot keys: turning ``(action, subject, cycle)`` into the canonical text the ledger stores.

Pure functions, shared by the sync and async ledgers and the Notifier. Every check runs
before any SQL, so bad input never writes a row.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from typing import TypeAlias

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = [
    "MAX_ACTION_LENGTH",
    "MAX_CYCLE_LENGTH",
    "MAX_SUBJECT_LENGTH",
    "Cycle",
    "KeyMaker",
    "SlotKey",
    "Subject",
    "check_text",
    "make_key",
    "normalize_action",
    "normalize_cycle",
    "normalize_subject",
]

Subject: TypeAlias = int | str
"""A user or chat id: an int, or a non-empty str."""

Cycle: TypeAlias = dt.datetime | dt.date | int | str
"""What makes a slot recur: an aware datetime (e.g. the end of the paid period), a date,
an int or a str."""

MAX_ACTION_LENGTH = 64
MAX_SUBJECT_LENGTH = 128
MAX_CYCLE_LENGTH = 128

# Stored as text so one column serves every kind of cycle. The datetime form is fixed-width
# ISO 8601 in UTC (YYYY-MM-DDTHH:MM:SSZ), so text order is time order inside the unique index.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A control character, or a lone surrogate (it cannot be encoded as UTF-8: the driver
# would fail mid-statement). One search for the text that has neither, nearly all of it.
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
# From 00:00 UTC of a date to the end of that date at UTC-12, the last zone to finish it.
_DATE_ENDS_EVERYWHERE = dt.timedelta(hours=36)
# The datetimes and dates a cycle may be: far enough from datetime.min/max that converting
# to UTC and adding a date's 36 hours cannot overflow, and 4-digit years so the text form
# sorts like time.
_FIRST_DAY = dt.date(1, 1, 2)
_LAST_DAY = dt.date(9999, 12, 29)
_NAIVE_ADVICE = (
    "naive datetime; pass an aware one. For a value known to be UTC (e.g. read from a "
    "SQLite or MySQL DATETIME column written in UTC) use value.replace(tzinfo=timezone.utc); "
    "for local wall-clock time attach its zone, value.replace(tzinfo=ZoneInfo('Europe/Berlin')). "
    "Never value.astimezone(): it assumes the zone of the host it runs on"
)


@dataclass(frozen=True, slots=True)
class SlotKey:
    """The canonical, validated form of a slot's key.

    Attributes:
        action: What is sent, e.g. ``"trial_6h"``.
        subject: Who it is for, as text (``42`` becomes ``"42"``).
        cycle: Which cycle, as text: ``"2026-11-30T18:00:00Z"`` for a datetime,
            ``"2026-11-30"`` for a date, the decimal digits of an int, or the str itself.
        cycle_at: The last moment the cycle names, in UTC: the datetime itself, or for a
            date the moment that date ends everywhere on Earth (24:00 at UTC-12, i.e. the
            next day 12:00 UTC); None for int and str cycles. The retention purge uses it
            to know when a cycle can no longer fire.
    """

    action: str
    subject: str
    cycle: str
    cycle_at: dt.datetime | None = None

    def __str__(self) -> str:
        return f"{self.action}/{self.subject}/{self.cycle}"

    @property
    def idempotency_key(self) -> str:
        """An opaque, stable key for this slot, safe in an HTTP header.

        The same for every attempt of the slot and different for every other slot (a
        SHA-256 of the three canonical parts), so a receiver that deduplicates by it turns
        at-least-once delivery into exactly-once.

        Examples:
            >>> make_key("trial_6h", 42, 1764613815).idempotency_key
            'nfo1-7d8e4ea70ff5f784bf069836af851c01'
        """
        digest = hashlib.sha256(
            "\x00".join((self.action, self.subject, self.cycle)).encode()
        ).hexdigest()
        return f"nfo1-{digest[:32]}"


def check_text(field: str, value: str, limit: int) -> str:
    """``value`` if it is a storable key text: not empty or blank, at most ``limit``
    characters, no control characters or lone surrogates; else a ValidationError
    naming ``field``."""
    if not value or value.isspace():
        raise ValidationError(field, "must not be empty or blank")
    if len(value) > limit:
        raise ValidationError(field, f"is {len(value)} characters long, the limit is {limit}")
    if _UNSTORABLE.search(value):
        if _CONTROL.search(value):
            raise ValidationError(field, "must not contain control characters (NUL included)")
        raise ValidationError(field, "must not contain lone surrogates (it cannot be UTF-8)")
    return value


def normalize_action(action: object) -> str:
    """Validate an action name and return it.

    Raises:
        ValidationTypeError: ``action`` is not a str.
        ValidationError: it is empty, blank, longer than 64 characters or has control
            characters.
    """
    if not isinstance(action, str):
        raise ValidationTypeError("action", f"must be a str, got {type(action).__name__}")
    return check_text("action", action, MAX_ACTION_LENGTH)


def normalize_subject(subject: object) -> str:
    """Return the canonical text of a subject (an int or a str).

    Raises:
        ValidationTypeError: ``subject`` is not an int or a str (a bool is rejected too).
        ValidationError: a str subject is empty, blank, too long or has control characters.
    """
    if type(subject) is str:  # the common case first: one type test, not three
        return check_text("subject", subject, MAX_SUBJECT_LENGTH)
    if isinstance(subject, bool) or not isinstance(subject, (int, str)):
        raise ValidationTypeError(
            "subject", f"must be an int or a str, got {type(subject).__name__}"
        )
    if isinstance(subject, int):
        text = str(subject)
        if len(text) > MAX_SUBJECT_LENGTH:
            raise ValidationError("subject", f"int has more than {MAX_SUBJECT_LENGTH} digits")
        return text
    return check_text("subject", subject, MAX_SUBJECT_LENGTH)


def normalize_cycle(cycle: object) -> tuple[str, dt.datetime | None]:
    """Return the canonical text of a cycle and, for points in time, the UTC datetime.

    An aware datetime is converted to UTC and truncated to whole seconds, so
    ``period_end`` read back from any database with any precision names the same slot.

    Raises:
        ValidationTypeError: ``cycle`` is not a datetime, date, int or str.
        ValidationError: a naive datetime, or an empty, blank or too long str.
    """
    if isinstance(cycle, dt.datetime):
        offset = cycle.utcoffset()
        if offset is None:
            raise ValidationError("cycle", _NAIVE_ADVICE)
        _check_day(cycle.date())
        at = (cycle - offset).replace(tzinfo=dt.timezone.utc, microsecond=0)
        # isoformat, not strftime: strftime's %Y does not pad years below 1000 on glibc.
        return at.replace(tzinfo=None).isoformat(timespec="seconds") + "Z", at
    if isinstance(cycle, dt.date):
        # A date's deadline may fall at any hour of that day in any zone: the purge may
        # only treat it as over once the day has ended everywhere.
        _check_day(cycle)
        midnight = dt.datetime(cycle.year, cycle.month, cycle.day, tzinfo=dt.timezone.utc)
        return cycle.isoformat(), midnight + _DATE_ENDS_EVERYWHERE
    if isinstance(cycle, bool) or not isinstance(cycle, (int, str)):
        raise ValidationTypeError(
            "cycle",
            f"must be an aware datetime, a date, an int or a str, got {type(cycle).__name__}",
        )
    if isinstance(cycle, int):
        text = str(cycle)
        if len(text) > MAX_CYCLE_LENGTH:
            raise ValidationError("cycle", f"int has more than {MAX_CYCLE_LENGTH} digits")
        return text, None
    return check_text("cycle", cycle, MAX_CYCLE_LENGTH), None


def _check_day(day: dt.date) -> None:
    if not _FIRST_DAY <= day <= _LAST_DAY:
        raise ValidationError(
            "cycle", f"must fall between {_FIRST_DAY} and {_LAST_DAY}, got {day.isoformat()}"
        )


def make_key(action: object, subject: object, cycle: object) -> SlotKey:
    """Validate and normalise the three parts of a slot key.

    Examples:
        >>> import datetime as dt
        >>> msk = dt.timezone(dt.timedelta(hours=3))
        >>> end = dt.datetime(2026, 12, 1, 21, 30, 15, 999, tzinfo=msk)
        >>> str(make_key("trial_6h", 42, end))
        'trial_6h/42/2026-12-01T18:30:15Z'

    Raises:
        ValidationError: a part is invalid (its ``field`` names which one).
    """
    action_text = normalize_action(action)
    subject_text = normalize_subject(subject)
    cycle_text, cycle_at = normalize_cycle(cycle)
    return SlotKey(action_text, subject_text, cycle_text, cycle_at)


# Cycles whose normal form depends only on their value (equal values, equal forms).
_MEMO_CYCLE_TYPES = frozenset({dt.datetime, dt.date, int, str})


class KeyMaker:
    """Slot keys of one action, as `make_key` makes them, each distinct cycle normalised
    once: a run names the same few cycles (deadlines, a campaign id) for many subjects.

    Examples:
        >>> keys = KeyMaker("trial_6h")
        >>> keys(42, "2026-12") == make_key("trial_6h", 42, "2026-12")
        True
    """

    __slots__ = ("_cycles", "action")

    def __init__(self, action: object) -> None:
        self.action = normalize_action(action)
        self._cycles: dict[tuple[object, ...], tuple[str, dt.datetime | None]] = {}

    def __call__(self, subject: object, cycle: object) -> SlotKey:
        text = str(subject) if type(subject) is int else ""
        if not text or len(text) > MAX_SUBJECT_LENGTH:
            text = normalize_subject(subject)
        kind = type(cycle)
        if kind not in _MEMO_CYCLE_TYPES:
            return SlotKey(self.action, text, *normalize_cycle(cycle))  # raises its error
        # Python compares datetimes of one zone by their wall clock, fold ignored: the two
        # 02:30 of a night whose clocks go back are equal but are different moments.
        memo = (kind, cycle, cycle.fold) if kind is dt.datetime else (kind, cycle)  # type: ignore[attr-defined]
        normal = self._cycles.get(memo)
        if normal is None:
            normal = self._cycles[memo] = normalize_cycle(cycle)
        return SlotKey(self.action, text, normal[0], normal[1])
