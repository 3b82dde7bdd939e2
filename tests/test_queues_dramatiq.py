"""notifyonce.queues.dramatiq: OnceMiddleware on real dramatiq workers on RabbitMQ (which
redelivers what a dropped connection did not acknowledge), SIGKILLed mid-message."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

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
