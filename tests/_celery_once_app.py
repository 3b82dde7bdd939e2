"""The Celery app of tests/test_queues_celery.py, imported by the worker processes it
starts and kills: one task under ``once_task`` whose side effect is a line appended to a
file (the outside counter), with a pause before and after it so kills land mid-task."""

from __future__ import annotations

import os
import random
import time

import sqlalchemy as sa
from celery import Celery

from _queue_storm import record_effect, worker_ledger_options
from notifyonce import Claim, Ledger
from notifyonce.queues.celery import once_task

QUEUE = os.environ["NFO_QUEUE"]

app = Celery("once_test", broker=os.environ["NFO_BROKER"])
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Redis: a task unacknowledged for visibility_timeout goes back to the queue, but
    # only when a worker sweeps: by default every 10 s, and scanning on every 10th sweep
    # (so every 100 s), under a mutex that a worker SIGKILLed while holding it keeps for
    # 300 s; swept every second here, the mutex expiring in 10 s
    broker_transport_options={
        "visibility_timeout": 10,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 10,
    },
)


def make_ledger() -> Ledger:
    """This worker process's ledger (an engine must not cross the prefork pool's fork)."""
    url, options = worker_ledger_options()
    return Ledger(sa.create_engine(url), **options)


@once_task(
    app,
    make_ledger,
    "effect",
    key=lambda n: (n, "2026-12"),
    mode=os.environ["NFO_MODE"],
    max_attempts=5,
    name="once_test.effect",
)
def effect(claim: Claim, n: int) -> int:
    """The side effect: one line per run, written by one O_APPEND write (a SIGKILL cannot
    tear it)."""
    time.sleep(random.uniform(0.0, 0.03))
    record_effect(n, claim.token)
    time.sleep(random.uniform(0.0, 0.03))
    return n
