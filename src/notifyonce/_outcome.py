"""Delivery modes and per-notification outcomes."""

from __future__ import annotations

import enum

__all__ = ["DeliveryMode", "Outcome"]


class DeliveryMode(str, enum.Enum):
    """What to do when a send may or may not have been delivered.

    Attributes:
        AT_MOST_ONCE: Record the slot as ``unknown`` and never send it again: zero
            duplicates, a message may be lost. The default.
        AT_LEAST_ONCE: Send again (up to ``max_attempts``) after an uncertain outcome or an
            expired lease: nothing is lost, duplicates are bounded by the attempts.
    """

    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"


class Outcome(str, enum.Enum):
    """What happened to one notification.

    Attributes:
        SENT: Delivered and recorded as sent.
        DUPLICATE: Someone else holds or already finished the slot; nothing was sent.
        FAILED: Refused for good (bot blocked, chat not found); never retried.
        RETRY: Certainly not delivered; the slot was released for a later run.
        UNKNOWN: May or may not have been delivered; not sent again automatically.
        LEASE_LOST: Sent, but the lease expired and another worker took the slot over
            before the result could be recorded; nothing was overwritten.
        SKIPPED: Not attempted, nothing claimed and no request made: the recipient is
            gone (blocked the bot, deleted its account) or opted out of the
            notification's category, or the run is a dry run, or spacing, quiet hours
            or a frequency cap (``"capped"``) held it back. ``Result.reason`` says which.
    """

    SENT = "sent"
    DUPLICATE = "duplicate"
    FAILED = "failed"
    RETRY = "retry"
    UNKNOWN = "unknown"
    LEASE_LOST = "lease_lost"
    SKIPPED = "skipped"
