"""A dramatiq middleware that runs an actor's body once per slot, however often the
message is delivered.

dramatiq acknowledges a message after its actor ran: a worker killed mid-message leaves
it unacknowledged, and RabbitMQ delivers it again when the connection drops (Redis, once
the dead worker's heartbeat is missed). `OnceMiddleware` claims the slot of each message
of an actor declared with ``once_action`` before the actor runs (`notifyonce.once`), and
records how it ended after:

- a message whose slot is done, or held by a live worker, is skipped (``SkipMessage``):
  the actor does not run and the message is acknowledged;
- at most once, a message whose worker died mid-actor never runs it again;
- at least once, a message that finds the slot held is retried after one lease
  (`SlotHeldError`, a ``Retry`` with a delay, through dramatiq's ``Retries`` middleware) and
  takes a dead worker's claim over; an actor that raised `NotDoneError`, or may have done
  its work with attempts left, is retried by the ``Retries`` middleware as any failure;
- a slot that cannot be claimed (the ledger table missing, the database unreachable, a
  key that is not one) stops the message with `ClaimError`: the actor does not run, and
  the ``Retries`` middleware tries the message again later, as a failed one.

Why two exception classes of our own: dramatiq's ``Broker.emit_before`` catches every
exception a ``before_process_message`` hook raises, logs it and **runs the actor
anyway**, unless it is a ``MiddlewareError``. A plain ``Retry`` or a ``LedgerError``
raised there would let the actor run without its slot. Both classes here derive from
``MiddlewareError``: dramatiq then skips the actor and hands the exception to the
``after_process_message`` hooks (``Retries`` among them), which retry the message.

The actor reads its claim (for the fencing token) with `current_claim`: dramatiq runs a
message's middleware hooks and its actor on one worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, MiddlewareError, SkipMessage

from notifyonce._errors import ValidationError
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import Ledger
from notifyonce._once import NotDoneError, OnceGuard, check_options, once
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import LedgerSource, retry_delay

__all__ = ["ClaimError", "OnceMiddleware", "SlotHeldError", "current_claim"]

_local = threading.local()


class SlotHeldError(dramatiq.Retry, MiddlewareError):
    """The message's slot is held by another worker (at least once): try again later.

    A ``Retry`` with a ``delay`` (milliseconds; one lease and a second), so dramatiq's
    ``Retries`` middleware enqueues the message again, and a ``MiddlewareError``, so
    dramatiq does not run the actor now (it runs an actor after any other exception of a
    ``before_process_message`` hook).
    """


class ClaimError(MiddlewareError):
    """The message's slot could not be claimed: its actor was not run.

    Raised from the cause (a `LedgerError` that says what to fix, such as running
    ``notifyonce migrate``, or a `ValidationError` from ``once_key``). dramatiq hands it
    to the ``Retries`` middleware as a failure, so the message is tried again with its
    back-off while the ledger is away, and fails when its retries run out.
    """


def current_claim() -> Claim:
    """The claim of the message this worker thread is processing.

    Raises:
        ValidationError: called outside an actor declared with ``once_action``.
    """
    guard: OnceGuard | None = getattr(_local, "guard", None)
    if guard is None or guard.claim is None:
        raise ValidationError("current_claim", "called outside an actor with once_action")
    return guard.claim


class OnceMiddleware(Middleware):
    """Claim the slot of each message of an actor declared with ``once_action``.

    Declare an actor with ``once_action`` (the slots' action) and ``once_key`` (takes the
    actor's arguments, returns ``(subject, cycle)``); ``once_mode`` and
    ``once_max_attempts`` override the middleware's for that actor.

    Args:
        ledger: A sync [`Ledger`][notifyonce.Ledger], or a function making one, called
            once in each worker process.
        mode: The default delivery mode.
        max_attempts: At least once: attempts that may have done the work, in all.
        not_done: More exception classes that say an actor certainly did nothing.

    Examples:
        ```python
        broker = RabbitmqBroker(url="amqp://guest:guest@127.0.0.1:5672")
        broker.add_middleware(OnceMiddleware(lambda: Ledger(sa.create_engine(URL))))
        dramatiq.set_broker(broker)

        @dramatiq.actor(once_action="charge_renewal", once_key=lambda user, period: (user, period))
        def charge(user: int, period: str) -> None:
            payments.charge(user, period, fencing_token=current_claim().token)
        ```
    """

    def __init__(
        self,
        ledger: Ledger | Callable[[], Ledger],
        *,
        mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
        max_attempts: int = 3,
        not_done: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._source = LedgerSource(ledger, Ledger)
        self.mode, self.max_attempts, self.not_done = check_options(mode, max_attempts, not_done)

    @property
    def actor_options(self) -> set[str]:
        return {"once_action", "once_key", "once_mode", "once_max_attempts"}

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        _local.guard = None
        options = broker.get_actor(message.actor_name).options
        action = options.get("once_action")
        if action is None:
            return
        # Every exception raised here must be a MiddlewareError: dramatiq runs the actor
        # after any other (see the module's docstring).
        try:
            key: Callable[..., tuple[Any, Any]] = options["once_key"]
            subject, cycle = key(*message.args, **message.kwargs)
            ledger = self._source.get()
            guard = once(
                ledger,
                action,
                subject,
                cycle,
                mode=options.get("once_mode", self.mode),
                max_attempts=options.get("once_max_attempts", self.max_attempts),
                not_done=self.not_done,
            )
            guard.__enter__()
        except Exception as exc:
            raise ClaimError(
                f"{message.actor_name}: the slot could not be claimed, the actor was not run: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if guard.claim is not None:
            _local.guard = guard
            return
        delay = retry_delay(guard, ledger.lease.total_seconds())
        if delay is not None:
            raise SlotHeldError(f"{guard.key} is held by another worker", delay=int(delay * 1000))
        raise SkipMessage(f"{guard.key} is {guard.skipped.value if guard.skipped else 'held'}")

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        guard: OnceGuard | None = getattr(_local, "guard", None)
        _local.guard = None
        if guard is None:
            return
        if isinstance(exception, MiddlewareError):
            # A middleware after this one stopped the message: the actor did not run.
            exception = NotDoneError(f"stopped by a middleware ({type(exception).__name__})")
        guard.__exit__(None if exception is None else type(exception), exception, None)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        guard: OnceGuard | None = getattr(_local, "guard", None)
        _local.guard = None
        if guard is not None:
            # A middleware after this one skipped the message: the actor did not run, so
            # the slot is given back rather than left to its lease.
            skipped = NotDoneError("skipped by a middleware")
            guard.__exit__(NotDoneError, skipped, None)
