"""What a run is given and what it gives back: Notification in, Result and Report out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from notifyonce._keys import Cycle, SlotKey, Subject
from notifyonce._message import Message, Receipt
from notifyonce._outcome import Outcome

if TYPE_CHECKING:
    from notifyonce._ledger.records import SweepResult

__all__ = ["ATTENTION", "DRY_RUN_SEND", "Notification", "Report", "Result"]

ATTENTION = frozenset({Outcome.FAILED, Outcome.UNKNOWN, Outcome.RETRY, Outcome.LEASE_LOST})
"""The outcomes a person may have to act on; a stream's report keeps these by default."""

DRY_RUN_SEND = "dry run: would send"
"""The reason of a dry run's SKIPPED result that a real run would have sent."""


@dataclass(frozen=True, slots=True)
class Notification:
    """One message for one subject in one cycle.

    Args:
        subject: Who it is for (a user or chat id).
        cycle: Which cycle (e.g. the end of the paid period); see [`make_key`][notifyonce.make_key].
        message: What to send.
        recipient: Where to send it (not blank); defaults to ``str(subject)``.
        timezone: The subject's time zone, for the Notifier's ``quiet_hours``.
        fields: What a campaign knew of the recipient (its row's columns, as text), which
            its message was filled in from; None for a notification without a row. Never
            logged.

    Examples:
        >>> n = Notification(42, "2026-12", Message("6 hours left"))
        >>> n.target
        '42'
    """

    subject: Subject
    cycle: Cycle
    message: Message
    recipient: str | None = None
    timezone: dt.tzinfo | None = None
    fields: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def target(self) -> str:
        """The recipient the sender is given."""
        return self.recipient if self.recipient is not None else str(self.subject)


@dataclass(frozen=True, slots=True)
class Result:
    """What happened to one notification.

    Attributes:
        action: The action it was sent under.
        notification: The notification itself.
        key: Its normalised slot key.
        outcome: What happened.
        attempt: Which attempt of the slot this was (None when nothing was claimed).
        receipt: The sender's receipt when it was delivered.
        error: The provider's code and description, or the exception's class name; never
            a message text.
        reason: Why it was skipped, when it was: ``"gone: blocked"`` (the recipient
            blocked the bot; see [`AsyncAudience`][notifyonce.AsyncAudience]),
            ``"opted out of promo"``, ``"quiet hours"``, ``"spacing"``, ``"dry run"``.
    """

    action: str
    notification: Notification
    key: SlotKey
    outcome: Outcome
    attempt: int | None = None
    receipt: Receipt | None = None
    error: str | None = None
    reason: str | None = None

    def __repr__(self) -> str:
        parts = [f"{self.key}", self.outcome.value]
        if self.attempt is not None:
            parts.append(f"attempt={self.attempt}")
        if self.error:
            parts.append(f"error={self.error!r}")
        if self.reason:
            parts.append(f"reason={self.reason!r}")
        return f"Result({', '.join(parts)})"


@dataclass
class Report:
    """The outcome of a [`Notifier.send_many`][notifyonce.Notifier.send_many] run.

    Attributes:
        counts: Number of notifications per outcome (every outcome is present).
        results: The kept results, in input order. By default every result of a list
            (or other sequence), and of a stream (any other iterable or an async
            iterable) only those that need attention: ``FAILED``, ``UNKNOWN``,
            ``RETRY`` and ``LEASE_LOST``, so that streaming millions of notifications
            keeps the memory flat. ``keep_results=True`` on the Notifier keeps every
            result, ``False`` none; ``counts`` is always complete.
        skips: How many notifications were skipped, per reason (``"gone: blocked"``,
            ``"opted out of promo"``, ``"quiet hours"``...): the ``SKIPPED`` count, told
            apart. A skipped notification was neither claimed nor sent.
        swept: What the automatic sweep of expired leases changed before this run, if it ran.
        dry_run: True when nothing was claimed, sent or recorded.
        stopped: Why the run stopped before its end, or None when it ran to the end. A
            bot-wide flood wait longer than the sender waits out stops a run so, and so do
            three refusals about the message (``SendError.about_message``: bad entities,
            a media file gone) before any send of the run was delivered: the sends under
            way finish, and the notifications not tried come back as ``RETRY`` (those of a
            list all; a stream is read no further).
    """

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    results: list[Result] = field(default_factory=list)
    skips: dict[str, int] = field(default_factory=dict)
    swept: SweepResult | None = None
    dry_run: bool = False
    stopped: str | None = None

    def __getitem__(self, outcome: Outcome) -> list[Result]:
        """The kept results with this outcome."""
        return [r for r in self.results if r.outcome is outcome]

    @property
    def total(self) -> int:
        """How many notifications the run handled."""
        return sum(self.counts.values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{o.value}={n}" for o, n in self.counts.items() if n)
        label = "dry run, " if self.dry_run else ""
        stop = f", stopped: {self.stopped}" if self.stopped else ""
        return f"Report({label}{shown or 'empty'}{stop})"
