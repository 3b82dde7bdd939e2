"""notifyonce: send each reminder once per cycle.

A slot ``(action, subject, cycle)`` is claimed in your own database before the message is
sent, so restarts, parallel workers and flaky networks cannot send it twice.
"""

from __future__ import annotations

from notifyonce._audience import (
    AsyncAudience,
    Audience,
    AudienceCounts,
    AudienceRow,
    Gone,
    GoneReason,
    OptOut,
    RecipientState,
)
from notifyonce._broadcast import (
    Broadcast,
    BroadcastProgress,
    BroadcastReport,
    RecipientSource,
    recipients_from_file,
    recipients_from_query,
)
from notifyonce._buttons import inline_keyboard, unsubscribe_button
from notifyonce._caps import FrequencyCap
from notifyonce._digest import Digest, DigestEvent, DigestReport
from notifyonce._drivers.postgresql import pgbouncer_options
from notifyonce._errors import (
    FloodWaitError,
    LedgerError,
    LedgerUnavailableError,
    MessageRefusedError,
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
from notifyonce._keys import Cycle, SlotKey, Subject, make_key
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger, Ledger
from notifyonce._ledger.records import LedgerStats, SlotRecord, SweepResult
from notifyonce._ledger.table import SlotStatus
from notifyonce._media import Album, Copy, Document, Photo, Video
from notifyonce._message import Message, Receipt, Sender, SupportsCheck, SupportsTurn
from notifyonce._notifier import Notification, Notifier, Report, Result, TickReport
from notifyonce._observe import Observer, SendEvent, report_flood_wait
from notifyonce._once import NotDoneError, OnceGuard, OnceResult, once, once_call
from notifyonce._outcome import DeliveryMode, Outcome
from notifyonce._personal import Recipient
from notifyonce._progress_chat import ProgressMessage
from notifyonce._quiet import QuietHours
from notifyonce._revision import (
    CampaignRevision,
    Revision,
    SentMessages,
    recipients_from_campaign,
)
from notifyonce._schedule.schedule import Schedule
from notifyonce._schedule.selection import (
    deadline_filter,
    schedule_filter,
    window_filter,
    window_filters,
)
from notifyonce._schedule.window import DeadlineRange, Window
from notifyonce._senders.channels import Channel, ChannelReceipt, FallbackSender, FanoutSender
from notifyonce._version import __version__

__all__ = [
    "Album",
    "AsyncAudience",
    "AsyncLedger",
    "Audience",
    "AudienceCounts",
    "AudienceRow",
    "Broadcast",
    "BroadcastProgress",
    "BroadcastReport",
    "CampaignRevision",
    "Channel",
    "ChannelReceipt",
    "Claim",
    "Copy",
    "Cycle",
    "DeadlineRange",
    "DeliveryMode",
    "Digest",
    "DigestEvent",
    "DigestReport",
    "Document",
    "FallbackSender",
    "FanoutSender",
    "FloodWaitError",
    "FrequencyCap",
    "Gone",
    "GoneReason",
    "Ledger",
    "LedgerError",
    "LedgerStats",
    "LedgerUnavailableError",
    "Message",
    "MessageRefusedError",
    "NotDoneError",
    "Notification",
    "Notifier",
    "NotifyOnceError",
    "Observer",
    "OnceGuard",
    "OnceResult",
    "OptOut",
    "Outcome",
    "PermanentSendError",
    "Photo",
    "ProgressMessage",
    "QuietHours",
    "Receipt",
    "Recipient",
    "RecipientSource",
    "RecipientState",
    "Report",
    "Result",
    "Revision",
    "Schedule",
    "ScheduleError",
    "SendError",
    "SendEvent",
    "Sender",
    "SenderConfigError",
    "SentMessages",
    "SlotKey",
    "SlotRecord",
    "SlotStatus",
    "Subject",
    "SupportsCheck",
    "SupportsTurn",
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
    "inline_keyboard",
    "make_key",
    "once",
    "once_call",
    "pgbouncer_options",
    "recipients_from_campaign",
    "recipients_from_file",
    "recipients_from_query",
    "report_flood_wait",
    "schedule_filter",
    "unsubscribe_button",
    "window_filter",
    "window_filters",
]
