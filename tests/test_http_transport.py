"""The HTTP senders' own transport (httpx over aiohttp's pool) keeps httpx's guarantees.

What the sender's own client and a caller's httpx client must do alike, on real sockets:
a pool wait is bounded and certain (nothing sent), idle connections expire, headers and
body arrive as httpx built them. And the transport's own table: which aiohttp failure
becomes which httpx exception, by whether the connection had been acquired.
"""

from __future__ import annotations

import asyncio
import gzip
import sys
from types import SimpleNamespace

import aiohttp
import httpx
import pytest

from notifyonce import Message, TransientSendError
from notifyonce._senders.aiohttp_transport import AiohttpTransport, _Attempt, _error
from notifyonce._senders.http import DEFAULT_LIMITS, default_transport
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, Reply

TOKEN = "424242:transport-SECRET_token"
PATHS = ["own-client", "httpx-client"]


def sender(
    server: BotAPIServer, path: str, limits: httpx.Limits, **options: object
) -> TelegramSender:
    """A sender on ``path`` with ``limits``: its own client, or a caller's httpx client."""
    if path == "httpx-client":
        options["client"] = httpx.AsyncClient(limits=limits)
    return TelegramSender(
        TOKEN,
        base_url=server.url,
        rate_limit=None,
        limits=limits,
        **options,  # type: ignore[arg-type]
    )


async def close(sender: TelegramSender) -> None:
    client = sender._client
    await sender.aclose()
    if client is not None:
        await client.aclose()


@pytest.mark.parametrize("path", PATHS)
async def test_a_pool_wait_past_pool_timeout_is_certain_and_never_sent(
    bot_api_server: BotAPIServer, path: str
) -> None:
    """With the one connection busy, a second send gives up after pool_timeout, as a
    transient error, and the server never sees it."""
    bot_api_server.script("1", [Reply.ok(delay=1.5)])
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    s = sender(bot_api_server, path, one, pool_timeout=0.2, max_retries=0)
    try:
        busy = asyncio.create_task(s.send("1", Message("slow")))
        await asyncio.sleep(0.3)  # the first send holds the connection
        with pytest.raises(TransientSendError) as info:
            await s.send("2", Message("waits"))
        await busy
    finally:
        await close(s)
    assert ["1"] == [r.chat_id for r in bot_api_server.requests]
    assert "PoolTimeout" in str(info.value)
    assert TOKEN not in str(info.value) + str(info.value.__cause__)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("expiry", "connections"), [(0.2, 2), (60.0, 1)])
async def test_idle_connections_expire_after_keepalive_expiry(
    bot_api_server: BotAPIServer, path: str, expiry: float, connections: int
) -> None:
    """A connection idle longer than keepalive_expiry is not reused; a younger one is."""
    limits = httpx.Limits(max_connections=4, max_keepalive_connections=4, keepalive_expiry=expiry)
    s = sender(bot_api_server, path, limits)
    try:
        await s.send("1", Message("a"))
        await asyncio.sleep(0.6)
        await s.send("1", Message("b"))
    finally:
        await close(s)
    assert connections == bot_api_server.connections_opened


async def test_the_request_arrives_as_httpx_built_it(bot_api_server: BotAPIServer) -> None:
    """Method, path, content type and JSON body reach the server through the own transport."""
    async with sender(bot_api_server, "own-client", DEFAULT_LIMITS) as s:
        await s.send("-1001", Message("über ✓", options={"disable_notification": True}))
    (request,) = bot_api_server.requests
    (delivery,) = bot_api_server.deliveries
    assert "sendMessage" == request.method
    assert "über ✓" == delivery.text
    assert {"chat_id": -1001, "text": "über ✓", "disable_notification": True}.items() <= (
        delivery.params.items()
    )


async def test_the_own_client_sends_over_aiohttp_and_closes_it(
    bot_api_server: BotAPIServer,
) -> None:
    """The sender's own client uses the aiohttp transport with the sender's limits, and
    aclose closes its session."""
    s = sender(bot_api_server, "own-client", DEFAULT_LIMITS)
    await s.send("1", Message("x"))
    transport = s._client._transport  # type: ignore[union-attr]
    assert isinstance(transport, AiohttpTransport)
    session = transport._session
    assert session is not None
    assert not session.closed
    await s.aclose()
    assert session.closed


