"""AiogramSender and PTBSender against the local BotAPIServer, and their exception maps."""

from __future__ import annotations

import asyncio
import gc
import socket
import subprocess
import sys
import traceback
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
)
from notifyonce.testing import BotAPIServer, Reply

from ._optional import require

require("aiogram", "aiogram")
require("telegram", "ptb")

import aiohttp  # noqa: E402
from aiogram import Bot as AiogramBot  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.exceptions import TelegramNetworkError  # noqa: E402
from aiogram.methods import SendMessage  # noqa: E402
from telegram import Bot as PTBBot  # noqa: E402
from telegram.error import NetworkError, RetryAfter, TimedOut  # noqa: E402

from notifyonce.aiogram import AiogramSender, classify_aiogram_error  # noqa: E402
from notifyonce.ptb import PTBSender, classify_ptb_error  # noqa: E402

# Their sockets are theirs to close (see the wrap fixture); ours stay checked elsewhere.
pytestmark = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")

TOKEN = "123456:SECRET-wrapper_token"
TEXT = "the secret text"
Factory = Callable[[str], Any]


class Wrapped:
    """One wrapper over one library's bot pointed at a base URL, closed after the test."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.closers: list[Any] = []

    def __call__(self, base_url: str, **options: Any) -> AiogramSender | PTBSender:
        if self.library == "aiogram":
            session = AiohttpSession(api=TelegramAPIServer.from_base(base_url))
            aiogram_bot = AiogramBot(TOKEN, session=session)
            self.closers.append(aiogram_bot.session.close)
            return AiogramSender(aiogram_bot, **options)
        ptb_bot = PTBBot(TOKEN, base_url=f"{base_url}/bot")
        # Bot.shutdown() closes nothing on a bot never initialized (as here: the sender
        # needs no initialize()), so its request object is shut down itself: its pooled
        # connections would otherwise reach the garbage collector still open.
        self.closers.append(ptb_bot.request.shutdown)
        return PTBSender(ptb_bot, **options)


@pytest.fixture(params=["aiogram", "ptb"])
async def wrap(request: pytest.FixtureRequest) -> AsyncIterator[Wrapped]:
    wrapped = Wrapped(request.param)
    yield wrapped
    for close in wrapped.closers:
        await close()
    await asyncio.sleep(0.01)


@pytest.fixture(scope="module", autouse=True)
def _collect_sockets() -> Iterator[None]:
    """aiohttp (aiogram) and httpx (python-telegram-bot) leave closed connections' sockets
    to the garbage collector: collect them once the module's last test here ends, under
    this module's warning filter, rather than in whichever test runs next (a collection
    after each test cost a second a test in a process that ran the whole suite)."""
    yield
    gc.collect()


async def attempt(sender: Any, recipient: str = "42", **fields: Any) -> Receipt | SendError:
    try:
        result: Receipt = await sender.send(recipient, Message(TEXT, **fields))
    except SendError as exc:
        return exc
    return result


async def test_delivers_with_options(wrap: Wrapped, bot_api_server: BotAPIServer) -> None:
    """A send reaches the server with markup and options and returns Telegram's message id."""
    markup = {"inline_keyboard": [[{"text": "Pay", "url": "https://example.com"}]]}
    result = await attempt(
        wrap(bot_api_server.url),
        parse_mode="HTML",
        silent=True,
        reply_markup=markup,
        options={"protect_content": True},
    )
    (delivery,) = bot_api_server.deliveries
    assert Receipt("42", delivery.message_id, None) == result
    assert markup == delivery.params["reply_markup"]
    assert "HTML" == delivery.params["parse_mode"]
    assert delivery.params["protect_content"] in (True, "true", "True")
    assert delivery.params["disable_notification"] in (True, "true", "True")


async def test_migration_followed_once(wrap: Wrapped, bot_api_server: BotAPIServer) -> None:
    """A migrated group is resent to the new id and the receipt says where it went."""
    bot_api_server.script("-55", [Reply.migrate(-10055)])
    result = await attempt(wrap(bot_api_server.url), "-55")
    assert isinstance(result, Receipt)
    assert ("-10055", "-10055") == (result.recipient, result.migrated_to)
    assert ["-10055"] == [d.chat_id for d in bot_api_server.deliveries]


