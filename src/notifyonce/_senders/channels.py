"""Several channels behind one Sender: fan out to all of them, or fall back in order.

Both use **one slot for all channels**: the Notifier sees one send and one outcome. For
one slot per channel, run one Notifier per channel with per-channel actions instead
(see the fan-out guide).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from notifyonce._errors import (
    PermanentSendError,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._message import (
    Message,
    Receipt,
    Sender,
    SupportsCheck,
    SupportsTurn,
    keep_capabilities,
)

__all__ = ["Channel", "ChannelReceipt", "FallbackSender", "FanoutSender"]


@dataclass(frozen=True, slots=True)
class Channel:
    """One named channel: a sender and, optionally, how to address the recipient there.

    Args:
        name: The channel's name, as reported in receipts and errors.
        sender: Any [`Sender`][notifyonce.Sender].
        recipient: Maps the notification's recipient to this channel's (a user id to a
            chat id, an e-mail address, ...); None passes it unchanged.

    Examples:
        >>> from notifyonce.testing import FakeSender
        >>> Channel("email", FakeSender(), recipient=lambda user: f"{user}@example.com").name
        'email'
    """

    name: str
    sender: Sender
    recipient: Callable[[str], str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValidationError("channels", "every channel needs a non-empty str name")
        if not callable(getattr(self.sender, "send", None)):
            raise ValidationTypeError("channels", f"channel {self.name!r} has no send method")
        if self.recipient is not None and not callable(self.recipient):
            raise ValidationTypeError(
                "channels", f"channel {self.name!r}: recipient must be callable"
            )

    def address(self, recipient: str) -> str:
        """The recipient on this channel."""
        return recipient if self.recipient is None else self.recipient(recipient)


@dataclass(frozen=True, slots=True)
class ChannelReceipt(Receipt):
    """A receipt from several channels: which delivered, and what the others said.

    ``recipient`` is the notification's recipient; ``message_id`` and ``migrated_to``
    come from the first channel that delivered.

    Attributes:
        channels: The channels that delivered, in channel order.
        receipts: Each delivering channel's own receipt.
        failures: The channels that failed before a fallback delivered, with their errors.
    """

    channels: tuple[str, ...] = ()
    receipts: Mapping[str, Receipt] = field(default_factory=dict, hash=False)
    failures: Mapping[str, SendError] = field(default_factory=dict, hash=False)


def _channels(channels: Mapping[str, Sender] | Iterable[Channel]) -> tuple[Channel, ...]:
    if isinstance(channels, Mapping):
        items = tuple(Channel(name, sender) for name, sender in channels.items())
    else:
        items = tuple(channels)
        for item in items:
            if not isinstance(item, Channel):
                raise ValidationTypeError("channels", "must be a mapping of senders or Channels")
    if not items:
        raise ValidationError("channels", "must name at least one channel")
    names = [c.name for c in items]
    if len(set(names)) != len(names):
        raise ValidationError("channels", "channel names must be unique")
    return items


def _check_channel(channel: Channel, recipient: str, message: Message) -> None:
    """The channel sender's own ``check``, if it has one."""
    if isinstance(channel.sender, SupportsCheck):
        channel.sender.check(channel.address(recipient), message)


def _as_send_error(exc: BaseException) -> SendError:
    """A channel's failure as a SendError, by the Sender protocol's rules."""
    if isinstance(exc, SendError):
        return exc
    if isinstance(exc, ValidationError):
        # This channel cannot take this recipient or message: it never will.
        error: SendError = PermanentSendError(f"{type(exc).__name__}: {exc.field}")
    else:
        error = UncertainSendError(type(exc).__name__)  # the protocol's default
    error.__cause__ = exc
    return error


def _summary(kind: str, results: Mapping[str, Receipt | SendError]) -> str:
    parts = []
    for name, result in results.items():
        if isinstance(result, SendError):
            code = "" if result.code is None else f" {result.code}"
            parts.append(f"{name}: {type(result).__name__}{code}")
        else:
            parts.append(f"{name}: delivered")
    return f"{kind}: " + "; ".join(parts)


def _receipt(
    recipient: str, delivered: Mapping[str, Receipt], failures: Mapping[str, SendError]
) -> ChannelReceipt:
    first = next(iter(delivered.values()))
    migrated = next((r.migrated_to for r in delivered.values() if r.migrated_to), None)
    return ChannelReceipt(
        recipient,
        first.message_id,
        migrated,
        channels=tuple(delivered),
        receipts=dict(delivered),
        failures=dict(failures),
    )


def _retry_after(errors: Iterable[SendError], pick: Callable[[list[float]], float]) -> float | None:
    waits = [
        e.retry_after
        for e in errors
        if isinstance(e, TransientSendError) and e.retry_after is not None
    ]
    return pick(waits) if waits else None


