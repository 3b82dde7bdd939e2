"""A won slot."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from notifyonce._keys import SlotKey

__all__ = ["Claim"]


@dataclass(frozen=True, slots=True)
class Claim:
    """A slot won by this caller, committed before it was returned.

    Pass it back to ``mark_sent``, ``mark_failed``, ``mark_unknown`` or ``release``. Those
    act only while ``token`` still matches the row: after the lease expired and another
    worker took the slot over, they change nothing and return False.

    Attributes:
        key: The slot's normalised key.
        id: The row id in the ledger table.
        token: The fencing token of this claim: unique per claim of a slot.
        attempt: The slot's attempts that may have delivered, this one included: 1 for
            the first claim, +1 for every later one, except that a release whose send
            certainly did not deliver gives its attempt back (``max_attempts`` counts
            only attempts that may have delivered).
        lease_until: When the lease expires (UTC) unless the claim is marked first.
    """

    key: SlotKey
    id: int
    token: int
    attempt: int
    lease_until: dt.datetime
