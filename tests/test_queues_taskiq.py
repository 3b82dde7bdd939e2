"""notifyonce.queues.taskiq: once_task on real taskiq workers (taskiq-redis's stream
broker, which redelivers what a dead consumer did not acknowledge), SIGKILLed mid-task."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from notifyonce import Claim, DeliveryMode, SlotStatus

from ._databases import IN_CI, redis_url
from ._queue_storm import Storm, check

if not IN_CI:  # in CI a missing dev dependency is a failure, not a skip
    pytest.importorskip("taskiq")

from notifyonce.queues.taskiq import once_task


def _drop(url: str, queue: str) -> None:
    """Delete the test's stream and its reclaim lock."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.delete(queue, f"autoclaim:{queue}:{queue}")
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.sqlite
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_killed_taskiq_workers_never_double_at_most_once_never_lose_at_least_once(
    tmp_path: Path, mode: DeliveryMode
) -> None:
    """1,000 tasks on two taskiq workers (two processes each) on Redis streams, a whole
    worker SIGKILLed 10 times mid-run and its unacknowledged tasks claimed by another
    consumer: at most once, no side effect happened twice (0 doubles); at least once,
    every side effect happened (0 lost) and every slot ends sent."""
    if not IN_CI:  # a test dependency (the dev extra), not in the lowest-versions legs
        pytest.importorskip("taskiq_redis")
    from taskiq.kicker import AsyncKicker
    from taskiq_redis import RedisStreamBroker

    url = redis_url()
    queue = f"nfo_q_{uuid.uuid4().hex[:12]}"
    command = [sys.executable, "-m", "taskiq", "worker", "_taskiq_once_app:broker"]
    command += ["--workers", "2", "--max-async-tasks", "4", "--log-level", "WARNING"]
    storm = Storm(tmp_path, mode, command, {"NFO_QUEUE": queue, "NFO_BROKER": url})

    async def kick(names: list[tuple[str, tuple[int, ...]]]) -> None:
        broker = RedisStreamBroker(url, queue_name=queue, consumer_group_name=queue)
        await broker.startup()  # the consumer group exists before the first message
        try:
            for name, args in names:
                await AsyncKicker(name, broker, {}).kiq(*args)
        finally:
            await broker.shutdown()

    def enqueue(count: int) -> None:
        asyncio.run(kick([("once_test.effect", (n,)) for n in range(count)]))

    def nudge() -> None:
        asyncio.run(kick([("once_test.nudge", ())]))

    try:
        effects = storm.run(enqueue, nudge=nudge)
    finally:
        _drop(url, queue)
    print(check(storm, effects))


@pytest.mark.sqlite
async def test_once_task_delivered_twice_runs_its_body_once(tmp_path: Path) -> None:
    """A taskiq task under once_task, run twice with the same arguments as a worker runs
    it: the body runs once, the second run skips it; the claim is not a task parameter."""
    import inspect

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    from taskiq import InMemoryBroker

    broker = InMemoryBroker()
    runs: list[int] = []

    @once_task(broker, ledger, "effect", key=lambda n: (n, 1), task_name="twice.effect")
    async def effect(claim: Claim, n: int) -> int:
        runs.append(n)
        return n

    try:
        assert [7, None] == [await effect.original_func(7), await effect.original_func(7)]
        assert [7] == runs
        assert ["n"] == list(inspect.signature(effect.original_func).parameters)
        record = await ledger.get("effect", 7, 1)
        assert SlotStatus.SENT == record.status
    finally:
        await engine.dispose()
