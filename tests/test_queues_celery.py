"""notifyonce.queues.celery: once_task on real Celery workers, SIGKILLed mid-task.

The workers run on RabbitMQ (a killed worker's unacknowledged task is redelivered when
its connection drops) and on Redis (redelivered after the visibility timeout); the task's
side effect is counted in a file outside the ledger.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa

from notifyonce import Claim, DeliveryMode, Ledger, ValidationError, ValidationTypeError

from ._databases import IN_CI
from ._queue_storm import Storm, check

if not IN_CI:  # in CI a missing dev dependency is a failure, not a skip
    pytest.importorskip("celery")

from notifyonce.queues.celery import once_task

AMQP = os.environ.get("NOTIFYONCE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS = os.environ.get("NOTIFYONCE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKERS = {"rabbitmq": AMQP, "redis": REDIS}


def _answers(url: str) -> None:
    """Skip (fail in CI) unless the broker at ``url`` accepts a connection."""
    where = urlparse(url)
    try:
        with socket.create_connection((where.hostname or "127.0.0.1", where.port or 0), 2):
            return
    except OSError:
        message = f"no broker listening at {where.hostname}:{where.port} (make test starts it)"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)


def _clean(broker: str, queue: str) -> None:
    """Delete the test's queue (RabbitMQ), or its list and binding keys (Redis)."""
    if broker == "rabbitmq":
        from kombu import Connection

        with Connection(AMQP) as connection:
            connection.default_channel.queue_delete(queue)
        return
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        client.delete(queue, f"_kombu.binding.{queue}")
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.sqlite
@pytest.mark.parametrize("broker", ["rabbitmq", "redis"])
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_killed_celery_workers_never_double_at_most_once_never_lose_at_least_once(
    tmp_path: Path, broker: str, mode: DeliveryMode
) -> None:
    """1,000 tasks on two Celery workers, a whole worker SIGKILLed 10 times mid-run and its
    tasks redelivered: at most once, no side effect happened twice (0 doubles); at least
    once, every side effect happened (0 lost) and every slot ends sent, but (on Redis) a
    task the broker lost before any worker ran it."""
    _answers(BROKERS[broker])
    queue = f"nfo_q_{uuid.uuid4().hex[:12]}"
    command = [sys.executable, "-m", "celery", "-A", "_celery_once_app", "worker", "-Q", queue]
    command += ["--concurrency", "2", "--without-gossip", "--without-mingle"]
    command += ["--without-heartbeat", "-n", f"w-{queue}@%h", "--loglevel", "WARNING"]
    env = {"NFO_QUEUE": queue, "NFO_BROKER": BROKERS[broker]}
    # kombu's Redis transport pops a message (BRPOP) before it records it unacknowledged:
    # a worker killed between the two loses it (celery/celery#7950, celery/kombu#305).
    # Such a slot never gets a row; the storm settles once the ledger stood still for
    # two visibility timeouts, and checks that only such slots are missing.
    may_lose = 20.0 if broker == "redis" else 0.0
    storm = Storm(tmp_path, mode, command, env, may_lose=may_lose)

    def enqueue(count: int) -> None:
        from celery import Celery

        sender = Celery("enqueue", broker=BROKERS[broker])
        with sender.connection_for_write() as connection:
            for n in range(count):
                sender.send_task("once_test.effect", args=[n], queue=queue, connection=connection)

    try:
        effects = storm.run(enqueue)
    finally:
        _clean(broker, queue)
    print(check(storm, effects))


@pytest.mark.sqlite
def test_once_task_registers_a_task_that_is_redelivered_when_its_worker_dies(
    tmp_path: Path,
) -> None:
    """once_task registers its task with acks_late and reject_on_worker_lost (a killed
    worker's task goes back to the queue) and the caller's own options; the task delivered
    twice runs its body once; a ledger that is neither a Ledger nor a function making one
    is refused, naming it."""
    from celery import Celery

    app = Celery("options", broker=AMQP)
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()

    @once_task(
        app, ledger, "effect", key=lambda n: (n, 1), name="options.effect", ignore_result=True
    )
    def effect(claim: Claim, n: int) -> int:
        return n

    task = app.tasks["options.effect"]
    assert (True, True, True) == (task.acks_late, task.reject_on_worker_lost, task.ignore_result)
    # the task as a worker runs it, delivered twice: the body runs once
    assert [7, None] == [effect.run(7), effect.run(7)]
    with pytest.raises(ValidationTypeError) as raised:
        once_task(app, "sqlite://", "effect", key=lambda n: (n, 1))  # type: ignore[arg-type]
    assert "ledger" == raised.value.field
    ledger.engine.dispose()


@pytest.mark.sqlite
def test_a_task_with_a_bad_option_is_refused_when_declared(tmp_path: Path) -> None:
    """once_task refuses a bad mode, max_attempts or key when the task is declared (not
    when a worker first runs it), naming the option."""
    from celery import Celery

    app = Celery("bad", broker=AMQP)
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    fields = []
    for options in (
        {"key": lambda n: (n, 1), "mode": "twice"},
        {"key": lambda n: (n, 1), "max_attempts": 0},
        {"key": "n"},
    ):
        with pytest.raises(ValidationError) as raised:
            once_task(app, ledger, "effect", **options)  # type: ignore[arg-type]
        fields.append(raised.value.field)
    assert ["mode", "max_attempts", "key"] == fields
    ledger.engine.dispose()
