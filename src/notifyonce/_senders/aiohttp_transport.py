"""The senders' default transport: httpx's API over an aiohttp connection pool.

httpx's own transport (httpcore) spends most of a send's CPU in its connection pool
(milliseconds per request at 32 concurrent sends); aiohttp's pool costs a tenth of that.
This transport keeps httpx's ``Request``/``Response`` and exception classes, so the
senders and a caller's hooks see exactly what httpx's own transport gives them, and it
reports, through httpx's ``trace`` extension, whether a request may have been written:

- the connection is acquired (where aiohttp's connector opens a new one or takes a pooled
  one, the moments of its ``on_connection_create_end`` and ``on_connection_reuseconn``
  traces) right before the request is written, so a failure before
  that moment certainly sent nothing (``ConnectError``, ``ConnectTimeout``,
  ``PoolTimeout``), and any failure after it may have delivered the request
  (``ReadTimeout``, ``RemoteProtocolError``, ``ReadError``);
- the same moment is reported to the ``trace`` callback as httpcore reports it
  (``http11.send_request_headers.started``), so the sender's classification is the same
  for both transports;
- an idle connection is checked before it is reused, as httpcore checks it: a socket
  that is readable while no request is under way was closed (or reset) by the server.
  aiohttp alone notices that only once the event loop has run since: a loop busy while
  the server closed it would write the request onto a dead connection, and that failure
  comes after the write, so it may have delivered (and an at-most-once send is lost).
  Such a connection is closed and the next one, or a new one, taken instead.

Timeouts come from the request's ``timeout`` extension, as httpx sets them: ``pool``
bounds the wait for one of the ``max_connections`` (the transport's own semaphore, held for
the whole request as httpcore holds a connection), ``connect`` opening a new connection,
``read`` the wait for each chunk of the answer. aiohttp does not report when a request has
been written, so ``write`` is not enforced separately: a stuck write ends at the read
timeout or at the sender's overall deadline, and is uncertain either way, as a write
timeout would be. (A sender's body is a few kilobytes, which the socket's buffer takes at
once: a write does not block on either transport.)
"""

from __future__ import annotations

import asyncio
import select
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

import aiohttp
import httpx
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest, ConnectionKey
from aiohttp.connector import Connection
from aiohttp.tracing import Trace
from yarl import URL

from notifyonce._senders.transport import TurnMissedError

__all__ = ["AiohttpTransport", "Answer"]


class _Attempt:
    """What the connector said of one request: did it get a connection (and so may have
    been written)."""

    __slots__ = ("announced", "started", "trace")

    def __init__(self, trace: Any) -> None:
        self.trace = trace  # httpx's "trace" extension (the sender's Progress), or None
        self.started = False
        self.announced = False  # "connection.acquire.started" already reported


class Answer:
    """An answer read whole: its status, headers (case-insensitive) and body, as aiohttp
    gave them. A sender reads these three alone; `response` makes the httpx response a
    client returns (decoding the body by its Content-Encoding)."""

    __slots__ = ("_raw", "content", "headers", "reason", "status_code")

    def __init__(self, answer: aiohttp.ClientResponse, content: bytes) -> None:
        self.status_code = answer.status
        self.headers: Mapping[str, str] = answer.headers
        self._raw = answer.raw_headers
        self.reason = answer.reason
        self.content = content

    def response(self, request: httpx.Request) -> httpx.Response:
        reason = (self.reason or "").encode("ascii", "replace")
        return httpx.Response(
            self.status_code,
            headers=self._raw,
            stream=httpx.ByteStream(self.content),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
            request=request,
        )


# The request the current task is making, for the connector to tell it has a connection.
_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("notifyonce_aiohttp_attempt", default=None)


async def _connected() -> None:
    """The current request holds a connection and its request is written next: say so.

    Called by the connector where aiohttp would send ``on_connection_create_end`` (a new
    connection) or ``on_connection_reuseconn`` (a pooled one), without an aiohttp trace:
    a session with trace configs builds a ``Trace`` and awaits six signals per request,
    each empty but these two.
    """
    attempt = _ATTEMPT.get()
    if attempt is None:
        return
    attempt.started = True
    if attempt.trace is not None:
        await attempt.trace("http11.send_request_headers.started", {})


def closed_by_peer(transport: asyncio.BaseTransport | None) -> bool:
    """Whether an idle connection's socket is readable: the peer closed or reset it (or
    sent what no request asked for); either way it must not carry a request. httpcore's
    ``is_socket_readable``, on the transport's socket. False when there is no socket to
    look at: aiohttp's own check (``is_connected``) is all there is then."""
    if transport is None:
        return True
    if transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    if sock.fileno() < 0:
        return True
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, with a liveness check of each idle connection it reuses.

    aiohttp takes a pooled connection when its transport is not closing, which it learns
    only when the event loop reads the server's FIN: here the socket itself is asked, and
    a dead connection is closed before any request is written on it. The request is told
    it holds a connection (`_connected`) only for the connection that is used, and for a
    new one once it is open.
    """

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        while True:
            connection = await super()._get(key, [])
            if connection is None:
                return None
            protocol = connection.protocol
            if not closed_by_peer(None if protocol is None else protocol.transport):
                break
            connection.close()
        try:
            await _connected()
        except BaseException:
            connection.close()
            raise
        return connection

    async def _create_connection(
        self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        protocol = await super()._create_connection(req, traces, timeout)
        try:
            await _connected()
        except BaseException:
            protocol.close()
            raise
        return protocol


def _timeout(timeouts: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
    connect = timeouts.get("connect")
    return aiohttp.ClientTimeout(
        total=None, connect=connect, sock_connect=connect, sock_read=timeouts.get("read")
    )


def _error(exc: BaseException, attempt: _Attempt, request: httpx.Request) -> httpx.HTTPError:
    """The httpx exception httpx's own transport raises for the same failure."""
    # aiohttp's texts can hold the whole URL (a bot token sits in its path): keep the host.
    detail = str(exc).replace(str(request.url), request.url.host) or type(exc).__name__
    klass: type[httpx.TransportError]
    if not attempt.started:
        if isinstance(exc, asyncio.TimeoutError):
            klass = httpx.ConnectTimeout
        else:
            klass = httpx.ConnectError
    elif isinstance(exc, asyncio.TimeoutError):  # aiohttp's ServerTimeoutError included
        klass = httpx.ReadTimeout
    elif isinstance(
        exc,
        # a dropped connection, a cut body, a malformed answer
        (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError),
    ):
        klass = httpx.RemoteProtocolError
    else:
        klass = httpx.ReadError
    return klass(f"{type(exc).__name__}: {detail}", request=request)