def combine_fanout(results: Mapping[str, Receipt | SendError]) -> SendError | None:
    """The fan-out rule: None when every channel delivered, else the one error to raise.

    0. Nothing delivered, every failure certain (transient or a config error) and one a
       config error -> [`SenderConfigError`][notifyonce.SenderConfigError]: fix the channel,
       and all go out.
    1. Any permanent failure -> permanent: all channels can never succeed together, and a
       retry would only repeat the others.
    2. Else any uncertain failure, or a delivery next to a transient failure -> uncertain:
       a retry would resend where the notification was (or may have been) delivered.
    3. Else (nothing delivered, every failure transient) -> transient, with the longest
       ``retry_after`` (when every channel may be tried again).
    """
    errors = {n: r for n, r in results.items() if isinstance(r, SendError)}
    if not errors:
        return None
    delivered = len(errors) < len(results)
    deciding: SendError
    config = [e for e in errors.values() if isinstance(e, SenderConfigError)]
    certain = all(isinstance(e, (TransientSendError, SenderConfigError)) for e in errors.values())
    if config and certain and not delivered:
        # Nothing went anywhere and a channel is set up wrong: stop the run, fix it.
        error: SendError = SenderConfigError(_summary("fan-out", results))
        error.__cause__ = config[0]
        return error
    if any(isinstance(e, PermanentSendError) for e in errors.values()):
        deciding = next(e for e in errors.values() if isinstance(e, PermanentSendError))
        error = PermanentSendError(_summary("fan-out", results))
    elif delivered or any(not isinstance(e, TransientSendError) for e in errors.values()):
        deciding = next(
            (e for e in errors.values() if not isinstance(e, TransientSendError)),
            next(iter(errors.values())),
        )
        error = UncertainSendError(_summary("fan-out", results))
    else:
        deciding = next(iter(errors.values()))
        error = TransientSendError(
            _summary("fan-out", results), retry_after=_retry_after(errors.values(), max)
        )
    error.__cause__ = deciding
    return error


async def _enter_turn(turns: contextlib.AsyncExitStack, channel: Channel, recipient: str) -> None:
    """Enter ``channel``'s turn for ``recipient`` on ``turns``, if its sender has turns."""
    if isinstance(channel.sender, SupportsTurn):
        await turns.enter_async_context(channel.sender.turn(channel.address(recipient)))


