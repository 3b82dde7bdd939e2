"""TelegramSender: one reused httpx.AsyncClient, split timeouts, classified failures."""

from __future__ import annotations

import hashlib
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType, TracebackType
from typing import Any

import httpx
from typing_extensions import Unpack

from notifyonce._errors import (
    MessageRefusedError,
    PermanentSendError,
    SendError,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._media import Album, Copy, Media
from notifyonce._message import Message, Receipt
from notifyonce._observe import note_flood
from notifyonce._senders.http import (
    CONNECT_TIMEOUT,
    DEFAULT_BUDGET,
    DEFAULT_CLOCK,
    DEFAULT_LIMITS,
    DEFAULT_RNG,
    DEFAULT_SLEEP,
    POOL_TIMEOUT,
    WRITE_TIMEOUT,
    Answer,
    HTTPOptions,
    HTTPSenderBase,
    check_seconds,
    refuse_unknown_options,
)
from notifyonce._senders.rate.stores import (
    BOT_LANE,
    PAID_LANE,
    Grant,
    MemoryRateStore,
    RateStore,
    SharedRateLimiter,
    bot_key,
)
from notifyonce._senders.redaction import Secrets, chain_cause, scrubbed
from notifyonce._senders.retry import RetryPlan
from notifyonce._senders.telegram.api_url import default_api_url
from notifyonce._senders.telegram.chat import chat_id as _chat_id
from notifyonce._senders.telegram.chat import message_fields
from notifyonce._senders.telegram.chat import validate_recipient as _validate_recipient
from notifyonce._senders.telegram.classify import Delivered, Migrated, classify_response
from notifyonce._senders.telegram.files import (
    FileIdStore,
    UploadOnce,
    file_key,
    read_upload,
    same_bytes,
)
from notifyonce._senders.telegram.markup import check_markup
from notifyonce._senders.telegram.payload import (
    Upload,
    check_caption,
    check_message,
    check_text,
    encode,
    jsonable,
    multipart,
)
from notifyonce._senders.telegram.ratelimit import RateLimit
from notifyonce._senders.transport import TurnMissedError

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_BUDGET",
    "DEFAULT_LIMITS",
    "POOL_TIMEOUT",
    "WRITE_TIMEOUT",
    "TelegramSender",
]

logger = logging.getLogger("notifyonce.telegram")

# "<bot id>:<secret>", as @BotFather gives it: the bot id is digits, the secret letters,
# digits, "-" and "_".
_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")


@dataclass(slots=True, eq=False)
class _Held:
    """A turn TelegramSender.turn holds for the send to ``target`` in its block."""

    sender: int  # id() of the sender that took it
    target: str
    grant: Grant
    handed: float  # when it was handed to the caller, on the sender's clock
    used: bool = False  # mutable: a send in a copy of the context (gather) uses it up too


# The turn held in this task. Task-local: concurrent sends of one sender never share a turn.
_GRANTED: ContextVar[_Held | None] = ContextVar("notifyonce_turn", default=None)
# The longest a turn is waited for (seconds): the cap on a flood wait.
_TURN_MAX_WAIT = 3600.0
# A turn is booked as far ahead as the caller's steps between it and its send took lately
# (the longest of the last _LEAD_SAMPLES, at most _MAX_LEAD seconds), and handed over that
# much before its start: a claim then runs before the start instead of after it.
_LEAD_SAMPLES = 16
_MAX_LEAD = 0.25
# Turns are handed over on a grid of this many seconds: at 1,000 msg/s the claims of the
# ten or so turns starting in one step go to the ledger in one statement instead of one
# each (a claim held that much longer before its send is the price).
_TOGETHER = 0.01
_BOT_PREFIX = re.compile(r"bot[0-9]+:")


def check_token(token: object) -> str:
    """``token`` if it has a bot token's shape; the error never shows the token."""
    if not isinstance(token, str):
        raise ValidationTypeError("token", f"must be a str, got {type(token).__name__}")
    if _TOKEN.fullmatch(token):
        return token
    if token != token.strip() and _TOKEN.fullmatch(token.strip()):
        raise ValidationError(
            "token",
            "has a space or a line break before or after it (read from a file with its "
            "newline?): strip it, e.g. token.strip()",
        )
    if _BOT_PREFIX.match(token) and _TOKEN.fullmatch(token[3:]):
        raise ValidationError(
            "token",
            "starts with 'bot': that prefix belongs to the URL (/bot<token>/sendMessage); "
            "pass the token alone, as @BotFather gives it ('123456:ABC...')",
        )
    raise ValidationError(
        "token",
        "is not a bot token: expected '<bot id>:<secret>' as @BotFather gives it "
        "('123456:ABC...'), digits, a colon, then letters, digits, '-' or '_'",
    )


