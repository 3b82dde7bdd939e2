"""Argument checks of the ledger's methods: all run before any SQL, so bad input writes
nothing and raises a ValidationError naming the argument."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import (
    MAX_SUBJECT_LENGTH,
    SlotKey,
    normalize_action,
    normalize_cycle,
    normalize_subject,
)
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.table import MAX_ERROR_LENGTH, MAX_MESSAGE_ID_LENGTH, SlotStatus
from notifyonce._ledger.transitions import MARK_CALLS

__all__ = [
    "ClaimOptions",
    "check_aware",
    "check_bool",
    "check_claim",
    "check_lease",
    "check_mark_results",
    "check_message_id",
    "check_positive_int",
    "check_statuses",
    "check_synchronous_commit",
    "check_text",
    "memo_cycle",
    "normalize_items",
    "normalize_subjects",
    "storable",
    "storable_detail",
]

# Cycles whose normal form depends only on their value (equal values, equal forms).
_MEMO_CYCLES = frozenset({dt.datetime, dt.date, int, str})
# What a mark may record: the statuses the marks move a claim into.
_MARK_STATUSES = frozenset(MARK_CALLS)


def check_lease(value: object, field: str = "lease") -> dt.timedelta:
    """Return ``value`` if it is a positive timedelta."""
    if not isinstance(value, dt.timedelta):
        raise ValidationTypeError(field, f"must be a timedelta, got {type(value).__name__}")
    if value <= dt.timedelta(0):
        raise ValidationError(field, "must be positive")
    return value


#: What ``synchronous_commit`` may ask of a claim's commit: PostgreSQL's levels that wait
#: for a synchronous standby (weakest first).
SYNCHRONOUS_COMMITS = ("remote_write", "on", "remote_apply")


def check_synchronous_commit(value: object) -> str | None:
    """Return ``value`` if it is None or one of `SYNCHRONOUS_COMMITS`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationTypeError(
            "synchronous_commit", f"must be a str or None, got {type(value).__name__}"
        )
    if value not in SYNCHRONOUS_COMMITS:
        allowed = ", ".join(repr(level) for level in SYNCHRONOUS_COMMITS)
        raise ValidationError(
            "synchronous_commit",
            f"must be one of {allowed} or None (the levels that wait for a standby), got {value!r}",
        )
    return value


