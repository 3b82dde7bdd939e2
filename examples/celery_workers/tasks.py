"""Trial reminders on Celery workers: many worker processes, one ledger, one rate store.

Each task sends one batch of reminders through the Notifier. Run as many workers as you
like, on as many hosts: the ledger makes every reminder go out once, and the rate store
keeps all of them together inside the bot's Telegram limits.

    celery -A tasks worker --concurrency 4          # in this folder, once per host
    python tasks.py 300                             # enqueue 300 reminders in batches

Settings (environment):
    CELERY_BROKER_URL          amqp://guest:guest@127.0.0.1:5672//  (RabbitMQ)
    NOTIFYONCE_DATABASE_URL    the ledger's and the rate store's database (async URL)
    NOTIFYONCE_BOT_TOKEN       the bot token
    NOTIFYONCE_BOT_API         the Bot API server (https://api.telegram.org)
    NOTIFYONCE_CELERY_QUEUE    the queue name (notifyonce)
"""

from __future__ import annotations

import asyncio
import os
import sys

from celery import Celery
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, DeliveryMode, Message, Notification, Notifier
from notifyonce.ratelimit import SQLRateStore
from notifyonce.telegram import TelegramSender

QUEUE = os.environ.get("NOTIFYONCE_CELERY_QUEUE", "notifyonce")
CYCLE = "2026-12-01"

app = Celery(
    "reminders", broker=os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
)
app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=True,  # a worker that dies mid-task leaves it for another; the ledger dedupes
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


async def send_batch_async(first: int, count: int) -> dict[str, int]:
    """Remind subjects first .. first + count - 1 (the engine and the sender live in this loop)."""
    engine = create_async_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        ledger = AsyncLedger(engine)
        store = SQLRateStore(engine)
        token = os.environ["NOTIFYONCE_BOT_TOKEN"]
        base_url = os.environ.get("NOTIFYONCE_BOT_API", "https://api.telegram.org")
        async with TelegramSender(token, base_url=base_url, rate_store=store) as sender:
            notifier = Notifier(ledger, sender, mode=DeliveryMode.AT_MOST_ONCE)
            items = [
                Notification(subject, CYCLE, Message(f"Your trial ends soon ({subject})"))
                for subject in range(first, first + count)
            ]
            report = await notifier.send_many("trial_6h", items)
        return {outcome.value: n for outcome, n in report.counts.items()}
    finally:
        await engine.dispose()


@app.task(name="tasks.send_batch")  # one name whether imported or run as a script
def send_batch(first: int, count: int) -> dict[str, int]:
    """A Celery task: one batch, in a fresh event loop."""
    return asyncio.run(send_batch_async(first, count))


async def create_tables() -> None:
    """The quick start; production runs notifyonce.migrations.upgrade instead."""
    engine = create_async_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        await AsyncLedger(engine).create_schema()
        await SQLRateStore(engine).create_schema()
    finally:
        await engine.dispose()


if __name__ == "__main__":
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    asyncio.run(create_tables())
    for first in range(1, total + 1, 25):
        send_batch.delay(first, min(25, total + 1 - first))
    print(f"enqueued {total} reminders on queue {QUEUE!r}")