# A stand-in media, only to check a new caption against a caption's limit.
_CAPTION_PROBE = Copy(from_chat_id=1, message_id=1)

# The headers of a JSON request (never changed: httpx and the transport copy them).
_JSON_HEADERS: Mapping[str, str] = MappingProxyType({"content-type": "application/json"})

# The Bot API method that sends each kind of media.
_METHODS = {"photo": "sendPhoto", "document": "sendDocument", "video": "sendVideo"}


def edit_payload(
    message_id: object,
    text: str | None,
    parse_mode: str | None,
    reply_markup: Any,
    *,
    caption: bool,
) -> dict[str, Any]:
    """The checked fields of an edit: the message id, the new text (or caption: its own
    limit) and keyboard. A ValidationError names the field, before any request."""
    if isinstance(message_id, bool) or not isinstance(message_id, int) or message_id < 1:
        raise ValidationError("message_id", "must be a positive message id")
    payload: dict[str, Any] = {"message_id": message_id}
    if text is None and reply_markup is None:
        raise ValidationError("text", "an edit needs a new text, caption or keyboard")
    if text is not None:
        probe = Message(text, parse_mode=parse_mode)
        check_markup(probe)
        if caption:
            check_caption(Message(text, parse_mode=parse_mode, media=_CAPTION_PROBE))
        else:
            check_text(probe)
        payload["caption" if caption else "text"] = text
        if parse_mode is not None:
            payload["parse_mode"] = parse_mode
    if reply_markup is not None:
        payload["reply_markup"] = jsonable(reply_markup, "reply_markup")
        encode({"reply_markup": payload["reply_markup"]})
    return payload


def _payload(message: Message) -> dict[str, Any]:
    if message.media is None:
        payload: dict[str, Any] = {"text": message.text}
    else:
        # The media itself is added at send time: a file_id, a URL or an upload.
        payload = {"caption": message.text} if message.text.strip() else {}
    payload.update(message_fields(message, lambda disabled: {"is_disabled": disabled}))
    if message.reply_markup is not None:
        # An aiogram keyboard (a pydantic model) becomes the dict the Bot API expects.
        payload["reply_markup"] = jsonable(message.reply_markup, "reply_markup")
    payload.update(jsonable(dict(message.options), "options"))
    return payload


def prepare(recipient: object, message: object, *, file: bool = True) -> tuple[str, dict[str, Any]]:
    """The checked recipient and ``sendMessage`` payload; a ValidationError otherwise.

    Everything that can fail before the request is written fails here: a malformed chat
    id, markup Telegram cannot parse, a text or caption too long for Telegram, a value the
    JSON encoder cannot handle, and (``file``) a media file gone missing or grown past the
    upload limit. A send passes ``file=False``: there a file problem is the message's, not
    a reason to refuse its recipient (see ``files.unreadable``).
    """
    global _last_text  # one slot, replaced whole: no lock needed
    recipient = _validate_recipient(recipient)
    if not isinstance(message, Message):
        raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
    # A text message with no keyboard, whose options are plain values (``--paid``'s
    # allow_paid_broadcast), is checked by its immutable fields alone: a broadcast sends
    # the same one to every chat (the Notifier checks it before each claim, the send
    # again), so the last one checked is remembered.
    key = None
    if (
        message.media is None
        and message.reply_markup is None
        and all(type(v) in _PLAIN for v in message.options.values())
    ):
        options = tuple(message.options.items())
        key = (message.text, message.parse_mode, message.silent, message.link_preview, options)
        last = _last_text
        if last is not None and last[0] == key:
            return recipient, dict(last[1])
    check_message(message, file=file)
    payload = _payload(message)
    # Encoded once by field, so an error can say which field cannot be encoded.
    options = jsonable(dict(message.options), "options")
    encode({"reply_markup": payload.get("reply_markup"), "options": options})
    if key is not None:
        _last_text = (key, dict(payload))
    return recipient, payload


