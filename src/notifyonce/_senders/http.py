"""Shared httpx plumbing of the HTTP senders (Telegram, webhook).

One module you can describe in a sentence: *how a send over one reused httpx client is
timed, retried, classified when the transport fails, and kept free of secrets*. The
provider-specific parts (what an answer means) stay with each sender.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

import httpx

from notifyonce._errors import (
    PermanentSendError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._senders.redaction import RedactedTransportError, chain_cause, scrubbed, short

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_BUDGET",
    "DEFAULT_LIMITS",
    "EXCEPTION_CLASSES",
    "POOL_TIMEOUT",
    "WRITE_TIMEOUT",
    "HTTPSenderBase",
    "Progress",
    "RedactedTransportError",
    "RetryPlan",
    "Secrets",
    "chain_cause",
    "check_seconds",
    "classify_transport_error",
    "parse_retry_after",
    "scrubbed",
    "short",
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

# --------------------------------------------------------------------------------------
# Transport failures

# Every httpx exception class, mapped explicitly (tests walk httpx's hierarchy and fail on
# a class missing here). Lookup walks the MRO, so a future subclass gets its parent's rule.
_CERTAIN = TransientSendError  # raised before any byte of the request could leave
_MAYBE = UncertainSendError  # raised after the request may have been written
_NEVER = PermanentSendError  # the request cannot be sent as built: retrying cannot help

EXCEPTION_CLASSES: dict[type[BaseException], type[SendError]] = {
    # Before the request: waiting for a pooled connection or opening a new one.
    httpx.PoolTimeout: _CERTAIN,
    httpx.ConnectTimeout: _CERTAIN,
    httpx.ConnectError: _CERTAIN,
    httpx.ProxyError: _CERTAIN,  # the proxy refused the tunnel; nothing reached the server
    # Configuration and programming errors, found before anything is sent.
    httpx.UnsupportedProtocol: _NEVER,
    httpx.InvalidURL: _NEVER,
    httpx.LocalProtocolError: _NEVER,  # h11 refuses to emit an invalid request
    # During or after writing: httpcore even swallows write errors and reads on, so a
    # peer that closed or reset the connection shows up here after the request left.
    httpx.WriteTimeout: _MAYBE,
    httpx.WriteError: _MAYBE,
    httpx.ReadTimeout: _MAYBE,
    httpx.ReadError: _MAYBE,
    httpx.RemoteProtocolError: _MAYBE,  # "Server disconnected without sending a response."
    httpx.CloseError: _MAYBE,
    httpx.DecodingError: _MAYBE,  # an answer arrived but could not be decoded
    httpx.TooManyRedirects: _MAYBE,
    httpx.HTTPStatusError: _MAYBE,  # only from a caller's hook; the sender reclassifies it
    httpx.CookieConflict: _MAYBE,
    httpx.StreamConsumed: _MAYBE,
    httpx.StreamClosed: _MAYBE,
    httpx.ResponseNotRead: _MAYBE,
    httpx.RequestNotRead: _MAYBE,
    # Abstract bases, for exceptions raised directly as the base class.
    httpx.ProtocolError: _MAYBE,
    httpx.NetworkError: _MAYBE,
    httpx.TimeoutException: _MAYBE,
    httpx.TransportError: _MAYBE,
    httpx.RequestError: _MAYBE,
    httpx.HTTPError: _MAYBE,
    httpx.StreamError: _MAYBE,
}


def transport_error_class(exc: BaseException) -> type[SendError]:
    """The failure class of an httpx exception by its class alone (unknown: uncertain)."""
    for klass in type(exc).__mro__:
        if klass in EXCEPTION_CLASSES:
            return EXCEPTION_CLASSES[klass]
    return UncertainSendError  # the Sender protocol's default


def classify_transport_error(
    exc: BaseException,
    *,
    request_started: bool | None = None,
    placed: bool = True,
    scrub: Callable[[str], str] = str,
) -> SendError:
    """Classify an exception raised while sending one request.

    Args:
        exc: What httpx (or a caller's transport) raised.
        request_started: Whether httpcore reported starting to write the request (from
            its ``trace`` extension). False proves nothing left this process, so any
            transport failure is transient; True makes every failure that is not a
            programming error uncertain; None (a transport that does not trace) falls
            back to the exception class when ``placed``.
        placed: Whether the transport's exception classes say where a failure happened
            (httpx's own transport, over httpcore). A foreign transport that does not
            trace cannot be trusted to: its connect errors are uncertain.
        scrub: Removes secrets from the description.

    Returns:
        The error to raise. It is not chained here: the sender decides what to chain.
    """
    error_class = transport_error_class(exc)
    if request_started is False and error_class is UncertainSendError:
        error_class = TransientSendError
    elif error_class is TransientSendError and (
        request_started is True or (request_started is None and not placed)
    ):
        # The class says "before the write", but the transport said the request had
        # started, or it cannot say and is not httpx's own: httpx-aiohttp, for one, maps
        # every aiohttp connection error to ConnectTimeout, a drop after delivery included.
        error_class = UncertainSendError
    detail = short(str(exc), scrub)
    description = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return error_class(description)


class Progress:
    """httpcore ``trace`` callback: did this attempt start writing the request?"""

    __slots__ = ("request_started", "traced")

    def __init__(self) -> None:
        self.traced = False
        self.request_started = False

    async def __call__(self, name: str, info: Mapping[str, Any]) -> None:
        self.traced = True
        if name.endswith("send_request_headers.started"):
            self.request_started = True

    @property
    def evidence(self) -> bool | None:
        """True/False when httpcore told us; None when the transport does not trace."""
        return self.request_started if self.traced else None


class SenderClosedError(TransientSendError, RuntimeError):
    """The sender (or the caller's client) was closed: certainly nothing was sent.

    A [`TransientSendError`][notifyonce.TransientSendError], so a Notifier releases the slot for a
    later run instead of recording an unknown outcome; also a ``RuntimeError``, because it is a
    usage error.
    """


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP-date; else None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is read as such
            return None
        return max(0.0, when.timestamp() - now())
    return seconds if seconds >= 0 and math.isfinite(seconds) else None


# --------------------------------------------------------------------------------------
# Secrets


class Secrets:
    """The secret strings of one sender; its repr never shows them.

    Live instances are consulted by the log filter on the ``httpx`` logger, which logs
    every request URL at INFO. Held weakly: a collected sender's secrets are forgotten.
    """

    __slots__ = ("__weakref__", "replacements")

    def __init__(self, replacements: Mapping[str, str]) -> None:
        # Longest first, so a URL is replaced as a whole before its parts are.
        self.replacements = tuple(
            sorted(((s, r) for s, r in replacements.items() if s), key=lambda p: -len(p[0]))
        )
        _LIVE_SECRETS.add(self)

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for secret, replacement in self.replacements:
            if secret in text:
                text = text.replace(secret, replacement)
        return text

    def __repr__(self) -> str:
        return "<redacted>"


_LIVE_SECRETS: weakref.WeakSet[Secrets] = weakref.WeakSet()
_LOG_SCRUBBERS: list[Callable[[str], str]] = []


class _RedactingFilter(logging.Filter):
    """Hides secrets in records of the ``httpx`` logger (it logs every request URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = original = record.getMessage()
        for scrub in _LOG_SCRUBBERS:
            text = scrub(text)
        for secrets in list(_LIVE_SECRETS):
            text = secrets.scrub(text)
        if text != original:
            record.msg = text
            record.args = None
        return True


def add_log_scrubber(scrub: Callable[[str], str]) -> None:
    """Apply ``scrub`` to every record of the ``httpx`` logger (idempotent per function)."""
    if scrub not in _LOG_SCRUBBERS:
        _LOG_SCRUBBERS.append(scrub)
    for name in ("httpx", "aiohttp.client"):  # the senders' own transport is aiohttp's
        http_logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in http_logger.filters):
            http_logger.addFilter(_RedactingFilter())


add_log_scrubber(lambda text: text)  # installs the filter for the Secrets registry


# --------------------------------------------------------------------------------------
# Options, retries and the client


def check_seconds(name: str, value: object) -> float:
    """``value`` as a positive finite float, or a ValidationError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationTypeError(name, f"must be a number, got {type(value).__name__}")
    if not (value > 0 and math.isfinite(value)):
        raise ValidationError(name, "must be a positive finite number of seconds")
    return float(value)


class RetryPlan:
    """Decides, for one send, how long to wait before the next attempt, or to give up.

    Only [`TransientSendError`][notifyonce.TransientSendError] is retried. A provider's
    ``retry_after`` is waited exactly; the first retry after a certain transport failure is
    immediate (the pool has discarded the failed connection); other retries back off with full
    jitter. Nothing is retried past ``max_retries`` or when the wait would end after the deadline.
    """

    __slots__ = (
        "_immediate_used",
        "base",
        "cap",
        "clock",
        "deadline",
        "max_retries",
        "retries",
        "rng",
    )

    def __init__(
        self,
        *,
        deadline: float,
        max_retries: int,
        base: float,
        cap: float,
        clock: Callable[[], float],
        rng: Callable[[], float],
    ) -> None:
        self.deadline = deadline
        self.max_retries = max_retries
        self.base = base
        self.cap = cap
        self.clock = clock
        self.rng = rng
        self.retries = 0
        self._immediate_used = False

    def next_wait(self, error: SendError, *, certain_transport: bool) -> float | None:
        """Seconds to wait before retrying after ``error``, or None to raise it."""
        if not isinstance(error, TransientSendError):
            return None
        if error.retry_after is not None:
            wait = error.retry_after
        elif certain_transport and not self._immediate_used:
            self._immediate_used = True
            wait = 0.0
        else:
            wait = self.rng() * min(self.cap, self.base * 2**self.retries)
        if self.retries >= self.max_retries or self.clock() + wait > self.deadline:
            return None
        self.retries += 1
        return wait


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
        budget: float,
        connect_timeout: float,
        write_timeout: float,
        pool_timeout: float,
        limits: httpx.Limits,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[object]],
        rng: Callable[[], float],
    ) -> None:
        self.budget = check_seconds("budget", budget)
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout)
        self.write_timeout = check_seconds("write_timeout", write_timeout)
        self.pool_timeout = check_seconds("pool_timeout", pool_timeout)
        self.backoff_base = check_seconds("backoff_base", backoff_base)
        self.backoff_max = check_seconds("backoff_max", backoff_max)
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
            self._client = httpx.AsyncClient(
                transport=default_transport(self.limits),
                limits=self.limits,
                timeout=httpx.Timeout(
                    connect=self.connect_timeout,
                    read=self.budget,
                    write=self.write_timeout,
                    pool=self.pool_timeout,
                ),
                follow_redirects=False,
            )
        return self._client

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
    ) -> tuple[httpx.Response | SendError, BaseException | None, bool]:
        """POST once. Returns (the read response or the classified transport failure,
        the exception to chain, whether the failure certainly left nothing sent)."""
        progress = Progress()
        target = self._parsed
        if target is None or target.text != url:  # parsed once: httpx parses a str per request
            target = self._parsed = _ParsedURL(url)
        try:
            # httpx's read timeout restarts with every chunk received: a server trickling
            # its answer could hold a send far past its budget (and past its lease). One
            # overall deadline, a little after the phase timeouts, bounds it.
            response = await asyncio.wait_for(
                client.post(
                    target.url,
                    content=body,
                    headers=headers,
                    timeout=self._timeout(remaining),
                    extensions={"trace": progress},
                ),
                remaining + _DEADLINE_GRACE,
            )
        except asyncio.TimeoutError:
            if progress.evidence is False:
                return TransientSendError("no connection within the send's budget"), None, True
            return UncertainSendError("no complete answer within the send's budget"), None, False
        except httpx.HTTPStatusError as exc:  # raised by a caller's response hook
            try:
                await exc.response.aread()
            except Exception as read_exc:
                return classify_transport_error(read_exc, scrub=scrub), read_exc, False
            return exc.response, None, False
        except Exception as exc:
            error = classify_transport_error(
                exc,
                request_started=progress.evidence,
                placed=self._transport_is_httpx(client),
                scrub=scrub,
            )
            return error, exc, isinstance(error, TransientSendError)
        return response, None, False

    def _transport_is_httpx(self, client: httpx.AsyncClient) -> bool:
        """Whether ``client`` sends through httpx's own transport (httpcore), whose
        exception classes place a failure before or after the write."""
        if self._owns_client:
            return True
        # A caller's client: look at its transports. Private attributes of httpx, read
        # defensively: if they move, the answer is "cannot tell", the safe side.
        transport = getattr(client, "_transport", None)
        mounts = getattr(client, "_mounts", None)
        if not isinstance(mounts, dict):
            return False
        transports = [transport, *mounts.values()]
        return all(type(t) is httpx.AsyncHTTPTransport or t is None for t in transports[1:]) and (
            type(transport) is httpx.AsyncHTTPTransport
        )

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


def default_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport | None:
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
