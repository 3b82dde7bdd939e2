"""notifyonce: send each reminder once per cycle.

A slot ``(action, subject, cycle)`` is claimed in your own database before the message is
sent, so restarts, parallel workers and flaky networks cannot send it twice.
"""

from __future__ import annotations

from ._broadcast import (
    Broadcast,
    BroadcastProgress,
    BroadcastReport,
    RecipientSource,
    recipients_from_file,
    recipients_from_query,
)
from ._channels import Channel, ChannelReceipt, FallbackSender, FanoutSender
from ._claim import Claim
from ._errors import (
    LedgerError,
    LedgerUnavailableError,
    NotifyOnceError,
    PermanentSendError,
    ScheduleError,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from ._keys import Cycle, SlotKey, Subject, make_key
from ._ledger import AsyncLedger, Ledger
from ._ledger_records import LedgerStats, SlotRecord, SweepResult
from ._media import Document, Photo, Video
from ._message import Message, Receipt, Sender
from ._notifier import Notification, Notifier, Report, Result, TickReport
from ._observe import Observer, SendEvent, report_flood_wait
from ._outcome import DeliveryMode, Outcome
from ._quiet import QuietHours
from ._schedule import Schedule
from ._selection import deadline_filter, schedule_filter, window_filter, window_filters
from ._table import SlotStatus
from ._version import __version__
from ._window import DeadlineRange, Window

__all__ = [
    "AsyncLedger",
    "Broadcast",
    "BroadcastProgress",
    "BroadcastReport",
    "Channel",
    "ChannelReceipt",
    "Claim",
    "Cycle",
    "DeadlineRange",
    "DeliveryMode",
    "Document",
    "FallbackSender",
    "FanoutSender",
    "Ledger",
    "LedgerError",
    "LedgerStats",
    "LedgerUnavailableError",
    "Message",
    "Notification",
    "Notifier",
    "NotifyOnceError",
    "Observer",
    "Outcome",
    "PermanentSendError",
    "Photo",
    "QuietHours",
    "Receipt",
    "RecipientSource",
    "Report",
    "Result",
    "Schedule",
    "ScheduleError",
    "SendError",
    "SendEvent",
    "Sender",
    "SenderConfigError",
    "SlotKey",
    "SlotRecord",
    "SlotStatus",
    "Subject",
    "SweepResult",
    "TickReport",
    "TransientSendError",
    "UncertainSendError",
    "ValidationError",
    "ValidationTypeError",
    "Video",
    "Window",
    "__version__",
    "deadline_filter",
    "make_key",
    "recipients_from_file",
    "recipients_from_query",
    "report_flood_wait",
    "schedule_filter",
    "window_filter",
    "window_filters",
]
