"""The shared rate store restarts under four workers: the limit holds and nobody stalls.

Four worker processes (tests/_rate_worker.py) send through one bot's budget kept in a
private Redis, or in a private PostgreSQL or MariaDB (the SQL store), that is restarted
three times while they send, down for a second each time. A restarted Redis has
forgotten every booked turn. The local Bot API server counts the deliveries as Telegram would.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from notifyonce.testing import BotAPIServer

from ._private_servers import PrivateMariaDB, PrivatePostgres, PrivateRedis

pytestmark = [pytest.mark.slow, pytest.mark.storm]

WORKER = Path(__file__).with_name("_rate_worker.py")
PER_WORKER = 250
RESTARTS = 3
CAP = 30


@pytest.fixture(
    params=[
        pytest.param("redis", id="redis"),
        pytest.param("sql-postgres", marks=pytest.mark.postgres, id="sql-postgres"),
        pytest.param("sql-mariadb", marks=pytest.mark.mariadb, id="sql-mariadb"),
    ]
)
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A private server and how a worker opens the store on it."""
    if request.param == "redis":
        with PrivateRedis() as redis_server:
            prefix = f"nfo_t_{uuid.uuid4().hex[:12]}:"
            yield redis_server, {"store": "redis", "url": redis_server.url, "prefix": prefix}
        return
    private = PrivatePostgres if request.param == "sql-postgres" else PrivateMariaDB
    with private() as db:
        from sqlalchemy.ext.asyncio import create_async_engine

        from notifyonce.ratelimit import SQLRateStore

        async def create() -> None:
            engine = create_async_engine(db.async_url)
            await SQLRateStore(engine, table_name="rate").create_schema()
            await engine.dispose()

        asyncio.run(create())
        yield db, {"store": "sql", "url": db.async_url, "table": "rate"}


# SQLAlchemy's pool logs, with a traceback, a connection whose rollback failed as it was
# checked in: the server went away between the end of a transaction and the check-in. The
# pool then discards that connection; nothing of the worker's failed.
_POOL_RESET = re.compile(
    r"Exception during reset or similar\nTraceback \(most recent call last\):\n"
    r"(?:[ \t].*\n)*.*(?:\n|$)"
)


def _without_pool_resets(err: str) -> str:
    """A worker's stderr without the pool's logs of connections it discarded."""
    return _POOL_RESET.sub("", err)


def test_four_workers_go_on_through_three_restarts_of_their_rate_store(
    store: tuple[Any, dict[str, Any]],
) -> None:
    """Three restarts of the store under 4 workers x 250 messages: every message delivered
    once, no worker fails or stalls, and the server never sees more than the bot's cap in
    a second (measured: the busiest second is printed)."""
    server, config = store
    restarted: list[float] = []
    with BotAPIServer(bot_per_second=CAP, flood_retry_after=1) as api:
        start_at = time.time() + 4.0
        configs = [
            {
                **config,
                "server": api.url,
                "worker": worker,
                "count": PER_WORKER,
                "start_at": start_at,
                "budget": 120.0,
            }
            for worker in range(4)
        ]
        processes = [
            subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(c)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for c in configs
        ]
        outputs: list[tuple[str, str]] = [("", "")] * 4

        def collect(n: int) -> None:
            outputs[n] = processes[n].communicate(timeout=240)

        readers = [threading.Thread(target=collect, args=(n,)) for n in range(4)]
        for reader in readers:
            reader.start()
        try:
            total = 4 * PER_WORKER
            for share in (0.2, 0.45, 0.7):
                deadline = time.monotonic() + 120
                while len(api.deliveries) < share * total and time.monotonic() < deadline:
                    time.sleep(0.05)
                began = time.monotonic()
                server.restart(down=1.0)
                restarted.append(round(time.monotonic() - began, 2))
        finally:
            for reader in readers:
                reader.join(260)
            for process in processes:
                if process.poll() is None:
                    process.kill()
        deliveries = api.deliveries
        busiest = api.busiest_window(1.0)
        floods = sum(1 for r in api.requests if r.reply.status == 429)

    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    errs = [err for _, err in outputs]
    print(f"restarts {restarted}; busiest second {busiest}; 429s {floods}")
    print("\n".join(line for err in errs for line in err.splitlines() if "rate store" in line))
    assert RESTARTS == len(restarted)
    assert [[]] * 4 == [report["errors"] for report in reports]
    texts = sorted(d.text for d in deliveries)
    assert sorted(f"w{w}-m{n}" for w in range(4) for n in range(PER_WORKER)) == texts
    assert busiest <= CAP
    for err in errs:
        away = err.count("is away")
        assert away == err.count("is back") <= RESTARTS, err[-2000:]
        assert "Traceback" not in _without_pool_resets(err), err[-2000:]
