"""What is sent (Message), what came back (Receipt), and the Sender protocol."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from notifyonce._buttons import inline_keyboard
from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._media import Album, Copy, Document, Media, Photo, Video

__all__ = ["Message", "Receipt", "Sender", "SupportsCheck", "SupportsTurn", "keep_capabilities"]


@dataclass(frozen=True, slots=True)
class Message:
    """A message to deliver.

    The text never appears in ``repr()``, logs or exception messages: only its length.

    Args:
        text: The message body.
        parse_mode: ``"HTML"``, ``"MarkdownV2"`` or None for plain text (Telegram).
        silent: Deliver without a notification sound.
        link_preview: False to disable link previews; None leaves the provider's default.
        reply_markup: A provider-specific keyboard or markup object, passed through as is.
        options: Any further provider parameters, passed through as is.
        idempotency_key: The slot's stable key, set by the Notifier on every send: the same
            across every attempt of one slot, different for every other slot, safe in an
            HTTP header. Senders whose receiver can deduplicate pass it on (the webhook
            sender sends it as ``Idempotency-Key``).
        media: A [`Photo`][notifyonce.Photo], [`Document`][notifyonce.Document] or
            [`Video`][notifyonce.Video] to send, with ``text`` as its caption (which may
            then be empty; ``parse_mode`` and ``options["caption_entities"]`` format it).
            Telegram senders only: the other senders refuse it before anything is claimed.
            A [`Copy`][notifyonce.Copy] (see `Message.copy`) copies a message already in
            Telegram, with ``text`` as a caption override (empty: its own caption); an
            [`Album`][notifyonce.Album] sends 2-10 photos and videos as one media group,
            ``text`` the first one's caption.

    Examples:
        >>> Message("6 hours left", parse_mode="HTML")
        Message(text=<12 chars>, parse_mode='HTML')
        >>> Message("The new tariff", media=Photo("https://example.com/tariff.png"))
        Message(text=<14 chars>, media=Photo(url=<redacted>))
    """

    text: str
    parse_mode: str | None = None
    silent: bool = False
    link_preview: bool | None = None
    reply_markup: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    media: Media | Copy | Album | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValidationTypeError("text", f"must be a str, got {type(self.text).__name__}")
        if self.media is not None and not isinstance(
            self.media, (Photo, Document, Video, Copy, Album)
        ):
            raise ValidationTypeError(
                "media",
                f"must be a Photo, Document, Video, Copy, Album or None, got {type(self.media)}",
            )
        if not self.text.strip() and self.media is None:
            raise ValidationError("text", "must not be empty or blank")

    @classmethod
    def copy(
        cls,
        from_chat_id: int | str,
        message_id: int,
        *,
        caption: str | None = None,
        parse_mode: str | None = None,
        buttons: object = None,
        silent: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> Message:
        """A copy of a message already in Telegram (any content: formatted text, a photo,
        a poll), sent to each recipient with ``copyMessage``.

        Args:
            from_chat_id: The chat the message is in (an admin chat, a channel); not 0.
            message_id: Its id there (aiogram's ``message.message_id``); at least 1.
            caption: A caption instead of the message's own (None keeps its own).
            parse_mode: How Telegram reads ``caption``'s formatting.
            buttons: Rows of inline buttons, each a mapping with ``text`` and one action
                (``url``, ``callback_data``, ``web_app``, ``copy_text``, ...; see
                [`inline_keyboard`][notifyonce.inline_keyboard]).
            silent: Deliver without a notification sound.
            options: Further ``copyMessage`` parameters, passed through as is.

        Raises:
            ValidationError: A field is malformed (a chat id of 0, a message id below 1,
                a button without an action or with two); the error names it, and
                nothing is claimed or sent.

        Examples:
            >>> open_site = {"text": "Open", "url": "https://example.com"}
            >>> Message.copy(-1001234567890, 42, buttons=[[open_site]]).media
            Copy(from_chat_id=-1001234567890, message_id=42)
            >>> Message.copy(0, 42)
            Traceback (most recent call last):
            ...
            notifyonce._errors.ValidationError: from_chat_id: must not be 0: give the chat ...
        """
        if caption is not None and not isinstance(caption, str):
            raise ValidationTypeError("caption", f"must be a str or None, got {type(caption)}")
        return cls(
            caption or "",
            parse_mode=parse_mode,
            silent=silent,
            reply_markup=None if buttons is None else inline_keyboard(buttons),
            options={} if options is None else options,
            media=Copy(from_chat_id, message_id),
        )

    def _keyed(self, idempotency_key: str) -> Message:
        """This message with ``idempotency_key`` set: a copy made without checking again
        what was checked when this one was made (the Notifier makes one per send)."""
        twin = object.__new__(Message)
        for name in _MESSAGE_FIELDS:
            object.__setattr__(twin, name, getattr(self, name))
        object.__setattr__(twin, "idempotency_key", idempotency_key)
        return twin

    def __repr__(self) -> str:
        parts = [f"text=<{len(self.text)} chars>"]
        if self.parse_mode is not None:
            parts.append(f"parse_mode={self.parse_mode!r}")
        if self.silent:
            parts.append("silent=True")
        if self.link_preview is not None:
            parts.append(f"link_preview={self.link_preview!r}")
        if self.reply_markup is not None:
            parts.append("reply_markup=...")
        if self.idempotency_key is not None:
            parts.append(f"idempotency_key={self.idempotency_key!r}")
        if self.options:
            parts.append(f"options=<{', '.join(sorted(self.options))}>")
        if self.media is not None:
            parts.append(f"media={self.media!r}")
        return f"Message({', '.join(parts)})"


_MESSAGE_FIELDS = tuple(f.name for f in fields(Message))


@dataclass(frozen=True, slots=True)
class Receipt:
    """The provider's confirmation of a delivered message.

    Attributes:
        recipient: Where the message was actually delivered. Differs from the requested
            recipient when the chat moved (see ``migrated_to``).
        message_id: The provider's id of the delivered message, if it gives one (a
            Telegram album's: the ids of its messages joined by commas, ``"101,102,103"``).
        migrated_to: The new chat id when Telegram moved the chat (a group became a
            supergroup) and the sender followed it; otherwise None. Store it.
        file_id: The Telegram ``file_id`` of the message's media (a photo's largest
            size), when it had media: send it again by this id without uploading.
    """

    recipient: str
    message_id: int | str | None = None
    migrated_to: str | None = None
    file_id: str | None = None


@runtime_checkable
class Sender(Protocol):
    """Anything that can deliver a [`Message`][notifyonce.Message] to a recipient.

    Implementations raise [`PermanentSendError`][notifyonce.PermanentSendError] when the provider
    refused for good, [`TransientSendError`][notifyonce.TransientSendError] when the message was
    certainly not delivered, and [`UncertainSendError`][notifyonce.UncertainSendError] when it may
    have been. Any other exception is treated as uncertain. A sender that is set up wrong
    (a rejected token, a wrong URL) raises [`SenderConfigError`][notifyonce.SenderConfigError].

    A sender may also offer ``check`` ([`SupportsCheck`][notifyonce.SupportsCheck]), to
    refuse a notification before anything is claimed, and ``turn``
    ([`SupportsTurn`][notifyonce.SupportsTurn]), to hold the rate-limit turn its claim is
    made in. A sender that wraps others has each of them exactly when what it wraps does.

    Examples:
        >>> class PrintSender:
        ...     async def send(self, recipient: str, message: Message) -> Receipt:
        ...         print(recipient, len(message.text))
        ...         return Receipt(recipient)
        >>> isinstance(PrintSender(), Sender)
        True
    """

    async def send(self, recipient: str, message: Message) -> Receipt:
        """Deliver ``message`` to ``recipient`` and return the receipt."""
        ...


@runtime_checkable
class SupportsCheck(Protocol):
    """A sender that can tell, without sending anything, that it would refuse a send.

    ``check`` is a plain (not async) method that raises
    [`ValidationError`][notifyonce.ValidationError] when the sender would refuse the
    recipient or the message (a malformed chat id, a text too long for the provider). The
    Notifier calls it before claiming, so such a notification writes nothing and burns no
    slot.

    Examples:
        >>> from notifyonce.testing import FakeSender
        >>> class DigitsOnly(FakeSender):
        ...     def check(self, recipient: str, message: Message) -> None:
        ...         if not recipient.isdigit():
        ...             raise ValidationError("recipient", "not a chat id")
        >>> isinstance(DigitsOnly(), SupportsCheck), isinstance(FakeSender(), SupportsCheck)
        (True, False)
    """

    def check(self, recipient: str, message: Message) -> None:
        """Raise ValidationError if sending ``message`` to ``recipient`` would be refused."""
        ...


@runtime_checkable
class SupportsTurn(Protocol):
    """A sender that paces its sends and lets the Notifier wait for a send's turn first.

    ``turn(recipient)`` returns an async context manager that waits for the recipient's
    rate-limit turn; the Notifier claims the slot inside it and sends before it exits, so
    no slot sits claimed while its send waits in the limiter.
    [`TelegramSender`][notifyonce.telegram.TelegramSender] has one.
    """

    def turn(self, recipient: str) -> AbstractAsyncContextManager[object]:
        """Wait for ``recipient``'s turn on entering; the send goes inside."""
        ...


