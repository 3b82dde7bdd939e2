"""The Celery app of tests/test_queues_celery.py, imported by the worker processes it
starts and kills: one task under ``once_task`` whose side effect is a line appended to a
file (the outside counter), with a pause before and after it so kills land mid-task."""

from __future__ import annotations

import datetime as dt
import os
import random
import time

import sqlalchemy as sa
from celery import Celery

from notifyonce import Claim, Ledger
from notifyonce.queues.celery import once_task

QUEUE = os.environ["NFO_QUEUE"]
COUNTER = os.environ["NFO_COUNTER"]

app = Celery("once_test", broker=os.environ["NFO_BROKER"])
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Redis: a task unacknowledged this long goes back to the queue; every key of the
    # test under its own prefix (the suite runs in parallel)
    broker_transport_options={"visibility_timeout": 10},
)


def make_ledger() -> Ledger:
    """This worker process's ledger (an engine must not cross the prefork pool's fork)."""
    lease = dt.timedelta(seconds=float(os.environ["NFO_LEASE"]))
    engine = sa.create_engine(os.environ["NFO_DATABASE"])
    return Ledger(engine, table_name=os.environ["NFO_TABLE"], lease=lease)


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
    fd = os.open(COUNTER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{n} {claim.token}\n".encode())
    finally:
        os.close(fd)
    time.sleep(random.uniform(0.0, 0.03))
    return n
