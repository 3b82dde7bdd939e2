"""AiogramSender: a notifyonce Sender over an existing aiogram 3 ``Bot``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    RestartingTelegram,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods import SendDocument, SendMessage, SendPhoto, SendVideo
from aiogram.methods.base import TelegramMethod
from aiogram.types import BufferedInputFile, LinkPreviewOptions
from pydantic import ValidationError as PydanticValidationError

from notifyonce._errors import (
    PermanentSendError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._media import Album, Copy, Media
from notifyonce._message import Message
from notifyonce._senders.rate.stores import bot_key
from notifyonce._senders.redaction import short
from notifyonce._senders.status import error_for_status, retry_after_in, status_in
from notifyonce._senders.telegram.chat import Migrated, message_fields
from notifyonce._senders.telegram.files import FileIdStore
from notifyonce._senders.telegram.wrapped import Upload, WrappedBotSender, sent_file_id

__all__ = ["AiogramSender", "classify_aiogram_error"]

# aiogram maps these HTTP statuses to these classes exactly (BaseSession.check_response),
# so the code can be given back; checked in this order (EntityTooLarge is a NetworkError).
_REFUSALS: tuple[tuple[type[TelegramAPIError], int], ...] = (
    (TelegramEntityTooLarge, 413),
    (TelegramBadRequest, 400),
    (TelegramNotFound, 404),
    (TelegramUnauthorizedError, 401),
    (TelegramForbiddenError, 403),
    (TelegramConflictError, 409),
)

# Raised by aiohttp while connecting: the request cannot have left. ConnectionTimeoutError
# only exists in aiohttp >= 3.10, and only with a sock_connect timeout on the session.
_CONNECT_FAILURES: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError,) + (
    (aiohttp.ConnectionTimeoutError,) if hasattr(aiohttp, "ConnectionTimeoutError") else ()
)


def classify_aiogram_error(
    exc: BaseException, scrub: Callable[[str], str] = str
) -> Migrated | SendError | None:
    """Map an exception from aiogram's ``Bot`` into notifyonce's classes.

    aiogram raises one ``TelegramNetworkError`` for a refused connection, a dropped one
    and a timeout alike; the aiohttp exception underneath (chained as ``__cause__`` since
    aiogram 3.25, only as ``__context__`` before) tells a failed connect (certainly not
    sent) from the rest (may have been sent).

    Args:
        exc: The exception ``bot(...)`` raised.
        scrub: Removes the token from descriptions.

    Returns:
        `Migrated` for a migration, the SendError to raise, or None when the
        exception is not aiogram's (the caller re-raises it).
    """
    description = short(str(getattr(exc, "message", "") or exc), scrub)
    if isinstance(exc, TelegramMigrateToChat):
        return Migrated(str(exc.migrate_to_chat_id), description)
    if isinstance(exc, TelegramRetryAfter):
        return TransientSendError(description, code=429, retry_after=float(exc.retry_after))
    for klass, code in _REFUSALS:
        if isinstance(exc, klass):
            return error_for_status(code, description)
    if isinstance(exc, TelegramNetworkError):
        underneath = exc.__cause__ if exc.__cause__ is not None else exc.__context__
        if isinstance(underneath, _CONNECT_FAILURES):
            return TransientSendError(description)
        # A read timeout (aiogram's total timeout cannot say which phase ran out), a
        # connection dropped or reset after writing: it may have been delivered.
        return UncertainSendError(description)
    if isinstance(exc, RestartingTelegram):
        return TransientSendError(description)  # the Bot API says it is restarting
    if isinstance(exc, TelegramServerError):
        # aiogram keeps only the description of a 5xx answer, not its status: read the
        # status from it (the Bot API writes "Bad Gateway"); one it cannot name may be a
        # 502/504, whose request may have been passed on.
        status = status_in(description)
        if status is None or status < 500:
            return UncertainSendError(description)
        return error_for_status(status, description)
    if isinstance(exc, TelegramAPIError) and not isinstance(exc, TelegramNetworkError):
        # An answer aiogram has no class for (a 429 without parameters, a 3xx): the status
        # named in its text decides, with the wait written there.
        status = status_in(description)
        if status is not None:
            return error_for_status(status, description, retry_after=retry_after_in(description))
    if isinstance(exc, ClientDecodeError):
        # An answer came but was not the Bot API's (a proxy's error page, a cut body).
        return UncertainSendError(description)
    if isinstance(exc, TelegramAPIError):
        return PermanentSendError(description)
    if isinstance(exc, asyncio.TimeoutError):  # a custom session without aiogram's wrapping
        return UncertainSendError("timeout")
    return None


def _preview(is_disabled: bool) -> LinkPreviewOptions:
    return LinkPreviewOptions(is_disabled=is_disabled)


_MEDIA_METHODS: dict[str, type[SendPhoto | SendDocument | SendVideo]] = {
    "photo": SendPhoto,
    "document": SendDocument,
    "video": SendVideo,
}
# Stands in for the file when a media request is only built to be checked.
_PLACEHOLDER_FILE_ID = "AAAAAAAAAAAA"


class AiogramSender(WrappedBotSender):
    """Sends with an aiogram 3 ``Bot`` you already have (its session, its defaults).

    aiogram does the HTTP; this sender maps its exceptions into notifyonce's classes,
    follows a chat migration once (``Receipt.migrated_to``) and keeps the token out of
    exception text. It does not rate-limit (aiogram has no limiter) and does not retry.

    ``Message.parse_mode=None`` leaves the bot's default (``DefaultBotProperties``)
    in force; ``Message.options`` are extra ``sendMessage`` parameters. A message with a
    [`Photo`][notifyonce.Photo], [`Document`][notifyonce.Document] or
    [`Video`][notifyonce.Video] goes with ``sendPhoto``, ``sendDocument`` or
    ``sendVideo``, uploaded once and then sent by its ``file_id``.

    Args:
        bot: An ``aiogram.Bot``. It is not closed here: close its session yourself.
        request_timeout: Seconds for each request instead of the session's timeout.
        file_store: Where the ``file_id`` of each uploaded file is kept: by default in
            this sender only; a [`SQLFileIdStore`][notifyonce.telegram.SQLFileIdStore]
            keeps them across runs (and shares them with the bot's other senders).

    Examples:
        >>> from aiogram import Bot
        >>> AiogramSender(Bot("123:ABC"))
        AiogramSender(bot=<aiogram.Bot>, token=<redacted>)
    """

    def __init__(
        self,
        bot: Bot,
        *,
        request_timeout: int | None = None,
        file_store: FileIdStore | None = None,
    ) -> None:
        if not isinstance(bot, Bot):
            raise ValidationTypeError("bot", f"must be an aiogram.Bot, got {type(bot).__name__}")
        if request_timeout is not None and (
            isinstance(request_timeout, bool)
            or not isinstance(request_timeout, int)
            or request_timeout <= 0
        ):
            raise ValidationError("request_timeout", "must be a positive int of seconds or None")
        self.bot = bot
        self.request_timeout = request_timeout
        self._token = bot.token
        self._use_files(bot_key(bot.token), file_store)

    def __repr__(self) -> str:
        return "AiogramSender(bot=<aiogram.Bot>, token=<redacted>)"

    def _request(self, chat: int | str, message: Message) -> SendMessage:
        fields: dict[str, Any] = {"chat_id": chat, "text": message.text}
        fields.update(message_fields(message, _preview))
        if message.reply_markup is not None:
            fields["reply_markup"] = message.reply_markup
        fields.update(message.options)
        return _validated(SendMessage, fields)

    def _media_request(
        self, chat: int | str, message: Message, media: Media, file: str | Upload
    ) -> SendPhoto | SendDocument | SendVideo:
        source = file if isinstance(file, str) else BufferedInputFile(file.data, file.filename)
        fields: dict[str, Any] = {"chat_id": chat, media.kind: source}
        if message.text.strip():
            fields["caption"] = message.text
        fields.update(message_fields(message, _preview))
        if message.reply_markup is not None:
            fields["reply_markup"] = message.reply_markup
        fields.update(message.options)
        return _validated(_MEDIA_METHODS[media.kind], fields)

    def _check_request(self, chat: int | str, message: Message) -> None:
        media = message.media
        if media is None or isinstance(media, (Copy, Album)):  # refused before this
            self._request(chat, message)
        else:
            self._media_request(chat, message, media, _PLACEHOLDER_FILE_ID)

    async def _deliver(self, chat: int | str, message: Message) -> int | None:
        request = self._request(chat, message)
        sent = await self.bot(request, request_timeout=self.request_timeout)
        return sent.message_id

    async def _deliver_media(
        self, chat: int | str, message: Message, media: Media, file: str | Upload
    ) -> tuple[int | None, str | None]:
        request = self._media_request(chat, message, media, file)
        sent = await self.bot(request, request_timeout=self.request_timeout)
        return sent.message_id, sent_file_id(sent, media.kind)

    def _classify(self, exc: Exception) -> Migrated | SendError | None:
        return classify_aiogram_error(exc, self._scrub)


R = TypeVar("R", bound=TelegramMethod[Any])


def _validated(method: type[R], fields: dict[str, Any]) -> R:
    """aiogram's request object; a field it refuses is a ValidationError naming it."""
    try:
        return method(**fields)
    except PydanticValidationError as exc:
        # Names the fields, never their values (the text may be among them).
        where = sorted({str(e["loc"][0]) for e in exc.errors() if e.get("loc")})
        name = getattr(method, "__api_method__", method.__name__)  # "sendMessage"
        raise ValidationTypeError(
            "message", f"aiogram refuses {name} fields: {', '.join(where)}"
        ) from None
