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
  (``Retry(delay=...)``, through dramatiq's ``Retries`` middleware) and takes a dead
  worker's claim over; an actor that raised `NotDoneError`, or may have done its work
  with attempts left, is retried by the ``Retries`` middleware as any failure.

The actor reads its claim (for the fencing token) with `current_claim`: dramatiq runs a
message's middleware hooks and its actor on one worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from notifyonce._errors import ValidationError
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import Ledger
from notifyonce._once import OnceGuard, check_options, once
from notifyonce._outcome import DeliveryMode
from notifyonce.queues._common import LedgerSource, retry_delay

__all__ = ["OnceMiddleware", "current_claim"]

_local = threading.local()


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
        if guard.claim is not None:
            _local.guard = guard
            return
        delay = retry_delay(guard, ledger.lease.total_seconds())
        if delay is not None:
            raise dramatiq.Retry(delay=int(delay * 1000))
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
        if guard is not None:
            guard.__exit__(None if exception is None else type(exception), exception, None)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        _local.guard = None
