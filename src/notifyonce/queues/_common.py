"""What every queue adapter shares: a ledger per process, and when to try a task again.

A queue's task runs in a worker process, often forked from the one that imported the
task module: an engine made before the fork must not be used after it. The adapters take
a ledger or a function that makes one, and make it once per process (`LedgerSource`).

After ``once`` ran or skipped the body, the adapter tells its queue what to do:

- the body ran and the slot was released (`NotDoneError`, or at least once an uncertain
  end with attempts left): the queue retries the task;
- the slot is held by another worker (``CLAIMED``): at most once, the holder (alive, or
  swept ``unknown`` once its lease ran out) settles it, so the task is done; at least
  once, the holder may be dead, so the task is tried again after one lease, when the
  claim, if its worker died, can be taken over;
- the claim failed because the database was away (the body did not run): the task is
  tried again a little later, while the queue's retries last, then fails with the error;
- anything else (done before, settled, or sent): the task is done.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from notifyonce._errors import LedgerUnavailableError, ValidationTypeError
from notifyonce._keys import Cycle, Subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger, Ledger
from notifyonce._ledger.table import SlotStatus
from notifyonce._once import OnceGuard, check_options, once
from notifyonce._outcome import DeliveryMode, Outcome

__all__ = ["GuardSpec", "LedgerSource", "retry_delay", "run_guarded", "run_retrying_async"]

L = TypeVar("L", AsyncLedger, Ledger)
#: Seconds before a task whose claim found the database away is tried again.
CLAIM_RETRY_SECONDS = 2.0
R = TypeVar("R")


class LedgerSource(Generic[L]):
    """A ledger, or a function making one, called once per process that asks for it."""

    def __init__(self, ledger: L | Callable[[], L], kind: type[L]) -> None:
        if not isinstance(ledger, kind) and not callable(ledger):
            raise ValidationTypeError(
                "ledger", f"must be a {kind.__name__} or a function returning one"
            )
        self._source: L | Callable[[], L] = ledger
        self._kind: type[L] = kind
        self._made: tuple[int, L] | None = None
        self._lock = threading.Lock()

    def get(self) -> L:
        """This process's ledger."""
        source = self._source
        if isinstance(source, (AsyncLedger, Ledger)):
            return source
        with self._lock:
            pid = os.getpid()
            if self._made is None or self._made[0] != pid:
                made = source()
                if not isinstance(made, self._kind):
                    raise ValidationTypeError(
                        "ledger", f"the function must return a {self._kind.__name__}"
                    )
                self._made = (pid, made)
            return self._made[1]


@dataclass(frozen=True)
class GuardSpec:
    """What a task's guard is made of, but its arguments: one per registered task."""

    action: str
    key: Callable[..., tuple[Subject, Cycle]]
    mode: DeliveryMode | str
    max_attempts: int
    not_done: tuple[type[BaseException], ...]

    def __post_init__(self) -> None:
        check_options(self.mode, self.max_attempts, self.not_done)
        if not isinstance(self.action, str):
            raise ValidationTypeError("action", f"must be a str, got {type(self.action).__name__}")
        if not callable(self.key):
            raise ValidationTypeError("key", "must be a function of the task's arguments")

    def guard(
        self, ledger: AsyncLedger | Ledger, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> OnceGuard:
        """The guard of one call, its slot made from the call's arguments."""
        subject, cycle = self.key(*args, **kwargs)
        return once(
            ledger,
            self.action,
            subject,
            cycle,
            mode=self.mode,
            max_attempts=self.max_attempts,
            not_done=self.not_done,
        )


def retry_delay(
    guard: OnceGuard, lease_seconds: float, error: BaseException | None = None
) -> float | None:
    """Seconds after which the queue should run the task again, or None: it is done.

    ``error``: what running the guard raised. A claim that failed because the database
    was away (the body never ran) is tried again: the database may be back by then, and
    the retry's claim finds out whether the failed one was committed."""
    if guard.outcome is None and isinstance(error, LedgerUnavailableError):
        return CLAIM_RETRY_SECONDS
    if guard.outcome is Outcome.RETRY:
        return 1.0
    held = guard.skipped is SlotStatus.CLAIMED
    if held and guard.mode is DeliveryMode.AT_LEAST_ONCE:
        return lease_seconds + 1.0
    return None


def run_guarded(guard: OnceGuard, body: Callable[[Claim], R]) -> tuple[R | None, Exception | None]:
    """Run ``body`` with the claim under ``guard`` (a sync ledger's), unless it skips: the
    body's value, and the exception it raised, kept for the queue to see after the guard
    recorded the slot."""
    try:
        with guard:
            if guard.claim is not None:
                return body(guard.claim), None
    except Exception as exc:
        return None, exc
    return None, None


async def run_retrying_async(
    spec: GuardSpec,
    ledger: AsyncLedger,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    max_retries: int,
    body: Callable[[Claim], Awaitable[R]],
) -> R | None:
    """Run ``body`` once for the task's slot on an async ledger, trying again in-process
    as `retry_delay` says (up to ``max_retries`` times): the body's value, or the
    exception it raised, raised again after the guard recorded the slot."""
    error: Exception | None = None
    value: R | None = None
    for _ in range(max_retries + 1):
        guard = spec.guard(ledger, args, kwargs)
        error = None
        try:
            async with guard:
                if guard.claim is not None:
                    value = await body(guard.claim)
        except Exception as exc:
            error = exc
        delay = retry_delay(guard, ledger.lease.total_seconds(), error)
        if delay is None:
            break
        await asyncio.sleep(delay)
    if error is not None:
        raise error
    return value