async def test_second_migration_is_permanent(wrap: Wrapped, bot_api_server: BotAPIServer) -> None:
    """A chat that moves again after the move is a permanent failure, not a loop."""
    bot_api_server.script("-55", [Reply.migrate(-10055)])
    bot_api_server.script("-10055", [Reply.migrate(-10066)])
    result = await attempt(wrap(bot_api_server.url), "-55")
    assert isinstance(result, PermanentSendError)
    assert [] == bot_api_server.deliveries


@pytest.mark.parametrize(
    ("reply", "expected", "code"),
    [
        (Reply.blocked(), PermanentSendError, 403),
        (Reply.chat_not_found(), PermanentSendError, 400),
        (Reply.error(401, "Unauthorized"), SenderConfigError, 401),
        (Reply.error(404, "Not Found"), SenderConfigError, 404),
        (Reply.flood(3), TransientSendError, 429),
        (Reply.error(429, "Too Many Requests: retry after 3"), TransientSendError, 429),
        (Reply.drop_after_delivery(), UncertainSendError, None),
        (Reply.html(502), UncertainSendError, None),
        (Reply.error(502, "Bad Gateway"), UncertainSendError, 502),
        (Reply.error(504, "Gateway Timeout"), UncertainSendError, 504),
    ],
    ids=[
        "blocked",
        "chat-not-found",
        "unauthorized",
        "not-found",
        "flood",
        "flood-text-only",
        "dropped",
        "502-html",
        "502-envelope",
        "504-envelope",
    ],
)
@pytest.mark.filterwarnings("ignore:.*retry_after.*")  # PTB 22 warns when it builds RetryAfter
async def test_answers_are_classified(
    wrap: Wrapped, bot_api_server: BotAPIServer, reply: Reply, expected: type, code: int | None
) -> None:
    """Refusals are permanent, 401/404 a config error, 429 transient with its wait (also
    when only the description says it), a lost answer or a 502/504 uncertain."""
    bot_api_server.script("42", [reply])
    result = await attempt(wrap(bot_api_server.url))
    assert expected is type(result)
    assert isinstance(result, SendError)
    if code is not None:
        assert code == result.code
    if isinstance(result, TransientSendError):
        assert 3.0 == result.retry_after


async def test_a_refusal_of_the_message_is_marked_about_it(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """Through aiogram and python-telegram-bot too, "can't parse entities" is a refusal of
    the message (the Notifier gives its slot back), "chat not found" one of the chat."""
    bot_api_server.script("42", [Reply.error(400, "Bad Request: can't parse entities: x")])
    bot_api_server.script("43", [Reply.chat_not_found()])
    refused = await attempt(wrap(bot_api_server.url), "42")
    missing = await attempt(wrap(bot_api_server.url), "43")
    assert isinstance(refused, PermanentSendError)
    assert isinstance(missing, PermanentSendError)
    assert (True, False) == (refused.about_message, missing.about_message)


async def test_envelope_server_error_is_transient(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """A 500 with a Bot API error envelope means Telegram did not send: transient."""
    bot_api_server.script("42", [Reply.error(500, "Internal Server Error")])
    assert isinstance(await attempt(wrap(bot_api_server.url)), TransientSendError)


async def test_refused_connection_is_transient(wrap: Wrapped) -> None:
    """A port nobody listens on: the request cannot have left, so transient."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert isinstance(await attempt(wrap(f"http://127.0.0.1:{port}")), TransientSendError)


def _network_error(underneath: BaseException, chained: bool) -> TelegramNetworkError:
    """aiogram's error for a failed request, raised while handling ``underneath``."""
    method = SendMessage(chat_id=42, text="x")
    try:
        try:
            raise underneath
        except (aiohttp.ClientError, TimeoutError) as exc:
            if chained:  # aiogram >= 3.25
                raise TelegramNetworkError(method=method, message="failed") from exc
            raise TelegramNetworkError(method=method, message="failed")  # noqa: B904 - as aiogram < 3.25
    except TelegramNetworkError as exc:
        return exc


@pytest.mark.parametrize("chained", [True, False], ids=["cause", "context"])
def test_aiogram_connect_failure_is_transient_however_chained(chained: bool) -> None:
    """A connect error under aiogram's network error, as its cause or only as its context
    (aiogram before 3.25), is transient; a timeout under it stays uncertain."""
    key = SimpleNamespace(host="127.0.0.1", port=1, ssl=True)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))
    assert isinstance(classify_aiogram_error(_network_error(refused, chained)), TransientSendError)
    timeout = _network_error(TimeoutError(), chained)
    assert isinstance(classify_aiogram_error(timeout), UncertainSendError)