# The last text message `prepare` passed, by its fields, and its payload; the option
# values that cannot change under it.
_PLAIN = (str, int, float, bool, type(None))
_last_text: tuple[tuple[object, ...], dict[str, Any]] | None = None


def _limiter(
    token: str,
    rate_limit: RateLimit | None,
    rate_store: RateStore | None,
    allow_paid_broadcast: bool,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[object]],
) -> SharedRateLimiter | None:
    """The sender's limiter, after checking the rate options."""
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise ValidationTypeError("rate_limit", "must be a RateLimit or None")
    if rate_store is not None and not isinstance(rate_store, RateStore):
        raise ValidationTypeError(
            "rate_store", "must be a rate store (MemoryRateStore, SQLRateStore, RedisRateStore)"
        )
    if not isinstance(allow_paid_broadcast, bool):
        raise ValidationTypeError("allow_paid_broadcast", "must be a bool")
    if rate_limit is None:
        if rate_store is not None:
            raise ValidationError("rate_store", "needs a rate_limit (rate_limit=None disables it)")
        return None
    store = MemoryRateStore(clock=clock) if rate_store is None else rate_store
    return SharedRateLimiter(rate_limit, store, bot_key(token), clock=clock, sleep=sleep)


class _Turn:
    """`TelegramSender.turn`'s block: the turn is taken on entering it, held in `_GRANTED`
    for the send inside, and given back on leaving it when no send used it. A class, not
    an async generator: a broadcast enters one per message, and an async generator costs
    the event loop's bookkeeping of it (a weak set entry, added and removed) besides
    contextlib's wrapper."""

    __slots__ = ("_entered", "_recipient", "_sender")

    def __init__(self, sender: TelegramSender, recipient: str | int) -> None:
        self._sender = sender
        self._recipient = recipient
        # The turn taken on entering, and the token that puts `_GRANTED` back on leaving.
        self._entered: tuple[_Held, Token[_Held | None]] | None = None

    async def __aenter__(self) -> None:
        held = await self._sender._take_turn(self._recipient)
        if held is not None:
            self._entered = held, _GRANTED.set(held)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered is None:  # no limiter: no turn was taken
            return
        (held, token), self._entered = self._entered, None
        _GRANTED.reset(token)
        await self._sender._end_turn(held)