class _Checks:
    """The public ``check`` of a wrapper whose inner senders have one (see
    `keep_capabilities`): the wrapper's own ``_check``."""

    __slots__ = ()

    def check(self, recipient: str, message: Message) -> None:
        """Raise ValidationError where what this sender wraps would refuse the send."""
        self._check(recipient, message)

    def _check(self, recipient: str, message: Message) -> None:
        raise NotImplementedError


class _Turns:
    """The public ``turn`` of a wrapper whose inner senders have one (see
    `keep_capabilities`): the wrapper's own ``_turn``."""

    __slots__ = ()

    def turn(self, recipient: str) -> AbstractAsyncContextManager[object]:
        """Wait for the turn of what this sender wraps; the send goes inside."""
        return self._turn(recipient)

    def _turn(self, recipient: str) -> AbstractAsyncContextManager[object]:
        raise NotImplementedError


_CAPABLE: dict[tuple[type, bool, bool], type] = {}


def _capable(plain: type, check: bool, turn: bool) -> type:
    """``plain``, or its subclass (of the same name) with a public check, turn or both."""
    extra = (*((_Checks,) if check else ()), *((_Turns,) if turn else ()))
    if not extra:
        return plain
    key = (plain, check, turn)
    if key not in _CAPABLE:
        namespace = {
            "__slots__": (),
            "__module__": plain.__module__,
            "__qualname__": plain.__qualname__,
            "__doc__": plain.__doc__,
            "_plain_class": plain,
        }
        _CAPABLE[key] = type(plain.__name__, (plain, *extra), namespace)
    return _CAPABLE[key]


def keep_capabilities(wrapper: object, *, check: bool, turn: bool) -> None:
    """Give a sender that wraps others exactly their capabilities.

    A class that defines ``check`` or ``turn`` satisfies
    [`SupportsCheck`][notifyonce.SupportsCheck] or
    [`SupportsTurn`][notifyonce.SupportsTurn] for every instance; a wrapper whose inner
    senders lack one must not. So the wrapper's class implements ``_check`` and ``_turn``,
    and this call (at the end of its ``__init__``) makes ``wrapper`` an instance of its
    class's subclass that adds the public ``check`` where ``check`` is true and ``turn``
    where ``turn`` is: ``isinstance(wrapper, type(...))`` and its class's name stay.
    """
    cls = type(wrapper)
    plain: type = cls.__dict__.get("_plain_class", cls)
    wrapper.__class__ = _capable(plain, check, turn)
