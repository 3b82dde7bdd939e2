"""What the ledger returns when asked about slots: records, sweep results, statistics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from notifyonce._keys import SlotKey
from notifyonce._ledger.table import SlotStatus

__all__ = ["CAPPED_NOTE", "LedgerStats", "SlotRecord", "SweepResult"]


@dataclass(frozen=True)
class SlotRecord:
    """Everything the ledger stores about one slot.

    Attributes:
        key: The slot's key.
        id: The row id.
        status: Where the slot stands.
        attempt: How many times it was claimed (1 after the first claim).
        token: The fencing token of the latest claim.
        lease_until: When the latest claim's lease ends (UTC).
        created_at: When the slot was first claimed (UTC).
        updated_at: When the row last changed (UTC).
        sent_at: When it was marked sent (UTC), else None.
        last_error: The last error recorded (at most 500 characters), else None.
        message_id: The provider's message id given to ``mark_sent``, else None.
    """

    key: SlotKey
    id: int
    status: SlotStatus
    attempt: int
    token: int
    lease_until: dt.datetime
    created_at: dt.datetime
    updated_at: dt.datetime
    sent_at: dt.datetime | None
    last_error: str | None
    message_id: str | None


@dataclass(frozen=True)
class SweepResult:
    """What a ``sweep`` changed.

    Attributes:
        unknown: Slots whose expired claim was recorded as UNKNOWN.
        released: Slots whose expired claim was released for another attempt.
    """

    unknown: list[SlotKey]
    released: list[SlotKey]


#: The error a slot released for a frequency cap keeps (the skip's reason, ``"capped"``).
CAPPED_NOTE = "capped"


@dataclass(frozen=True)
class LedgerStats:
    """A summary of the ledger for dashboards and the command line.

    Attributes:
        counts: Rows per ``(action, status)``.
        live_claims: CLAIMED rows whose lease has not expired.
        oldest_live_claim: When the oldest live claim was taken (UTC), or None.
        expired_leases: CLAIMED rows whose lease expired (what ``sweep`` would handle).
        unknown: UNKNOWN rows: sends whose outcome nobody knows.
        capped: Per action, the RELEASED rows whose recipient a frequency cap held back
            (counted in ``counts`` too): a run skipped them as ``"capped"``, and a later
            run tries them again.
    """

    counts: Mapping[tuple[str, SlotStatus], int]
    live_claims: int
    oldest_live_claim: dt.datetime | None
    expired_leases: int
    unknown: int
    capped: Mapping[str, int] = field(default_factory=dict)
