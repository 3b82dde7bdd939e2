"""PTBSender: a notifyonce Sender over an existing python-telegram-bot ``Bot``."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable
from typing import Any

import httpx
from telegram import Bot, LinkPreviewOptions
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from notifyonce._errors import (
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._media import Media
from notifyonce._message import Message
from notifyonce._senders.rate.stores import bot_key
from notifyonce._senders.redaction import short
from notifyonce._senders.status import error_for_status, retry_after_in, status_in
from notifyonce._senders.telegram.chat import Migrated, message_fields
from notifyonce._senders.telegram.files import FileIdStore
from notifyonce._senders.telegram.wrapped import Upload, WrappedBotSender, sent_file_id
from notifyonce._senders.transport import transport_error_class

__all__ = ["PTBSender", "classify_ptb_error"]

# python-telegram-bot maps these statuses to these classes (BaseRequest._request_wrapper);
# BadRequest is a NetworkError subclass, so refusals are checked before network errors.
_REFUSALS: tuple[tuple[type[TelegramError], int], ...] = (
    (BadRequest, 400),
    (Forbidden, 403),
    (EndPointNotFound, 404),
    (Conflict, 409),
)


def _seconds(exc: RetryAfter) -> float:
    # PTB 22 keeps a timedelta and returns an int (with a deprecation warning) or the
    # timedelta (PTB_TIMEDELTA); PTB 21 keeps an int.
    stored = getattr(exc, "_retry_after", None)
    if isinstance(stored, dt.timedelta):
        return stored.total_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value: object = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)  # type: ignore[arg-type]


def classify_ptb_error(
    exc: BaseException, scrub: Callable[[str], str] = str
) -> Migrated | SendError | None:
    """Map an exception from python-telegram-bot's ``Bot`` into notifyonce's classes.

    python-telegram-bot raises one ``NetworkError`` (or ``TimedOut``) for a refused
    connection, a dropped one and a read timeout alike; with its default ``HTTPXRequest``
    it chains the httpx exception as ``__cause__``, which notifyonce classifies like
    TelegramSender does (a failed connect or pool timeout: certainly not sent).

    Args:
        exc: The exception ``bot.send_message`` raised.
        scrub: Removes the token from descriptions.

    Returns:
        `Migrated` for a migration, the SendError to raise, or None when the
        exception is not python-telegram-bot's (the caller re-raises it).
    """
    if not isinstance(exc, TelegramError):
        return None
    # PTB appends the unparsable body to the message: a proxy's page, or an echo of ours.
    description = short(exc.message.split(". Parsing the server response")[0], scrub)
    if isinstance(exc, ChatMigrated):
        return Migrated(str(exc.new_chat_id), description)
    if isinstance(exc, RetryAfter):
        return TransientSendError(description, code=429, retry_after=_seconds(exc))
    if isinstance(exc, InvalidToken):
        # PTB raises it for 401 and 404 alike (both: the token or the URL is wrong).
        return error_for_status(status_in(exc.message) or 401, description)
    for klass, code in _REFUSALS:
        if isinstance(exc, klass):
            return error_for_status(code, description)
    cause = exc.__cause__
    if isinstance(exc, NetworkError):
        if isinstance(cause, httpx.HTTPError):
            return transport_error_class(cause)(description)
        if isinstance(exc, TimedOut):  # a custom request class: no way to tell the phase
            return UncertainSendError(description)
        if cause is None or isinstance(cause, TelegramError):
            # An answer PTB has no class for: an error envelope (a 5xx, a 413, a 429
            # without parameters), or one it could not parse ("Bad Gateway (502)"). PTB
            # keeps only the text; the status named there decides. 502/504 are uncertain,
            # and so is an answer whose status cannot be read.
            status = status_in(exc.message)
            if status is None or 200 <= status < 300:
                return UncertainSendError(description)
            return error_for_status(status, description, retry_after=retry_after_in(description))
        return UncertainSendError(description)  # "Unknown error in HTTP implementation"
    # "Invalid server response" to a 2xx, and anything newer: may have been sent.
    return UncertainSendError(description)


def _preview(is_disabled: bool) -> LinkPreviewOptions:
    return LinkPreviewOptions(is_disabled=is_disabled)


# The Bot method that sends each kind of media.
_MEDIA_METHODS = {"photo": "send_photo", "document": "send_document", "video": "send_video"}


class PTBSender(WrappedBotSender):
    """Sends with a python-telegram-bot (v21+) ``Bot`` you already have.

    python-telegram-bot does the HTTP (its request object, pool and timeouts); this
    sender maps its exceptions into notifyonce's classes, follows a chat migration once
    (``Receipt.migrated_to``) and keeps the token out of exception text. It does not
    retry; for PTB's own rate limiter, pass it to your ``Bot`` as usual.

    ``Message.parse_mode=None`` leaves the bot's defaults (``ExtBot`` ``Defaults``) in
    force; ``Message.options`` go to the Bot API as ``api_kwargs``. A message with a
    [`Photo`][notifyonce.Photo], [`Document`][notifyonce.Document] or
    [`Video`][notifyonce.Video] goes with ``send_photo``, ``send_document`` or
    ``send_video``, uploaded once and then sent by its ``file_id``.

    Args:
        bot: A ``telegram.Bot`` (or ``ExtBot``). Initialise and shut it down as your
            application does (``Application`` does both); the sender never shuts it down.
        read_timeout: Seconds to wait for Telegram's answer instead of the bot's default.
        file_store: Where the ``file_id`` of each uploaded file is kept: by default in
            this sender only; a [`SQLFileIdStore`][notifyonce.telegram.SQLFileIdStore]
            keeps them across runs (and shares them with the bot's other senders).

    Examples:
        >>> from telegram import Bot
        >>> PTBSender(Bot("123:ABC"))
        PTBSender(bot=<telegram.Bot>, token=<redacted>)
    """

    def __init__(
        self,
        bot: Bot,
        *,
        read_timeout: float | None = None,
        file_store: FileIdStore | None = None,
    ) -> None:
        if not isinstance(bot, Bot):
            raise ValidationTypeError("bot", f"must be a telegram.Bot, got {type(bot).__name__}")
        if read_timeout is not None and (
            isinstance(read_timeout, bool)
            or not isinstance(read_timeout, (int, float))
            or not read_timeout > 0
        ):
            raise ValidationError("read_timeout", "must be a positive number of seconds or None")
        self.bot = bot
        self.read_timeout = read_timeout
        self._token = bot.token
        self._use_files(bot_key(bot.token), file_store)

    def __repr__(self) -> str:
        return "PTBSender(bot=<telegram.Bot>, token=<redacted>)"

    def _kwargs(self, message: Message) -> dict[str, Any]:
        kwargs = message_fields(message, _preview)
        if message.reply_markup is not None:
            # A plain mapping goes to the Bot API as is, like any other parameter.
            kwargs.setdefault("api_kwargs", {})["reply_markup"] = dict(message.reply_markup)
        if message.options:
            kwargs.setdefault("api_kwargs", {}).update(message.options)
        if self.read_timeout is not None:
            kwargs["read_timeout"] = self.read_timeout
        return kwargs

    async def _deliver(self, chat: int | str, message: Message) -> int | None:
        sent = await self.bot.send_message(chat_id=chat, text=message.text, **self._kwargs(message))
        return sent.message_id

    async def _deliver_media(
        self, chat: int | str, message: Message, media: Media, file: str | Upload
    ) -> tuple[int | None, str | None]:
        kwargs = self._kwargs(message)
        if message.text.strip():
            kwargs["caption"] = message.text
        if isinstance(file, Upload):
            kwargs["filename"] = file.filename
        send = getattr(self.bot, _MEDIA_METHODS[media.kind])
        source = file if isinstance(file, str) else file.data
        sent = await send(chat_id=chat, **{media.kind: source}, **kwargs)
        return sent.message_id, sent_file_id(sent, media.kind)

    def _classify(self, exc: Exception) -> Migrated | SendError | None:
        return classify_ptb_error(exc, self._scrub)
