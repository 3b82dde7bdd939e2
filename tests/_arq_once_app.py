"""The arq app of tests/test_queues_arq.py, imported by the worker processes it starts and
kills: one job under ``once_job`` whose side effect is a line appended to a file (the
outside counter), with a pause before and after it so kills land mid-job. arq runs in
its own site directory (arq pins redis<6, the dev extra needs redis 8), put first on the
path by the test."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import func
from sqlalchemy.ext.asyncio import create_async_engine

from _queue_storm import record_effect, worker_ledger_options
from notifyonce import AsyncLedger, Claim
from notifyonce.queues.arq import once_job

QUEUE = os.environ["NFO_QUEUE"]
REDIS = RedisSettings.from_dsn(os.environ["NFO_BROKER"])


def make_ledger() -> AsyncLedger:
    """This worker process's ledger."""
    url, options = worker_ledger_options()
    return AsyncLedger(create_async_engine(url.replace("sqlite:", "sqlite+aiosqlite:")), **options)


@once_job(
    make_ledger, "effect", key=lambda n: (n, "2026-12"), mode=os.environ["NFO_MODE"], max_attempts=5
)
async def effect(claim: Claim, ctx: dict[str, Any], n: int) -> int:
    """The side effect: one line per run, written by one O_APPEND write."""
    await asyncio.sleep(random.uniform(0.0, 0.03))
    record_effect(n, claim.token)
    await asyncio.sleep(random.uniform(0.0, 0.03))
    return n


class WorkerSettings:
    """Two workers' settings: a killed worker's job runs again once its in-progress mark
    (the job's timeout plus 10 s) expired."""

    functions = (func(effect, name="once_test_effect", timeout=12, max_tries=50),)
    redis_settings = REDIS
    queue_name = QUEUE
    max_jobs = 8
    poll_delay = 0.2
    keep_result = 0


async def enqueue(count: int) -> None:
    """Enqueue ``count`` jobs, one per subject, their ids under the queue's name."""
    pool = await create_pool(REDIS, default_queue_name=QUEUE)
    try:
        for n in range(count):
            await pool.enqueue_job("once_test_effect", n, _job_id=f"{QUEUE}:{n}")
    finally:
        await pool.aclose()


if __name__ == "__main__":
    asyncio.run(enqueue(int(sys.argv[1])))
