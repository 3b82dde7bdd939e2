"""When to try a send again: the ``Retry-After`` header and the retry plan of one send."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable

from notifyonce._errors import SendError, TransientSendError

__all__ = ["RetryPlan", "parse_retry_after"]


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
