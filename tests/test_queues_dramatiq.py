"""notifyonce.queues.dramatiq: OnceMiddleware on real dramatiq workers on RabbitMQ (which
redelivers what a dropped connection did not acknowledge), SIGKILLed mid-message."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from notifyonce import DeliveryMode

from ._databases import IN_CI
from ._queue_storm import Storm, check
from .test_queues_celery import AMQP, _answers

# pika reads the vhost from the path, percent-encoded; kombu's "//" is vhost "/"
PIKA_URL = AMQP[:-2] + "/%2F" if AMQP.endswith("//") else AMQP

if not IN_CI:  # in CI a missing dev dependency is a failure, not a skip
    pytest.importorskip("dramatiq")


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.sqlite
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_killed_dramatiq_workers_never_double_at_most_once_never_lose_at_least_once(
    tmp_path: Path, mode: DeliveryMode
) -> None:
    """1,000 messages on two dramatiq workers (two processes, two threads each) on
    RabbitMQ, a whole worker SIGKILLed 10 times mid-run and its messages redelivered: at
    most once, no side effect happened twice (0 doubles); at least once, every side effect
    happened (0 lost) and every slot ends sent."""
    if not IN_CI:  # a test dependency (the dev extra), not in the lowest-versions legs
        pytest.importorskip("pika")
    _answers(AMQP)
    queue = f"nfo_q_{uuid.uuid4().hex[:12]}"
    command = [sys.executable, "-m", "dramatiq", "_dramatiq_once_app"]
    command += ["--processes", "2", "--threads", "2", "--queues", queue]
    env = {"NFO_QUEUE": queue, "NFO_BROKER": PIKA_URL}
    storm = Storm(tmp_path, mode, command, env)

    def enqueue(count: int) -> None:
        import dramatiq
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        broker = RabbitmqBroker(url=PIKA_URL)
        try:
            broker.declare_queue(queue)
            for n in range(count):
                broker.enqueue(dramatiq.Message(queue, "once_test_effect", (n,), {}, {}))
        finally:
            broker.close()

    try:
        effects = storm.run(enqueue)
    finally:
        from kombu import Connection

        with Connection(AMQP) as connection:
            for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
                connection.default_channel.queue_delete(name)
    print(check(storm, effects))


@pytest.mark.sqlite
def test_the_middleware_runs_a_message_delivered_twice_once(tmp_path: Path) -> None:
    """An actor with once_action, its message delivered twice to a stub broker's worker:
    the actor runs once with its claim, the second message is skipped; outside an actor
    current_claim raises ValidationError naming it."""
    import dramatiq
    import sqlalchemy as sa
    from dramatiq.brokers.stub import StubBroker

    from notifyonce import Ledger, SlotStatus, ValidationError
    from notifyonce.queues.dramatiq import OnceMiddleware, current_claim

    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()
    broker = StubBroker()
    broker.add_middleware(OnceMiddleware(ledger))
    runs: list[tuple[int, int]] = []

    @dramatiq.actor(broker=broker, once_action="effect", once_key=lambda n: (n, 1))
    def effect(n: int) -> None:
        runs.append((n, current_claim().attempt))

    worker = dramatiq.Worker(broker, worker_timeout=100)
    worker.start()
    try:
        effect.send(7)
        effect.send(7)
        broker.join(effect.queue_name, timeout=30_000)
        worker.join()
    finally:
        worker.stop()
        ledger.engine.dispose()
    assert [(7, 1)] == runs
    assert SlotStatus.SENT == ledger.get("effect", 7, 1).status
    with pytest.raises(ValidationError) as raised:
        current_claim()
    assert "current_claim" == raised.value.field


def _stub_run(
    ledger: Any, mode: DeliveryMode, count: int = 1, max_retries: int = 20
) -> tuple[list[Any], list[BaseException]]:
    """Send ``count`` messages of one slot to a stub broker's worker with OnceMiddleware:
    the ledger's clock at each run of the actor, and the exceptions dramatiq stuffed into
    the messages it gave up."""
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from notifyonce.queues.dramatiq import OnceMiddleware

    broker = StubBroker()
    broker.add_middleware(OnceMiddleware(ledger, mode=mode))
    runs: list[Any] = []
    name = f"effect_{uuid.uuid4().hex[:8]}"

    @dramatiq.actor(
        broker=broker,
        actor_name=name,
        once_action="effect",
        once_key=lambda n: (n, 1),
        max_retries=max_retries,
        min_backoff=100,
        max_backoff=200,
    )
    def effect(n: int) -> None:
        runs.append(ledger.now())

    worker = dramatiq.Worker(broker, worker_timeout=50)
    worker.start()
    try:
        for _ in range(count):
            effect.send(7)
        broker.join(effect.queue_name, timeout=30_000, fail_fast=False)
        worker.join()
    finally:
        worker.stop()
    failed = [m._exception for m in broker.dead_letters if getattr(m, "_exception", None)]
    return runs, failed


@pytest.mark.sqlite
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_a_slot_held_by_a_live_worker_does_not_run_the_actor(
    tmp_path: Path, mode: DeliveryMode
) -> None:
    """A message whose slot another worker holds under a live lease does not run its
    actor, in both modes (dramatiq runs an actor after any hook exception that is not a
    MiddlewareError); at least once the message comes back after the lease and runs once,
    at most once it is skipped for good."""
    import datetime as dt

    import sqlalchemy as sa

    from notifyonce import Ledger

    ledger = Ledger(
        sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"), lease=dt.timedelta(seconds=1)
    )
    ledger.create_schema()
    holder = ledger.claim_slot("effect", 7, 1)
    assert holder is not None
    try:
        runs, failed = _stub_run(ledger, mode)
        held_runs = 1 if mode is DeliveryMode.AT_LEAST_ONCE else 0
        assert held_runs == len(runs)
        assert all(run >= holder.lease_until for run in runs), "ran while the slot was held"
        assert [] == failed
        # at least once the retry took the expired claim over: the holder's mark is refused
        assert (mode is DeliveryMode.AT_MOST_ONCE) == ledger.mark_sent(holder)
    finally:
        ledger.engine.dispose()


@pytest.mark.sqlite
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_a_missing_ledger_table_stops_the_message_and_names_the_fix(
    tmp_path: Path, mode: DeliveryMode
) -> None:
    """Without the ledger table the actor never runs, in both modes: the message fails
    (after its retries) with ClaimError, whose text says to run the migration."""
    import sqlalchemy as sa

    from notifyonce import Ledger
    from notifyonce.queues.dramatiq import ClaimError

    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    try:
        runs, failed = _stub_run(ledger, mode, max_retries=1)
    finally:
        ledger.engine.dispose()
    assert [] == runs
    assert 1 == len(failed)
    assert isinstance(failed[0], ClaimError)
    assert "notifyonce migrate" in str(failed[0])
