"""The send loop shared by the senders that wrap a bot library's own Bot object.

The library does the HTTP; this loop validates, classifies the library's exceptions
(each wrapper supplies the rules), follows a chat migration once and builds the receipt.
No httpx here: an aiogram bot has only aiohttp.
"""

from __future__ import annotations

import logging

from notifyonce._errors import PermanentSendError, SendError, ValidationTypeError
from notifyonce._media import refuse_media
from notifyonce._message import Message, Receipt
from notifyonce._senders.redaction import chain_cause, redact, scrubbed, short
from notifyonce._senders.telegram.chat import Migrated, chat_id, validate_recipient
from notifyonce._senders.telegram.payload import check_text, encode, jsonable

__all__ = ["WrappedBotSender"]


class WrappedBotSender:
    """Base of AiogramSender and PTBSender: subclasses implement the two hooks."""

    _token: str

    def _scrub(self, text: str) -> str:
        return redact(text, self._token)

    def _describe(self, text: str) -> str:
        return short(text, self._scrub)

    async def _deliver(self, chat: int | str, message: Message) -> int | None:
        """Send once through the library; return Telegram's message id."""
        raise NotImplementedError

    def _classify(self, exc: Exception) -> Migrated | SendError | None:
        """The library's exception as a migration or a SendError; None: not the library's."""
        raise NotImplementedError

    async def send(self, recipient: str, message: Message) -> Receipt:
        """Send ``message`` to ``recipient`` with the wrapped bot and return the receipt.

        Args:
            recipient: A chat id as a string (negative for groups and channels) or
                ``@channelname``.
            message: What to send.

        Returns:
            The receipt; ``migrated_to`` is set when the chat had moved and the message
            was delivered to the new chat id.

        Raises:
            ValidationError: ``recipient`` or ``message`` is invalid (nothing was sent).
            PermanentSendError: Telegram refused for good.
            SenderConfigError: The bot's token or server URL is wrong (nothing was sent).
            TransientSendError: Not delivered; ``retry_after`` says when to try again.
            UncertainSendError: May have been delivered.
        """
        target = self._prepare(recipient, message)
        migrated_to: str | None = None
        while True:
            error: SendError | None = None
            try:
                message_id = await self._deliver(chat_id(target), message)
            except Exception as exc:
                outcome = self._classify(exc)
                if outcome is None:
                    raise
                if isinstance(outcome, Migrated) and migrated_to is None:
                    migrated_to = target = outcome.new_chat_id
                    logger.info("chat migrated; following it to the new chat id")
                    continue
                if isinstance(outcome, Migrated):
                    error = PermanentSendError(
                        f"the chat moved twice ({outcome.description})", code=400
                    )
                else:
                    error = outcome
                chain_cause(error, exc, self._scrub)
            if error is not None:
                # Outside the except block: no implicit context to leak. Error reporters
                # record the locals of every frame: leave them no message text.
                del message
                raise scrubbed(error)
            return Receipt(target, message_id, migrated_to)

    def check(self, recipient: str, message: Message) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] if Telegram would refuse this send
        for its recipient or message alone (nothing is sent): a malformed chat id, a text
        too long for Telegram, a keyboard or option that cannot be serialised.

        The Notifier calls it before claiming, so such a notification burns no slot.
        """
        self._prepare(recipient, message)

    def _prepare(self, recipient: object, message: object) -> str:
        target = validate_recipient(recipient)
        if not isinstance(message, Message):
            raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
        refuse_media(message.media, type(self).__name__)
        check_text(message)
        encode(
            {
                "reply_markup": jsonable(message.reply_markup, "reply_markup"),
                "options": jsonable(dict(message.options), "options"),
            }
        )
        self._check_request(chat_id(target), message)
        return target

    def _check_request(self, chat: int | str, message: Message) -> None:
        """Build the library's request without sending it; a ValidationError if it refuses."""


logger = logging.getLogger("notifyonce.telegram")
