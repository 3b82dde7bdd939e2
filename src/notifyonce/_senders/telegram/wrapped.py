"""The send loop shared by the senders that wrap a bot library's own Bot object.

The library does the HTTP; this loop validates, classifies the library's exceptions
(each wrapper supplies the rules), follows a chat migration once and builds the receipt.
A photo, document or video is uploaded once and then sent by the ``file_id`` Telegram
gave for it, as TelegramSender does (see ``files``). No httpx here: an aiogram bot has
only aiohttp.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from notifyonce._errors import PermanentSendError, SendError, ValidationTypeError
from notifyonce._media import Album, Copy, Media, refuse_telegram_only
from notifyonce._message import Message, Receipt
from notifyonce._senders.redaction import chain_cause, redact, scrubbed, short
from notifyonce._senders.telegram.chat import Migrated, chat_id, validate_recipient
from notifyonce._senders.telegram.classify import refusal
from notifyonce._senders.telegram.files import FileIdStore, UploadOnce, read_upload, same_bytes
from notifyonce._senders.telegram.payload import check_message, encode, jsonable

__all__ = ["Upload", "WrappedBotSender", "sent_file_id"]

# How long a send waits for another send's first upload of the same file (seconds);
# then it gives up, certainly not delivered, and a later run tries again.
_UPLOAD_WAIT = 300.0


@dataclass(frozen=True, slots=True)
class Upload:
    """A file's bytes to upload, with the name it goes by."""

    filename: str
    data: bytes


def sent_file_id(sent: object, kind: str) -> str | None:
    """The file_id of the media in a library's answer (of a photo, its largest size)."""
    found = getattr(sent, kind, None)
    if isinstance(found, (list, tuple)):  # a photo's sizes, the largest last
        found = found[-1] if found else None
    file_id = getattr(found, "file_id", None)
    return file_id if isinstance(file_id, str) else None


class WrappedBotSender:
    """Base of AiogramSender and PTBSender: subclasses implement the hooks."""

    _token: str
    _files: UploadOnce

    def _use_files(self, bot_id: str, file_store: FileIdStore | None) -> None:
        if file_store is not None and not isinstance(file_store, FileIdStore):
            raise ValidationTypeError(
                "file_store", "must be a file id store (MemoryFileIdStore, SQLFileIdStore)"
            )
        self._files = UploadOnce(bot_id, file_store)

    def _scrub(self, text: str) -> str:
        return redact(text, self._token)

    def _describe(self, text: str) -> str:
        return short(text, self._scrub)

    async def _deliver(self, chat: int | str, message: Message) -> int | None:
        """Send a text once through the library; return Telegram's message id."""
        raise NotImplementedError

    async def _deliver_media(
        self, chat: int | str, message: Message, media: Media, file: str | Upload
    ) -> tuple[int | None, str | None]:
        """Send ``message``'s media once through the library, as ``file`` (a file_id or
        URL, or an upload); return Telegram's message id and the file's file_id."""
        raise NotImplementedError

    def _classify(self, exc: Exception) -> Migrated | SendError | None:
        """The library's exception as a migration or a SendError; None: not the library's."""
        raise NotImplementedError

    async def send(self, recipient: str | int, message: Message) -> Receipt:
        """Send ``message`` to ``recipient`` with the wrapped bot and return the receipt.

        A message with a [`Photo`][notifyonce.Photo], [`Document`][notifyonce.Document]
        or [`Video`][notifyonce.Video] is sent with ``sendPhoto``, ``sendDocument`` or
        ``sendVideo``, its text as the caption; a file is uploaded once, and every later
        send of the same bytes goes by the ``file_id`` Telegram returned.

        Args:
            recipient: A chat id (negative for groups and channels), as a string or an
                int (``message.chat.id``), or ``@channelname``.
            message: What to send.

        Returns:
            The receipt; ``migrated_to`` is set when the chat had moved and the message
            was delivered to the new chat id; ``file_id`` for media.

        Raises:
            ValidationError: ``recipient`` or ``message`` is invalid (nothing was sent).
            PermanentSendError: Telegram refused for good.
            SenderConfigError: The bot's token or server URL is wrong (nothing was sent).
            TransientSendError: Not delivered; ``retry_after`` says when to try again.
            UncertainSendError: May have been delivered.
        """
        target = self._prepare(recipient, message, file=False)
        migrated_to: str | None = None
        while True:
            error: SendError | None = None
            try:
                message_id, file_id = await self._attempt(chat_id(target), message)
            except SendError as exc:  # classified already (a media send, an upload's wait)
                error = exc
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
                raise scrubbed(refusal(error))
            return Receipt(target, message_id, migrated_to, file_id)

    async def _attempt(self, chat: int | str, message: Message) -> tuple[int | None, str | None]:
        """One send of ``message``: a text, or media by file_id, URL or a single upload."""
        media = message.media
        if media is None:
            return await self._deliver(chat, message), None
        assert not isinstance(media, (Copy, Album))  # refused by _prepare
        if isinstance(media.source, str):  # a file_id or a URL
            return await self._media_call(chat, message, media, media.source)
        deadline = time.monotonic() + _UPLOAD_WAIT
        key = await self._files.key(media)

        async def reuse(file_id: str) -> tuple[tuple[int | None, str | None], str | None]:
            sent = await self._media_call(chat, message, media, file_id)
            return sent, sent[1]

        async def upload() -> tuple[tuple[int | None, str | None], str | None]:
            data = await read_upload(media)
            # The file changed since it was hashed: its id does not belong to this key
            # (and a file pinned to a campaign is not sent at all).
            fresh = same_bytes(media, key, data)
            sent = await self._media_call(chat, message, media, Upload(media.upload_name(), data))
            return sent, sent[1] if fresh else None

        return await self._files.send(key, lambda: deadline - time.monotonic(), reuse, upload)

    async def _media_call(
        self, chat: int | str, message: Message, media: Media, file: str | Upload
    ) -> tuple[int | None, str | None]:
        """`_deliver_media`, with a refusal classified here: a file_id Telegram no longer
        knows must reach the upload-once bookkeeping as a PermanentSendError."""
        try:
            return await self._deliver_media(chat, message, media, file)
        except Exception as exc:
            outcome = self._classify(exc)
            if not isinstance(outcome, PermanentSendError):
                raise
            chain_cause(outcome, exc, self._scrub)
            error = outcome
        raise error  # outside the except block: no implicit context to leak

    def check(self, recipient: str | int, message: Message) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] if Telegram would refuse this send
        for its recipient or message alone (nothing is sent): a malformed chat id, a text
        or caption too long for Telegram, HTML or Markdown Telegram cannot parse, a media
        file missing or over the upload limit (unless this sender already has its
        file_id), a keyboard or option that cannot be serialised.

        The Notifier calls it before claiming, so such a notification burns no slot.
        """
        self._prepare(
            recipient, message, file=not self._files.knows(getattr(message, "media", None))
        )

    def _prepare(self, recipient: object, message: object, *, file: bool = True) -> str:
        """The checked chat; ``file=False`` at send time, where a file problem is the
        message's (see ``files.unreadable``), not a reason to refuse the recipient."""
        target = validate_recipient(recipient)
        if not isinstance(message, Message):
            raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
        refuse_telegram_only(message.media, type(self).__name__)
        check_message(message, file=file)
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
