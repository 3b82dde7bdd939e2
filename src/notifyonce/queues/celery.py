"""Celery tasks whose body runs once per slot, however often the task is delivered.

Celery redelivers a task whose worker died before it acknowledged (``acks_late``: a
``SIGKILL``, an out-of-memory kill, a host gone), and on Redis or SQS also one that ran
longer than the broker's visibility timeout, to another worker that may still be running
it. `once_task` registers a task that claims its slot (`notifyonce.once`) before the body:

- a redelivered copy whose slot is done, or held by a live worker, skips the body;
- at most once, a copy whose worker died mid-body never runs it again (the slot is swept
  ``unknown`` once the lease ran out);
- at least once, a copy that finds the slot held retries itself after one lease, and takes
  the claim over if its worker died; a body that raised `NotDoneError`, or may have done
  its work with attempts left, is retried by Celery (``self.retry``).

The task is registered with ``acks_late=True`` and ``reject_on_worker_lost=True``, so a
killed worker's task goes back to the queue instead of being lost.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from celery import Celery, Task

from notifyonce._keys import Cycle, Subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import Ledger
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import GuardSpec, LedgerSource, retry_delay, run_guarded

__all__ = ["once_task"]

P = ParamSpec("P")
R = TypeVar("R")


def once_task(
    app: Celery,
    ledger: Ledger | Callable[[], Ledger],
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
    max_retries: int = 20,
    **task_options: Any,
) -> Callable[[Callable[Concatenate[Claim, P], R]], Task]:
    """Register a Celery task whose body runs once per ``(action, *key(args))`` slot.

    The body gets the won [`Claim`][notifyonce.Claim] first (pass ``claim.token`` on as a
    fencing token), then the task's arguments. The task returns the body's value, or None
    when it skipped the body.

    Args:
        app: The Celery app to register the task with.
        ledger: A sync [`Ledger`][notifyonce.Ledger], or a function making one; a function
            is called once in each worker process (an engine must not cross a fork).
        action: The slots' action, e.g. ``"charge_renewal"``.
        key: Takes the task's arguments, returns the slot's ``(subject, cycle)``.
        mode: At most once (the default) or at least once; see `notifyonce.once`.
        max_attempts: At least once: attempts that may have done the work, in all.
        not_done: More exception classes that say the body certainly did nothing.
        max_retries: How often Celery retries the task (a held slot, a released one).
        task_options: More options for ``app.task`` (``name``, ``queue``, ...).

    Examples:
        ```python
        app = Celery("billing", broker="amqp://guest:guest@127.0.0.1:5672//")
        ledger = lambda: Ledger(sa.create_engine(DATABASE_URL))

        @once_task(app, ledger, "charge_renewal", key=lambda user, period: (user, period))
        def charge(claim: Claim, user: int, period: str) -> str:
            return payments.charge(user, period, idempotency_key=str(claim.token))

        charge.delay(42, "2026-12")
        ```
    """
    source = LedgerSource(ledger, Ledger)
    spec = GuardSpec(action, key, mode, max_attempts, not_done)

    def decorate(function: Callable[Concatenate[Claim, P], R]) -> Task:
        @functools.wraps(function)
        def run(self: Task, *args: P.args, **kwargs: P.kwargs) -> R | None:
            ledger = source.get()
            guard = spec.guard(ledger, args, kwargs)
            value, error = run_guarded(guard, lambda claim: function(claim, *args, **kwargs))
            delay = retry_delay(guard, ledger.lease.total_seconds(), error)
            if delay is not None:
                raise self.retry(exc=error, countdown=delay, max_retries=max_retries)
            if error is not None:
                raise error
            return value

        options = {"acks_late": True, "reject_on_worker_lost": True, **task_options}
        task: Task = app.task(bind=True, **options)(run)
        return task

    return decorate
