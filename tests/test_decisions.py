"""The Notifier's decisions as tables: pure functions, no ledger, no sender, no clock.

The rows are the outcome table of docs/concepts/delivery.md: what the sender did, in which
mode, on which attempt -> what the ledger records and what the caller is told.
"""

from __future__ import annotations

import pytest

from notifyonce import (
    DeliveryMode,
    Outcome,
    PermanentSendError,
    Receipt,
    SenderConfigError,
    SlotStatus,
    TransientSendError,
    UncertainSendError,
    ValidationError,
)
from notifyonce._dispatch import INTERRUPTED, Decision, decide_error, detail, settle

AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE
RELEASED, FAILED, UNKNOWN = SlotStatus.RELEASED, SlotStatus.FAILED, SlotStatus.UNKNOWN

ERRORS = {
    "permanent": PermanentSendError("blocked", code=403),
    "transient": TransientSendError("flood", code=429, retry_after=3),
    "config": SenderConfigError("bad token", code=401),
    "validation": ValidationError("recipient", "must be a chat id"),
    "uncertain": UncertainSendError("read timeout"),
    "foreign": RuntimeError("the library broke, quoting the text 'hello'"),
}

# (error, mode, attempt of max 3) -> (status recorded, outcome, may have delivered)
DECIDE_ERROR = [
    ("permanent", AMO, 1, FAILED, Outcome.FAILED, False),
    ("permanent", ALO, 1, FAILED, Outcome.FAILED, False),
    ("transient", AMO, 1, RELEASED, Outcome.RETRY, False),
    ("transient", ALO, 3, RELEASED, Outcome.RETRY, False),
    ("config", AMO, 1, RELEASED, Outcome.RETRY, False),
    ("config", ALO, 1, RELEASED, Outcome.RETRY, False),
    ("validation", AMO, 1, FAILED, Outcome.FAILED, False),
    ("validation", ALO, 1, FAILED, Outcome.FAILED, False),
    ("uncertain", AMO, 1, UNKNOWN, Outcome.UNKNOWN, True),
    ("uncertain", ALO, 1, RELEASED, Outcome.RETRY, True),
    ("uncertain", ALO, 2, RELEASED, Outcome.RETRY, True),
    ("uncertain", ALO, 3, UNKNOWN, Outcome.UNKNOWN, True),
    ("foreign", AMO, 1, UNKNOWN, Outcome.UNKNOWN, True),
    ("foreign", ALO, 1, RELEASED, Outcome.RETRY, True),
    ("foreign", ALO, 3, UNKNOWN, Outcome.UNKNOWN, True),
]


@pytest.mark.parametrize(
    ("error", "mode", "attempt", "status", "outcome", "maybe"),
    DECIDE_ERROR,
    ids=[f"{e}-{m.value}-attempt{a}" for e, m, a, *_ in DECIDE_ERROR],
)
def test_decide_error(
    error: str,
    mode: DeliveryMode,
    attempt: int,
    status: SlotStatus,
    outcome: Outcome,
    maybe: bool,
) -> None:
    decision = decide_error(ERRORS[error], mode, attempt, 3)
    assert (decision.status, decision.outcome, decision.may_have_delivered) == (
        status,
        outcome,
        maybe,
    )


def test_stored_errors_never_quote_a_foreign_exception() -> None:
    """A foreign exception's text may quote the message: only its class is stored."""
    assert decide_error(ERRORS["foreign"], AMO, 1, 3).error == "RuntimeError"
    assert decide_error(ERRORS["validation"], AMO, 1, 3).error == "recipient: must be a chat id"


SENT = Decision(SlotStatus.SENT, Outcome.SENT, receipt=Receipt("1", 42))
MAYBE = Decision(UNKNOWN, Outcome.UNKNOWN, error="read timeout", may_have_delivered=True)
NOT_SENT = Decision(RELEASED, Outcome.RETRY, error="flood")

# (decision, the record landed / lease lost / ledger failed) -> (outcome, error reported)
SETTLE = [
    (SENT, True, Outcome.SENT, None),
    (SENT, False, Outcome.DUPLICATE, None),
    (SENT, None, Outcome.UNKNOWN, "the ledger failed while recording the outcome"),
    (MAYBE, True, Outcome.UNKNOWN, "read timeout"),
    (MAYBE, False, Outcome.LEASE_LOST, "read timeout"),
    (MAYBE, None, Outcome.UNKNOWN, "the ledger failed while recording the outcome"),
    (NOT_SENT, True, Outcome.RETRY, "flood"),
    (NOT_SENT, False, Outcome.DUPLICATE, "flood"),
    (INTERRUPTED, True, Outcome.RETRY, "not sent: interrupted"),
]


@pytest.mark.parametrize(
    ("decision", "landed", "outcome", "error"),
    SETTLE,
    ids=[f"{d.outcome.value}-{landed}" for d, landed, *_ in SETTLE],
)
def test_settle(
    decision: Decision, landed: bool | None, outcome: Outcome, error: str | None
) -> None:
    assert settle(decision, landed) == (outcome, error)


@pytest.mark.parametrize(
    ("decision", "stored"),
    [
        (SENT, "42"),
        (Decision(SlotStatus.SENT, Outcome.SENT, receipt=Receipt("1", None)), None),
        (Decision(SlotStatus.SENT, Outcome.SENT), None),
        (MAYBE, "read timeout"),
        (NOT_SENT, "flood"),
    ],
)
def test_detail(decision: Decision, stored: str | None) -> None:
    assert detail(decision) == stored
