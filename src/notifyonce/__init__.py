"""notifyonce: send each reminder once per cycle.

A slot ``(action, subject, cycle)`` is claimed in your own database before the message is
sent, so restarts, parallel workers and flaky networks cannot send it twice.
"""

from __future__ import annotations

from ._channels import Channel, ChannelReceipt, FallbackSender, FanoutSender
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
from ._message import Message, Receipt, Sender
from ._outcome import DeliveryMode, Outcome
from ._schedule import Schedule
from ._selection import deadline_filter, schedule_filter, window_filter, window_filters
from ._version import __version__
from ._window import DeadlineRange, Window

__all__ = [
    "Channel",
    "ChannelReceipt",
    "Claim",
    "Cycle",
    "DeadlineRange",
    "DeliveryMode",
    "FallbackSender",
    "FanoutSender",
    "LedgerError",
    "LedgerUnavailableError",
    "Message",
    "NotifyOnceError",
    "Outcome",
    "PermanentSendError",
    "Receipt",
    "Schedule",
    "ScheduleError",
    "SendError",
    "Sender",
    "SlotKey",
    "Subject",
    "TransientSendError",
    "UncertainSendError",
    "ValidationError",
    "ValidationTypeError",
    "Window",
    "__version__",
    "deadline_filter",
    "make_key",
    "schedule_filter",
    "window_filter",
    "window_filters",
]
