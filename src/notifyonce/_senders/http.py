"""The base of the HTTP senders (Telegram, webhook): one reused httpx client, timed.

*How a send over one reused httpx client is timed and posted.* The rest of the shared
plumbing has its own module: `transport` (what a failed request means), `retry` (when
to try again), `redaction` (keeping secrets out of text and logs); `aiohttp_transport` is
the sender's own transport, chosen here by `default_transport`. What an answer means
stays with each sender.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import httpx
from typing_extensions import TypedDict, Unpack

from notifyonce._errors import (
    SenderClosedError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._senders.redaction import redacted
from notifyonce._senders.retry import RetryPlan
from notifyonce._senders.transport import (
    Progress,
    TurnMissedError,
    classify_transport_error,
    placed_by_httpcore,
)

if TYPE_CHECKING:
    from notifyonce._senders.aiohttp_transport import AiohttpTransport


class Answer(Protocol):
    """What a sender reads of an answer: an ``httpx.Response``, or the lighter answer of
    the sender's own aiohttp transport."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_BUDGET",
    "DEFAULT_CLOCK",
    "DEFAULT_LIMITS",
    "DEFAULT_RNG",
    "DEFAULT_SLEEP",
    "POOL_TIMEOUT",
    "WRITE_TIMEOUT",
    "HTTPOptions",
    "HTTPSenderBase",
    "SenderClosedError",
    "check_seconds",
    "default_transport",
    "refuse_unknown_options",
]

#: Seconds to open a TCP (+TLS) connection. A live connect takes tens of milliseconds;
#: waiting longer only delays the retry (a scalar 40 s timeout once made connect wait 40 s).
CONNECT_TIMEOUT = 5.0
#: Seconds to write a request: a message body is a few kilobytes at most.
WRITE_TIMEOUT = 10.0
#: Seconds to wait for a free pooled connection before giving up (certainly not sent).
POOL_TIMEOUT = 5.0
#: Seconds one ``send`` may take in total: waits, attempts and backoff. Also the read
#: timeout, since an answer can only be awaited for as long as the budget lasts.
DEFAULT_BUDGET = 30.0
#: Sized for the concurrency a notifier uses. httpx's default ``max_keepalive_connections=20``
#: counts busy connections too, so above 20 concurrent sends it reconnects on nearly every
#: send; here every connection may stay alive. httpx's default keep-alive expiry (5 s) loses
#: the connection between sends a few seconds apart: keep it for a minute.
DEFAULT_LIMITS = httpx.Limits(
    max_connections=32, max_keepalive_connections=32, keepalive_expiry=60.0
)


T = TypeVar("T")


# --------------------------------------------------------------------------------------
# Options and the client


class HTTPOptions(TypedDict, total=False):
    """How an HTTP sender times, pools and retries its requests.

    Keyword arguments of [`TelegramSender`][notifyonce.telegram.TelegramSender] and
    [`WebhookSender`][notifyonce.webhook.WebhookSender], written once here (httpx groups the
    same settings in ``Timeout`` and ``Limits``). Every one is optional; the defaults suit a
    notifier's concurrency. Pass them as keywords or unpack a dict typed with this class:
    ``TelegramSender(token, **options)``.

    Attributes:
        budget: Seconds one ``send`` may take in total, including rate-limit waits, retries
            and backoff; also the read timeout of each attempt (default
            [`DEFAULT_BUDGET`][notifyonce.telegram.DEFAULT_BUDGET]).
        connect_timeout: Seconds to open a connection
            ([`CONNECT_TIMEOUT`][notifyonce.telegram.CONNECT_TIMEOUT]).
        write_timeout: Seconds to write a request
            ([`WRITE_TIMEOUT`][notifyonce.telegram.WRITE_TIMEOUT]).
        pool_timeout: Seconds to wait for a free pooled connection
            ([`POOL_TIMEOUT`][notifyonce.telegram.POOL_TIMEOUT]).
        limits: Connection pool limits of the sender's own client (whichever transport it
            uses, aiohttp's or httpx's own); size ``max_connections`` and
            ``max_keepalive_connections`` to your concurrency
            ([`DEFAULT_LIMITS`][notifyonce.telegram.DEFAULT_LIMITS]).
        max_retries: Retries after the first attempt, for transient failures only (3).
        backoff_base: Backoff before retry n is uniform in ``[0, min(backoff_max,
            backoff_base * 2**n)]`` (full jitter); the first retry after a connection-level
            failure is immediate: the pool has discarded the failed connection (0.5).
        backoff_max: The cap of one backoff (8.0).
    """

    budget: float
    connect_timeout: float
    write_timeout: float
    pool_timeout: float
    limits: httpx.Limits
    max_retries: int
    backoff_base: float
    backoff_max: float