class TelegramSender(HTTPSenderBase):
    """Delivers messages with the Telegram Bot API's ``sendMessage``, and a message's
    [`Photo`][notifyonce.Photo], [`Document`][notifyonce.Document] or
    [`Video`][notifyonce.Video] with ``sendPhoto``, ``sendDocument`` or ``sendVideo``
    (each file uploaded once, then sent by its ``file_id``; see ``file_store``).

    One ``httpx.AsyncClient`` is created on the first send and reused for every send and
    retry (keep-alive), until `aclose` or the end of ``async with``. A client you
    pass in is used as is and never closed here.

    Every failure is classified by whether the message may have been delivered:
    [`PermanentSendError`][notifyonce.PermanentSendError] (blocked, chat not found, bad
    request), [`SenderConfigError`][notifyonce.SenderConfigError] (a rejected token, a wrong
    ``base_url``: 401, 404, a redirect), [`TransientSendError`][notifyonce.TransientSendError]
    (certainly not delivered; carries ``retry_after`` for 429) or
    [`UncertainSendError`][notifyonce.UncertainSendError] (the request may have been written:
    read timeout, connection closed or reset after sending, a 502/504
    from a gateway). Only transient failures are retried, within one ``budget`` per send.

    Args:
        token: The bot token. It never appears in logs, reprs or exception messages.
        base_url: The Bot API server. By default ``$NOTIFYONCE_BOT_API_URL`` when that is
            set (a local server to try a bot against, such as
            ``notifyonce serve-test-api``), else ``https://api.telegram.org``.
        client: Your own ``httpx.AsyncClient`` (not closed by the sender). Its limits and
            transport apply; the timeouts are still set on every request.
        rate_limit: Telegram's limits, on by default; None disables the limiter.
        rate_store: Where the limiter keeps its state: by default in this process only
            (a [`MemoryRateStore`][notifyonce.ratelimit.MemoryRateStore]); pass a
            [`SQLRateStore`][notifyonce.ratelimit.SQLRateStore] or
            [`RedisRateStore`][notifyonce.ratelimit.RedisRateStore] to share the bot's budget with
            every worker and host. When the store fails, nothing is sent
            ([`RateStoreUnavailableError`][notifyonce.ratelimit.RateStoreUnavailableError]).
        allow_paid_broadcast: Send with ``allow_paid_broadcast`` (Telegram's paid lane,
            charged in Stars) and pace by ``rate_limit.paid_broadcast_per_second``
            instead of ``bot_per_second``. Off unless asked for.
        file_store: Where the ``file_id`` of every uploaded photo, document and video is
            kept, by the sha256 of its bytes: by default in this sender only (a
            [`MemoryFileIdStore`][notifyonce.telegram.MemoryFileIdStore]); a
            [`SQLFileIdStore`][notifyonce.telegram.SQLFileIdStore] keeps them across runs
            and workers, so a resumed broadcast does not upload again.
        max_flood_wait: The longest flood wait (a 429's ``retry_after``) waited out, in
            seconds; 5 by default. A longer wait for one chat gives its notification back
            (``RETRY``, nothing claimed) while the others go on; a longer bot-wide one stops
            the Notifier's run (see [`FloodWaitError`][notifyonce.FloodWaitError]), so a
            flood never holds a job past its next run.
        **http: Timeouts, pool limits and retries: ``budget``, ``connect_timeout``,
            ``write_timeout``, ``pool_timeout``, ``limits``, ``max_retries``,
            ``backoff_base``, ``backoff_max`` (see
            [`HTTPOptions`][notifyonce.telegram.HTTPOptions]).
        clock: Monotonic clock (tests inject a fake one).
        sleep: Async sleep (tests inject a fake one).
        rng: Returns a float in [0, 1) for jitter (tests inject a fixed one).

    Examples:
        >>> import asyncio
        >>> from notifyonce import Message
        >>> async def main() -> None:
        ...     async with TelegramSender("123:ABC") as sender:
        ...         await sender.send("12345", Message("6 hours left"))
        >>> TelegramSender("123:ABC")
        TelegramSender(base_url='https://api.telegram.org', token=<redacted>)
    """

    keeps_cookies = False  # the Bot API sets none

    def __init__(
        self,
        token: str,
        *,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        rate_limit: RateLimit | None = RateLimit(),  # noqa: B008 (frozen, shared safely)
        rate_store: RateStore | None = None,
        allow_paid_broadcast: bool = False,
        file_store: FileIdStore | None = None,
        max_flood_wait: float = 5.0,
        clock: Callable[[], float] = DEFAULT_CLOCK,
        sleep: Callable[[float], Awaitable[object]] = DEFAULT_SLEEP,
        rng: Callable[[], float] = DEFAULT_RNG,
        **http: Unpack[HTTPOptions],
    ) -> None:
        refuse_unknown_options(self, http)
        token = check_token(token)
        if base_url is None:
            base_url = default_api_url()
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValidationError("base_url", "must be an http:// or https:// URL")
        self._configure(client=client, clock=clock, sleep=sleep, rng=rng, **http)
        self.base_url = base_url.rstrip("/")
        self._secrets = Secrets(f"{self.base_url}/bot{token}/", token=token)
        self._limiter = _limiter(token, rate_limit, rate_store, allow_paid_broadcast, clock, sleep)
        if file_store is not None and not isinstance(file_store, FileIdStore):
            raise ValidationTypeError(
                "file_store", "must be a file id store (MemoryFileIdStore, SQLFileIdStore)"
            )
        self._files = UploadOnce(bot_key(token), file_store)
        self._lane = PAID_LANE if allow_paid_broadcast else BOT_LANE
        self.max_flood_wait = check_seconds("max_flood_wait", max_flood_wait)
        # Seconds between a turn handed over and its send, lately (see _MAX_LEAD).
        self._steps: deque[float] = deque(maxlen=_LEAD_SAMPLES)

    def __repr__(self) -> str:
        return f"TelegramSender(base_url={self.base_url!r}, token=<redacted>)"

    @property
    def rate_limit(self) -> RateLimit | None:
        """The limits in force, or None when the limiter is off."""
        return None if self._limiter is None else self._limiter.limit

    async def __aenter__(self) -> TelegramSender:
        return self

    async def send(
        self, recipient: str | int, message: Message, *, budget: float | None = None
    ) -> Receipt:
        """Send ``message`` to ``recipient`` and return Telegram's receipt.

        Args:
            recipient: A chat id (negative for groups and channels), as a string or an
                int (aiogram's ``message.chat.id``), or ``@channelname``.
            message: What to send; its options are passed through to ``sendMessage``.
            budget: Seconds for this send instead of the sender's ``budget``: give a
                secondary send (a note to an operator) a narrow budget so it cannot stall
                the main work.

        Returns:
            The receipt; ``migrated_to`` is set when the chat had moved and the message
            was delivered to the new chat id.

        Raises:
            ValidationError: ``recipient`` or ``message`` is invalid (nothing was sent).
            PermanentSendError: Telegram refused for good.
            SenderConfigError: The token or ``base_url`` is wrong (nothing was sent).
            TransientSendError: Not delivered; ``retry_after`` says when to try again.
            UncertainSendError: May have been delivered.
        """
        target, payload = prepare(recipient, message, file=False)
        try:
            if message.media is None:
                return await self._send(target, payload, self._budget(budget))
            return await self._send_media(target, payload, message.media, self._budget(budget))
        except SendError as exc:
            error = exc
        # Error reporters record the locals of every frame an exception passed through:
        # leave them neither the text nor the raw transport exception (its URL holds the
        # token).
        del message, payload
        raise scrubbed(error)

    async def edit_text(
        self,
        recipient: str | int,
        message_id: int,
        text: str,
        *,
        parse_mode: str | None = None,
        budget: float | None = None,
    ) -> bool:
        """Replace the text of a message this bot sent (``editMessageText``), within the
        sender's rate limit like any send.

        Returns:
            True when edited; False when Telegram answered "message is not modified" (the
            text was already that).

        Raises:
            ValidationError: A malformed chat id, a message id below 1, an empty text.
            SendError: As `send` (the message is gone, a flood wait, ...).
        """
        return await self.edit_message(
            recipient, message_id, text=text, parse_mode=parse_mode, budget=budget
        )

    async def edit_message(
        self,
        recipient: str | int,
        message_id: int,
        *,
        text: str | None = None,
        parse_mode: str | None = None,
        reply_markup: Any = None,
        caption: bool = False,
        budget: float | None = None,
    ) -> bool:
        """Edit a message this bot sent, within the sender's rate limit like any send:
        its text (``editMessageText``), or with ``caption`` its media's caption
        (``editMessageCaption``), or without ``text`` only its inline keyboard
        (``editMessageReplyMarkup``). A text edit of a media message, or a caption edit of
        a text one, is tried once more the other way: the copy of a post may be either.

        Returns:
            True when edited; False when Telegram answered "message is not modified" (it
            already was so).

        Raises:
            ValidationError: A malformed chat id, a message id below 1, an empty text or
                one over Telegram's limit, a keyboard the JSON encoder cannot handle.
            SendError: As `send`; "message to edit not found" is a PermanentSendError.
        """
        target = _validate_recipient(recipient)
        payload = edit_payload(message_id, text, parse_mode, reply_markup, caption=caption)
        methods = ["editMessageCaption", "editMessageText"]
        if text is None:
            methods = ["editMessageReplyMarkup"]
        elif not caption:
            methods.reverse()
        error: SendError | None = None
        for method in methods:
            fields = dict(payload)
            if method == "editMessageText":
                fields["text"] = fields.pop("caption", text)
            elif method == "editMessageCaption":
                fields["caption"] = fields.pop("text", text)
            try:
                await self._send(target, fields, self._budget(budget), method)
            except PermanentSendError as exc:
                lowered = exc.description.lower()
                if "message is not modified" in lowered:
                    return False
                error = exc
                if "there is no text in the message" in lowered or (
                    "there is no caption in the message" in lowered
                ):
                    continue  # the other kind of message: try the other method
                break
            except SendError as exc:
                error = exc
                break
            else:
                return True
        del payload, text
        assert error is not None
        raise scrubbed(error)

    async def delete_messages(
        self, recipient: str | int, message_ids: Sequence[int], *, budget: float | None = None
    ) -> None:
        """Delete messages this bot sent to one chat, within the sender's rate limit like
        any send: one with ``deleteMessage``, several (an album's) with one
        ``deleteMessages``, so that they go together or not at all.

        Telegram lets a bot delete its messages for 48 hours; past that it answers
        "message can't be deleted for everyone" (a PermanentSendError).

        Raises:
            ValidationError: A malformed chat id, no ids, more than 100, an id below 1.
            SendError: As `send`; "message to delete not found" is a PermanentSendError.
        """
        target = _validate_recipient(recipient)
        ids = list(message_ids) if isinstance(message_ids, (list, tuple)) else None
        if not ids or len(ids) > 100:
            raise ValidationError("message_ids", "must be a list of 1 to 100 message ids")
        for one in ids:
            if isinstance(one, bool) or not isinstance(one, int) or one < 1:
                raise ValidationError("message_ids", "must hold positive message ids")
        if len(ids) == 1:
            payload: dict[str, Any] = {"message_id": ids[0]}
            method = "deleteMessage"
        else:
            payload, method = {"message_ids": ids}, "deleteMessages"
        try:
            await self._send(target, payload, self._budget(budget), method)
        except SendError as exc:
            raise scrubbed(exc) from None

    def check_edit(
        self,
        text: str | None,
        *,
        parse_mode: str | None = None,
        reply_markup: Any = None,
        caption: bool = False,
    ) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] if Telegram would refuse
        this edit of any message (nothing is sent): no text and no keyboard, a text over
        4096 characters or a caption over 1024 (as Telegram counts them), markup Telegram
        cannot parse, a keyboard the JSON encoder cannot handle."""
        edit_payload(1, text, parse_mode, reply_markup, caption=caption)

    def check(self, recipient: str | int, message: Message) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] if Telegram would refuse this send
        for its recipient or message alone (nothing is sent).

        A malformed chat id, HTML or Markdown that Telegram cannot parse (in the
        message's ``parse_mode``), a text longer than Telegram's 4096 characters or a
        caption longer than 1024 (counted as Telegram counts them), a media file missing or
        over the upload limit (unless this sender already has its file_id), or options the
        JSON encoder cannot handle. The Notifier calls it before claiming, so such a
        notification burns no slot.
        """
        prepare(recipient, message, file=not self._files.knows(getattr(message, "media", None)))

    def turn(self, recipient: str | int) -> AbstractAsyncContextManager[None]:
        """Wait for ``recipient``'s rate-limit turn; the first send to it inside uses it.

        The Notifier claims a slot only inside its recipient's turn, so claims never wait
        in the limiter: a crash then costs the sends under way, not every claim queued
        behind the rate limit. The turn is handed over as long before its start as the
        steps between a turn and its send (the claim) took lately, at most 0.25 s, and on
        a 10 ms grid: the turns starting in one 10 ms step are handed over at the same
        moment, so their claims share one statement (at 1,000 msg/s, ten claims a round
        trip instead of one). The send then leaves at the start booked for it, waiting if
        the claim was quicker, and gives the turn back for a new one if it could not leave
        in time (it waited for a free connection, the event loop was busy). A turn no send
        used (the slot was someone else's, the run stopped) is given back.
        Without a limiter this waits for nothing.

        Raises:
            RateStoreUnavailableError: The rate store failed (nothing may be sent).
            FloodWaitError: The chat's or the bot's flood wait is longer than
                ``max_flood_wait``.
            TransientSendError: The next turn is more than an hour away.
        """
        return _Turn(self, recipient)

    async def _take_turn(self, recipient: str | int) -> _Held | None:
        """The turn `turn` enters with (None without a limiter)."""
        if self._limiter is None:
            return None
        target = _validate_recipient(recipient)
        grant = await self._limiter.acquire(
            target,
            max_wait=_TURN_MAX_WAIT,
            lane=self._lane,
            flood_limit=self.max_flood_wait,
            ready_in=min(max(self._steps, default=0.0), _MAX_LEAD),
            together=_TOGETHER,
        )
        if not isinstance(grant, Grant):
            raise TransientSendError(
                f"rate limit: the next turn is {grant:.0f} s away", retry_after=grant
            )
        return _Held(id(self), target, grant, self._clock())

    async def _end_turn(self, held: _Held) -> None:
        """Give ``held`` back if no send used it."""
        if not held.used and self._limiter is not None:
            await self._limiter.give_back(held.grant)

    def _held_turn(self, target: str) -> Grant | None:
        """The turn this task holds for ``target`` (now used up), or None when there is
        none and the send must take one."""
        held = _GRANTED.get()
        if held is None or held.used or (held.sender, held.target) != (id(self), target):
            return None
        held.used = True
        self._steps.append(self._clock() - held.handed)
        return held.grant

    async def _keep_turn(self, grant: Grant) -> bool:
        """The gate right before a send's request: wait for the turn's start if the steps
        since it was handed over were quicker; True to send.

        A send that leaves later than the limiter's tolerance (it waited for a free
        connection, or the event loop was busy) would bunch with the next turns' sends:
        the turn is given back (in a shared store only if no turn was booked after it) and
        False tells the send to take a new one.
        """
        assert self._limiter is not None
        early = grant.due - self._clock()
        if early > 0:
            await self._sleep(early)
            early = grant.due - self._clock()
        if -early <= self._limiter.tolerance:
            return True
        await self._limiter.give_back(grant)
        return False

    async def _send_media(
        self, target: str, payload: dict[str, Any], media: Media | Copy | Album, budget: float
    ) -> Receipt:
        """Send ``media`` by file_id or URL, or upload it once (see ``UploadOnce``); copy
        a message with ``copyMessage``."""
        if isinstance(media, Copy):
            source = {
                "from_chat_id": _chat_id(str(media.from_chat_id)),
                "message_id": media.message_id,
            }
            try:
                return await self._send(target, {**payload, **source}, budget, "copyMessage")
            except MessageRefusedError as exc:
                refused = exc
            # Telegram does not say which message it cannot copy; whoever stops a campaign
            # over it needs to (a chat id and a message id are no secret).
            raise MessageRefusedError(
                f"{refused.description} (copying message {media.from_chat_id}:{media.message_id})",
                code=refused.code,
                about_message=True,
            )
        if isinstance(media, Album):
            return await self._send_album(target, payload, media, budget)
        method = _METHODS[media.kind]
        if not media.uploads:
            return await self._send(target, {**payload, media.kind: media.source}, budget, method)
        deadline = self._clock() + budget
        key = await self._files.key(media)

        def remaining() -> float:
            return deadline - self._clock()

        async def reuse(file_id: str) -> tuple[Receipt, str | None]:
            fields = {**payload, media.kind: file_id}
            receipt = await self._send(target, fields, remaining(), method)
            return receipt, receipt.file_id

        async def upload() -> tuple[Receipt, str | None]:
            data = await read_upload(media)
            # The file changed since it was hashed: its id does not belong to this key
            # (and a file pinned to a campaign is not sent at all).
            fresh = same_bytes(media, key, data)
            file = (media.kind, media.upload_name(), data)
            receipt = await self._send(target, dict(payload), remaining(), method, [file])
            return receipt, receipt.file_id if fresh else None

        return await self._files.send(key, remaining, reuse, upload)

    async def _send_album(
        self, target: str, payload: dict[str, Any], album: Album, budget: float
    ) -> Receipt:
        """Send ``album`` with ``sendMediaGroup``: by the file_ids of its items once
        known, else in one request uploading every file (see ``UploadOnce``); the album's
        ids are kept under one key, so concurrent first sends upload once."""
        deadline = self._clock() + budget
        caption = {k: v for k, v in payload.items() if k in ("caption", "parse_mode")}
        rest = {k: v for k, v in payload.items() if k not in caption}
        if "caption_entities" in rest:
            caption["caption_entities"] = rest.pop("caption_entities")
        keys = [await self._files.key(i) if i.uploads else str(i.source) for i in album.items]

        def remaining() -> float:
            return deadline - self._clock()

        def group(sources: list[str]) -> list[dict[str, Any]]:
            pairs = zip(album.items, sources, strict=True)
            media = [{"type": item.kind, "media": source} for item, source in pairs]
            media[0].update(caption)
            return media

        async def send(sources: list[str], files: list[Upload]) -> Receipt:
            fields = {**rest, "media": group(sources)}
            return await self._send(target, fields, remaining(), "sendMediaGroup", files)

        async def reuse(joined: str) -> tuple[Receipt, str | None]:
            receipt = await send(joined.split(","), [])
            return receipt, receipt.file_id

        async def upload() -> tuple[Receipt, str | None]:
            sources, files = [], []
            fresh = True
            for number, (item, key) in enumerate(zip(album.items, keys, strict=True)):
                if item.uploads:
                    field = f"file{number}"
                    data = await read_upload(item)
                    fresh = same_bytes(item, key, data) and fresh
                    files.append((field, item.upload_name(), data))
                    sources.append(f"attach://{field}")
                else:
                    sources.append(str(item.source))
            receipt = await send(sources, files)
            joined = receipt.file_id
            ok = fresh and joined is not None and len(joined.split(",")) == len(album.items)
            return receipt, joined if ok else None

        if not album.uploads:
            return await send(keys, [])
        digest = hashlib.sha256("\x00".join(keys).encode()).hexdigest()
        key = file_key(self._files.bot, album.kind, digest)
        return await self._files.send(key, remaining, reuse, upload)

    async def _send(
        self,
        target: str,
        payload: dict[str, Any],
        budget: float,
        method: str = "sendMessage",
        upload: Sequence[Upload] = (),
    ) -> Receipt:
        client = self._get_client()
        if self._lane == PAID_LANE:
            payload["allow_paid_broadcast"] = True
        deadline = self._clock() + budget
        migrated_to: str | None = None
        plan: RetryPlan | None = None  # made on the first failure: most sends have none

        while True:
            payload["chat_id"] = _chat_id(target)
            remaining = deadline - self._clock()
            gate: Callable[[], Awaitable[bool]] | None = None
            grant: Grant | None = None
            if self._limiter is not None:
                grant = self._held_turn(target)
                if grant is None:
                    taken = await self._limiter.acquire(
                        target,
                        max_wait=max(remaining, 0.0),
                        lane=self._lane,
                        flood_limit=self.max_flood_wait,
                    )
                    if not isinstance(taken, Grant):
                        raise TransientSendError(
                            f"rate limit: the next slot is {taken:.2f} s away, beyond the budget",
                            retry_after=taken,
                        )
                    grant = taken
                    remaining = deadline - self._clock()
                gate = partial(self._keep_turn, grant)
            if remaining <= 0:
                if grant is not None and self._limiter is not None:
                    await self._limiter.give_back(grant)
                raise TransientSendError("the send budget ran out before an attempt")

            try:
                outcome, cause, certain_transport = await self._attempt(
                    client, payload, remaining, method, upload, gate
                )
            except TurnMissedError:
                continue  # nothing was sent; the turn was given back: take a new one

            if isinstance(outcome, Delivered):
                return Receipt(target, outcome.message_id, migrated_to, outcome.file_id)
            if isinstance(outcome, Migrated):
                if migrated_to is not None:
                    raise PermanentSendError(
                        f"the chat moved twice ({outcome.description})", code=400
                    )
                migrated_to = target = outcome.new_chat_id
                logger.info("chat migrated; following it to the new chat id")
                continue

            error = outcome
            note_flood(error)  # the Notifier's observer, when it has one
            if plan is None:
                plan = self._retry_plan(deadline)
            wait = plan.next_wait(error, certain_transport=certain_transport)
            flood = error.retry_after if isinstance(error, TransientSendError) else None
            if flood is not None and flood > self.max_flood_wait:
                wait = None  # given back: this slot goes in a later run, not after a long wait
            if flood is not None and self._limiter is not None:
                await self._limiter.flood_wait(target, flood)
                if wait is not None:
                    wait = 0.0  # the limiter waits before the next attempt
            if wait is None:
                chain_cause(error, cause, self._secrets.scrub)
                raise error
            await self._pause(logger, method, plan, error, wait)

    async def _attempt(
        self,
        client: httpx.AsyncClient,
        payload: dict[str, Any],
        remaining: float,
        method: str = "sendMessage",
        upload: Sequence[Upload] = (),
        gate: Callable[[], Awaitable[bool]] | None = None,
    ) -> tuple[Delivered | Migrated | SendError, BaseException | None, bool]:
        """One HTTP request; returns (outcome, exception to chain, certain transport failure).

        ``upload`` holds files, each (its field, its file name, its bytes): the request is
        then a multipart form, built again for every attempt (the chat id may have moved).
        ``gate`` keeps the rate limiter's turn right before the request (`TurnMissedError`
        when it is given back instead).
        """
        if not upload:
            body, headers = encode(payload), _JSON_HEADERS
        else:
            body, content_type = multipart(payload, upload)
            headers = {"content-type": content_type}
        response, cause, certain = await self._post(
            client,
            self._secrets.url + method,
            body,
            headers,
            remaining,
            self._secrets.scrub,
            gate,
        )
        if isinstance(response, SendError):
            return response, cause, certain
        return self._classify(response), None, False

    def _classify(self, response: Answer) -> Delivered | Migrated | SendError:
        return classify_response(
            response.status_code, response.headers, response.content, token=self._secrets.token
        )
