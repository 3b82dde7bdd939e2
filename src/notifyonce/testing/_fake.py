"""FakeSender: an in-memory Sender that records sends and plays scripted failures."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from notifyonce._errors import SendError, UncertainSendError, ValidationError, ValidationTypeError
from notifyonce._message import Message, Receipt

__all__ = ["OK", "FakeSender", "SendRecord"]


class _Ok:
    """The outcome "delivered" in a script."""

    _instance: _Ok | None = None

    def __new__(cls) -> _Ok:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OK"


#: A scripted successful delivery, for [`FakeSender.script`][notifyonce.testing.FakeSender.script].
OK: Final = _Ok()

Outcome: TypeAlias = "_Ok | SendError"


@dataclass(frozen=True, slots=True)
class _Step:
    outcome: Outcome
    delivered: bool


@dataclass(frozen=True, slots=True)
class SendRecord:
    """One call of [`FakeSender.send`][notifyonce.testing.FakeSender.send].

    Attributes:
        recipient: The recipient the caller asked for.
        message: The message.
        receipt: The receipt returned, or None when the call raised.
        error: The error raised, or None.
        delivered: Whether the simulated provider delivered the message: True for every
            success, and for an [`UncertainSendError`][notifyonce.UncertainSendError] scripted with
            ``delivered=True`` (the answer was lost after delivery).
    """

    recipient: str
    message: Message
    receipt: Receipt | None
    error: SendError | None
    delivered: bool


class FakeSender:
    """A [`Sender`][notifyonce.Sender] for tests: records every send, fails on cue.

    By default every send succeeds. Script failures per recipient or for the next calls;
    a recipient's own script is used before the shared one.

    Args:
        latency: Seconds each send takes (awaited with ``sleep``).
        sleep: The async sleep used for latency.

    Examples:
        >>> import asyncio
        >>> from notifyonce import Message, PermanentSendError
        >>> sender = FakeSender()
        >>> blocked = PermanentSendError("Forbidden: bot was blocked", code=403)
        >>> sender.fail_next(blocked, recipient="7")
        >>> async def main() -> None:
        ...     await sender.send("42", Message("6 hours left"))
        ...     try:
        ...         await sender.send("7", Message("6 hours left"))
        ...     except PermanentSendError as exc:
        ...         print("refused:", exc.code)
        >>> asyncio.run(main())
        refused: 403
        >>> sender.texts, len(sender.records)
        (['6 hours left'], 2)
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if isinstance(latency, bool) or not isinstance(latency, (int, float)):
            raise ValidationTypeError("latency", f"must be a number, got {type(latency).__name__}")
        if latency < 0:
            raise ValidationError("latency", "must be >= 0")
        self.latency = float(latency)
        self._sleep = sleep
        self.records: list[SendRecord] = []
        self._by_recipient: dict[str, deque[_Step]] = {}
        self._shared: deque[_Step] = deque()
        self._migrations: dict[str, str] = {}
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"FakeSender(records={len(self.records)}, delivered={len(self.sent)})"

    # -- scripting ----------------------------------------------------------------------

    def fail_next(
        self, error: SendError, *, recipient: str | None = None, delivered: bool = False
    ) -> None:
        """Make the next send (to ``recipient``, or to anyone) raise ``error``.

        Args:
            error: A [`SendError`][notifyonce.SendError] instance to raise.
            recipient: Only for sends to this recipient; None for the next send to anyone.
            delivered: With an [`UncertainSendError`][notifyonce.UncertainSendError]: the message
                was delivered and only the answer was lost (what makes duplicates possible).
        """
        self.script(recipient, [error], delivered=delivered)

    def script(
        self,
        recipient: str | None,
        outcomes: Iterable[Outcome],
        *,
        delivered: bool = False,
    ) -> None:
        """Queue outcomes, one per send: [`OK`][notifyonce.testing.OK] or a
        [`SendError`][notifyonce.SendError].

        After the queue is used up, sends succeed again.

        Args:
            recipient: Whose sends follow the script; None for sends to anyone.
            outcomes: The outcomes in order.
            delivered: Applies to scripted [`UncertainSendError`][notifyonce.UncertainSendError]
                items.
        """
        steps: list[_Step] = []
        for index, outcome in enumerate(outcomes):
            if not isinstance(outcome, (_Ok, SendError)):
                raise ValidationTypeError(
                    f"outcomes[{index}]",
                    f"must be OK or a SendError instance, got {type(outcome).__name__}",
                )
            if delivered and not isinstance(outcome, (_Ok, UncertainSendError)):
                raise ValidationError("delivered", "only an UncertainSendError can hide a delivery")
            steps.append(_Step(outcome, delivered or isinstance(outcome, _Ok)))
        queue = (
            self._shared if recipient is None else self._by_recipient.setdefault(recipient, deque())
        )
        queue.extend(steps)

    def migrate(self, old: str, new: str) -> None:
        """Simulate Telegram moving chat ``old`` to ``new``: sends to ``old`` land in ``new``."""
        self._migrations[old] = new

    def reset(self) -> None:
        """Forget records, scripts and migrations."""
        self.records.clear()
        self._by_recipient.clear()
        self._shared.clear()
        self._migrations.clear()

    # -- inspecting ---------------------------------------------------------------------

    @property
    def sent(self) -> list[SendRecord]:
        """The records of delivered messages, in order."""
        return [r for r in self.records if r.delivered]

    @property
    def texts(self) -> list[str]:
        """The texts of delivered messages, in order."""
        return [r.message.text for r in self.sent]

    def sent_to(self, recipient: str) -> list[Message]:
        """The messages delivered to ``recipient`` (the requested or the migrated id)."""
        return [
            r.message
            for r in self.sent
            if r.recipient == recipient
            or (r.receipt is not None and r.receipt.recipient == recipient)
        ]

    # -- the Sender protocol ------------------------------------------------------------

    async def send(self, recipient: str, message: Message) -> Receipt:
        """Record the send and play the next scripted outcome (default: delivered)."""
        if not isinstance(recipient, str):
            raise ValidationTypeError("recipient", f"must be a str, got {type(recipient).__name__}")
        if not recipient:
            raise ValidationError("recipient", "must not be empty")
        if not isinstance(message, Message):
            raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
        # Take the outcome before awaiting, so concurrent sends follow the script in call order.
        own = self._by_recipient.get(recipient)
        if own:
            step = own.popleft()
        elif self._shared:
            step = self._shared.popleft()
        else:
            step = _Step(OK, True)
        if self.latency:
            await self._sleep(self.latency)
        if isinstance(step.outcome, SendError):
            self.records.append(SendRecord(recipient, message, None, step.outcome, step.delivered))
            raise step.outcome
        target = self._migrations.get(recipient)
        receipt = Receipt(target or recipient, next(self._ids), target)
        self.records.append(SendRecord(recipient, message, receipt, None, True))
        return receipt
