"""Real processes: several workers at once, and workers killed with SIGKILL mid-send.

Workers are separate Python processes (tests/_crash_worker.py) sending through
TelegramSender to a local Bot-API-shaped server that sometimes drops the connection after
delivering and sometimes answers 429. Every loop is bounded in count and time; all traffic
stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce.testing import BotAPIServer, Reply

from ._databases import Backend, drop_table, make_backend

WORKER = Path(__file__).with_name("_crash_worker.py")
SUBJECTS = 40

pytestmark = pytest.mark.slow


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres-asyncpg", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def table(backend: Backend) -> object:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)


async def spawn(config: dict[str, object]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        json.dumps(config),
        env={**os.environ, "PYTHONPATH": str(WORKER.parent.parent)},
    )


def flaky_server(random_state: int) -> tuple[BotAPIServer, int]:
    """A server whose first answer to a chat is sometimes lost after delivery, or a 429."""
    rng = random.Random(random_state)
    server = BotAPIServer(latency=0.03).start()
    drops = 0
    for chat in range(1, SUBJECTS + 1):
        roll = rng.random()
        if roll < 0.25:
            server.script(str(chat), [Reply.drop_after_delivery()])
            drops += 1
        elif roll < 0.4:
            server.script(str(chat), [Reply.flood(1)])
    return server, drops


def per_chat(server: BotAPIServer) -> Counter[str]:
    return Counter(d.chat_id for d in server.deliveries)


async def test_parallel_worker_processes_send_each_slot_once(backend: Backend, table: str) -> None:
    """Four worker processes over the same notifications: every chat gets exactly one message."""
    server = BotAPIServer(latency=0.01).start()
    try:
        config = {
            "db_url": backend.async_url, "table": table, "server": server.url,
            "mode": "at_most_once", "lease": 30, "max_attempts": 3,
            "subjects": SUBJECTS, "seconds": 60,
        }  # fmt: skip
        await setup_table(backend, table)
        workers = [await spawn(config) for _ in range(4)]
        codes = await asyncio.wait_for(asyncio.gather(*(w.wait() for w in workers)), 120)
        assert [0, 0, 0, 0] == codes
        assert {str(s): 1 for s in range(1, SUBJECTS + 1)} == dict(per_chat(server))
    finally:
        server.stop()


async def setup_table(backend: Backend, table: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger

    engine = create_async_engine(backend.async_url)
    await AsyncLedger(engine, table_name=table).create_schema()
    await engine.dispose()


async def slot_attempts(backend: Backend, table: str) -> dict[str, int]:
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT subject, attempt FROM {table}")).all()
    engine.dispose()
    return {str(subject): int(attempt) for subject, attempt in rows}


async def kill_and_respawn(
    config: dict[str, object], workers: int, kills: int, random_state: int
) -> tuple[list[int], int]:
    """Run ``workers`` processes, SIGKILL one at random ``kills`` times (respawning it),
    then let them finish. Returns the exit codes of the last generation and the kills made."""
    rng = random.Random(random_state)
    alive = [await spawn(config) for _ in range(workers)]
    done = 0
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.15, 0.5))
        running = [p for p in alive if p.returncode is None]
        if not running:
            break
        victim = rng.choice(running)
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        done += 1
        alive[alive.index(victim)] = await spawn(config)
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in alive)), 120)
    return list(codes), done


@pytest.mark.parametrize("random_state", [11])
async def test_sigkill_at_most_once_never_duplicates(
    backend: Backend, table: str, random_state: int
) -> None:
    """At most once: workers killed at random while sending; no chat ever gets two messages."""
    server, _ = flaky_server(random_state)
    try:
        config = {
            "db_url": backend.async_url, "table": table, "server": server.url,
            "mode": "at_most_once", "lease": 1.5, "max_attempts": 3,
            "subjects": SUBJECTS, "seconds": 45,
        }  # fmt: skip
        await setup_table(backend, table)
        codes, kills = await kill_and_respawn(config, workers=3, kills=6, random_state=random_state)
        assert all(code == 0 for code in codes), codes
        assert kills > 0
        counts = per_chat(server)
        assert [] == [chat for chat, n in counts.items() if n > 1]
        # Most chats were served despite the kills; a lost one is an UNKNOWN, never a dup.
        assert len(counts) >= SUBJECTS // 2
    finally:
        server.stop()


@pytest.mark.parametrize("random_state", [12])
async def test_sigkill_at_least_once_loses_nothing(
    backend: Backend, table: str, random_state: int
) -> None:
    """At least once: every chat is served; duplicates are no more than the uncertain outcomes."""
    server, drops = flaky_server(random_state)
    try:
        config = {
            "db_url": backend.async_url, "table": table, "server": server.url,
            "mode": "at_least_once", "lease": 1.5, "max_attempts": 10,
            "subjects": SUBJECTS, "seconds": 45,
        }  # fmt: skip
        await setup_table(backend, table)
        codes, kills = await kill_and_respawn(config, workers=3, kills=6, random_state=random_state)
        assert all(code == 0 for code in codes), codes
        counts = per_chat(server)
        assert {str(s) for s in range(1, SUBJECTS + 1)} == set(counts)
        duplicates = sum(n - 1 for n in counts.values())
        dropped = sum(1 for r in server.requests if r.reply.drop == "after_delivery")
        assert drops == dropped
        # Each claim of a slot sends at most once, so a chat's deliveries never exceed the
        # slot's attempts, which never exceed max_attempts.
        attempts = await slot_attempts(backend, table)
        assert [] == [c for c, n in counts.items() if n > attempts[c]]
        assert max(attempts.values()) <= 10
        # An uncertain outcome is an answer lost after delivery, or a send the worker made
        # but could not record before it was killed: at most one batch (8) per kill.
        assert duplicates <= dropped + kills * 8
    finally:
        server.stop()
