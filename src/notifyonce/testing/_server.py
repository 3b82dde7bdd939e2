"""BotAPIServer: a small Bot-API-shaped HTTP/1.1 server on 127.0.0.1 for tests.

Standard library only (asyncio streams in a background thread), so it works in sync and
async tests alike and times deliveries on its own event loop, like a remote server would.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl

from typing_extensions import Self

R = TypeVar("R")

__all__ = [
    "BotAPIServer",
    "Change",
    "Delivery",
    "LocalServer",
    "Reply",
    "Request",
    "Upload",
    "read_body",
    "read_head",
]

# How long a bot may delete a message it sent in a chat (Telegram's rule for bots).
DELETE_LIMIT = 48 * 3600.0
# The methods that change or remove a message the server holds.
_EDIT_METHODS = frozenset({"editMessageText", "editMessageCaption", "editMessageReplyMarkup"})
_DELETE_METHODS = frozenset({"deleteMessage", "deleteMessages"})

# The Bot API methods that send media, and the parameter carrying the file.
_MEDIA_METHODS = {"sendPhoto": "photo", "sendDocument": "document", "sendVideo": "video"}

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    422: "Unprocessable Content",
    425: "Too Early",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def _api_error(status: int, description: str, **parameters: Any) -> bytes:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return json.dumps(body).encode()


def _markup(value: object) -> str:
    """A message's inline keyboard as compared for "message is not modified": its JSON
    with sorted keys, "" for none."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, sort_keys=True)


def _chat(chat_id: str) -> dict[str, Any]:
    """A Chat object as the Bot API returns it (aiogram and python-telegram-bot need ``type``)."""
    if chat_id.startswith("@"):
        return {"id": -1000000000001, "type": "channel", "username": chat_id[1:]}
    number = int(chat_id) if chat_id.lstrip("-").isdigit() else 0
    kind = "private" if number > 0 else "supergroup" if chat_id.startswith("-100") else "group"
    return {"id": number, "type": kind}


@dataclass(frozen=True, slots=True)
class Reply:
    """How the server answers one request. Build with the class methods.

    Attributes:
        status: HTTP status (ignored when the connection is dropped).
        body: The answer body; None means the ok envelope of a delivered message.
        delay: Seconds to wait before answering (after delivering, if it delivers).
        drop: ``"after_delivery"`` (deliver, then close without answering) or
            ``"before_body"`` (close after the headers, before reading the body).
        delivers: Whether the message counts as delivered.
        until: When set, the answer also waits (after ``delay``) until this event is
            set: a send held in flight for exactly as long as a test needs it there.

    Examples:
        >>> Reply.flood(3).status, Reply.blocked().delivers
        (429, False)
    """

    status: int = 200
    body: bytes | None = None
    delay: float = 0.0
    drop: str | None = None
    delivers: bool = True
    content_type: str = "application/json"
    until: threading.Event | None = None

    @classmethod
    def ok(cls, *, delay: float = 0.0, until: threading.Event | None = None) -> Reply:
        """Deliver and answer ok (after ``delay`` seconds, and once ``until`` is set)."""
        return cls(delay=delay, until=until)

    @classmethod
    def error(cls, status: int, description: str, **parameters: Any) -> Reply:
        """Refuse with a Bot API error envelope."""
        return cls(status, _api_error(status, description, **parameters), delivers=False)

    @classmethod
    def flood(cls, retry_after: int) -> Reply:
        """429 Too Many Requests with ``parameters.retry_after``."""
        return cls.error(
            429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after
        )

    @classmethod
    def blocked(cls) -> Reply:
        """403: the user blocked the bot."""
        return cls.error(403, "Forbidden: bot was blocked by the user")

    @classmethod
    def chat_not_found(cls) -> Reply:
        """400: chat not found."""
        return cls.error(400, "Bad Request: chat not found")

    @classmethod
    def migrate(cls, new_chat_id: int) -> Reply:
        """400 with ``parameters.migrate_to_chat_id`` (a group became a supergroup)."""
        return cls.error(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            migrate_to_chat_id=new_chat_id,
        )

    @classmethod
    def html(cls, status: int = 500) -> Reply:
        """An HTML error page, as a proxy in front of the Bot API sends."""
        page = f"<html><body><h1>{status} {_REASONS.get(status, '')}</h1></body></html>"
        return cls(status, page.encode(), delivers=False, content_type="text/html")

    @classmethod
    def drop_after_delivery(cls) -> Reply:
        """Deliver the message, then close the connection without answering."""
        return cls(drop="after_delivery")

    @classmethod
    def drop_before_body(cls) -> Reply:
        """Close the connection after the request headers, before reading the body."""
        return cls(drop="before_body", delivers=False)


# What the server answers to the calls a bot makes around polling (aiogram's and
# python-telegram-bot's start-up and shutdown), as Telegram answers them for a bot
# without a webhook.
_SIMPLE_METHODS: dict[str, Any] = {
    "getMe": {
        "id": 1,
        "is_bot": True,
        "first_name": "test",
        "username": "test_bot",
        "can_join_groups": True,
        "can_read_all_group_messages": False,
        "supports_inline_queries": False,
    },
    "deleteWebhook": True,
    "answerCallbackQuery": True,
    "getWebhookInfo": {"url": "", "has_custom_certificate": False, "pending_update_count": 0},
    "setMyCommands": True,
    "deleteMyCommands": True,
    "close": True,
    "logOut": True,
}


# The bot as a chat member names it (the user of old_chat_member and new_chat_member).
_ME = {k: _SIMPLE_METHODS["getMe"][k] for k in ("id", "is_bot", "first_name", "username")}
# What the bot may do as an administrator (every right the Bot API requires of a
# ChatMemberAdministrator; aiogram and python-telegram-bot refuse one without them).
_ADMIN_RIGHTS = {
    "can_be_edited": False,
    "is_anonymous": False,
    "can_manage_chat": True,
    "can_delete_messages": True,
    "can_manage_video_chats": True,
    "can_restrict_members": True,
    "can_promote_members": False,
    "can_change_info": True,
    "can_invite_users": True,
    "can_post_stories": False,
    "can_edit_stories": False,
    "can_delete_stories": False,
    "can_send_welcome_messages": False,
    "can_post_messages": True,
    "can_edit_messages": True,
    "can_pin_messages": True,
}
_GONE_STATUSES = ("left", "kicked")
_IN_STATUSES = ("member", "administrator")


def _user(user_id: int) -> dict[str, Any]:
    """A User object: the person who wrote, pressed, blocked or removed."""
    return {"id": user_id, "is_bot": False, "first_name": "User"}


def _member(status: str) -> dict[str, Any]:
    """The bot as a ChatMember of ``status``: a ban is for good (``until_date`` 0)."""
    member: dict[str, Any] = {"user": dict(_ME), "status": status}
    if status == "kicked":
        member["until_date"] = 0
    if status == "administrator":
        member.update(_ADMIN_RIGHTS)
    return member


def _removed(chat: dict[str, Any], status: str) -> Reply:
    """How Telegram refuses a send to a group or channel the bot was removed from."""
    kind = chat["type"]
    if status == "kicked" or kind == "group":
        return Reply.error(403, f"Forbidden: bot was kicked from the {kind} chat")
    return Reply.error(403, f"Forbidden: bot is not a member of the {kind} chat")


def _chat_id_param(value: object) -> int | str:
    """A chat id given over HTTP: an int, or ``@channelname``."""
    text = str(value)
    if text.startswith("@") and len(text) > 1:
        return text
    return int(text)


