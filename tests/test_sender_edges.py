"""Everyday mistakes a new user makes with a sender: each costs nothing and says why.

A wrong token or base_url is a SenderConfigError; a keyboard object, an odd option or a
too-long text is handled or refused before any request; a bad recipient is refused by
``check``; a transport that cannot place its failures never causes a duplicate; and a
raised error leaves neither the text nor the token in its frames.
"""

from __future__ import annotations

import asyncio
import decimal
import socket
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import pytest

from notifyonce import (
    FallbackSender,
    FanoutSender,
    Message,
    PermanentSendError,
    Receipt,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
)
from notifyonce._senders.transport import placed_by_httpcore
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender, Reply
from notifyonce.webhook import WebhookSender

from ._fakes import FakeClock, Script, scripted

TOKEN = "424242:EDGE-secret_token"
TEXT = "the very private reminder text"
OK_BODY = {"ok": True, "result": {"message_id": 7, "chat": {"id": 42}}}


def mock_sender(script: Script, clock: FakeClock | None = None, **options: Any) -> TelegramSender:
    return TelegramSender(
        TOKEN, rate_limit=None, **scripted(script, clock or FakeClock()), **options
    )


# ---- the token -------------------------------------------------------------------------


def test_a_token_with_the_url_prefix_is_refused_naming_the_mistake() -> None:
    """'bot123:ABC' (pasted from the URL) is refused at construction; the error names the
    'bot' prefix and never shows the token."""
    with pytest.raises(ValidationError) as info:
        TelegramSender("bot" + TOKEN)
    assert "token" == info.value.field
    assert "starts with 'bot'" in info.value.problem
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize("token", [TOKEN + "\n", " " + TOKEN, TOKEN + "\r\n"])
def test_a_token_with_a_line_break_or_space_around_it_is_named_as_such(token: str) -> None:
    """A token read from a file with its newline gets its own message, without the token."""
    with pytest.raises(ValidationError) as info:
        TelegramSender(token)
    assert "token" == info.value.field
    assert "has a space or a line break before or after it" in info.value.problem
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize("token", ["not-a-token", "987654", ":XYZ", "123:AB C", "abc:def"])
def test_a_token_without_the_bot_token_shape_is_refused(token: str) -> None:
    """A string that is not '<digits>:<secret>' is refused when the sender is built."""
    with pytest.raises(ValidationError) as info:
        TelegramSender(token)
    assert "token" == info.value.field
    assert token not in str(info.value)


async def test_a_rejected_token_is_a_config_error_on_the_local_server() -> None:
    """A well-formed but wrong token gets the server's 401: SenderConfigError, nothing sent."""
    with BotAPIServer(token="1:right") as server:
        async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
            with pytest.raises(SenderConfigError) as info:
                await sender.send("42", Message(TEXT))
        assert [] == server.deliveries
    assert 401 == info.value.code
    assert TOKEN not in str(info.value)


async def test_an_unknown_method_path_is_a_404_config_error() -> None:
    """A base_url that already ends in /bot<token> makes the method path wrong: 404."""
    with BotAPIServer() as server:
        base = f"{server.url}/bot{TOKEN}"
        async with TelegramSender(TOKEN, base_url=base, rate_limit=None) as sender:
            with pytest.raises(SenderConfigError) as info:
                await sender.send("42", Message(TEXT))
        assert [] == server.deliveries
    assert 404 == info.value.code


# ---- 429 without parameters ------------------------------------------------------------