async def test_read_timeout_is_uncertain(wrap: Wrapped, bot_api_server: BotAPIServer) -> None:
    """An answer slower than the request timeout, after delivery, is uncertain."""
    bot_api_server.script("42", [Reply.ok(delay=1.5)])
    option = "request_timeout" if wrap.library == "aiogram" else "read_timeout"
    result = await attempt(wrap(bot_api_server.url, **{option: 1}))
    assert isinstance(result, UncertainSendError)
    assert 1 == len(bot_api_server.deliveries)


async def test_token_and_text_never_in_errors(wrap: Wrapped, bot_api_server: BotAPIServer) -> None:
    """A description echoing the token is redacted; the message text is never shown."""
    bot_api_server.script("42", [Reply.error(400, f"Bad Request: token {TOKEN} refused")])
    sender = wrap(bot_api_server.url)
    result = await attempt(sender)
    assert isinstance(result, PermanentSendError)
    shown = "".join(traceback.format_exception(result)) + repr(result) + repr(sender)
    assert TOKEN not in shown
    assert TEXT not in shown


async def test_invalid_recipient_is_rejected_before_sending(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """A recipient that is no chat id fails validation and nothing reaches the server."""
    with pytest.raises(ValidationError) as info:
        await wrap(bot_api_server.url).send("not a chat", Message("x"))
    assert "recipient" == info.value.field
    assert [] == bot_api_server.requests


def test_wrong_bot_type_names_the_field() -> None:
    """Passing something that is not the library's Bot is a ValidationTypeError on 'bot'."""
    for make in (AiogramSender, PTBSender):
        with pytest.raises(ValidationError) as info:
            make(object())
        assert "bot" == info.value.field


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (httpx.ConnectError("refused"), TransientSendError),
        (httpx.ConnectTimeout("slow"), TransientSendError),
        (httpx.ReadError("reset"), UncertainSendError),
        (httpx.RemoteProtocolError("closed"), UncertainSendError),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_ptb_network_errors_classified_by_their_httpx_cause(
    cause: Exception, expected: type
) -> None:
    """PTB folds every httpx failure into NetworkError; the chained cause decides."""
    exc = NetworkError(f"httpx.{type(cause).__name__}: {cause}")
    exc.__cause__ = cause
    assert expected is type(classify_ptb_error(exc))


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (httpx.PoolTimeout("busy"), TransientSendError),
        (httpx.ConnectTimeout("slow"), TransientSendError),
        (httpx.ReadTimeout("slow"), UncertainSendError),
        (httpx.WriteTimeout("slow"), UncertainSendError),
        (None, UncertainSendError),
    ],
    ids=["pool", "connect", "read", "write", "no-cause"],
)
def test_ptb_timeouts_classified_by_their_httpx_cause(
    cause: Exception | None, expected: type
) -> None:
    """TimedOut is transient only when httpx says the request never left."""
    exc = TimedOut()
    exc.__cause__ = cause
    assert expected is type(classify_ptb_error(exc))