def check_positive_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationTypeError(field, f"must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValidationError(field, f"must be at least 1, got {value}")
    return value


def check_bool(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationTypeError(field, f"must be a bool, got {type(value).__name__}")
    return value


def check_aware(field: str, value: object) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise ValidationTypeError(field, f"must be a datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise ValidationError(field, "naive datetime; pass an aware one")
    try:
        return value.astimezone(dt.timezone.utc)
    except OverflowError:
        raise ValidationError(field, "is too close to datetime.min or datetime.max") from None


def check_statuses(value: object, *, allowed: frozenset[SlotStatus]) -> list[SlotStatus]:
    """One status or several (SlotStatus members or their values), each in ``allowed``."""
    items = [value] if isinstance(value, (str, SlotStatus)) else value
    if not isinstance(items, Iterable):
        raise ValidationTypeError(
            "status", f"must be a status or statuses, got {type(value).__name__}"
        )
    names = ", ".join(sorted(s.value for s in allowed))
    statuses: list[SlotStatus] = []
    for item in items:
        try:
            status = SlotStatus(item)
        except ValueError:
            raise ValidationError("status", f"{item!r} is not one of: {names}") from None
        if status not in allowed:
            raise ValidationError("status", f"{status.value!r} is not one of: {names}")
        statuses.append(status)
    if not statuses:
        raise ValidationError("status", f"name at least one of: {names}")
    return list(dict.fromkeys(statuses))


def check_claim(value: object) -> Claim:
    if not isinstance(value, Claim):
        raise ValidationTypeError("claim", f"must be a Claim, got {type(value).__name__}")
    return value


# NUL and lone surrogates: PostgreSQL refuses the first in text, the drivers of MySQL and
# SQLite cannot encode the second. Both can come from a provider's answer.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str, limit: int) -> str:
    """``text`` as every database can store it: unstorable characters replaced, truncated.

    An error text or a message id is a record of what happened, not a key: replacing a
    character the database would refuse keeps the outcome (the point) instead of losing it.
    """
    return _UNSTORABLE.sub("\ufffd", text[:limit])


def storable_detail(status: SlotStatus, detail: str) -> str:
    """A mark's detail as it is stored: the message id of a SENT mark, else the error."""
    return storable(
        detail, MAX_MESSAGE_ID_LENGTH if status is SlotStatus.SENT else MAX_ERROR_LENGTH
    )


def check_text(field: str, value: object, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValidationTypeError(field, f"must be a str, got {type(value).__name__}")
    return storable(value, MAX_ERROR_LENGTH)


def check_message_id(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValidationTypeError(
            "message_id", f"must be an int, a str or None, got {type(value).__name__}"
        )
    return storable(str(value), MAX_MESSAGE_ID_LENGTH)


@dataclass(frozen=True)
class ClaimOptions:
    """The validated options of one claim call."""

    lease: dt.timedelta
    take_expired: bool
    max_attempts: int | None


def normalize_items(action: object, items: object) -> list[SlotKey]:
    """Validate every item before any SQL; collapse duplicates, keep first-seen order.

    A window run names the same few cycles (deadlines) for many subjects, so each
    distinct cycle is normalised once per call; an int subject, the common case, skips
    the general check unless it is too long.
    """
    action_text = normalize_action(action)
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise ValidationTypeError("items", "must be an iterable of (subject, cycle) pairs")
    keys: dict[tuple[str, str], SlotKey] = {}
    cycles: dict[tuple[object, ...], tuple[str, dt.datetime | None]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 2:
            raise ValidationTypeError(
                "items", f"item {index} must be a (subject, cycle) tuple, got {type(item).__name__}"
            )
        subject, cycle = item
        text = str(subject) if type(subject) is int else ""
        if not text or len(text) > MAX_SUBJECT_LENGTH:
            text = normalize_subject(subject)
        normalized = memo_cycle(cycle, cycles)
        pair = (text, normalized[0])
        if pair not in keys:
            keys[pair] = SlotKey(action_text, text, normalized[0], normalized[1])
    return list(keys.values())


#: Normal forms of cycles by value (see `memo_cycle`).
CycleMemo = dict[tuple[object, ...], tuple[str, "dt.datetime | None"]]


def memo_cycle(cycle: object, memo: CycleMemo) -> tuple[str, dt.datetime | None]:
    """`normalize_cycle` of ``cycle``, kept in ``memo`` for the next cycle equal to it (of
    the types whose normal form depends only on their value)."""
    kind = type(cycle)
    if kind not in _MEMO_CYCLES:
        return normalize_cycle(cycle)  # raises the type error
    # Python compares datetimes of one zone by their wall clock, fold ignored: the two
    # 02:30 of a night whose clocks go back are equal but are different moments, so the
    # fold is part of the memo's key.
    key = (kind, cycle, cycle.fold) if kind is dt.datetime else (kind, cycle)  # type: ignore[attr-defined]
    normalized = memo.get(key)
    if normalized is None:
        normalized = memo[key] = normalize_cycle(cycle)
    return normalized


def normalize_subjects(subjects: object) -> list[str]:
    """The distinct subject texts, validated."""
    if isinstance(subjects, (str, bytes)) or not isinstance(subjects, Iterable):
        raise ValidationTypeError("subjects", "must be an iterable of subjects")
    return list(dict.fromkeys(normalize_subject(s) for s in subjects))


def check_mark_results(
    results: Sequence[tuple[Claim, SlotStatus, str | None]],
) -> list[tuple[Claim, SlotStatus, str | None]]:
    """Validate ``mark_many`` input: claims, final statuses, str details."""
    checked = []
    seen: set[int] = set()
    for claim, status, detail in results:
        if isinstance(claim, Claim):
            if claim.id in seen:
                # Two outcomes for one row: which one is true cannot be guessed.
                raise ValidationError(
                    "results", f"the claim of {claim.key} (row {claim.id}) appears twice"
                )
            seen.add(claim.id)
        if not isinstance(status, SlotStatus) or status not in _MARK_STATUSES:
            raise ValidationError(
                "status", f"must be SENT, FAILED, UNKNOWN or RELEASED: {status!r}"
            )
        if status is SlotStatus.SENT:
            text = check_message_id(detail)
        else:
            text = check_text("error", detail, optional=True)
        checked.append((check_claim(claim), status, text))
    return checked
