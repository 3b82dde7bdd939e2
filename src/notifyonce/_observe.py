"""The instrumentation seam: what a Notifier tells an observer while it runs.

An [`Observer`][notifyonce.Observer] given to ``Notifier(..., observer=...)`` hears about
each run, each claim statement, each send (its duration, outcome and flood waits) and each
result. Its hooks are plain synchronous calls on the task doing the work; one that raises
is logged by its class name and ignored, so a broken exporter never stops a send.

Without an observer (the default) nothing here runs: the pipeline reads no clock, builds
no event and sets no context for it, beyond one ``is None`` check per claim statement,
send and result.

Flood waits are reported by the sender itself, through
[`report_flood_wait`][notifyonce.report_flood_wait] (``TelegramSender`` and
``WebhookSender`` do, on every 429 with a retry-after). When a sender that does not
raises a 429 [`TransientSendError`][notifyonce.TransientSendError] with ``retry_after``,
the Notifier counts that one itself.
"""

from __future__ import annotations

import logging
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from notifyonce._errors import SendError, TransientSendError, ValidationError, ValidationTypeError
from notifyonce._outcome import Outcome

if TYPE_CHECKING:
    from notifyonce._results import Report, Result

__all__ = [
    "SENDING",
    "Hooks",
    "Observer",
    "SendEvent",
    "SendProbe",
    "flood_seconds",
    "note_flood",
    "report_flood_wait",
]

logger = logging.getLogger("notifyonce.notifier")

# The observed send under way in this task (set by the Notifier only when it has an
# observer): how a sender's report_flood_wait reaches it without knowing the Notifier.
SENDING: ContextVar[SendProbe | None] = ContextVar("notifyonce_sending", default=None)


class Observer:
    """Hooks a [`Notifier`][notifyonce.Notifier] calls while it runs: subclass it and
    override the ones you need (each does nothing here).

    Pass it as ``Notifier(ledger, sender, observer=...)``;
    [`Telemetry`][notifyonce.otel.Telemetry] is one, for OpenTelemetry. Hooks are called
    on the event loop, in the task doing the work, and should return at once (record a
    number, start or end a span). A hook that raises is logged at WARNING (its class
    name only; later failures of the same hook in the same run at DEBUG) and the run goes
    on as if it had returned None.

    The hooks other than `on_result` are given the action, counts, durations, the
    outcome and exception class names: never a subject, a recipient, a message text or
    a token.

    Examples:
        >>> class Latency(Observer):
        ...     def __init__(self) -> None:
        ...         self.seconds: list[float] = []
        ...
        ...     def send_finished(self, handle: object, send: SendEvent) -> None:
        ...         self.seconds.append(send.seconds)
        >>> notifier = Notifier(ledger, sender, observer=Latency())  # doctest: +SKIP
    """

    def run_started(self, action: str) -> object:
        """A ``send_many`` run (also one ``send_once``) starts; before any claim or send.

        Returns:
            Anything (a span, a start time); it is given back to `run_finished`. The
            run's claims and sends happen in tasks started after this returns, so a
            context variable set here (an OpenTelemetry context) is seen by their hooks.
        """
        return None

    def run_finished(self, handle: object, action: str, report: Report, error: str | None) -> None:
        """The run ended, with ``report`` (counts so far when it raised) and the class name
        of what it raised, if it did. Called in the task that called `run_started`."""

    def claimed(self, action: str, seconds: float, asked: int, won: int) -> None:
        """One claim statement took ``seconds``; it asked for ``asked`` slots and won ``won``.

        The workers whose turn comes together share one statement, so this is called once
        per statement, not once per notification.
        """

    def send_started(self, action: str, attempt: int) -> object:
        """``sender.send`` is about to be called for a won claim (its ``attempt`` of the slot).

        Returns:
            Anything; it is given back to `send_finished`, which is always called, in the
            same task, also when the send is cancelled.
        """
        return None

    def send_finished(self, handle: object, send: SendEvent) -> None:
        """``sender.send`` returned or raised; ``send`` says how long it took and what it
        means. Called before the outcome is recorded in the ledger."""

    def flood_wait(self, action: str, sender: str, seconds: float) -> None:
        """The provider answered a send of ``action`` with a flood wait (429) of ``seconds``.

        ``sender`` is the sender's class name. Called while the send is under way (from
        inside it), so between that send's `send_started` and `send_finished`.
        """

    def on_result(self, result: Result) -> None:
        """One notification's final result: the same as the Notifier's ``on_result``.

        Unlike the other hooks it gets the whole [`Result`][notifyonce.Result], with its
        notification (subject, message): keep what you record from it free of them.
        """


