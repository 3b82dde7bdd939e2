"""Test doubles shared by the sender and limiter tests."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx

from notifyonce import Message, SendError, SupportsCheck, SupportsTurn
from notifyonce._message import keep_capabilities


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps; records the waits."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(round(seconds, 6))
        self.now += seconds


# The failures httpcore raises before any byte of the request is written.
_BEFORE_WRITE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError)


class Script:
    """A MockTransport handler answering from a list; records every request.

    With ``traced`` (the default) it reports progress through the request's ``trace``
    extension as httpcore does, so a sender can place a failure before or after the
    write: a connect-phase exception is raised after ``connection.connect_tcp.started``,
    any other after ``http11.send_request_headers.started``. Without it, it behaves like
    a foreign transport that says nothing.
    """

    def __init__(self, steps: Iterable[Any], *, traced: bool = True) -> None:
        self.steps = list(steps)
        self.traced = traced
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        trace = request.extensions.get("trace")
        if isinstance(step, BaseException):
            if self.traced and trace is not None:
                before = isinstance(step, _BEFORE_WRITE)
                phase = "connection.connect_tcp" if before else "http11.send_request_headers"
                await trace(f"{phase}.started", {})
            raise step
        if callable(step):
            return step(request)
        assert isinstance(step, httpx.Response)
        return httpx.Response(step.status_code, headers=step.headers, content=step.content)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def scripted(script: Script, clock: FakeClock) -> dict[str, Any]:
    """The options that make an HTTP sender send through ``script`` on ``clock``: a
    MockTransport client, the clock's sleep and a fixed jitter."""
    return {
        "client": httpx.AsyncClient(transport=httpx.MockTransport(script)),
        "clock": clock,
        "sleep": clock.sleep,
        "rng": lambda: 0.5,
    }


async def send_scripted(
    make: Callable[..., Any], steps: Iterable[Any], message: Any = None, **options: Any
) -> tuple[Any, Script, FakeClock]:
    """One send to chat 42 by ``make(script, clock, **options)``, a sender answered from
    ``steps``: its receipt or the SendError it raised, the script and the clock."""
    script, clock = Script(steps), FakeClock()
    sender = make(script, clock, **options)
    try:
        return await sender.send("42", message or Message("hello")), script, clock
    except SendError as exc:
        return exc, script, clock


class Wrapper:
    """A sender that sends through ``inner``, with its ``check`` and ``turn`` where
    ``inner`` has them (as every sender that wraps another must)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        keep_capabilities(
            self, check=isinstance(inner, SupportsCheck), turn=isinstance(inner, SupportsTurn)
        )

    async def send(self, recipient: str, message: Any) -> Any:
        return await self.inner.send(recipient, message)

    def _check(self, recipient: str, message: Any) -> None:
        self.inner.check(recipient, message)

    def _turn(self, recipient: str) -> contextlib.AbstractAsyncContextManager[object]:
        return self.inner.turn(recipient)


class CountedTurns(Wrapper):
    """A TelegramSender seen through its turns: ``granted`` counts the turns entered."""

    def __init__(self, sender: Any) -> None:
        super().__init__(sender)
        self.granted = 0

    @contextlib.asynccontextmanager
    async def _turn(self, recipient: str) -> AsyncIterator[None]:
        async with self.inner.turn(recipient):
            self.granted += 1
            yield


class StampingSender(Wrapper):
    """Sends through ``inner``, noting the time (``now()``, the ledger's) of every send's
    start."""

    def __init__(self, inner: Any, now: Callable[[], dt.datetime]) -> None:
        super().__init__(inner)
        self.now = now
        self.started: list[dt.datetime] = []

    async def send(self, recipient: str, message: Any) -> Any:
        self.started.append(self.now())
        return await super().send(recipient, message)
