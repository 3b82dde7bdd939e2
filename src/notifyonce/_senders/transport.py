"""What a failed httpx request means: the transport error table and the trace callback.

Every httpx exception class is mapped to whether the message may have left (tests walk
httpx's hierarchy and fail on a class missing here; the senders' aiohttp transport raises
the same classes); httpcore's ``trace`` extension (`Progress`, which the aiohttp transport
calls at the same moment) says whether this attempt started writing, which overrides the
class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpcore
import httpx

from notifyonce._errors import PermanentSendError, SendError, TransientSendError, UncertainSendError
from notifyonce._senders.redaction import short

__all__ = [
    "EXCEPTION_CLASSES",
    "Progress",
    "TurnMissedError",
    "classify_transport_error",
    "placed_by_httpcore",
    "transport_error_class",
]

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


class TurnMissedError(Exception):
    """A POST's gate refused it right before the request: nothing was written.

    The gate keeps a rate limiter's turn: a send that waited too long for a connection
    (or on a busy event loop) since its turn started would bunch with the next turns'
    sends; it gives the turn back and takes a new one instead.
    """


def transport_error_class(exc: BaseException) -> type[SendError]:
    """The failure class of an httpx exception by its class alone (unknown: uncertain)."""
    for klass in type(exc).__mro__:
        if klass in EXCEPTION_CLASSES:
            return EXCEPTION_CLASSES[klass]
    return UncertainSendError  # the Sender protocol's default


# The bases of httpcore's exceptions: httpx's own transport raises each as the httpx class
# of the same name, from it.
_HTTPCORE_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)


def placed_by_httpcore(exc: BaseException) -> bool:
    """Whether ``exc`` is httpx's own transport reporting a failure of httpcore's.

    httpx's transport raises the httpx exception of the same name as httpcore's, from it
    (``httpx.PoolTimeout`` from ``httpcore.PoolTimeout``); httpcore's classes say whether
    the failure came before the write. Any other exception (a caller's transport raising
    an httpx class itself, or from another library's error) may not: httpx-aiohttp, for
    one, reports a drop after delivery as ``ConnectTimeout``.
    """
    cause = exc.__cause__
    return isinstance(cause, _HTTPCORE_ERRORS) and type(cause).__name__ == type(exc).__name__


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
        placed: Whether the exception's class says where the failure happened: the
            senders' own transport, or httpx's over httpcore (`placed_by_httpcore`). A
            foreign transport that does not trace cannot be trusted to: its connect errors
            are uncertain. Nor can its messages: one may quote the request (the message's
            text), so only the exception's class is kept.
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
    detail = short(str(exc), scrub) if placed else ""
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
