"""notifyonce.queues.arq: once_job on real arq workers on Redis (arq runs a job again once
its killed worker's in-progress mark expired), SIGKILLed mid-job.

arq 0.28 pins redis<6 and the dev extra needs redis 8 (taskiq-redis, kombu), so arq is
not in the dev environment: the storm installs it into a site directory of its own (kept
in pytest's cache, see ``site_of``) that only its worker processes put first on their
path. The wrapper itself imports nothing from arq, so its unit test runs without it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from notifyonce import Claim, DeliveryMode, SlotStatus, ValidationError

from ._databases import redis_url
from ._optional import site_of
from ._queue_storm import ROOT, Storm, check

ARQ = "arq==0.28.0"  # the release tested; pyproject's arq extra starts there


def _drop(url: str, queue: str) -> None:
    """Delete the test's queue and its jobs' keys (their ids start with the queue's name)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.delete(queue, f"{queue}:health-check", *client.scan_iter(f"arq:*{queue}*"))
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.sqlite
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_killed_arq_workers_never_double_at_most_once_never_lose_at_least_once(
    request: pytest.FixtureRequest, tmp_path: Path, mode: DeliveryMode
) -> None:
    """1,000 jobs on two arq workers on Redis, a worker SIGKILLed 10 times mid-run and its
    jobs run again by another once their in-progress marks expired: at most once, no side
    effect happened twice (0 doubles); at least once, every side effect happened (0 lost)
    and every slot ends sent."""
    site = site_of(request.config, ARQ, "arq")
    url = redis_url()
    queue = f"nfo_q_{uuid.uuid4().hex[:12]}"
    app = [sys.executable, "-m", "arq", "_arq_once_app.WorkerSettings"]
    storm = Storm(tmp_path, mode, app, {"NFO_QUEUE": queue, "NFO_BROKER": url}, site=[site])

    def enqueue(count: int) -> None:
        command = [sys.executable, "_arq_once_app.py", str(count)]
        subprocess.run(command, cwd=ROOT / "tests", env=storm.worker_env(), check=True)

    try:
        effects = storm.run(enqueue)
    finally:
        _drop(url, queue)
    print(check(storm, effects))


@pytest.mark.sqlite
async def test_once_job_run_twice_runs_its_body_once(tmp_path: Path) -> None:
    """A job under once_job, run twice with the same arguments as an arq worker runs it
    (``ctx`` first): the body runs once with the claim and ctx, keeps its name for arq to
    enqueue it by; an argument that cannot make a slot is refused before the body, naming
    it."""
    import datetime as dt

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger
    from notifyonce.queues.arq import once_job

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    runs: list[tuple[int, int]] = []

    @once_job(ledger, "effect", key=lambda n, at: (n, at))
    async def effect(claim: Claim, ctx: dict[str, Any], n: int, at: Any) -> int:
        runs.append((n, ctx["job_try"]))
        return n

    cycle = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    try:
        assert [7, None] == [await effect({"job_try": 1}, 7, cycle), await effect({}, 7, cycle)]
        assert [(7, 1)] == runs
        assert effect.__qualname__.endswith(".effect")  # arq names a job by it
        assert SlotStatus.SENT == (await ledger.get("effect", 7, cycle)).status
        with pytest.raises(ValidationError) as raised:
            await effect({"job_try": 1}, 8, dt.datetime(2026, 12, 1))  # naive
        assert [(7, 1)] == runs
        assert "cycle" == raised.value.field
    finally:
        await engine.dispose()