@dataclass(frozen=True, slots=True)
class SendEvent:
    """One call of ``sender.send``, as an [`Observer`][notifyonce.Observer] hears of it.

    Attributes:
        action: The action it was sent under.
        sender: The sender's class name (``"TelegramSender"``).
        attempt: Which attempt of the slot this was (1 unless at-least-once retried it).
        outcome: What the sender's answer means for the slot: ``SENT``, ``FAILED``,
            ``RETRY`` or ``UNKNOWN`` (as the delivery mode decides), before it is
            recorded. The result's outcome can still differ (``LEASE_LOST``, or
            ``UNKNOWN`` when the ledger fails).
        seconds: How long ``send`` took, rate-limit waits, retries and flood waits inside
            it included.
        error: The class name of what ``send`` raised (``"PermanentSendError"``), else None.
        flood_waits: How many flood waits (429) the provider asked of this send.
        flood_wait_seconds: The seconds those flood waits asked for, in all.
    """

    action: str
    sender: str
    attempt: int
    outcome: Outcome
    seconds: float
    error: str | None = None
    flood_waits: int = 0
    flood_wait_seconds: float = 0.0


def report_flood_wait(seconds: float) -> None:
    """Tell the observer of the send under way that the provider asked it to wait.

    A sender calls this each time the provider answers with a flood wait (Telegram's 429
    with ``retry_after``), whether it then waits and retries or raises. Outside a send of
    a Notifier that has an observer it does nothing.

    Args:
        seconds: How long the provider asked to wait.

    Raises:
        ValidationError: ``seconds`` is not a finite number >= 0.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValidationTypeError("seconds", f"must be a number, got {type(seconds).__name__}")
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValidationError("seconds", "must be a finite number of seconds >= 0")
    probe = SENDING.get()
    if probe is not None:
        probe.flood(float(seconds))


def flood_seconds(error: BaseException) -> float | None:
    """The wait a flood-control refusal (429 with a retry-after) asks for, else None."""
    if isinstance(error, TransientSendError) and error.code == 429:
        return error.retry_after
    return None


def note_flood(error: SendError) -> None:
    """Report ``error`` as a flood wait if it is one (for a sender's retry loop)."""
    seconds = flood_seconds(error)
    if seconds is not None:
        report_flood_wait(seconds)


class Hooks:
    """One run's observer, each hook called so that a failure is logged and ignored."""

    __slots__ = ("failed", "observer", "sender")

    def __init__(self, observer: Observer, sender: str) -> None:
        self.observer = observer
        self.sender = sender
        self.failed: set[str] = set()

    def call(self, name: str, *args: Any) -> Any:
        """The observer's hook ``name`` called with ``args``, or None when it raised
        (logged by class names, never with its message)."""
        try:
            return getattr(self.observer, name)(*args)
        except Exception as exc:
            # Loud once per hook and run; a hook that fails on every send stays quiet after.
            level = logging.DEBUG if name in self.failed else logging.WARNING
            self.failed.add(name)
            logger.log(
                level,
                "observer hook %s.%s raised %s; ignored",
                type(self.observer).__name__,
                name,
                type(exc).__name__,
            )
            return None


class SendProbe:
    """The flood waits of one observed send; the senders find it through a context variable."""

    __slots__ = ("action", "count", "hooks", "seconds")

    def __init__(self, hooks: Hooks, action: str) -> None:
        self.hooks = hooks
        self.action = action
        self.count = 0
        self.seconds = 0.0

    def flood(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds
        self.hooks.call("flood_wait", self.action, self.hooks.sender, seconds)

    def refused(self, error: BaseException) -> None:
        """Count a flood refusal ``send`` raised, unless the sender reported its waits."""
        seconds = flood_seconds(error)
        if seconds is not None and self.count == 0:
            self.flood(seconds)

    def event(self, attempt: int, outcome: Outcome, seconds: float, error: str | None) -> SendEvent:
        return SendEvent(
            self.action,
            self.hooks.sender,
            attempt,
            outcome,
            seconds,
            error,
            self.count,
            self.seconds,
        )
