"""taskiq tasks whose body runs once per slot, however often the task is delivered.

taskiq acknowledges a message after the task ran (``--ack-type when_saved``, the
default), so a worker killed mid-task leaves it unacknowledged: a broker with
acknowledgements delivers it again (taskiq-redis's ``RedisStreamBroker`` to another
consumer once it was idle ``idle_timeout``; taskiq-aio-pika when the connection drops),
and a scheduler started twice sends a cron task twice. `once_task` registers a task that
claims its slot (`notifyonce.once`, on an [`AsyncLedger`][notifyonce.AsyncLedger]) before
the body:

- a copy whose slot is done, or held by a live worker, skips the body;
- at most once, a copy whose worker died mid-body never runs it again;
- at least once, a copy that finds the slot held waits one lease, its message still
  unacknowledged, and takes the claim over if its worker died; a body that raised
  `NotDoneError`, or may have done its work with attempts left, is run again after a
  second, up to ``max_retries`` times, inside the same delivery.

A taskiq middleware sees a message before and after its task but cannot skip the task nor
hand it the claim, so the guard wraps the task's function instead.

With ``RedisStreamBroker``, keep ``idle_timeout`` above the longest run plus one lease (it
counts from the delivery: a message a live worker still holds is claimed by another once
that old) and ``unacknowledged_batch_size`` near the worker's ``--max-async-tasks`` (a
large batch ages in one worker's hands and is claimed again and again).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from taskiq import AsyncBroker, AsyncTaskiqDecoratedTask

from notifyonce._keys import Cycle, Subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import GuardSpec, LedgerSource, run_retrying_async

__all__ = ["once_task"]

P = ParamSpec("P")
R = TypeVar("R")


def once_task(
    broker: AsyncBroker,
    ledger: AsyncLedger | Callable[[], AsyncLedger],
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
    max_retries: int = 20,
    task_name: str | None = None,
    **labels: Any,
) -> Callable[
    [Callable[Concatenate[Claim, P], Awaitable[R]]],
    AsyncTaskiqDecoratedTask[P, Coroutine[Any, Any, R | None]],
]:
    """Register a taskiq task whose body runs once per ``(action, *key(args))`` slot.

    The body (a coroutine function) gets the won [`Claim`][notifyonce.Claim] first, then
    the task's arguments; the task returns the body's value, or None when it skipped it.

    Args:
        broker: The taskiq broker to register the task with.
        ledger: An [`AsyncLedger`][notifyonce.AsyncLedger], or a function making one,
            called once in each worker process.
        action: The slots' action, e.g. ``"trial_6h"``.
        key: Takes the task's arguments, returns the slot's ``(subject, cycle)``.
        mode: At most once (the default) or at least once; see `notifyonce.once`.
        max_attempts: At least once: attempts that may have done the work, in all.
        not_done: More exception classes that say the body certainly did nothing.
        max_retries: How often one delivery tries again (a held slot, a released one).
        task_name: The task's name (default: taskiq's, from the function).
        labels: More labels for ``broker.task``.

    Examples:
        ```python
        broker = RedisStreamBroker(
            "redis://127.0.0.1:6379/0", idle_timeout=60_000, unacknowledged_batch_size=10
        )
        ledger = lambda: AsyncLedger(create_async_engine(DATABASE_URL))

        @once_task(broker, ledger, "trial_6h", key=lambda user, deadline: (user, deadline))
        async def remind(claim: Claim, user: int, deadline: str) -> None:
            await bot.send_message(user, "6 hours left")

        await remind.kiq(42, "2026-12-01T18:00:00Z")
        ```
    """
    source = LedgerSource(ledger, AsyncLedger)
    spec = GuardSpec(action, key, mode, max_attempts, not_done)

    def decorate(
        function: Callable[Concatenate[Claim, P], Awaitable[R]],
    ) -> AsyncTaskiqDecoratedTask[P, Coroutine[Any, Any, R | None]]:
        @functools.wraps(function)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            return await run_retrying_async(
                spec,
                source.get(),
                args,
                kwargs,
                max_retries,
                lambda claim: function(claim, *args, **kwargs),
            )

        # taskiq reads the task's parameters from its signature: the claim is not one
        parameters = list(inspect.signature(function).parameters.values())[1:]
        run.__signature__ = inspect.signature(function).replace(  # type: ignore[attr-defined]
            parameters=parameters
        )
        name = {} if task_name is None else {"task_name": task_name}
        return broker.task(**name, **labels)(run)

    return decorate