HTTP_DEFAULTS: HTTPOptions = {
    "budget": DEFAULT_BUDGET,
    "connect_timeout": CONNECT_TIMEOUT,
    "write_timeout": WRITE_TIMEOUT,
    "pool_timeout": POOL_TIMEOUT,
    "limits": DEFAULT_LIMITS,
    "max_retries": 3,
    "backoff_base": 0.5,
    "backoff_max": 8.0,
}


def refuse_unknown_options(sender: object, options: Mapping[str, object]) -> None:
    """A TypeError naming the first keyword of ``options`` that is no `HTTPOptions` field:
    what Python says for a misspelt keyword, which ``**http`` would otherwise take."""
    unknown = sorted(set(options) - set(HTTP_DEFAULTS))
    if unknown:
        raise TypeError(
            f"{type(sender).__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}"
        )


def check_seconds(name: str, value: object) -> float:
    """``value`` as a positive finite float, or a ValidationError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationTypeError(name, f"must be a number, got {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValidationError(name, "must be a positive finite number of seconds")
    return float(value)


class _ParsedURL:
    """A request URL, as given and parsed; its repr never shows it (it may hold a token)."""

    __slots__ = ("text", "url")

    def __init__(self, text: str) -> None:
        self.text = text
        self.url = httpx.URL(text)

    def __repr__(self) -> str:
        return "<redacted>"


class HTTPSenderBase:
    """One lazily created, reused ``httpx.AsyncClient`` with split, budget-bound timeouts.

    Subclasses call `_configure` from ``__init__`` and `_get_client`,
    `_timeout`, `_budget` and `_retry_plan` from ``send``.
    """

    _client: httpx.AsyncClient | None

    def _configure(
        self,
        *,
        client: httpx.AsyncClient | None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[object]],
        rng: Callable[[], float],
        **options: Unpack[HTTPOptions],
    ) -> None:
        refuse_unknown_options(self, options)
        settings: HTTPOptions = {**HTTP_DEFAULTS, **options}
        self.budget = check_seconds("budget", settings["budget"])
        self.connect_timeout = check_seconds("connect_timeout", settings["connect_timeout"])
        self.write_timeout = check_seconds("write_timeout", settings["write_timeout"])
        self.pool_timeout = check_seconds("pool_timeout", settings["pool_timeout"])
        self.backoff_base = check_seconds("backoff_base", settings["backoff_base"])
        self.backoff_max = check_seconds("backoff_max", settings["backoff_max"])
        max_retries, limits = settings["max_retries"], settings["limits"]
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise ValidationTypeError("max_retries", "must be an int")
        if max_retries < 0:
            raise ValidationError("max_retries", "must be >= 0")
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise ValidationTypeError("client", "must be an httpx.AsyncClient or None")
        self.max_retries = max_retries
        self.limits = limits
        self._client = client
        self._parsed: _ParsedURL | None = None
        self._owns_client = client is None
        # The sender's own client's aiohttp transport, when it keeps no cookies: posted to
        # directly (see `_post_direct`); the headers httpx would send, by URL.
        self._direct: AiohttpTransport | None = None
        self._wire_headers: dict[
            tuple[str, tuple[tuple[str, str], ...]], list[tuple[str, str]]
        ] = {}
        self._closed = False
        self._clock = clock
        self._sleep = sleep
        self._rng = rng

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the sender's own client (not a client you passed in). Idempotent."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()

    def _get_client(self) -> httpx.AsyncClient:
        name = type(self).__name__
        if self._closed:
            raise SenderClosedError(f"{name} is closed")
        if self._client is not None and self._client.is_closed:
            # Certainly nothing can be sent: say so rather than report an uncertain send.
            raise SenderClosedError(f"the httpx.AsyncClient given to {name} is closed")
        if self._client is None:
            client_class = httpx.AsyncClient if self.keeps_cookies else _CookielessClient
            transport = default_transport(self.limits)
            self._client = client_class(
                transport=transport,
                limits=self.limits,
                timeout=httpx.Timeout(
                    connect=self.connect_timeout,
                    read=self.budget,
                    write=self.write_timeout,
                    pool=self.pool_timeout,
                ),
                follow_redirects=False,
            )
            if not self.keeps_cookies:
                self._direct = transport
        return self._client

    #: The sender's own client keeps the cookies its server sets (a webhook behind a
    #: sticky load balancer may); False skips cookie handling per answer (the Bot API sets
    #: none).
    keeps_cookies: ClassVar[bool] = True

    def _timeout(self, remaining: float) -> httpx.Timeout:
        # Each phase gets its own limit, never more than what is left of the budget.
        return httpx.Timeout(
            connect=min(self.connect_timeout, remaining),
            read=remaining,
            write=min(self.write_timeout, remaining),
            pool=min(self.pool_timeout, remaining),
        )

    async def _post(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        remaining: float,
        scrub: Callable[[str], str],
        gate: Callable[[], Awaitable[bool]] | None = None,
    ) -> tuple[Answer | SendError, BaseException | None, bool]:
        """POST once. Returns (the read response or the classified transport failure,
        the exception to chain, whether the failure certainly left nothing sent).

        ``gate`` is awaited right before the request is made: on the sender's own client
        once a connection is held, on a client passed in before it is asked (its pool's
        wait comes after). When it answers False nothing is sent and `TurnMissedError` is
        raised.
        """
        progress = Progress()
        target = self._parsed
        if target is None or target.text != url:  # parsed once: httpx parses a str per request
            target = self._parsed = _ParsedURL(url)
        try:
            # httpx's read timeout restarts with every chunk received: a server trickling
            # its answer could hold a send far past its budget (and past its lease). One
            # overall deadline, a little after the phase timeouts, bounds it. The sender's
            # own transport sets no read timer at all (aiohttp's would be set again with
            # each chunk, two timers a send): there this deadline is the read's, at the
            # budget itself.
            if self._direct is not None and client is self._client:
                response = await _within(
                    self._post_direct(
                        self._direct, client, target, body, headers, remaining, progress, gate
                    ),
                    remaining,
                )
            else:
                if gate is not None and not await gate():
                    raise TurnMissedError
                response = await _within(
                    client.post(
                        target.url,
                        content=body,
                        headers=headers,
                        timeout=self._timeout(remaining),
                        extensions={"trace": progress},
                    ),
                    remaining + _DEADLINE_GRACE,
                )
        except TurnMissedError:
            raise
        except asyncio.TimeoutError:
            if progress.evidence is False:
                return TransientSendError("no connection within the send's budget"), None, True
            return UncertainSendError("no complete answer within the send's budget"), None, False
        except httpx.HTTPStatusError as exc:  # raised by a caller's response hook
            try:
                await exc.response.aread()
            except Exception as read_exc:
                error, cause = self._failure(read_exc, None, scrub)
                return error, cause, False
            return exc.response, None, False
        except Exception as exc:
            error, cause = self._failure(exc, progress.evidence, scrub)
            return error, cause, isinstance(error, TransientSendError)
        return response, None, False

    async def _post_direct(
        self,
        transport: AiohttpTransport,
        client: httpx.AsyncClient,
        target: _ParsedURL,
        body: bytes,
        headers: Mapping[str, str],
        remaining: float,
        progress: Progress,
        gate: Callable[[], Awaitable[bool]] | None = None,
    ) -> Answer:
        """The sender's own client's POST, straight to its aiohttp transport: the same
        headers on the wire (httpx's, built once per URL and content type), the same
        timeouts, trace and exceptions, without an httpx request and response per send (a
        sixth of a send's CPU). An answer with a Content-Encoding is decoded by httpx."""
        key = (target.text, tuple(headers.items()))
        fixed = self._wire_headers.get(key)
        if fixed is None:
            built = client.build_request("POST", target.url, content=b"", headers=headers)
            fixed = [(k, v) for k, v in built.headers.multi_items() if k != "content-length"]
            if len(self._wire_headers) > 8:  # one URL, one or two content types
                self._wire_headers.clear()
            self._wire_headers[key] = fixed
        timeouts = {
            "connect": min(self.connect_timeout, remaining),
            "read": None,  # the caller's overall deadline, at ``remaining``, bounds the answer
            "write": min(self.write_timeout, remaining),
            "pool": min(self.pool_timeout, remaining),
        }
        wire = [*fixed, ("content-length", str(len(body)))]
        answer = await transport.post(target.text, wire, body, timeouts, progress, gate)
        if "content-encoding" not in answer.headers:
            return answer
        response = answer.response(httpx.Request("POST", target.url))
        try:
            await response.aread()
        except httpx.HTTPError:
            await response.aclose()
            raise
        return response

    def _failure(
        self, exc: Exception, request_started: bool | None, scrub: Callable[[str], str]
    ) -> tuple[SendError, BaseException]:
        """A failed request's error, and the exception to chain to it: ``exc`` itself when
        its text can be read (the sender's own transport, or httpx's over httpcore), else
        a stand-in naming only its class, as the error's description does. A caller's
        transport may quote the request's body, the message's text, in its exception."""
        placed = self._owns_client or placed_by_httpcore(exc)
        error = classify_transport_error(
            exc, request_started=request_started, placed=placed, scrub=scrub
        )
        return error, exc if placed else redacted(exc, scrub, quoted=False)

    async def _pause(
        self, logger: logging.Logger, what: str, plan: RetryPlan, error: SendError, wait: float
    ) -> None:
        """Log a retry (class and code only: never a description) and wait before it."""
        logger.debug(
            "%s attempt %d failed (%s%s), retrying in %.2f s",
            what,
            plan.retries,
            type(error).__name__,
            "" if error.code is None else f" {error.code}",
            wait,
        )
        if wait > 0:
            await self._sleep(wait)

    def _budget(self, budget: float | None) -> float:
        return self.budget if budget is None else check_seconds("budget", budget)

    def _retry_plan(self, deadline: float) -> RetryPlan:
        return RetryPlan(
            deadline=deadline,
            max_retries=self.max_retries,
            base=self.backoff_base,
            cap=self.backoff_max,
            clock=self._clock,
            rng=self._rng,
        )


class _CookielessClient(httpx.AsyncClient):
    """An httpx client that keeps no cookies: no cookie jar is read or written per request
    and answer (a tenth of a send's own CPU, for a server that never sets any)."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        if cookies:
            raise ValueError("this client keeps no cookies")


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


_NO_COOKIES = _NoCookies()

if sys.version_info >= (3, 11):

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """``awaitable`` within ``seconds`` (asyncio.timeout: no task of its own)."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - Python 3.10
    _within = asyncio.wait_for


def default_transport(limits: httpx.Limits) -> AiohttpTransport | None:
    """The sender's own transport: aiohttp's connection pool when aiohttp is installed (the
    extras install it), else None (httpx's own, over httpcore).

    See `notifyonce._senders.aiohttp_transport`.
    """
    try:
        from notifyonce._senders.aiohttp_transport import AiohttpTransport
    except ImportError:
        return None
    return AiohttpTransport(limits)


# Seconds past the budget before the overall deadline cuts a request short, so that the
# phase timeouts (which say more precisely what failed) normally fire first.
_DEADLINE_GRACE = 0.5


# Defaults shared by the senders' signatures.
DEFAULT_CLOCK: Callable[[], float] = time.monotonic
DEFAULT_SLEEP: Callable[[float], Awaitable[object]] = asyncio.sleep
DEFAULT_RNG: Callable[[], float] = random.random
