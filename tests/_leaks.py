"""Connections a test left open: found when the test ends, not when the garbage collector
happens to run in some later test.

An asyncio socket transport that is still open once its event loop is closed was never
closed by its client (a pool that was not shut down, a bot never told to shut down): its
socket reaches the garbage collector whenever the last reference goes, and the
ResourceWarning then fails whichever test is running. Every socket transport the selector
event loops make is remembered (weakly), so the check after each test looks at those only.
"""

from __future__ import annotations

import asyncio
import weakref
from asyncio import selector_events
from typing import Any

_made: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()


def watch() -> None:
    """Remember every socket transport an asyncio selector loop makes from now on."""
    loop_class = selector_events.BaseSelectorEventLoop
    original = loop_class._make_socket_transport
    if getattr(original, "watched", False):
        return

    def make(self: Any, *args: Any, **kwargs: Any) -> asyncio.Transport:
        transport = original(self, *args, **kwargs)
        _made.add(transport)
        return transport

    make.watched = True  # type: ignore[attr-defined]
    loop_class._make_socket_transport = make  # type: ignore[method-assign]


def left_open() -> list[asyncio.BaseTransport]:
    """The transports still open on an event loop that is closed: each is forgotten, and
    its socket closed (``close()`` needs the loop), so it cannot warn in a later test."""
    found = []
    for transport in list(_made):
        loop = getattr(transport, "_loop", None)
        if loop is None or not loop.is_closed():
            continue
        _made.discard(transport)
        if transport.is_closing():
            continue
        found.append(transport)
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            sock.close()
            # what the transport's __del__ checks, and its StreamWriter's (is_closing())
            transport._sock = None  # type: ignore[attr-defined]
            transport._closing = True  # type: ignore[attr-defined]
    return found


def describe(transport: asyncio.BaseTransport) -> str:
    return f"{type(transport).__name__} to {transport.get_extra_info('peername')}"
