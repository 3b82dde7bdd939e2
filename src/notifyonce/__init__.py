"""notifyonce: send each reminder once per cycle.

A slot ``(action, subject, cycle)`` is claimed in your own database before the message is
sent, so restarts, parallel workers and flaky networks cannot send it twice.
"""

from __future__ import annotations

from ._claim import Claim
from ._errors import (
    LedgerError,
    LedgerUnavailableError,
    NotifyOnceError,
    PermanentSendError,
    ScheduleError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from ._keys import Cycle, SlotKey, Subject, make_key
from ._ledger import AsyncLedger, Ledger
from ._ledger_records import LedgerStats, SlotRecord, SweepResult
from ._message import Message, Receipt, Sender
from ._outcome import DeliveryMode, Outcome
from ._table import SlotStatus
from ._version import __version__

__all__ = [
    "AsyncLedger",
    "Claim",
    "Cycle",
    "DeliveryMode",
    "Ledger",
    "LedgerError",
    "LedgerStats",
    "LedgerUnavailableError",
    "Message",
    "NotifyOnceError",
    "Outcome",
    "PermanentSendError",
    "Receipt",
    "ScheduleError",
    "SendError",
    "Sender",
    "SlotKey",
    "SlotRecord",
    "SlotStatus",
    "Subject",
    "SweepResult",
    "TransientSendError",
    "UncertainSendError",
    "ValidationError",
    "ValidationTypeError",
    "__version__",
    "make_key",
]
