"""arq jobs whose body runs once per slot, however often arq runs the job.

arq keeps a job in its queue until the job ends, and marks it in progress for the job's
timeout plus 10 seconds: a worker killed mid-job leaves the job queued, and another worker
runs it again once that mark expired (``job_try`` one higher). A job id is unique only
until its result is cleared, so a job enqueued again later runs again too. `once_job`
wraps the job's coroutine so each run claims its slot (`notifyonce.once`, on an
[`AsyncLedger`][notifyonce.AsyncLedger]) before the body:

- a run whose slot is done, or held by a live worker, skips the body;
- at most once, a run whose worker died mid-body never runs it again;
- at least once, a run that finds the slot held waits one lease and takes the claim over
  if its worker died; a body that raised `NotDoneError`, or may have done its work with
  attempts left, is run again after a second, up to ``max_retries`` times, inside the
  same run.

Give the job a timeout above the longest run including those waits (arq's
``job_timeout``, 300 s by default). The wrapper needs nothing from arq: it is a coroutine
function taking arq's ``ctx`` first, registered in ``WorkerSettings.functions`` as usual.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from notifyonce._keys import Cycle, Subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import GuardSpec, LedgerSource, run_retrying_async

__all__ = ["once_job"]

P = ParamSpec("P")
R = TypeVar("R")

ArqContext = dict[str, Any]


def once_job(
    ledger: AsyncLedger | Callable[[], AsyncLedger],
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
    max_retries: int = 20,
) -> Callable[
    [Callable[Concatenate[Claim, ArqContext, P], Awaitable[R]]],
    Callable[Concatenate[ArqContext, P], Awaitable[R | None]],
]:
    """Wrap an arq job's coroutine so its body runs once per ``(action, *key(args))`` slot.

    The body gets the won [`Claim`][notifyonce.Claim] first, then arq's ``ctx`` and the
    job's arguments; the job returns the body's value, or None when it skipped the body.
    The wrapped job keeps the body's name, which arq enqueues it by.

    Args:
        ledger: An [`AsyncLedger`][notifyonce.AsyncLedger], or a function making one,
            called once in each worker process.
        action: The slots' action, e.g. ``"trial_6h"``.
        key: Takes the job's arguments (not ``ctx``), returns the slot's
            ``(subject, cycle)``.
        mode: At most once (the default) or at least once; see `notifyonce.once`.
        max_attempts: At least once: attempts that may have done the work, in all.
        not_done: More exception classes that say the body certainly did nothing.
        max_retries: How often one run tries again (a held slot, a released one).

    Raises:
        ValidationError: At decoration, a bad option, naming it; when the job runs, a key
            that cannot make a slot (a naive datetime, an empty subject), before the body.

    Examples:
        ```python
        ledger = lambda: AsyncLedger(create_async_engine(DATABASE_URL))

        @once_job(ledger, "trial_6h", key=lambda user, deadline: (user, deadline))
        async def remind(claim: Claim, ctx: dict, user: int, deadline: str) -> None:
            await bot.send_message(user, "6 hours left")

        class WorkerSettings:
            functions = [remind]

        await redis.enqueue_job("remind", 42, "2026-12-01T18:00:00Z")
        ```
    """
    source = LedgerSource(ledger, AsyncLedger)
    spec = GuardSpec(action, key, mode, max_attempts, not_done)

    def decorate(
        function: Callable[Concatenate[Claim, ArqContext, P], Awaitable[R]],
    ) -> Callable[Concatenate[ArqContext, P], Awaitable[R | None]]:
        @functools.wraps(function)
        async def job(ctx: ArqContext, /, *args: P.args, **kwargs: P.kwargs) -> R | None:
            return await run_retrying_async(
                spec,
                source.get(),
                args,
                kwargs,
                max_retries,
                lambda claim: function(claim, ctx, *args, **kwargs),
            )

        return job

    return decorate