async def test_retry_after_is_read_from_the_description_when_parameters_are_missing() -> None:
    """'Too Many Requests: retry after 3' with no parameters waits 3 s, not the backoff."""
    body = {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 3"}
    clock = FakeClock()
    script = Script([httpx.Response(429, json=body), httpx.Response(200, json=OK_BODY)])
    receipt = await mock_sender(script, clock).send("42", Message(TEXT))
    assert Receipt("42", 7, None) == receipt
    assert [3.0] == clock.waits


# ---- the message, serialised and checked up front ---------------------------------------


async def test_an_aiogram_keyboard_is_sent_as_the_bot_api_dict(
    bot_api_server: BotAPIServer,
) -> None:
    """An aiogram InlineKeyboardMarkup (a pydantic model) goes out as plain JSON, no nulls."""
    keyboard = pytest.importorskip("aiogram.utils.keyboard")
    builder = keyboard.InlineKeyboardBuilder()
    builder.button(text="Pay", url="https://example.com/pay")
    message = Message(TEXT, reply_markup=builder.as_markup())
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        sender.check("42", message)
        await sender.send("42", message)
    (delivery,) = bot_api_server.deliveries
    expected = {"inline_keyboard": [[{"text": "Pay", "url": "https://example.com/pay"}]]}
    assert expected == delivery.params["reply_markup"]


async def test_a_python_telegram_bot_keyboard_is_sent_as_the_bot_api_dict(
    bot_api_server: BotAPIServer,
) -> None:
    """A python-telegram-bot InlineKeyboardMarkup goes out through its to_dict()."""
    telegram = pytest.importorskip("telegram")
    button = telegram.InlineKeyboardButton("Pay", url="https://example.com/pay")
    message = Message(TEXT, reply_markup=telegram.InlineKeyboardMarkup([[button]]))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        await sender.send("42", message)
    (delivery,) = bot_api_server.deliveries
    expected = {"inline_keyboard": [[{"text": "Pay", "url": "https://example.com/pay"}]]}
    assert expected == delivery.params["reply_markup"]


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Message(TEXT, options={"amount": decimal.Decimal("9.99")}), "options"),
        (Message(TEXT, options={"ratio": float("nan")}), "options"),
        (Message(TEXT, reply_markup={"inline_keyboard": [[{1, 2}]]}), "reply_markup"),
    ],
    ids=["decimal", "nan", "set"],
)
async def test_an_unencodable_message_is_refused_before_any_request(
    message: Message, field: str
) -> None:
    """A value the JSON encoder cannot handle is a ValidationError from check() and send(),
    naming the field, with no request made (certain: nothing was sent)."""
    script = Script([httpx.Response(200, json=OK_BODY)])
    sender = mock_sender(script)
    with pytest.raises(ValidationError) as checked:
        sender.check("42", message)
    with pytest.raises(ValidationError) as sent:
        await sender.send("42", message)
    assert (field, field) == (checked.value.field, sent.value.field)
    assert [] == script.requests
    assert TEXT not in str(sent.value)


@pytest.mark.parametrize(
    ("text", "parse_mode", "accepted"),
    [
        ("x" * 4096, None, True),
        ("x" * 4097, None, False),
        ("\U0001f600" * 2048, None, True),  # 4096 UTF-16 code units
        ("\U0001f600" * 2049, None, False),  # 4098: Telegram counts surrogate pairs
        ("<b>" + "x" * 4096 + "</b>", "HTML", True),
        ("&amp;" * 4096, "HTML", True),
        ("&amp;" * 4097, "HTML", False),
        ("*" + "x" * 4096 + "*", "MarkdownV2", True),
        ("\\." * 4097, "MarkdownV2", False),
    ],
    ids=[
        "4096",
        "4097",
        "astral-4096",
        "astral-4098",
        "html-tags",
        "html-entities-4096",
        "html-entities-4097",
        "markdown-4096",
        "markdown-escapes-4097",
    ],
)
def test_text_length_is_counted_as_telegram_counts_it(
    text: str, parse_mode: str | None, accepted: bool
) -> None:
    """The 4096 limit is in UTF-16 code units after markup parsing; over it, check refuses."""
    sender = TelegramSender(TOKEN, rate_limit=None)
    message = Message(text, parse_mode=parse_mode)
    if accepted:
        sender.check("42", message)
    else:
        with pytest.raises(ValidationError) as info:
            sender.check("42", message)
        assert "text" == info.value.field
        assert "4096" in info.value.problem


async def test_a_too_long_text_is_refused_by_send_without_a_request() -> None:
    """send() refuses a 4,097-character text before any request (Telegram would refuse it)."""
    script = Script([httpx.Response(200, json=OK_BODY)])
    with pytest.raises(ValidationError):
        await mock_sender(script).send("42", Message("x" * 4097))
    assert [] == script.requests