if sys.version_info >= (3, 11):

    async def _acquire_within(slots: asyncio.Semaphore, seconds: float | None) -> None:
        """Take one of ``slots`` within ``seconds`` (asyncio.TimeoutError otherwise).

        ``asyncio.timeout`` cancels the waiting send's own task at the deadline: one timer,
        where ``wait_for`` also made a task per wait (at 64 sends on 32 connections, every
        second send waits here).
        """
        async with asyncio.timeout(seconds):
            await slots.acquire()

else:  # pragma: no cover - Python 3.10

    async def _acquire_within(slots: asyncio.Semaphore, seconds: float | None) -> None:
        await asyncio.wait_for(slots.acquire(), seconds)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` over one ``aiohttp.ClientSession``.

    The session is created on the first request, in the running event loop, and closed by
    `aclose`. Answers are read whole (a Bot API or webhook answer is small), so the
    connection returns to the pool before the response is handed on.

    Args:
        limits: ``max_connections`` (requests in flight at once, each on its own
            connection; None: unlimited) and ``keepalive_expiry`` (seconds an idle
            connection is kept). aiohttp keeps every idle connection, at most
            ``max_connections`` here, so ``max_keepalive_connections`` has no counterpart.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        most = limits.max_connections
        self._slots = None if most is None else asyncio.Semaphore(most)
        self._session: aiohttp.ClientSession | None = None
        self._url: tuple[str, URL] | None = None
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        expiry = self._limits.keepalive_expiry
        connector = _Connector(
            limit=0,  # bounded by self._slots, which times out as httpx's pool does
            limit_per_host=0,
            keepalive_timeout=15.0 if expiry is None else expiry,
        )
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # httpx keeps cookies, not the transport
            auto_decompress=False,  # httpx decodes by Content-Encoding
            trust_env=False,  # proxies from the environment go through httpx's mounts
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("the transport is closed", request=request)
        attempt = _Attempt(request.extensions.get("trace"))
        body = request.content if isinstance(request.stream, httpx.ByteStream) else None
        if body is None:
            if attempt.trace is not None:
                await attempt.trace("connection.acquire.started", {})  # "this transport traces"
                attempt.announced = True
            body = await request.aread()
        answer = await self._exchange(
            request.method,
            str(request.url),
            request.headers.multi_items(),
            body,
            request.extensions.get("timeout", {}),
            attempt,
            lambda: request,
        )
        return answer.response(request)

    async def post(
        self,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes,
        timeouts: Mapping[str, float | None],
        trace: Any,
        gate: Callable[[], Awaitable[bool]] | None = None,
    ) -> Answer:
        """POST ``body`` to ``url`` with exactly ``headers`` (those httpx would send),
        without an httpx request or response around it: what a sender's own client costs
        per send. Fails with the same httpx exceptions, and traces the same moments, as
        `handle_async_request`.

        ``gate`` is awaited once one of the ``max_connections`` is held, right before the
        request is made: a rate limiter's turn is kept there, after any wait for a free
        connection, not before it. When it answers False the request is not made and
        `TurnMissedError` is raised.
        """
        if self._closed:
            raise httpx.ConnectError("the transport is closed", request=httpx.Request("POST", url))
        return await self._exchange(
            "POST",
            url,
            headers,
            body,
            timeouts,
            _Attempt(trace),
            lambda: httpx.Request("POST", url),
            gate,
        )

    async def _exchange(
        self,
        method: str,
        text: str,
        headers: list[tuple[str, str]],
        body: bytes,
        timeouts: Mapping[str, float | None],
        attempt: _Attempt,
        request: Callable[[], httpx.Request],
        gate: Callable[[], Awaitable[bool]] | None = None,
    ) -> Answer:
        session = self._session
        if session is None:
            session = self._session = self._open()
        if attempt.trace is not None and not attempt.announced:
            await attempt.trace("connection.acquire.started", {})  # "this transport traces"
        slots = self._slots
        if slots is not None:
            if slots.locked():
                try:
                    await _acquire_within(slots, timeouts.get("pool"))
                except asyncio.TimeoutError:
                    raise httpx.PoolTimeout("no free connection", request=request()) from None
            else:
                await slots.acquire()
        try:
            if gate is not None and not await gate():
                raise TurnMissedError
            url = self._url
            if url is None or url[0] != text:  # a sender posts to one URL: parse it once
                url = self._url = (text, URL(text, encoded=True))
            told = _ATTEMPT.set(attempt)
            try:
                async with session.request(
                    method,
                    url[1],
                    headers=headers,
                    data=body or None,
                    allow_redirects=False,
                    timeout=_timeout(timeouts),
                ) as answer:
                    content = await answer.read()
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                raise _error(exc, attempt, request()) from exc
            finally:
                _ATTEMPT.reset(told)
            return Answer(answer, content)
        finally:
            if slots is not None:
                slots.release()

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()