class FanoutSender:
    """Sends one notification to every channel at once; it counts as sent when all deliver.

    One slot covers all channels, so the outcome is combined:
    any permanent failure is permanent; otherwise any uncertain failure, or a partial
    delivery, is uncertain; otherwise (nothing delivered, all transient) transient. For
    independent outcomes per channel, use one slot per channel (see the fan-out guide).

    It has a ``check`` ([`SupportsCheck`][notifyonce.SupportsCheck]) when a channel has
    one, refusing what any channel refuses, and a ``turn``
    ([`SupportsTurn`][notifyonce.SupportsTurn]) when a channel has one, waiting for every
    channel's turn.

    Args:
        channels: ``{"name": sender}`` or [`Channel`][notifyonce.Channel] objects (to map
            recipients).

    Examples:
        >>> from notifyonce.testing import FakeSender
        >>> FanoutSender({"telegram": FakeSender(), "email": FakeSender()})
        FanoutSender(channels=['telegram', 'email'])
    """

    def __init__(self, channels: Mapping[str, Sender] | Iterable[Channel]) -> None:
        self.channels = _channels(channels)
        senders = [c.sender for c in self.channels]
        keep_capabilities(
            self,
            check=any(isinstance(s, SupportsCheck) for s in senders),
            turn=any(isinstance(s, SupportsTurn) for s in senders),
        )

    def __repr__(self) -> str:
        return f"FanoutSender(channels={[c.name for c in self.channels]!r})"

    def _check(self, recipient: str, message: Message) -> None:
        """``check``: raise the first channel's ValidationError: a fan-out counts as sent
        only when every channel delivers, so one refusal refuses it."""
        for channel in self.channels:
            _check_channel(channel, recipient, message)

    @contextlib.asynccontextmanager
    async def _turn(self, recipient: str) -> AsyncIterator[None]:
        """``turn``: wait for the rate-limit turn of every channel that has one (in
        channel order): the Notifier claims the slot inside it, and every channel's send
        then uses its own turn instead of waiting in its limiter with the slot claimed."""
        async with contextlib.AsyncExitStack() as turns:
            for channel in self.channels:
                await _enter_turn(turns, channel, recipient)
            yield

    async def send(self, recipient: str, message: Message) -> ChannelReceipt:
        """Send to every channel concurrently.

        Returns:
            A [`ChannelReceipt`][notifyonce.ChannelReceipt] listing every channel.

        Raises:
            PermanentSendError: A channel refused for good.
            UncertainSendError: A channel may have delivered, or some delivered and the
                others failed transiently.
            TransientSendError: Nothing was delivered and every failure was transient.
        """
        outcomes = await asyncio.gather(
            *(c.sender.send(c.address(recipient), message) for c in self.channels),
            return_exceptions=True,
        )
        results: dict[str, Receipt | SendError] = {}
        for channel, outcome in zip(self.channels, outcomes, strict=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancellation, KeyboardInterrupt: not a channel's failure
            results[channel.name] = (
                _as_send_error(outcome) if isinstance(outcome, Exception) else outcome
            )
        error = combine_fanout(results)
        if error is not None:
            raise error
        delivered = {n: r for n, r in results.items() if isinstance(r, Receipt)}
        return _receipt(recipient, delivered, {})


class FallbackSender:
    """Tries the channels in order until one delivers.

    A permanent or transient failure moves on to the next channel. An uncertain one stops
    there by default: the message may have been delivered, and falling back could deliver
    it twice. One slot covers all channels.

    When no channel delivered: uncertain if any channel was uncertain, else a
    [`SenderConfigError`][notifyonce.SenderConfigError] if a channel is set up wrong, else
    transient if any was transient (``retry_after``: the shortest wait), else permanent.

    It has a ``check`` ([`SupportsCheck`][notifyonce.SupportsCheck]) when every channel
    has one, refusing only what all of them refuse (a channel without one refuses
    nothing), and a ``turn`` ([`SupportsTurn`][notifyonce.SupportsTurn]) when the first
    channel has one.

    Args:
        channels: ``{"name": sender}`` or [`Channel`][notifyonce.Channel] objects, in fallback
            order.
        fallback_on_uncertain: Also fall back after an uncertain failure, accepting a
            possible duplicate for a lower risk of loss.

    Examples:
        >>> from notifyonce.testing import FakeSender
        >>> FallbackSender({"telegram": FakeSender(), "email": FakeSender()})
        FallbackSender(channels=['telegram', 'email'])
    """

    def __init__(
        self,
        channels: Mapping[str, Sender] | Iterable[Channel],
        *,
        fallback_on_uncertain: bool = False,
    ) -> None:
        self.channels = _channels(channels)
        self.fallback_on_uncertain = fallback_on_uncertain
        keep_capabilities(
            self,
            check=all(isinstance(c.sender, SupportsCheck) for c in self.channels),
            turn=isinstance(self.channels[0].sender, SupportsTurn),
        )

    def __repr__(self) -> str:
        return f"FallbackSender(channels={[c.name for c in self.channels]!r})"

    def _check(self, recipient: str, message: Message) -> None:
        """``check``: raise ValidationError only when every channel would refuse: a
        fallback delivers through any one of them."""
        refusals: list[str] = []
        for channel in self.channels:
            try:
                _check_channel(channel, recipient, message)
            except ValidationError as exc:
                refusals.append(f"{channel.name}: {exc.field}")
            else:
                return
        raise ValidationError("recipient", "every channel refuses it (" + "; ".join(refusals) + ")")

    @contextlib.asynccontextmanager
    async def _turn(self, recipient: str) -> AsyncIterator[None]:
        """``turn``: wait for the first channel's rate-limit turn: the channel the
        send tries first uses it. A channel fallen back to waits for its own turn in its
        send, as it would alone."""
        async with contextlib.AsyncExitStack() as turns:
            await _enter_turn(turns, self.channels[0], recipient)
            yield

    async def send(self, recipient: str, message: Message) -> ChannelReceipt:
        """Send through the first channel that delivers.

        Returns:
            A [`ChannelReceipt`][notifyonce.ChannelReceipt] naming the channel that
            delivered and the failures before it.

        Raises:
            UncertainSendError: A channel may have delivered (and fallback stopped there),
                or no channel delivered and one of them was uncertain.
            TransientSendError: No channel delivered; one may later.
            PermanentSendError: Every channel refused for good.
        """
        failures: dict[str, SendError] = {}
        for channel in self.channels:
            try:
                receipt = await channel.sender.send(channel.address(recipient), message)
            except Exception as exc:
                failures[channel.name] = error = _as_send_error(exc)
                if isinstance(error, UncertainSendError) and not self.fallback_on_uncertain:
                    break
                continue
            return _receipt(recipient, {channel.name: receipt}, failures)
        errors = list(failures.values())
        final: SendError
        if any(isinstance(e, UncertainSendError) for e in errors):
            final = UncertainSendError(_summary("fallback", failures))
        elif any(isinstance(e, SenderConfigError) for e in errors):
            # Nothing was delivered, and a channel is set up wrong: stop the run, fix it.
            final = SenderConfigError(_summary("fallback", failures))
        elif any(isinstance(e, TransientSendError) for e in errors):
            final = TransientSendError(
                _summary("fallback", failures), retry_after=_retry_after(errors, min)
            )
        else:
            final = PermanentSendError(_summary("fallback", failures))
        final.__cause__ = errors[-1]
        raise final