# ---- recipients, through check() --------------------------------------------------------


@pytest.mark.parametrize("recipient", ["not a chat", " 42", "42 ", "", "@a", "0"])
def test_telegram_check_refuses_a_bad_recipient(recipient: str) -> None:
    """A recipient Telegram cannot address is refused by check(), before any claim."""
    with pytest.raises(ValidationError) as info:
        TelegramSender(TOKEN, rate_limit=None).check(recipient, Message(TEXT))
    assert "recipient" == info.value.field


@pytest.mark.parametrize("recipient", ["", "   "])
def test_webhook_check_refuses_a_blank_recipient(recipient: str) -> None:
    """WebhookSender.check refuses a blank recipient and an unencodable body."""
    sender = WebhookSender("https://hooks.example.com/x")
    with pytest.raises(ValidationError) as info:
        sender.check(recipient, Message(TEXT))
    assert "recipient" == info.value.field
    with pytest.raises(ValidationError) as info:
        sender.check("7", Message(TEXT, options={"n": decimal.Decimal(1)}))
    assert "message" == info.value.field


class _Refusing(FakeSender):
    """A FakeSender whose check refuses one recipient."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def check(self, recipient: str, message: Message) -> None:
        if recipient == self.refused:
            raise ValidationError("recipient", "refused by this channel")


def test_fanout_check_refuses_when_any_channel_refuses() -> None:
    """A fan-out needs every channel: one channel's refusal refuses it."""
    sender = FanoutSender({"a": _Refusing("1"), "b": _Refusing("2")})
    sender.check("3", Message(TEXT))
    with pytest.raises(ValidationError):
        sender.check("2", Message(TEXT))


def test_fallback_check_refuses_only_when_every_channel_refuses() -> None:
    """A fallback delivers through any channel: it refuses only when all of them refuse."""
    sender = FallbackSender({"a": _Refusing("1"), "b": _Refusing("1"), "c": _Refusing("2")})
    sender.check("2", Message(TEXT))
    every = FallbackSender({"a": _Refusing("1"), "b": _Refusing("1")})
    with pytest.raises(ValidationError) as info:
        every.check("1", Message(TEXT))
    assert "a: recipient; b: recipient" in info.value.problem


async def test_fallback_and_fanout_raise_a_config_error_when_nothing_went_out() -> None:
    """A channel set up wrong, with nothing delivered anywhere, stops the run for both."""
    broken, busy = FakeSender(), FakeSender()
    broken.fail_next(SenderConfigError("bad token", code=401))
    busy.fail_next(TransientSendError("429", code=429))
    with pytest.raises(SenderConfigError):
        await FallbackSender({"broken": broken, "busy": busy}).send("1", Message(TEXT))
    broken.fail_next(SenderConfigError("bad token", code=401))
    busy.fail_next(TransientSendError("429", code=429))
    with pytest.raises(SenderConfigError):
        await FanoutSender({"broken": broken, "busy": busy}).send("1", Message(TEXT))
    broken.fail_next(SenderConfigError("bad token", code=401))
    with pytest.raises(UncertainSendError):  # "busy" delivered: a resend would repeat it
        await FanoutSender({"broken": broken, "busy": busy}).send("1", Message(TEXT))


def _wrapped(library: str) -> Any:
    if library == "aiogram":
        aiogram = pytest.importorskip("aiogram")
        from notifyonce.aiogram import AiogramSender

        return AiogramSender(aiogram.Bot(TOKEN))
    telegram = pytest.importorskip("telegram")
    from notifyonce.ptb import PTBSender

    return PTBSender(telegram.Bot(TOKEN))


@pytest.mark.parametrize("library", ["aiogram", "ptb"])
@pytest.mark.parametrize(
    ("recipient", "message", "field"),
    [
        ("not a chat", Message(TEXT), "recipient"),
        (" 42", Message(TEXT), "recipient"),
        ("42", Message("x" * 4097), "text"),
        ("42", Message(TEXT, options={"amount": decimal.Decimal(1)}), "options"),
    ],
    ids=["words", "space", "too-long", "decimal"],
)
def test_bot_wrappers_check_before_any_claim(
    library: str, recipient: str, message: Message, field: str
) -> None:
    """AiogramSender and PTBSender refuse bad recipients and messages in check()."""
    with pytest.raises(ValidationError) as info:
        _wrapped(library).check(recipient, message)
    assert field == info.value.field