def test_ptb_retry_after_is_seconds() -> None:
    """RetryAfter becomes a transient error carrying the wait in seconds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB 22 warns about int retry_after on construction
        flood = RetryAfter(7)
    error = classify_ptb_error(flood)
    assert isinstance(error, TransientSendError)
    assert 7.0 == error.retry_after


def test_missing_library_names_the_extra() -> None:
    """Without the library, importing the wrapper module says which extra to install."""
    code = (
        "import sys\n"
        "for lib, mod in (('aiogram', 'notifyonce.aiogram'), ('telegram', 'notifyonce.ptb'),"
        " ('apprise', 'notifyonce.apprise')):\n"
        "    sys.modules[lib] = None\n"
        "    try:\n        __import__(mod)\n    except ImportError as e:\n        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert 3 == len(lines)
    for extra, line in zip(("aiogram", "ptb", "apprise"), lines, strict=True):
        assert f'pip install "notifyonce[{extra}]"' in line


# -- media ----------------------------------------------------------------------------------

IMAGE = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8


async def test_a_photo_is_uploaded_once_then_sent_by_its_file_id(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """Three chats get one photo with its caption: one upload, then sends by the file_id
    Telegram gave; every receipt carries that file_id."""
    from notifyonce import Photo

    sender = wrap(bot_api_server.url)
    message = Message("<b>New</b> tariff", parse_mode="HTML", media=Photo(IMAGE, filename="t.jpg"))
    receipts = [await sender.send(chat, message) for chat in (1, 2, 3)]
    (upload,) = bot_api_server.uploads
    assert ("sendPhoto", "t.jpg", len(IMAGE)) == (upload.method, upload.filename, upload.size)
    assert {upload.file_id} == {r.file_id for r in receipts}
    deliveries = bot_api_server.deliveries
    assert ["1", "2", "3"] == [d.chat_id for d in deliveries]
    assert {"sendPhoto"} == {d.method for d in deliveries}
    assert {"<b>New</b> tariff"} == {d.text for d in deliveries}
    assert [upload.file_id] * 2 == [d.params["photo"] for d in deliveries[1:]]
    assert {"HTML"} == {d.params["parse_mode"] for d in deliveries}


async def test_a_photo_file_deleted_after_its_upload_goes_by_its_file_id(
    wrap: Wrapped, bot_api_server: BotAPIServer, tmp_path: Any
) -> None:
    """A photo on disk, deleted once it was uploaded, is checked and sent by its file_id;
    to a sender that never uploaded it, it is the message's problem, naming the file."""
    from notifyonce import Photo

    path = tmp_path / "tariff.jpg"
    await asyncio.to_thread(path.write_bytes, IMAGE)
    sender = wrap(bot_api_server.url)
    message = Message("", media=Photo(path))
    first = await sender.send("1", message)
    await asyncio.to_thread(path.unlink)
    sender.check("2", message)
    assert first.file_id == (await sender.send("2", message)).file_id
    with pytest.raises(TransientSendError) as caught:
        await wrap(bot_api_server.url).send("4", message)
    assert caught.value.about_message
    assert str(path) in str(caught.value)
    assert 1 == len(bot_api_server.uploads)


async def test_documents_and_videos_from_a_path_or_by_url(
    wrap: Wrapped, bot_api_server: BotAPIServer, tmp_path: Any
) -> None:
    """A document read from a file goes with its file name; a video named by URL is not
    uploaded."""
    from notifyonce import Document, Video

    path = tmp_path / "invoice.pdf"
    path.write_bytes(b"%PDF-1.7 the invoice")
    sender = wrap(bot_api_server.url)
    await sender.send("5", Message("", media=Document(path)))
    await sender.send("5", Message("clip", media=Video("https://example.com/clip.mp4")))
    assert [("sendDocument", "invoice.pdf")] == [
        (u.method, u.filename) for u in bot_api_server.uploads
    ]
    assert ["sendDocument", "sendVideo"] == [d.method for d in bot_api_server.deliveries]
    assert "https://example.com/clip.mp4" == bot_api_server.deliveries[1].params["video"]


async def test_a_file_id_telegram_forgot_is_uploaded_again(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """A stored file_id the server refuses ('wrong file identifier') is forgotten and the
    file uploaded again: delivered once, not a failure."""
    import hashlib

    from notifyonce import Photo
    from notifyonce._senders.rate.stores import bot_key
    from notifyonce._senders.telegram.files import file_key
    from notifyonce.telegram import MemoryFileIdStore

    store = MemoryFileIdStore()
    key = file_key(bot_key(TOKEN), "photo", hashlib.sha256(IMAGE).hexdigest())
    await store.put(key, "AgACAgIAAxkBAAIBgone")
    sender = wrap(bot_api_server.url, file_store=store)
    receipt = await sender.send("9", Message("", media=Photo(IMAGE)))
    assert 1 == len(bot_api_server.uploads)
    assert ["9"] == [d.chat_id for d in bot_api_server.deliveries]
    assert receipt.file_id == await store.get(key)


async def test_a_caption_too_long_is_refused_before_sending(
    wrap: Wrapped, bot_api_server: BotAPIServer
) -> None:
    """A caption over 1024 characters is refused by check() and by send(); nothing sent."""
    from notifyonce import Photo

    sender = wrap(bot_api_server.url)
    message = Message("x" * 1025, media=Photo(IMAGE))
    with pytest.raises(ValidationError, match="caption"):
        sender.check("1", message)
    with pytest.raises(ValidationError, match="caption"):
        await sender.send("1", message)
    assert [] == bot_api_server.requests
