"""Test doubles shared by the sender and limiter tests."""

from __future__ import annotations


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