def test_aiogram_check_names_the_fields_aiogram_refuses() -> None:
    """An option aiogram's SendMessage model cannot take is refused by check (not by a
    pydantic error after the claim), naming the field."""
    sender = _wrapped("aiogram")
    with pytest.raises(ValidationError) as info:
        sender.check("42", Message(TEXT, options={"message_thread_id": "not a number"}))
    assert "message_thread_id" in info.value.problem
    assert TEXT not in str(info.value)


# ---- a transport that cannot place its failures -----------------------------------------


class DropLooksLikeConnectTimeout(httpx.AsyncBaseTransport):
    """What httpx-aiohttp does: real requests, no httpcore trace, and a connection dropped
    after the request was delivered reported as ``httpx.ConnectTimeout``."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.extensions = {k: v for k, v in request.extensions.items() if k != "trace"}
        try:
            return await self.inner.handle_async_request(request)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise httpx.ConnectTimeout("Connection timeout to host", request=request) from exc

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_foreign_transports_connect_timeout_after_delivery_is_not_resent(
    bot_api_server: BotAPIServer,
) -> None:
    """A drop after delivery reported as ConnectTimeout by a transport that does not trace
    is uncertain: no retry, exactly one delivery (0.1.0 resent it and delivered twice)."""
    bot_api_server.script("42", [Reply.drop_after_delivery()])
    async with httpx.AsyncClient(transport=DropLooksLikeConnectTimeout()) as client:
        sender = TelegramSender(
            TOKEN, base_url=bot_api_server.url, client=client, rate_limit=None, max_retries=3
        )
        with pytest.raises(UncertainSendError):
            await sender.send("42", Message(TEXT))
    assert 1 == len(bot_api_server.deliveries)
    assert 1 == len(bot_api_server.requests)


class QuotingTransport(httpx.AsyncBaseTransport):
    """A foreign transport whose failure quotes the request it could not send (its body:
    the message's text)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = (await request.aread()).decode()
        raise httpx.ReadError(f"connection reset while sending {body}", request=request)


async def test_a_foreign_transports_message_never_carries_the_text_anywhere(
    sqlite_ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller's transport that quotes the request in its exception: the outcome, the
    ledger's stored error and the log name the exception's class, never the text."""
    from notifyonce import Notifier, Outcome

    caplog.set_level("DEBUG")
    async with httpx.AsyncClient(transport=QuotingTransport()) as client:
        sender = TelegramSender(TOKEN, client=client, rate_limit=None, max_retries=0)
        result = await Notifier(sqlite_ledger, sender).send_once("a", 42, "c1", Message(TEXT))
    record = await sqlite_ledger.get("a", 42, "c1")
    assert (Outcome.UNKNOWN, "ReadError") == (result, record.last_error)
    assert [] == [r.getMessage() for r in caplog.records if TEXT in r.getMessage()]


class BodyInItsError(httpx.AsyncBaseTransport):
    """A foreign transport that fails with an exception of its own quoting the body."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"failed sending {request.content!r} to {request.url}")


def _chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and every exception it leads to through ``__cause__`` and ``__context__``."""
    found: list[BaseException] = []
    pending = [error]
    while pending:
        exc = pending.pop()
        if exc is not None and all(exc is not seen for seen in found):
            found.append(exc)
            pending += [exc.__cause__, exc.__context__]
    return found


@pytest.mark.parametrize("kind", ["telegram", "webhook"])
async def test_a_foreign_exception_quoting_the_body_leaves_no_text_in_the_chain(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller's transport raising RuntimeError with the request's body and URL in it:
    neither the raised error, nor any exception of its cause and context chain, nor a log
    line holds the text or the secret (the redacted cause kept the exception's text)."""
    caplog.set_level("DEBUG")
    secret = "/hooks/secret-path-81d2"
    async with httpx.AsyncClient(transport=BodyInItsError()) as client:
        sender: TelegramSender | WebhookSender = (
            TelegramSender(TOKEN, client=client, rate_limit=None, max_retries=0)
            if kind == "telegram"
            else WebhookSender(f"https://hooks.example.com{secret}", client=client, max_retries=0)
        )
        with pytest.raises(SendError) as info:
            await sender.send("42", Message(TEXT))
    chain = _chain(info.value)
    assert [info.value.__cause__] == chain[1:]
    shown = [f"{e!s} {e!r}" for e in chain] + [r.getMessage() for r in caplog.records]
    assert [] == [line for line in shown if TEXT in line or TOKEN in line or secret in line]
    assert "RuntimeError" in str(info.value.__cause__)


@pytest.mark.parametrize(
    "exc",
    [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), httpx.PoolTimeout("busy")],
    ids=lambda e: type(e).__name__,
)
async def test_an_untraced_transport_failure_is_uncertain(exc: Exception) -> None:
    """Without a trace from a foreign transport, even a 'connect' failure may hide a
    delivery: uncertain, never retried."""
    script = Script([exc], traced=False)
    with pytest.raises(UncertainSendError):
        await mock_sender(script, max_retries=3).send("42", Message(TEXT))
    assert 1 == len(script.requests)


def _raised_from(exc: Exception, cause: Exception) -> Exception:
    exc.__cause__ = cause
    return exc


async def test_an_untraced_failure_of_httpxs_own_transport_is_placed() -> None:
    """A caller's client whose failure is httpx's own transport reporting httpcore's (a
    pool timeout, which httpcore does not trace): the class places it before the write,
    so it is retried; the same class raised by another transport is uncertain above."""
    busy = _raised_from(httpx.PoolTimeout("busy"), httpcore.PoolTimeout("busy"))
    script = Script([busy, httpx.Response(200, json=OK_BODY)], traced=False)
    receipt = await mock_sender(script, max_retries=3).send("42", Message(TEXT))
    assert 7 == receipt.message_id
    assert 2 == len(script.requests)


@pytest.mark.parametrize(
    ("exc", "placed"),
    [
        (_raised_from(httpx.ConnectTimeout("slow"), httpcore.ConnectTimeout("slow")), True),
        (_raised_from(httpx.ReadError("reset"), httpcore.ReadError("reset")), True),
        (httpx.ConnectTimeout("slow"), False),  # a transport raising httpx's class itself
        (_raised_from(httpx.ConnectTimeout("drop"), httpcore.ReadError("drop")), False),
        (_raised_from(httpx.ConnectTimeout("drop"), httpx.RemoteProtocolError("drop")), False),
    ],
    ids=["connect", "read", "no-cause", "other-name", "httpx-cause"],
)
def test_placed_by_httpcore_knows_httpxs_own_mapping(exc: Exception, placed: bool) -> None:
    assert placed == placed_by_httpcore(exc)


async def test_httpxs_own_transport_raises_from_httpcore() -> None:
    """What `placed_by_httpcore` relies on, with httpx's real transport: a refused
    connection and a pool timeout come as httpx's classes raised from httpcore's."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    limits = httpx.Limits(max_connections=1)
    try:
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(5.0, pool=0.05)) as c:
            held = asyncio.create_task(c.post(f"http://127.0.0.1:{port}/", content=b"x"))
            await asyncio.sleep(0.1)  # the one connection is taken
            with pytest.raises(httpx.PoolTimeout) as pool:
                await c.post(f"http://127.0.0.1:{port}/", content=b"y")
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
    finally:
        server.close()
        await server.wait_closed()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.post(f"http://127.0.0.1:{closed}/", content=b"z")
    assert placed_by_httpcore(pool.value)
    assert placed_by_httpcore(refused.value)


@pytest.mark.parametrize(
    "exc",
    [httpx.ConnectError("reset"), httpx.ConnectTimeout("slow")],
    ids=lambda e: type(e).__name__,
)
async def test_a_connect_failure_after_the_write_started_is_uncertain(exc: Exception) -> None:
    """A transport that traced the start of the write, then raised a connect-class error
    (as a foreign transport may name a drop after delivery): the trace wins over the
    class. Uncertain, never retried."""
    requests: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        await request.extensions["trace"]("http11.send_request_headers.started", {})
        raise exc

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    sender = TelegramSender(TOKEN, client=client, rate_limit=None, max_retries=3)
    with pytest.raises(UncertainSendError):
        await sender.send("42", Message(TEXT))
    assert 1 == len(requests)
    await client.aclose()


async def test_the_senders_own_client_still_retries_a_refused_connection() -> None:
    """The sender's own client (httpx over httpcore) places a refused connect before the
    write: transient, retried (here up to the retry limit, against a closed port)."""
    server = BotAPIServer().start()
    url = server.url
    server.stop()
    clock = FakeClock()
    sender = TelegramSender(
        TOKEN, base_url=url, rate_limit=None, max_retries=1, clock=clock, sleep=clock.sleep
    )
    async with sender:
        with pytest.raises(TransientSendError):
            await sender.send("42", Message(TEXT))


# ---- nothing secret in the frames of a raised error -------------------------------------


def _frames(error: BaseException) -> Iterator[tuple[str, dict[str, Any]]]:
    """(code name, locals) of every library frame an error and its chain passed through."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if "notifyonce" in code.co_filename and "tests" not in code.co_filename:
                yield code.co_name, dict(tb.tb_frame.f_locals)
            tb = tb.tb_next
        pending += [exc.__cause__, exc.__context__]


def _leaks(error: BaseException) -> list[str]:
    found = []
    for name, local_vars in _frames(error):
        for key, value in local_vars.items():
            shown = repr(value)
            if TEXT in shown or TOKEN in shown:
                found.append(f"{name}.{key}: repr shows a secret")
            if isinstance(value, (Message, httpx.HTTPError, httpx.Request)):
                found.append(f"{name}.{key}: {type(value).__name__}")
    return found


@pytest.mark.parametrize(
    "step",
    [
        httpx.ConnectError(f"cannot reach http://x/bot{TOKEN}/sendMessage"),
        httpx.ReadTimeout(f"timed out http://x/bot{TOKEN}/sendMessage"),
        httpx.Response(403, json={"ok": False, "error_code": 403, "description": "blocked"}),
        httpx.Response(401, json={"ok": False, "error_code": 401, "description": "no"}),
    ],
    ids=["transient", "uncertain", "permanent", "config"],
)
async def test_telegram_errors_carry_no_text_or_token_in_their_frames(step: Any) -> None:
    """Every SendError class from TelegramSender leaves neither the payload, the message,
    nor the raw transport exception (whose URL holds the token) in any frame's locals."""
    sender = mock_sender(Script([step]), max_retries=0)
    with pytest.raises(SendError) as info:
        await sender.send("42", Message(TEXT))
    assert [] == _leaks(info.value)


async def test_webhook_errors_carry_no_text_in_their_frames() -> None:
    """WebhookSender's raised errors keep neither the body nor the raw exception in frames."""
    script = Script([httpx.ReadTimeout("timed out https://hooks.example.com/secret-path")])
    sender = WebhookSender(
        "https://hooks.example.com/secret-path",
        client=httpx.AsyncClient(transport=httpx.MockTransport(script)),
        max_retries=0,
    )
    with pytest.raises(UncertainSendError) as info:
        await sender.send("7", Message(TEXT))
    assert [] == _leaks(info.value)


async def test_wrapped_bot_errors_carry_no_message_in_their_frames(
    bot_api_server: BotAPIServer,
) -> None:
    """AiogramSender's raised errors keep no Message or text in any frame's locals."""
    pytest.importorskip("aiogram")
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    from notifyonce.aiogram import AiogramSender

    bot_api_server.script("42", [Reply.blocked()])
    session = AiohttpSession(api=TelegramAPIServer.from_base(bot_api_server.url))
    bot = Bot(TOKEN, session=session)
    try:
        with pytest.raises(PermanentSendError) as info:
            await AiogramSender(bot).send("42", Message(TEXT))
    finally:
        await bot.session.close()
    assert [] == _leaks(info.value)
