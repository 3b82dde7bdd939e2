"""Test doubles shared by the sender and limiter tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx


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


class CountedTurns:
    """A TelegramSender seen through its turns: ``granted`` counts the turns entered."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.granted = 0

    async def send(self, recipient: str, message: Any) -> Any:
        return await self.sender.send(recipient, message)

    @contextlib.asynccontextmanager
    async def turn(self, recipient: str) -> AsyncIterator[None]:
        async with self.sender.turn(recipient):
            self.granted += 1
            yield
