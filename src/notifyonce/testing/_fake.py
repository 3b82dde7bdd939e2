"""FakeSender: an in-memory Sender that records sends and plays scripted failures."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from notifyonce._audience import GoneReason
from notifyonce._errors import (
    PermanentSendError,
    SendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
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

    A send has two halves, like a request to a real provider: ``latency`` until the
    provider has the message (it is then delivered and recorded in `records`), and
    ``answer_latency`` until the answer reaches the caller. A send cancelled in the second
    half was delivered although its caller never learns it: the case that makes a
    cancelled send uncertain. `hold_answers` keeps every answer in that second half
    until `release_answers`, and `wait_in_flight` waits for such sends, so a
    test can cancel at exactly that moment.

    Args:
        latency: Seconds until the provider has the message (awaited with ``sleep``).
        answer_latency: Seconds from then until the answer reaches the caller.
        sleep: The async sleep used for both.

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

        Delivered, and the answer still on its way when the caller gives up:

        >>> async def cancelled_mid_answer() -> None:
        ...     sender = FakeSender()
        ...     sender.hold_answers()
        ...     task = asyncio.create_task(sender.send("42", Message("6 hours left")))
        ...     await sender.wait_in_flight(1)
        ...     task.cancel()
        ...     await asyncio.gather(task, return_exceptions=True)
        ...     print(len(sender.sent), sender.in_flight)
        >>> asyncio.run(cancelled_mid_answer())
        1 0
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        answer_latency: float = 0.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.latency = _seconds("latency", latency)
        self.answer_latency = _seconds("answer_latency", answer_latency)
        self._sleep = sleep
        self._in_flight = 0
        self._answers: asyncio.Event | None = None  # set: answers flow; clear: held
        self._changed: asyncio.Condition | None = None
        self.records: list[SendRecord] = []
        self._by_recipient: dict[str, deque[_Step]] = {}
        self._shared: deque[_Step] = deque()
        self._migrations: dict[str, str] = {}
        self._blocked: dict[str, str] = {}
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

    def block(self, recipient: str, reason: str = "blocked") -> None:
        """Make every send to ``recipient`` refused as Telegram refuses a chat that is gone
        (a [`PermanentSendError`][notifyonce.PermanentSendError] with ``gone=reason``:
        ``"blocked"``, ``"deactivated"``, ``"chat_not_found"``...), until `unblock`. A
        recipient's scripted outcomes come first."""
        if reason not in _GONE_WORDS:
            known = ", ".join(r.value for r in GoneReason)
            raise ValidationError("reason", f"must be a GoneReason value ({known}), got {reason!r}")
        self._blocked[recipient] = reason

    def unblock(self, recipient: str) -> None:
        """Undo `block`: sends to ``recipient`` are delivered again."""
        self._blocked.pop(recipient, None)

    def migrate(self, old: str, new: str) -> None:
        """Simulate Telegram moving chat ``old`` to ``new``: sends to ``old`` land in ``new``."""
        self._migrations[old] = new

    def lose_answer(self, *, recipient: str | None = None) -> None:
        """Make the next send (to ``recipient``, or to anyone) deliver, then lose the answer.

        The message is delivered and recorded, then the send raises
        [`UncertainSendError`][notifyonce.UncertainSendError], as when a connection drops after the
        provider accepted the request.
        """
        self.fail_next(
            UncertainSendError("the answer was lost after delivery"),
            recipient=recipient,
            delivered=True,
        )

    def hold_answers(self) -> None:
        """From now on, keep every answer from reaching its caller until released.

        Messages are still delivered (and recorded) after ``latency``; the sends then wait
        in flight, which `in_flight` counts, until `release_answers` or until
        they are cancelled.
        """
        self._gate().clear()

    def release_answers(self) -> None:
        """Let held answers (and every later one) reach their callers."""
        self._gate().set()

    def reset(self) -> None:
        """Forget records, scripts and migrations."""
        self.records.clear()
        self._by_recipient.clear()
        self._shared.clear()
        self._migrations.clear()

    # -- inspecting ---------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Sends the provider has answered (delivered or refused) whose answer has not
        reached the caller yet."""
        return self._in_flight

    async def wait_in_flight(self, count: int = 1, *, timeout: float = 5.0) -> None:
        """Wait until at least ``count`` sends are in flight (see `in_flight`).

        Raises:
            TimeoutError: Fewer were in flight after ``timeout`` seconds.
        """
        changed = self._condition()

        async def reached() -> None:
            async with changed:
                await changed.wait_for(lambda: self._in_flight >= count)

        try:
            await asyncio.wait_for(reached(), timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise TimeoutError(
                f"{self._in_flight} sends in flight after {timeout}s, expected {count}"
            ) from None

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
        elif recipient in self._blocked:
            reason = self._blocked[recipient]
            code, words = _GONE_WORDS[reason]
            step = _Step(PermanentSendError(words, code=code, gone=reason), False)
        elif self._shared:
            step = self._shared.popleft()
        else:
            step = _Step(OK, True)
        if self.latency:
            await self._sleep(self.latency)
        # The provider has it now: record the delivery before the answer travels back, so a
        # cancellation from here on leaves a delivered message the caller never heard of.
        if isinstance(step.outcome, SendError):
            self.records.append(SendRecord(recipient, message, None, step.outcome, step.delivered))
            await self._answer()
            raise step.outcome
        target = self._migrations.get(recipient)
        receipt = Receipt(target or recipient, next(self._ids), target)
        self.records.append(SendRecord(recipient, message, receipt, None, True))
        await self._answer()
        return receipt

    async def _answer(self) -> None:
        """The answer's way back: ``answer_latency``, and the gate of `hold_answers`."""
        gate = self._answers
        if not self.answer_latency and (gate is None or gate.is_set()):
            return
        changed = self._condition()
        async with changed:
            self._in_flight += 1
            changed.notify_all()
        try:
            if self.answer_latency:
                await self._sleep(self.answer_latency)
            if gate is not None:
                await gate.wait()
        finally:
            self._in_flight -= 1

    def _gate(self) -> asyncio.Event:
        if self._answers is None:
            self._answers = asyncio.Event()
            self._answers.set()
        return self._answers

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed


# What Telegram answers for each reason a recipient is gone (its words, as the sender's
# classification reads them).
_GONE_WORDS = {
    GoneReason.BLOCKED.value: (403, "Forbidden: bot was blocked by the user"),
    GoneReason.DEACTIVATED.value: (403, "Forbidden: user is deactivated"),
    GoneReason.KICKED.value: (403, "Forbidden: bot was kicked from the group chat"),
    GoneReason.CHAT_NOT_FOUND.value: (400, "Bad Request: chat not found"),
    GoneReason.NOT_STARTED.value: (403, "Forbidden: bot can't initiate conversation with a user"),
    GoneReason.BOT.value: (403, "Forbidden: bot can't send messages to bots"),
    GoneReason.MIGRATED.value: (400, "Bad Request: group chat was upgraded to a supergroup chat"),
    GoneReason.DELETED.value: (403, "Forbidden: the group chat was deleted"),
    GoneReason.OTHER.value: (403, "Forbidden: the recipient cannot be reached"),
}


def _seconds(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationTypeError(field, f"must be a number, got {type(value).__name__}")
    if value < 0:
        raise ValidationError(field, "must be >= 0")
    return float(value)
