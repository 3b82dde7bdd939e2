"""Test doubles shared by the sender and limiter tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
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


class Script:
    """A MockTransport handler answering from a list; records every request."""

    def __init__(self, steps: Iterable[Any]) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(request)
        assert isinstance(step, httpx.Response)
        return httpx.Response(step.status_code, headers=step.headers, content=step.content)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]
