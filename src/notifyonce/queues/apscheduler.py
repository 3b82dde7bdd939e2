"""APScheduler jobs whose body runs once per run time, however many schedulers fire them.

A job scheduled in two scheduler processes (two replicas of a service, or one restarted
within the period) fires twice at each run time; APScheduler 3's job stores do not make
two schedulers one, nor do APScheduler 4's unless they share a data store. `once_job`
wraps the job's function so each run claims the slot ``(action, subject, run time)``
(`notifyonce.once`) before the body; it works with APScheduler 3 and 4 alike:

- the run time is the run's scheduled fire time under APScheduler 4 (read from its
  ``current_job``), else the moment the run starts, **rounded to the nearest multiple of
  ``period``** (from the Unix epoch, UTC): two schedulers firing the same cron second,
  minute or hour within half a period of each other claim the same slot, and the second
  skips the body;
- at most once, a run whose scheduler died mid-body is never run again;
- at least once, a run that finds the slot held waits one lease and takes a dead
  scheduler's claim over; a body that raised `NotDoneError`, or may have done its work
  with attempts left, runs again after a second, up to ``max_retries`` times.

Give the job ``max_instances`` above 1: a run that waits for a held slot must not make the
scheduler skip the next run time.
"""

from __future__ import annotations

import datetime as dt
import functools
import sys
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import Subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import Ledger
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import GuardSpec, LedgerSource, retry_delay, run_guarded

__all__ = ["fire_time", "once_job", "run_time"]

P = ParamSpec("P")
R = TypeVar("R")

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def run_time(now: dt.datetime, period: dt.timedelta) -> dt.datetime:
    """``now`` rounded to the nearest multiple of ``period`` since the Unix epoch (UTC).

    Examples:
        >>> at = dt.datetime(2026, 12, 1, 8, 59, 59, 800_000, tzinfo=dt.timezone.utc)
        >>> run_time(at, dt.timedelta(minutes=1)).isoformat()
        '2026-12-01T09:00:00+00:00'
    """
    steps = round((now - _EPOCH) / period)
    return _EPOCH + steps * period


def fire_time() -> dt.datetime:
    """The running job's scheduled fire time under APScheduler 4, else the current time.

    APScheduler 4 sets ``apscheduler.current_job`` while a job runs (in its thread too);
    APScheduler 3 has no such variable, and outside a job it is unset.
    """
    module = sys.modules.get("apscheduler")
    current = getattr(module, "current_job", None)
    job = current.get(None) if current is not None else None
    fired = getattr(job, "scheduled_fire_time", None)
    if isinstance(fired, dt.datetime) and fired.tzinfo is not None:
        return fired
    return dt.datetime.now(dt.timezone.utc)


def once_job(
    ledger: Ledger | Callable[[], Ledger],
    action: str,
    *,
    period: dt.timedelta,
    subject: Subject = "job",
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
    max_retries: int = 20,
    clock: Callable[[], dt.datetime] | None = None,
) -> Callable[[Callable[Concatenate[Claim, P], R]], Callable[P, R | None]]:
    """Wrap a job's function so each run time runs its body once, across schedulers.

    The body gets the won [`Claim`][notifyonce.Claim] first, then the job's arguments; the
    wrapped function returns the body's value, or None when it skipped the body.

    Args:
        ledger: A sync [`Ledger`][notifyonce.Ledger], or a function making one.
        action: The slots' action, e.g. ``"daily_digest"``.
        period: The job's period (its cron step): run times are rounded to it.
        subject: The slots' subject (one per job, or per argument set you schedule).
        mode: At most once (the default) or at least once; see `notifyonce.once`.
        max_attempts: At least once: attempts that may have done the work, in all.
        not_done: More exception classes that say the body certainly did nothing.
        max_retries: How often one run tries again (a held slot, a released one).
        clock: Returns the run's aware time, rounded to ``period`` (tests); by default
            APScheduler 4's scheduled fire time, else the system clock (`fire_time`).

    Examples:
        ```python
        @once_job(ledger, "daily_digest", period=timedelta(days=1))
        def digest(claim: Claim) -> None:
            send_digest(fencing_token=claim.token)

        scheduler.add_job(digest, "cron", hour=8, max_instances=3)
        ```
    """
    if not isinstance(period, dt.timedelta):
        raise ValidationTypeError("period", f"must be a timedelta, got {type(period).__name__}")
    if period < dt.timedelta(seconds=1):
        raise ValidationError("period", "must be at least one second")
    source = LedgerSource(ledger, Ledger)
    spec = GuardSpec(action, lambda at: (subject, at), mode, max_attempts, not_done)
    now = clock or fire_time

    def decorate(function: Callable[Concatenate[Claim, P], R]) -> Callable[P, R | None]:
        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            at = run_time(now(), period)
            ledger = source.get()
            for _ in range(max_retries + 1):
                guard = spec.guard(ledger, (at,), {})
                value, error = run_guarded(guard, lambda claim: function(claim, *args, **kwargs))
                delay = retry_delay(guard, ledger.lease.total_seconds(), error)
                if delay is None:
                    break
                time.sleep(delay)
            if error is not None:
                raise error
            return value

        return run

    return decorate