@dataclass(frozen=True, slots=True)
class Request:
    """A request the server received (delivered or not).

    Attributes:
        method: The Bot API method, e.g. ``"sendMessage"``.
        chat_id: The chat it was for (None when the body was never read).
        at: Server-side ``time.monotonic()`` when it was read in full.
        connection: Which TCP connection (1, 2, ...) carried it.
        reply: How the server answered it.
        bot_id: The bot's id: the digits before the colon of the token in the URL (the
            public part of a token; the secret part is never kept). Tests that run one
            client per bot id can tell clients apart by it.
    """

    method: str
    chat_id: str | None
    at: float
    connection: int
    reply: Reply
    bot_id: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message the server delivered.

    Attributes:
        chat_id: The chat id as a string (``@name`` kept as is).
        text: The message text.
        params: Every ``sendMessage`` parameter received.
        at: Server-side ``time.monotonic()`` when the request was read in full.
        connection: Which TCP connection (1, 2, ...) carried it.
        message_id: The id the server answered with.
        method: ``"sendMessage"``, or ``"sendPhoto"``, ``"sendDocument"``, ``"sendVideo"``
            (then ``text`` is the caption, empty when there was none), or ``"copyMessage"``
            (then ``text`` is the caption given, else the copied message's own text).
        file_id: For media, the file_id of the file delivered (a photo's largest size).
    """

    chat_id: str
    text: str
    params: dict[str, Any]
    at: float
    connection: int
    message_id: int
    method: str = "sendMessage"
    file_id: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """A message the server changed or removed on a bot's request.

    Attributes:
        method: ``"editMessageText"``, ``"editMessageCaption"``,
            ``"editMessageReplyMarkup"``, ``"deleteMessage"`` or ``"deleteMessages"``.
        chat_id: The message's chat.
        message_id: The message (a ``deleteMessages`` has one change per message removed).
        at: Server-side ``time.monotonic()`` when the request was read in full.
    """

    method: str
    chat_id: str
    message_id: int
    at: float


@dataclass(frozen=True, slots=True)
class Upload:
    """A request that carried file bytes (``sendPhoto`` etc. with a multipart file).

    Attributes:
        method: The Bot API method.
        chat_id: The chat it was for.
        filename: The file name the upload gave.
        size: Bytes uploaded.
        sha256: The hex digest of those bytes.
        file_id: The file_id the server gave the file (None when the reply refused it).
    """

    method: str
    chat_id: str
    filename: str
    size: int
    sha256: str
    file_id: str | None


async def read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    """The request line's verb and path and the lower-cased headers; None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed an idle keep-alive connection
    lines = head.decode("latin-1").split("\r\n")
    verb, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return verb, path, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request body: ``Content-Length`` bytes, or the chunks of a chunked body (what
    aiohttp sends for a multipart upload, aiogram's photos and documents)."""
    if "chunked" not in headers.get("transfer-encoding", "").lower():
        length = int(headers.get("content-length", "0"))
        return await reader.readexactly(length) if length else b""
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # the empty trailer
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after each chunk


def _parse_params(content_type: str, body: bytes) -> dict[str, Any]:
    """sendMessage parameters from JSON (TelegramSender), a form (aiogram, python-telegram-bot)
    or multipart; a form value that is JSON (reply_markup) is decoded."""
    return parse_form(content_type, body)[0]


def parse_form(
    content_type: str, body: bytes
) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
    """The parameters of a request, and its uploaded files: field -> (file name, bytes).

    A multipart part with a ``filename`` is a file; every other part, and every value of
    JSON or a urlencoded form, is a parameter (decoded as JSON when it looks like JSON).
    """
    files: dict[str, tuple[str, bytes]] = {}
    if not body:
        return {}, files
    if content_type.startswith("application/json"):
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data, files
    if content_type.startswith("multipart/form-data"):
        from email.parser import BytesParser
        from email.policy import HTTP

        message = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        if not message.is_multipart():
            raise ValueError("not a multipart body")
        pairs: list[tuple[str, str | bytes]] = []
        for part in message.iter_parts():
            field = str(part.get_param("name", header="content-disposition") or "")
            filename = part.get_filename()
            raw = part.get_payload(decode=True)
            data = raw if isinstance(raw, bytes) else b""
            if filename is not None:
                files[field] = (filename, data)
            else:  # form fields are UTF-8, as clients send them, without a charset
                pairs.append((field, data))
    else:
        pairs = list(parse_qsl(body.decode(), keep_blank_values=True))
    params: dict[str, Any] = {}
    for name, value in pairs:
        text = value.decode() if isinstance(value, bytes) else str(value)
        if text[:1] in "[{":
            try:
                params[str(name)] = json.loads(text)
                continue
            except ValueError:
                pass
        params[str(name)] = text
    return params, files


class Scripts(Generic[R]):
    """Scripted replies: a queue per key (a chat, an idempotency key) and a shared queue.

    A key's own queue is used before the shared one; when both are empty the caller's
    default applies. Not locked: the servers hold their own lock around every call.
    """

    def __init__(self) -> None:
        self.shared: deque[R] = deque()
        self.by_key: dict[str, deque[R]] = {}

    def add(self, key: str | None, replies: Iterable[R]) -> None:
        if key is None:
            self.shared.extend(replies)
        else:
            self.by_key.setdefault(key, deque()).extend(replies)

    def pop(self, key: str | None, default: R) -> R:
        own = self.by_key.get(key) if key is not None else None
        if own:
            return own.popleft()
        return self.shared.popleft() if self.shared else default

    def clear(self) -> None:
        self.shared.clear()
        self.by_key.clear()


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    id: int


class LocalServer:
    """An HTTP/1.1 server on 127.0.0.1 in a background thread; subclasses answer requests.

    Keeps connections alive and counts them; a subclass implements `_serve_one`.
    """

    def __init__(self, *, port: int = 0) -> None:
        self.port = port  # 0: any free port, known once started
        self._bind_error: OSError | None = None
        self._lock = threading.Lock()
        self._connection_ids = itertools.count(1)
        self._connections: set[_Connection] = set()
        self.connections_opened = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def close_connections(self) -> None:
        """Close every open connection, as a server closing idle keep-alive connections does."""
        loop = self._loop
        if loop is None:
            return
        done = threading.Event()

        def close_all() -> None:
            for connection in list(self._connections):
                connection.writer.close()
            done.set()

        loop.call_soon_threadsafe(close_all)
        done.wait(10)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Self:
        """Start serving in a background thread; returns once the port is bound."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        if self._bind_error is not None:
            self._thread.join(10)
            self._thread = None
            raise self._bind_error
        return self

    def stop(self) -> None:
        """Close every connection and stop the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self.port)
            )
        except OSError as exc:  # the port is taken: start() raises it
            self._bind_error = exc
            loop.close()
            self._ready.set()
            return
        self._loop = loop
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for connection in list(self._connections):
                connection.writer.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            # Closed transports finish closing on the loop's next turns; a loop closed
            # before that leaves their sockets to the garbage collector (ResourceWarning).
            for _ in range(3):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    # -- HTTP ---------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer, next(self._connection_ids))
        with self._lock:
            self.connections_opened += 1
        self._connections.add(connection)
        try:
            while await self._serve_one(reader, writer, connection.id):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels handlers; finishing normally keeps asyncio's stream
            # callback from logging the cancellation as an error.
            pass
        finally:
            self._connections.discard(connection)
            writer.close()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> bool:
        """Serve one request; False when the connection should close."""
        raise NotImplementedError

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        keep_alive: bool,
        content_type: str = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> bool:
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        return keep_alive


def busiest_window(times: Iterable[float], seconds: float) -> int:
    """The most events in any half-open window ``[t, t + seconds)`` of ``times``."""
    ordered = sorted(times)
    best = start = 0
    for end, at in enumerate(ordered):
        while at - ordered[start] >= seconds:
            start += 1
        best = max(best, end - start + 1)
    return best


_UNSCRIPTED = Reply.ok()  # compared by identity: "no scripted reply"


class BotAPIServer(LocalServer):
    """A Bot-API-shaped server on 127.0.0.1 that records deliveries; scriptable per chat.

    It answers ``POST /bot<token>/sendMessage``, and ``sendPhoto``, ``sendDocument`` and
    ``sendVideo`` as Telegram does: a multipart upload or a URL gets a new file (a photo
    two sizes, the largest last), a file_id it gave out is sent again, any other file_id
    is a 400. ``copyMessage`` copies a message the server holds (one it delivered, one a
    user wrote, one made with [`post`][notifyonce.testing.BotAPIServer.post]) and answers
    its new ``message_id``; a message it does not hold (never there, or removed with
    [`delete_message`][notifyonce.testing.BotAPIServer.delete_message]) is refused with
    400 "message to copy not found". ``sendMediaGroup`` delivers 2-10 photos and videos
    (uploaded, by file_id or URL) as one message each and refuses a group of another
    size. ``editMessageText``, ``editMessageCaption`` and ``editMessageReplyMarkup``
    change a message it holds (see `message_text`), refusing a missing one ("message to
    edit not found"), an edit that changes nothing ("message is not modified") and a text
    edit of a media message or a caption edit of a text one, as Telegram does.
    ``deleteMessage`` and ``deleteMessages`` remove held messages, refusing a missing one
    ("message to delete not found") and one older than 48 hours by the server's clock
    ("message can't be deleted for everyone"; see
    [`advance_clock`][notifyonce.testing.BotAPIServer.advance_clock] and
    [`set_message_date`][notifyonce.testing.BotAPIServer.set_message_date]). What bots
    edited and deleted is in [`changes`][notifyonce.testing.BotAPIServer.changes]. Every
    request that
    carried file bytes is in
    [`uploads`][notifyonce.testing.BotAPIServer.uploads]. It answers 404 for any path that
    is not ``/bot<token>/<method>`` (a wrong ``base_url``), 401 for a wrong token, keeps
    connections alive, and counts TCP connections. It also answers what a polling bot
    calls around it, so an aiogram ``Dispatcher`` or a python-telegram-bot
    ``Application`` can run against it: ``getUpdates`` (long polling, with ``offset``
    confirming updates, over the updates queued with
    [`user_says`][notifyonce.testing.BotAPIServer.user_says], or from another process by
    ``POST /user_says`` with ``chat_id`` and ``text``), ``getMe``,
    ``deleteWebhook``, ``getWebhookInfo``, ``setMyCommands``, ``deleteMyCommands``,
    ``answerCallbackQuery``, ``close`` and ``logOut``. A chat whose user blocked the bot
    ([`block`][notifyonce.testing.BotAPIServer.block], or
    [`user_blocks`][notifyonce.testing.BotAPIServer.user_blocks] with its
    ``my_chat_member`` update) or a group the bot was removed from
    ([`bot_removed`][notifyonce.testing.BotAPIServer.bot_removed]) is refused with
    Telegram's 403 on every send until it is unblocked or the bot added back; a press of
    an inline button is [`user_presses`][notifyonce.testing.BotAPIServer.user_presses].
    Each of these has its ``POST /<name>`` route too, and so do
    [`post`][notifyonce.testing.BotAPIServer.post], ``delete_message`` and
    [`script`][notifyonce.testing.BotAPIServer.script] (``POST /script``);
    ``GET /received`` answers [`received`][notifyonce.testing.BotAPIServer.received].
    Every call, in order, is in
    [`calls`][notifyonce.testing.BotAPIServer.calls]. Use it as a context manager (sync or
    async) or through the ``bot_api_server`` pytest fixture.

    Args:
        token: When set, other tokens get 401 Unauthorized.
        latency: Seconds added before every answer (a network round trip).
        bot_per_second: When set, enforce Telegram's bot-wide limit as a real server
            would: a ``sendMessage`` that would make more than this many deliveries in the
            second before it is answered 429 with ``retry_after=flood_retry_after``.
        flood_retry_after: The ``retry_after`` of those 429 answers.
        on_request: Called with every send (``sendMessage``, ``sendPhoto``, ...) the server
            read in full, after it was recorded (and delivered, if its reply delivers) and
            before any answer is written: the moment the client's send is in flight. It runs on the
            server's thread and delays the answer while it runs; a crash test can kill
            the client from it, knowing the kill landed mid-send.
        port: The port on 127.0.0.1 to listen on; 0 (the default) takes a free one.
            ``notifyonce serve-test-api`` runs one on a fixed port, to try a bot by hand.

    Examples:
        >>> with BotAPIServer(latency=0.0) as server:
        ...     server.script("42", [Reply.blocked()])
        ...     server.url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        latency: float = 0.0,
        bot_per_second: int | None = None,
        flood_retry_after: int = 1,
        on_request: Callable[[Request], object] | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(port=port)
        self.token = token
        self.latency = latency
        self.bot_per_second = bot_per_second
        self.flood_retry_after = flood_retry_after
        self.on_request = on_request
        self._deliveries: list[Delivery] = []
        self._requests: list[Request] = []
        self._scripts: Scripts[Reply] = Scripts()
        self._message_ids = itertools.count(1)
        self._calls: list[str] = []
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._uploads: list[Upload] = []
        self._files: dict[str, str] = {}  # file_id -> the kind of media it names
        # (chat id, message id) -> the text or caption of every message the server holds:
        # what copyMessage copies.
        self._messages: dict[tuple[str, int], str] = {}
        # What else Telegram knows of each message it holds: whether its text is a caption
        # (media), its inline keyboard (JSON, "" for none) and its date (the server's clock).
        self._captioned: set[tuple[str, int]] = set()
        self._markups: dict[tuple[str, int], str] = {}
        self._dates: dict[tuple[str, int], float] = {}
        self._changes: list[Change] = []
        self._clock_offset = 0.0  # seconds the server's clock is ahead of this machine's
        self._file_numbers = itertools.count(1)
        # chat id -> how every send to it is refused while the user has blocked the bot or
        # the bot is out of the group (persistent, unlike a script)
        self._refusals: dict[str, Reply] = {}
        self._statuses: dict[str, str] = {}  # chat id -> the bot's status there, once told

    @property
    def url(self) -> str:
        """The base URL to pass as ``TelegramSender(base_url=...)``."""
        return f"http://127.0.0.1:{self.port}"

    # -- scripting and inspecting -------------------------------------------------------

    def script(self, chat_id: str | None, replies: Iterable[Reply]) -> None:
        """Queue replies for requests to ``chat_id`` (None: the next requests to any chat).

        When a queue is used up the server delivers and answers ok again. Over HTTP:
        ``POST /script`` (see the testing guide).
        """
        with self._lock:
            self._scripts.add(None if chat_id is None else str(chat_id), replies)

    @property
    def deliveries(self) -> list[Delivery]:
        """Every delivered message, in arrival order."""
        with self._lock:
            return list(self._deliveries)

    @property
    def requests(self) -> list[Request]:
        """Every send request received (``sendMessage``, ``sendPhoto``, ...), delivered or
        not, and every request refused with 401 (a wrong token) or 404 (a wrong path), each
        with the reply it got. The other calls (``getMe``, ``getUpdates``, ...) are in
        [`calls`][notifyonce.testing.BotAPIServer.calls]."""
        with self._lock:
            return list(self._requests)

    @property
    def uploads(self) -> list[Upload]:
        """Every request that carried file bytes, in arrival order, delivered or not."""
        with self._lock:
            return list(self._uploads)

    def busiest_window(self, seconds: float = 1.0, *, chat_id: str | None = None) -> int:
        """The most deliveries in any half-open window ``[t, t + seconds)``, by server time."""
        return busiest_window(
            (d.at for d in self.deliveries if chat_id is None or d.chat_id == chat_id), seconds
        )

    @property
    def calls(self) -> list[str]:
        """The Bot API method of every request received, in order (``getUpdates`` too)."""
        with self._lock:
            return list(self._calls)

    def user_says(
        self,
        chat_id: int,
        text: str,
        *,
        user_id: int | None = None,
        reply_to: int | None = None,
    ) -> int:
        """Queue an update: a user wrote ``text`` in the private chat ``chat_id``
        (``reply_to``: in reply to that message of the chat, e.g. one from `post`).

        Returns the update's ``update_id``. ``getUpdates`` hands it out until a later
        call's ``offset`` confirms it, as Telegram does.

        A user who had blocked the bot in their private chat (`user_blocks`, `block`) and
        writes to it again (``/start``) has unblocked it, as Telegram has them do: the
        ``my_chat_member`` update (kicked to member) is queued before the message, and
        sends to the chat are delivered again.
        """
        sender = _user(user_id or chat_id)
        key = str(chat_id)
        with self._lock:
            if int(chat_id) > 0 and self._refusals.get(key) == Reply.blocked():
                self._refusals.pop(key)
                self._member_update(chat_id, _chat(key), "member", "kicked", by=int(chat_id))
            update_id = next(self._update_ids)
            message: dict[str, Any] = {
                "message_id": next(self._message_ids),
                "date": int(self.now()),
                "chat": _chat(str(chat_id)),
                "from": sender,
                "text": text,
            }
            self._messages[(str(chat_id), message["message_id"])] = text
            if reply_to is not None:
                original = self._messages.get((str(chat_id), reply_to))
                message["reply_to_message"] = {
                    "message_id": reply_to,
                    "date": int(self.now()),
                    "chat": _chat(str(chat_id)),
                    "from": sender,
                    "text": original or "",
                }
            if text.startswith("/"):
                command = len(text.split()[0])
                message["entities"] = [{"type": "bot_command", "offset": 0, "length": command}]
            self._updates.append({"update_id": update_id, "message": message})
        return update_id

    def post(self, chat_id: int | str, text: str, *, message_id: int | None = None) -> int:
        """A message someone posted in ``chat_id`` (an admin's post to copy): its
        ``message_id``, a new one unless ``message_id`` is given (a guide's ``42``; a
        message of the chat with that id is replaced). No update is queued;
        ``copyMessage`` can copy it. Over HTTP: ``POST /post``.

        Raises:
            ValueError: A ``message_id`` below 1.
        """
        if message_id is not None and message_id < 1:
            raise ValueError(f"message_id must be at least 1, got {message_id}")
        with self._lock:
            if message_id is None:
                message_id = next(self._message_ids)
            self._messages[(str(chat_id), message_id)] = text
            self._dates[(str(chat_id), message_id)] = self.now()
        return message_id

    def delete_message(self, chat_id: int | str, message_id: int) -> None:
        """The message is gone (its author deleted it): copying it is refused with
        "message to copy not found", editing it with "message to edit not found", as
        Telegram refuses them. Over HTTP: ``POST /delete_message``."""
        with self._lock:
            self._forget((str(chat_id), message_id))

    def _forget(self, key: tuple[str, int]) -> None:
        """Drop every trace of a held message (the caller holds the lock)."""
        self._messages.pop(key, None)
        self._captioned.discard(key)
        self._markups.pop(key, None)
        self._dates.pop(key, None)

    # -- the server's clock, and what bots changed -------------------------------------

    def now(self) -> float:
        """The server's clock (Unix seconds): this machine's, plus what `advance_clock`
        added. Messages are dated by it, and Telegram's 48-hour limit on deleting is
        counted on it. (A float read needs no lock, so it is safe under one.)"""
        return time.time() + self._clock_offset

    def advance_clock(self, seconds: float) -> None:
        """Move the server's clock ``seconds`` ahead: every message it holds grows that
        much older (past 48 hours, a bot can no longer delete it)."""
        with self._lock:
            self._clock_offset += seconds

    def message_date(self, chat_id: int | str, message_id: int) -> float | None:
        """When a held message was sent, by the server's clock; None when it holds none."""
        with self._lock:
            return self._dates.get((str(chat_id), message_id))

    def set_message_date(self, chat_id: int | str, message_id: int, date: float) -> None:
        """Date a held message ``date`` (Unix seconds, the server's clock): an old message
        without waiting two days.

        Raises:
            KeyError: The server holds no such message.
        """
        key = (str(chat_id), message_id)
        with self._lock:
            if key not in self._messages:
                raise KeyError(f"no message {message_id} in chat {chat_id}")
            self._dates[key] = date

    @property
    def changes(self) -> list[Change]:
        """Every message a bot edited or deleted, in order (refused requests are not here:
        they are in `requests`)."""
        with self._lock:
            return list(self._changes)

    def block(self, chat_id: int | str) -> None:
        """The user of ``chat_id`` blocked the bot: every later send to the chat is refused
        with 403 "Forbidden: bot was blocked by the user" (a block wins over a script)
        until `unblock`. No update is queued (see `user_blocks`)."""
        with self._lock:
            self._refusals[str(chat_id)] = Reply.blocked()

    def unblock(self, chat_id: int | str) -> None:
        """Sends to ``chat_id`` are delivered again (or answered as scripted)."""
        with self._lock:
            self._refusals.pop(str(chat_id), None)

    def user_blocks(self, chat_id: int) -> int:
        """The user blocks the bot in the private chat ``chat_id``: `block`, and queue the
        ``my_chat_member`` update Telegram sends (the bot from member to kicked).

        Returns:
            The update's ``update_id``.

        Raises:
            ValueError: ``chat_id`` is not a private chat (a positive id).
        """
        chat = self._chat_of(chat_id, private=True)
        with self._lock:
            self._refusals[str(chat_id)] = Reply.blocked()
            return self._member_update(chat_id, chat, "kicked", "member", by=int(chat_id))

    def user_unblocks(self, chat_id: int) -> int:
        """The user unblocks the bot: `unblock`, and queue its ``my_chat_member`` update
        (kicked to member); their ``/start`` is a `user_says` of its own."""
        chat = self._chat_of(chat_id, private=True)
        with self._lock:
            self._refusals.pop(str(chat_id), None)
            return self._member_update(chat_id, chat, "member", "kicked", by=int(chat_id))

    def bot_removed(
        self, chat_id: int | str, *, status: str = "kicked", by: int = 7, kind: str | None = None
    ) -> int:
        """An admin (user ``by``) removes the bot from the group or channel ``chat_id``:
        sends to it are refused with Telegram's 403 for it ("bot was kicked from the group
        chat", "bot is not a member of the channel chat") until `bot_added`, and the
        ``my_chat_member`` update is queued.

        Args:
            chat_id: A group (a negative id, ``-100...`` a supergroup) or ``@channel``.
            status: ``"kicked"`` (banned) or ``"left"``.
            by: The admin's user id.
            kind: The chat's type when its id does not say it (``"channel"`` for a
                channel named by its number).

        Returns:
            The update's ``update_id``.

        Raises:
            ValueError: A private chat, or a status other than left or kicked.
        """
        if status not in _GONE_STATUSES:
            raise ValueError(f"status must be one of {_GONE_STATUSES}, got {status!r}")
        chat = self._chat_of(chat_id, private=False, kind=kind)
        with self._lock:
            self._refusals[str(chat_id)] = _removed(chat, status)
            return self._member_update(chat_id, chat, status, "member", by=by)

    def bot_added(
        self, chat_id: int | str, *, status: str = "member", by: int = 7, kind: str | None = None
    ) -> int:
        """An admin (user ``by``) adds the bot to the group or channel ``chat_id`` (back):
        sends are delivered again, and the ``my_chat_member`` update is queued.

        Args:
            chat_id: As for `bot_removed`.
            status: ``"member"`` or ``"administrator"`` (with an admin's rights).
            by: The admin's user id.
            kind: As for `bot_removed`.

        Raises:
            ValueError: A private chat, or a status other than member or administrator.
        """
        if status not in _IN_STATUSES:
            raise ValueError(f"status must be one of {_IN_STATUSES}, got {status!r}")
        chat = self._chat_of(chat_id, private=False, kind=kind)
        with self._lock:
            self._refusals.pop(str(chat_id), None)
            return self._member_update(chat_id, chat, status, "left", by=by)

    def user_presses(
        self,
        chat_id: int,
        data: str,
        *,
        message_id: int | None = None,
        user_id: int | None = None,
    ) -> int:
        """Queue a ``callback_query``: the user pressed the inline button carrying
        ``data`` under a message of the chat (``message_id``, one the server delivered; a
        new id when None). ``answerCallbackQuery`` is answered ok.

        Returns:
            The update's ``update_id``.
        """
        with self._lock:
            update_id = next(self._update_ids)
            where = message_id if message_id is not None else next(self._message_ids)
            message = {
                "message_id": where,
                "date": int(self.now()),
                "chat": _chat(str(chat_id)),
                "from": dict(_ME),
                "text": self._messages.get((str(chat_id), where), ""),
            }
            query = {
                "id": f"{update_id}{chat_id}",
                "from": _user(user_id or chat_id),
                "message": message,
                "chat_instance": f"i{chat_id}",
                "data": data,
            }
            self._updates.append({"update_id": update_id, "callback_query": query})
        return update_id

    def _chat_of(
        self, chat_id: int | str, *, private: bool, kind: str | None = None
    ) -> dict[str, Any]:
        """The Chat object of ``chat_id``, which must be private (or must not be)."""
        chat = _chat(str(chat_id))
        if kind is not None:
            chat["type"] = kind
        if (chat["type"] == "private") != private:
            wanted = "a private chat (a positive id)" if private else "a group or a channel"
            raise ValueError(f"chat_id must be {wanted}, got {chat_id!r}")
        return chat

    def _member_update(
        self, chat_id: int | str, chat: dict[str, Any], new: str, old: str, *, by: int
    ) -> int:
        """Queue the ``my_chat_member`` update of the bot going from its status in the chat
        (``old`` when not told yet) to ``new``; the caller holds the lock."""
        key = str(chat_id)
        update_id = next(self._update_ids)
        change = {
            "chat": chat,
            "from": _user(by),
            "date": int(self.now()),
            "old_chat_member": _member(self._statuses.get(key, old)),
            "new_chat_member": _member(new),
        }
        self._statuses[key] = new
        self._updates.append({"update_id": update_id, "my_chat_member": change})
        return update_id

    @property
    def pending_updates(self) -> int:
        """Updates queued and not yet confirmed by a ``getUpdates`` offset."""
        with self._lock:
            return len(self._updates)

    def reset(self) -> None:
        """Forget deliveries, requests, calls, updates, scripts and blocks (connections
        stay open)."""
        with self._lock:
            self._refusals.clear()
            self._statuses.clear()
            self._deliveries.clear()
            self._requests.clear()
            self._scripts.clear()
            self._calls.clear()
            self._updates.clear()
            self._uploads.clear()
            self._changes.clear()

    # -- HTTP ---------------------------------------------------------------------------

    def _next_reply(self, chat_id: str | None, received: float) -> Reply:
        with self._lock:
            refusal = self._refusals.get(chat_id) if chat_id is not None else None
            if refusal is not None:
                return refusal
            reply = self._scripts.pop(chat_id, _UNSCRIPTED)
            if reply is not _UNSCRIPTED:
                return reply
            if self.bot_per_second is not None and self._recent(received) >= self.bot_per_second:
                return Reply.flood(self.flood_retry_after)
            return Reply.ok()

    def _recent(self, now: float) -> int:
        """Deliveries in the second before ``now`` (the caller holds the lock)."""
        count = 0
        for delivery in reversed(self._deliveries):
            if delivery.at <= now - 1.0:
                break
            count += 1
        return count

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> bool:
        """Serve one request; False when the connection should close."""
        request = await read_head(reader)
        if request is None:
            return False
        verb, path, headers = request
        path, _, query = path.partition("?")
        # /bot<token>/<method>: anything else (a wrong base_url) is 404, as on Telegram.
        parts = path.split("/")
        api_path = len(parts) == 3 and parts[1].startswith("bot")
        method = parts[-1] if api_path else ""
        token = parts[1][3:] if api_path else None

        # Peek at the script before the body for the drop-before-body case: it is keyed on
        # the chat, which is in the body, so only the shared queue can ask for it.
        with self._lock:
            shared = self._scripts.shared
            early = bool(shared) and shared[0].drop == "before_body"
            reply_early = shared.popleft() if early else None
        if reply_early is not None:
            self._record(Request(method, None, time.monotonic(), connection, reply_early))
            return False

        body = await read_body(reader, headers)
        received = time.monotonic()
        keep_alive = headers.get("connection", "").lower() != "close"

        if verb == "POST" and path in _CONTROLS:
            return await self._control_over_http(path, writer, headers, body, keep_alive)
        if verb == "GET" and path == "/received":
            answer = {"ok": True, "result": self.received()}
            return await self._answer(writer, 200, json.dumps(answer).encode(), keep_alive)
        if not api_path:
            return await self._refuse(writer, 404, path, received, connection, token, keep_alive)
        if self.token is not None and token != self.token:
            return await self._refuse(writer, 401, path, received, connection, token, keep_alive)
        with self._lock:
            self._calls.append(method)
        if verb in ("GET", "POST") and method in _SIMPLE_METHODS:
            result = {"ok": True, "result": _SIMPLE_METHODS[method]}
            return await self._answer(writer, 200, json.dumps(result).encode(), keep_alive)
        if verb in ("GET", "POST") and method == "getUpdates":
            try:
                params = dict(parse_qsl(query))
                params.update(_parse_params(headers.get("content-type", ""), body))
                updates = await self._get_updates(params)
            except (ValueError, TypeError):
                bad = _api_error(400, "Bad Request: wrong getUpdates parameters")
                return await self._answer(writer, 400, bad, keep_alive)
            result = {"ok": True, "result": updates}
            return await self._answer(writer, 200, json.dumps(result).encode(), keep_alive)
        if verb == "POST" and method in _EDIT_METHODS:
            return await self._edit(
                method, writer, headers, body, received, connection, token, keep_alive
            )
        if verb == "POST" and method in _DELETE_METHODS:
            return await self._delete(
                method, writer, headers, body, received, connection, token, keep_alive
            )
        if verb == "POST" and method == "sendMediaGroup":
            return await self._media_group(
                writer, headers, body, received, connection, token, keep_alive
            )
        kind = _MEDIA_METHODS.get(method)
        copying = method == "copyMessage"
        if verb != "POST" or (method != "sendMessage" and kind is None and not copying):
            return await self._refuse(writer, 404, path, received, connection, token, keep_alive)

        try:
            params, files = parse_form(headers.get("content-type", ""), body)
            chat_id = str(params["chat_id"])
            if copying:
                source = (str(params["from_chat_id"]), int(params["message_id"]))
                with self._lock:
                    original = self._messages.get(source)
                if original is None:
                    refusal = Reply.error(400, "Bad Request: message to copy not found")
                    self._record(Request(method, chat_id, received, connection, refusal))
                    assert refusal.body is not None
                    return await self._answer(writer, 400, refusal.body, keep_alive)
                text = str(params.get("caption", original))
                with self._lock:
                    captioned = source in self._captioned
            else:
                captioned = kind is not None
                text = str(params["text"] if kind is None else params.get("caption", ""))
        except (ValueError, KeyError, TypeError):
            what = "message text is empty" if kind is None and not copying else "wrong parameters"
            bad = _api_error(400, f"Bad Request: {what}")
            return await self._answer(writer, 400, bad, keep_alive)
        file = files.get(kind) if kind is not None else None
        named = params.get(kind) if kind is not None else None
        if kind is not None and isinstance(named, str) and named.startswith("attach://"):
            # The file in a part of its own, named by the field (as aiogram uploads).
            file = files.get(named[len("attach://") :])
            del params[kind]
        if kind is not None and file is None and not self._known_file(kind, params.get(kind)):
            bad = _api_error(400, "Bad Request: wrong file identifier/HTTP URL specified")
            return await self._answer(writer, 400, bad, keep_alive)

        reply = self._next_reply(chat_id, received)
        arrived = Request(method, chat_id, received, connection, reply, _bot_id(token))
        self._record(arrived)
        media: dict[str, Any] | None = None
        if kind is not None:
            media = self._media(kind, method, chat_id, file, params.get(kind), reply.delivers)
        file_id = None if media is None else _largest_file_id(media)
        message_id = self._deliver(arrived, text, params, file_id, captioned=captioned)
        if not await self._before_answer(arrived):
            return False
        body_out = reply.body
        if body_out is None and copying:  # copyMessage answers a MessageId
            body_out = json.dumps({"ok": True, "result": {"message_id": message_id}}).encode()
        if body_out is None:
            result = {"message_id": message_id, "date": int(self.now()), "chat": _chat(chat_id)}
            if media is None:
                result["text"] = text
            else:
                result.update(media)
                if text:
                    result["caption"] = text
            body_out = json.dumps({"ok": True, "result": result}).encode()
        return await self._answer(writer, reply.status, body_out, keep_alive, reply.content_type)

    async def _edit(
        self,
        method: str,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
        body: bytes,
        received: float,
        connection: int,
        token: str | None,
        keep_alive: bool,
    ) -> bool:
        """``editMessageText``, ``editMessageCaption``, ``editMessageReplyMarkup``: a
        message the server holds gets the new text, caption or keyboard; a missing one, a
        text edit of a media message (or a caption edit of a text one) and an edit that
        changes nothing are refused as Telegram refuses them."""
        try:
            params = parse_form(headers.get("content-type", ""), body)[0]
            chat_id, where = str(params["chat_id"]), int(params["message_id"])
            text = str(params["text"]) if method == "editMessageText" else None
            if method == "editMessageCaption":
                text = str(params.get("caption", ""))
        except (ValueError, KeyError, TypeError):
            bad = _api_error(400, "Bad Request: wrong parameters")
            return await self._answer(writer, 400, bad, keep_alive)
        key = (chat_id, where)
        markup = _markup(params.get("reply_markup"))
        with self._lock:
            old = self._messages.get(key)
            captioned = key in self._captioned
            old_markup = self._markups.get(key, "")
        problem = None
        if old is None:
            problem = "message to edit not found"
        elif method == "editMessageText" and captioned:
            problem = "there is no text in the message to edit"
        elif method == "editMessageCaption" and not captioned:
            problem = "there is no caption in the message to edit"
        elif (text is None or text == old) and markup == old_markup:
            problem = (
                "message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the "
                "message"
            )
        reply = (
            Reply.error(400, f"Bad Request: {problem}")
            if problem is not None
            else self._next_reply(chat_id, received)
        )
        arrived = Request(method, chat_id, received, connection, reply, _bot_id(token))
        self._record(arrived)
        new = old if text is None else text
        if reply.delivers and reply.body is None:
            with self._lock:
                if key in self._messages:
                    self._messages[key] = new or ""
                    self._markups[key] = markup
                    self._changes.append(Change(method, chat_id, where, received))
        if not await self._before_answer(arrived):
            return False
        result = {"message_id": where, "date": int(self.now()), "chat": _chat(chat_id)}
        result["caption" if captioned else "text"] = new
        body_out = reply.body or json.dumps({"ok": True, "result": result}).encode()
        return await self._answer(writer, reply.status, body_out, keep_alive, reply.content_type)

    async def _delete(
        self,
        method: str,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
        body: bytes,
        received: float,
        connection: int,
        token: str | None,
        keep_alive: bool,
    ) -> bool:
        """``deleteMessage`` (one message) and ``deleteMessages`` (1-100, such as an
        album's): a message the server holds is removed, unless it is older than 48 hours
        by the server's clock (Telegram's limit for bots: "message can't be deleted for
        everyone"); a missing one is "message to delete not found". ``deleteMessages``
        skips the messages it cannot delete, as Telegram does, and is refused only when it
        can delete none of them."""
        try:
            params = parse_form(headers.get("content-type", ""), body)[0]
            chat_id = str(params["chat_id"])
            if method == "deleteMessage":
                wanted = [int(params["message_id"])]
            else:
                listed = params["message_ids"]
                if not isinstance(listed, list) or not 1 <= len(listed) <= 100:
                    raise ValueError("message_ids is not a list of 1-100 ids")
                wanted = [int(i) for i in listed]
        except (ValueError, KeyError, TypeError):
            bad = _api_error(400, "Bad Request: wrong parameters")
            return await self._answer(writer, 400, bad, keep_alive)
        now = self.now()
        with self._lock:
            held = [i for i in wanted if (chat_id, i) in self._messages]
            young = [i for i in held if now - self._dates.get((chat_id, i), now) <= DELETE_LIMIT]
        problem = None
        if not held:
            problem = "message to delete not found"
        elif not young:
            problem = "message can't be deleted for everyone"
        reply = (
            Reply.error(400, f"Bad Request: {problem}")
            if problem is not None
            else self._next_reply(chat_id, received)
        )
        arrived = Request(method, chat_id, received, connection, reply, _bot_id(token))
        self._record(arrived)
        if reply.delivers and reply.body is None:
            with self._lock:
                for i in young:
                    if (chat_id, i) in self._messages:
                        self._forget((chat_id, i))
                        self._changes.append(Change(method, chat_id, i, received))
        if not await self._before_answer(arrived):
            return False
        body_out = reply.body or json.dumps({"ok": True, "result": True}).encode()
        return await self._answer(writer, reply.status, body_out, keep_alive, reply.content_type)

    def received(self) -> dict[str, list[dict[str, Any]]]:
        """What the server received, as JSON-ready data (``GET /received`` answers it):
        ``deliveries``, each with its ``chat_id``, ``message_id``, ``method``, ``text``,
        ``file_id`` and ``params`` (``reply_markup`` and the rest, as Telegram reads
        them), and ``requests``, every send with its ``method``, ``chat_id``, ``status``
        and whether it ``delivered``."""
        deliveries = [
            {
                "chat_id": d.chat_id,
                "message_id": d.message_id,
                "method": d.method,
                "text": d.text,
                "file_id": d.file_id,
                # What a form held is text or decoded JSON; anything else is shown as text.
                "params": json.loads(json.dumps(d.params, default=str)),
            }
            for d in self.deliveries
        ]
        requests = [
            {
                "method": r.method,
                "chat_id": r.chat_id,
                "status": r.reply.status,
                "delivered": r.reply.delivers,
            }
            for r in self.requests
        ]
        return {"deliveries": deliveries, "requests": requests}

    def message_text(self, chat_id: int | str, message_id: int) -> str | None:
        """The text the server holds for a message now (after its edits), or None."""
        with self._lock:
            return self._messages.get((str(chat_id), message_id))

    def _deliver(
        self,
        arrived: Request,
        text: str,
        params: dict[str, Any],
        file_id: str | None,
        *,
        captioned: bool = False,
    ) -> int:
        """Record one delivered message of ``arrived`` if its reply delivers; its id (0
        when it does not). ``captioned``: a media message, whose text is a caption."""
        if not arrived.reply.delivers:
            return 0
        assert arrived.chat_id is not None
        message_id = next(self._message_ids)
        delivery = Delivery(
            arrived.chat_id,
            text,
            params,
            arrived.at,
            arrived.connection,
            message_id,
            arrived.method,
            file_id,
        )
        key = (arrived.chat_id, message_id)
        with self._lock:
            self._deliveries.append(delivery)
            self._messages[key] = text
            self._dates[key] = self.now()
            self._markups[key] = _markup(params.get("reply_markup"))
            if captioned:
                self._captioned.add(key)
        return message_id

    async def _before_answer(self, arrived: Request) -> bool:
        """Tell ``on_request``, then wait out the latency; False when the reply drops the
        connection instead of answering."""
        if self.on_request is not None:
            self.on_request(arrived)
        if arrived.reply.drop is not None:
            return False
        if self.latency or arrived.reply.delay:
            await asyncio.sleep(self.latency + arrived.reply.delay)
        until = arrived.reply.until
        # A thread's event, set from the test's thread: polled, so that neither the loop nor
        # a worker thread is blocked on an event that may never be set.
        while until is not None and not until.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return True

    async def _media_group(
        self,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
        body: bytes,
        received: float,
        connection: int,
        token: str | None,
        keep_alive: bool,
    ) -> bool:
        """``sendMediaGroup``: 2-10 photos and videos (uploads as ``attach://<field>``, or
        file_ids this server gave, or URLs), delivered as one message each; the answer is
        their list, the caption on the first."""
        method = "sendMediaGroup"
        try:
            params, files = parse_form(headers.get("content-type", ""), body)
            chat_id = str(params["chat_id"])
            group = params["media"]
            if not isinstance(group, list) or not all(isinstance(i, dict) for i in group):
                raise ValueError("media is not a list of InputMedia")
        except (ValueError, KeyError, TypeError):
            bad = _api_error(400, "Bad Request: wrong parameters")
            return await self._answer(writer, 400, bad, keep_alive)
        if not 2 <= len(group) <= 10:
            bad = _api_error(400, "Bad Request: wrong number of media in the group (2-10)")
            return await self._answer(writer, 400, bad, keep_alive)
        sources: list[tuple[str, tuple[str, bytes] | None, object]] = []
        for item in group:
            kind, source = str(item.get("type")), item.get("media")
            if kind not in ("photo", "video"):
                bad = _api_error(400, "Bad Request: wrong media type in the group")
                return await self._answer(writer, 400, bad, keep_alive)
            file = None
            if isinstance(source, str) and source.startswith("attach://"):
                file = files.get(source[len("attach://") :])
            if file is None and not self._known_file(kind, source):
                bad = _api_error(400, "Bad Request: wrong file identifier/HTTP URL specified")
                return await self._answer(writer, 400, bad, keep_alive)
            sources.append((kind, file, source))
        reply = self._next_reply(chat_id, received)
        arrived = Request(method, chat_id, received, connection, reply, _bot_id(token))
        self._record(arrived)
        caption = str(group[0].get("caption", ""))
        messages: list[dict[str, Any]] = []
        for number, (kind, file, source) in enumerate(sources):
            media = self._media(kind, method, chat_id, file, source, reply.delivers)
            text = caption if number == 0 else ""
            message_id = self._deliver(
                arrived,
                text,
                params if number == 0 else {},
                _largest_file_id(media),
                captioned=True,
            )
            message = {"message_id": message_id, "date": int(self.now()), "chat": _chat(chat_id)}
            message.update(media)
            if text:
                message["caption"] = text
            messages.append(message)
        if not await self._before_answer(arrived):
            return False
        body_out = reply.body or json.dumps({"ok": True, "result": messages}).encode()
        return await self._answer(writer, reply.status, body_out, keep_alive, reply.content_type)

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        path: str,
        received: float,
        connection: int,
        token: str | None,
        keep_alive: bool,
    ) -> bool:
        """Answer 401 (a wrong token) or 404 (a wrong path or method), and record it."""
        reply = Reply.error(status, "Unauthorized" if status == 401 else "Not Found")
        method = path.rsplit("/", 1)[-1]
        self._record(Request(method, None, received, connection, reply, _bot_id(token)))
        assert reply.body is not None
        return await self._answer(writer, status, reply.body, keep_alive)

    async def _control_over_http(
        self,
        path: str,
        writer: asyncio.StreamWriter,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
    ) -> bool:
        """``POST /user_says`` (``chat_id``, ``text``), ``/user_blocks``, ``/user_unblocks``,
        ``/block``, ``/unblock`` (``chat_id``), ``/bot_removed``, ``/bot_added``
        (``chat_id``, optional ``status``), ``/user_presses`` (``chat_id``, ``data``),
        ``/post`` (``chat_id``, ``text``, optional ``message_id``), ``/delete_message``
        (``chat_id``, ``message_id``), ``/advance_clock`` (``seconds``) and ``/script``
        (see `_script_over_http`), as a form
        or JSON: do what the method of that name does, for a bot or a command using this
        server from another process. The answer's result is the queued update's id, the
        posted message's id, or True when there is nothing to say."""
        takes, control = _CONTROLS[path]
        try:
            params = parse_form(headers.get("content-type", ""), body)[0]
            result = control(self, params)
        except (ValueError, KeyError, TypeError):
            bad = _api_error(400, f"Bad Request: {path} takes {takes}")
            return await self._answer(writer, 400, bad, keep_alive)
        answer = {"ok": True, "result": result}
        return await self._answer(writer, 200, json.dumps(answer).encode(), keep_alive)

    def _known_file(self, kind: str, source: object) -> bool:
        """Whether ``source`` names a file this server gave out as ``kind``, or is a URL."""
        if isinstance(source, str) and source.startswith(("http://", "https://")):
            return True
        with self._lock:
            return isinstance(source, str) and self._files.get(source) == kind

    def _media(
        self,
        kind: str,
        method: str,
        chat_id: str,
        file: tuple[str, bytes] | None,
        source: object,
        delivers: bool,
    ) -> dict[str, Any]:
        """The answer's media object (a new file for an upload or a URL); records an upload.

        A photo gets two sizes with their own file_ids, as Telegram answers; the largest is
        last.
        """
        data = file[1] if file is not None else str(source).encode()
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            if file is not None or not isinstance(source, str) or source not in self._files:
                number = next(self._file_numbers)
                file_id = f"{kind[:3].upper()}{number}x{digest[:24]}"
            else:
                file_id = source  # sent again by its file_id: the same file
            if delivers:
                self._files[file_id] = kind
                if kind == "photo":
                    self._files[file_id + "s"] = kind
            if file is not None:
                upload = Upload(
                    method, chat_id, file[0], len(data), digest, file_id if delivers else None
                )
                self._uploads.append(upload)
        unique = digest[:16]
        if kind == "video":  # a Video object carries its size and length (aiogram reads them)
            shape = {"width": 1280, "height": 720, "duration": 10}
            return {kind: {"file_id": file_id, "file_unique_id": unique, **shape}}
        if kind != "photo":
            return {kind: {"file_id": file_id, "file_unique_id": unique, "file_size": len(data)}}
        base = file_id[:-1] if file_id.endswith("s") else file_id
        return {
            "photo": [
                {
                    "file_id": base + "s",
                    "file_unique_id": unique + "s",
                    "width": 90,
                    "height": 90,
                    "file_size": 1000,
                },
                {
                    "file_id": base,
                    "file_unique_id": unique,
                    "width": 1280,
                    "height": 1280,
                    "file_size": len(data),
                },
            ]
        }

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Confirm the updates below ``offset``; return the next ones, waiting up to
        ``timeout`` seconds (long polling) while there are none."""
        offset = int(params.get("offset") or 0)
        limit = min(max(int(params.get("limit") or 100), 1), 100)
        deadline = time.monotonic() + min(max(float(params.get("timeout") or 0), 0.0), 60.0)
        while True:
            with self._lock:
                if offset:
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
                ready = self._updates[:limit]
            if ready or time.monotonic() >= deadline:
                return ready
            await asyncio.sleep(0.02)


_Control = Callable[["BotAPIServer", dict[str, Any]], object]


def _update(update_id: int | None) -> object:
    """A control route's result: the queued update's id, or True when none was queued."""
    return True if update_id is None else {"update_id": update_id}


def _with_chat(name: str) -> _Control:
    """The server's method ``name``, given the ``chat_id`` of a control route."""
    return lambda server, p: _update(getattr(server, name)(_chat_id_param(p["chat_id"])))


# The replies POST /script can queue: its ``reply`` -> the Reply, from the other fields.
_SCRIPTED: dict[str, Callable[[dict[str, Any]], Reply]] = {
    "ok": lambda p: Reply.ok(delay=float(p.get("delay") or 0.0)),
    "blocked": lambda p: Reply.blocked(),
    "chat_not_found": lambda p: Reply.chat_not_found(),
    "flood": lambda p: Reply.flood(int(p["retry_after"])),
    "migrate": lambda p: Reply.migrate(int(p["new_chat_id"])),
    "error": lambda p: Reply.error(_error_status(p["status"]), str(p["description"])),
    "html": lambda p: Reply.html(_error_status(p.get("status") or 500)),
    "drop_after_delivery": lambda p: Reply.drop_after_delivery(),
}
_SCRIPT_TAKES = (
    f"reply ({', '.join(_SCRIPTED)}), chat_id (none: the next sends to any chat), times "
    "(default 1), and retry_after for flood, new_chat_id for migrate, status and "
    "description for error"
)


def _error_status(value: object) -> int:
    status = int(str(value))
    if not 400 <= status <= 599:
        raise ValueError(f"an error's status is 400-599, got {status}")
    return status


def _script_over_http(server: BotAPIServer, params: dict[str, Any]) -> object:
    """``POST /script``: queue ``times`` replies of the kind ``reply`` names for the sends
    to ``chat_id`` (or to any chat), as `script` does."""
    reply = _SCRIPTED[str(params["reply"])](params)
    times = int(params.get("times", 1))
    if times < 1:
        raise ValueError("times must be at least 1")
    chat = params.get("chat_id")
    server.script(None if chat is None else str(_chat_id_param(chat)), [reply] * times)
    return True


def _post_over_http(server: BotAPIServer, params: dict[str, Any]) -> object:
    given = params.get("message_id")
    message_id = server.post(
        _chat_id_param(params["chat_id"]),
        str(params["text"]),
        message_id=None if given is None else int(given),
    )
    return {"message_id": message_id}


def _delete_over_http(server: BotAPIServer, params: dict[str, Any]) -> object:
    server.delete_message(_chat_id_param(params["chat_id"]), int(params["message_id"]))
    return True


def _advance_over_http(server: BotAPIServer, params: dict[str, Any]) -> object:
    """``POST /advance_clock``: the server's clock moves ``seconds`` ahead; its answer is
    the clock then (Unix seconds)."""
    seconds = float(params["seconds"])
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("seconds must be a finite number, 0 or more")
    server.advance_clock(seconds)
    return {"now": server.now()}


def _status(params: dict[str, Any], default: str) -> str:
    return str(params.get("status") or default)


# The routes a test (or `notifyonce serve-test-api`'s user) drives the server with:
# path -> (what it takes, for the 400 answer; what it does, returning the answer's result).
_CONTROLS: dict[str, tuple[str, _Control]] = {
    "/user_says": (
        "chat_id (an int) and text",
        lambda server, p: _update(server.user_says(int(p["chat_id"]), str(p["text"]))),
    ),
    # The routes that take a chat alone: a user's private chat for user_blocks and
    # user_unblocks (any other is a 400), any chat for block and unblock.
    **{
        f"/{name}": ("chat_id (a chat's id)", _with_chat(name))
        for name in ("user_blocks", "user_unblocks", "block", "unblock")
    },
    "/bot_removed": (
        "chat_id (a group's id or @channel) and status (left or kicked)",
        lambda server, p: _update(
            server.bot_removed(_chat_id_param(p["chat_id"]), status=_status(p, "kicked"))
        ),
    ),
    "/bot_added": (
        "chat_id (a group's id or @channel) and status (member or administrator)",
        lambda server, p: _update(
            server.bot_added(_chat_id_param(p["chat_id"]), status=_status(p, "member"))
        ),
    ),
    "/user_presses": (
        "chat_id (an int) and data",
        lambda server, p: _update(server.user_presses(int(p["chat_id"]), str(p["data"]))),
    ),
    "/post": (
        "chat_id (a chat's id or @channel), text, and message_id (optional)",
        _post_over_http,
    ),
    "/delete_message": ("chat_id (a chat's id or @channel) and message_id", _delete_over_http),
    "/advance_clock": ("seconds (a number of seconds, 0 or more)", _advance_over_http),
    "/script": (_SCRIPT_TAKES, _script_over_http),
}


def _largest_file_id(media: dict[str, Any]) -> str | None:
    if "photo" in media:
        return str(media["photo"][-1]["file_id"])
    for value in media.values():
        return str(value["file_id"])
    return None


def _bot_id(token: str | None) -> int | None:
    """The public part of a bot token (``123:secret`` -> 123), if it has one."""
    head = (token or "").partition(":")[0]
    return int(head) if head.isdigit() else None
