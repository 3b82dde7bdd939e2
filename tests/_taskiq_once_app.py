"""The taskiq app of tests/test_queues_taskiq.py, imported by the worker processes it
starts and kills: one task under ``once_task`` whose side effect is a line appended to a
file (the outside counter), with a pause before and after it so kills land mid-task."""

from __future__ import annotations

import asyncio
import os
import random

from sqlalchemy.ext.asyncio import create_async_engine
from taskiq_redis import RedisStreamBroker

from _queue_storm import record_effect, worker_ledger_options
from notifyonce import AsyncLedger, Claim
from notifyonce.queues.taskiq import once_task

QUEUE = os.environ["NFO_QUEUE"]

# A message a killed worker read and did not acknowledge is claimed by another consumer
# once it was idle_timeout idle (when that consumer next reads); every key under the
# test's names. Idle is counted from the delivery, not from the last sign of life: a
# message a live worker still runs or holds for its next free task slot is claimed too,
# and then runs twice. So idle_timeout is longer than a run including an at-least-once
# wait for a held slot (one lease and a second), and a read claims only as many
# messages as a worker runs at once (taskiq-redis's default, 100, is held for minutes
# by four task slots, claimed again and again, each copy waiting out a held slot).
broker = RedisStreamBroker(
    os.environ["NFO_BROKER"],
    queue_name=QUEUE,
    consumer_group_name=QUEUE,
    idle_timeout=15_000,
    unacknowledged_batch_size=4,
    unacknowledged_lock_timeout=5,
    xread_count=4,
    xread_block=500,
)


def make_ledger() -> AsyncLedger:
    """This worker process's ledger."""
    url, options = worker_ledger_options()
    return AsyncLedger(create_async_engine(url.replace("sqlite:", "sqlite+aiosqlite:")), **options)


@once_task(
    broker,
    make_ledger,
    "effect",
    key=lambda n: (n, "2026-12"),
    mode=os.environ["NFO_MODE"],
    max_attempts=5,
    task_name="once_test.effect",
)
async def effect(claim: Claim, n: int) -> int:
    """The side effect: one line per run, written by one O_APPEND write."""
    await asyncio.sleep(random.uniform(0.0, 0.03))
    record_effect(n, claim.token)
    await asyncio.sleep(random.uniform(0.0, 0.03))
    return n


@broker.task(task_name="once_test.nudge")
async def nudge() -> None:
    """Nothing: a message that makes the consumers read, and so reclaim idle messages."""
