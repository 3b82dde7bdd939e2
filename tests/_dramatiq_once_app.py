"""The dramatiq app of tests/test_queues_dramatiq.py, imported by the worker processes it
starts and kills: one actor under ``OnceMiddleware`` whose side effect is a line appended
to a file (the outside counter), with a pause before and after it so kills land mid-task."""

from __future__ import annotations

import os
import random
import time

import dramatiq
import sqlalchemy as sa
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from _queue_storm import record_effect, worker_ledger_options
from notifyonce import Ledger
from notifyonce.queues.dramatiq import OnceMiddleware, current_claim

QUEUE = os.environ["NFO_QUEUE"]


def make_ledger() -> Ledger:
    """This worker process's ledger."""
    url, options = worker_ledger_options()
    return Ledger(sa.create_engine(url), **options)


broker = RabbitmqBroker(url=os.environ["NFO_BROKER"])
broker.add_middleware(OnceMiddleware(make_ledger, mode=os.environ["NFO_MODE"], max_attempts=5))
dramatiq.set_broker(broker)


@dramatiq.actor(
    actor_name="once_test_effect",
    queue_name=QUEUE,
    once_action="effect",
    once_key=lambda n: (n, "2026-12"),
    max_retries=20,
    min_backoff=500,
    max_backoff=5000,
)
def effect(n: int) -> None:
    """The side effect: one line per run, written by one O_APPEND write."""
    time.sleep(random.uniform(0.0, 0.03))
    record_effect(n, current_claim().token)
    time.sleep(random.uniform(0.0, 0.03))
