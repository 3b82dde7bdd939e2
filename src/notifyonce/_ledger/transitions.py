"""Every move of a slot: from which status to which, by which ledger call, and when.

The ledger's statements make these moves; this table says them in one place. The ledger
reads it for what ``requeue`` may put back and what a mark may record, the tests check it
against what the ledger really does on each database (``tests/test_ledger_model.py``:
every move the ledger makes is in the table, and every move in the table happens), and the
state diagram of ``docs/concepts/slots.md`` is checked against it
(``tests/test_docs.py``). A move added to the code and not here fails the first; added
here and not drawn, the second.

``None`` as a status is "no row": before the first claim, and after ``purge``.
"""

from __future__ import annotations

from dataclasses import dataclass

from notifyonce._ledger.table import SlotStatus

__all__ = ["MARK_CALLS", "TRANSITIONS", "Transition", "moves", "sources", "targets"]

_C, _S, _F, _U, _R = (
    SlotStatus.CLAIMED,
    SlotStatus.SENT,
    SlotStatus.FAILED,
    SlotStatus.UNKNOWN,
    SlotStatus.RELEASED,
)


@dataclass(frozen=True, slots=True)
class Transition:
    """One move of a slot.

    Attributes:
        source: The status before (None: no row yet, or purged).
        target: The status after (None: the row is deleted).
        by: The ledger call that makes it (``claim`` stands for ``claim_slot`` and
            ``claim_many``; ``mark_many`` makes the moves of the single marks).
        when: The condition, as the diagram labels it ("" when the call alone decides).
    """

    source: SlotStatus | None
    target: SlotStatus | None
    by: str
    when: str = ""


#: The mark each status is recorded with (``mark_many`` takes the status itself).
MARK_CALLS: dict[SlotStatus, str] = {
    _S: "mark_sent",
    _F: "mark_failed",
    _U: "mark_unknown",
    _R: "release",
}

TRANSITIONS: tuple[Transition, ...] = (
    Transition(None, _C, "claim", "no row yet"),
    Transition(_R, _C, "claim", "always won again"),
    Transition(_C, _C, "claim", "take-over: lease expired, take_expired=True"),
    *(Transition(_C, status, call) for status, call in MARK_CALLS.items()),
    Transition(_C, _U, "sweep", "lease expired: at most once, or no attempts left"),
    Transition(_C, _R, "sweep", "lease expired: at least once, attempts left"),
    Transition(_U, _R, "requeue"),
    Transition(_F, _R, "requeue"),
    Transition(_C, None, "purge", "lease expired, cycle long past"),
    *(Transition(status, None, "purge", "cycle long past") for status in (_S, _F, _U, _R)),
)


def moves() -> frozenset[tuple[SlotStatus | None, SlotStatus | None, str]]:
    """Every ``(source, target, by)`` of the table."""
    return frozenset((t.source, t.target, t.by) for t in TRANSITIONS)


def sources(by: str) -> frozenset[SlotStatus]:
    """The statuses that ``by`` moves a slot out of."""
    return frozenset(t.source for t in TRANSITIONS if t.by == by and t.source is not None)


def targets(by: str) -> frozenset[SlotStatus]:
    """The statuses that ``by`` moves a slot into."""
    return frozenset(t.target for t in TRANSITIONS if t.by == by and t.target is not None)