def test_without_aiohttp_the_own_client_is_httpxs(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx alone installed: the sender falls back to httpx's own transport."""
    monkeypatch.setitem(sys.modules, "notifyonce._senders.aiohttp_transport", None)
    assert default_transport(DEFAULT_LIMITS) is None


REQUEST = httpx.Request("POST", f"https://api.example/bot{TOKEN}/sendMessage")


@pytest.mark.parametrize(
    ("exc", "started", "expected"),
    [
        (
            aiohttp.ClientConnectorError(
                SimpleNamespace(host="api.example", port=443, ssl=True),  # type: ignore[arg-type]
                ConnectionRefusedError(111, "refused"),
            ),
            False,
            httpx.ConnectError,
        ),
        (ConnectionRefusedError(111, "refused"), False, httpx.ConnectError),
        (asyncio.TimeoutError(), False, httpx.ConnectTimeout),
        (aiohttp.ServerTimeoutError("read"), True, httpx.ReadTimeout),
        (asyncio.TimeoutError(), True, httpx.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), True, httpx.RemoteProtocolError),
        (aiohttp.ClientPayloadError("cut"), True, httpx.RemoteProtocolError),
        (ConnectionResetError(104, "reset"), True, httpx.ReadError),
        (aiohttp.ClientOSError(32, "broken pipe"), True, httpx.ReadError),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_aiohttp_failures_map_to_httpx_classes_by_progress(
    exc: BaseException, started: bool, expected: type[httpx.HTTPError]
) -> None:
    """Before a connection was acquired only connect-class errors (certain); after it only
    read-class errors (uncertain). A URL in aiohttp's text loses its path (and token)."""
    attempt = _Attempt(None)
    attempt.started = started
    error = _error(exc, attempt, REQUEST)
    assert expected is type(error)
    assert error.request is REQUEST


def test_a_url_in_aiohttps_text_keeps_only_the_host() -> None:
    """aiohttp's connection timeout names the whole URL; the httpx error names the host."""
    exc = aiohttp.ConnectionTimeoutError(f"Connection timeout to host {REQUEST.url}")
    error = _error(exc, _Attempt(None), REQUEST)
    assert TOKEN not in str(error)
    assert "api.example" in str(error)


async def _gzip_bot_api(
    heads: list[dict[str, str]],
) -> asyncio.Server:
    """A Bot API stand-in that answers every request with a gzip-compressed ``ok`` (as
    api.telegram.org may, asked with httpx's ``Accept-Encoding``), recording each
    request's headers."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")[1:]
                headers = dict(line.lower().split(": ", 1) for line in lines if line)
                await reader.readexactly(int(headers["content-length"]))
                heads.append(headers)
                body = gzip.compress(b'{"ok":true,"result":{"message_id":7,"chat":{"id":1}}}')
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_the_own_client_sends_httpxs_headers_and_reads_compressed_answers() -> None:
    """The own client posts straight to its aiohttp transport, without an httpx request
    per send: the server still sees the very headers a caller's httpx client sends, and a
    compressed answer is decoded before it is classified (its message id is read)."""
    heads: list[dict[str, str]] = []
    server = await _gzip_bot_api(heads)
    port = server.sockets[0].getsockname()[1]
    try:
        receipts = []
        for path in PATHS:
            options: dict[str, object] = {}
            if path == "httpx-client":
                options["client"] = httpx.AsyncClient()
            s = TelegramSender(
                TOKEN,
                base_url=f"http://127.0.0.1:{port}",
                rate_limit=None,
                allow_paid_broadcast=True,
                **options,  # type: ignore[arg-type]
            )
            try:
                receipts += [await s.send("1", Message("a")), await s.send("1", Message("bc"))]
            finally:
                await close(s)
    finally:
        server.close()
        await server.wait_closed()
    assert [7, 7, 7, 7] == [r.message_id for r in receipts]
    own, _, theirs, _ = heads
    assert theirs == own
    assert {"accept-encoding", "user-agent", "content-length", "content-type"} <= set(own)
    assert [str(len(b'{"text":"a","allow_paid_broadcast":true,"chat_id":1}'))] * 2 == [
        own["content-length"],
        theirs["content-length"],
    ]
