"""Real processes: several workers at once, and workers killed with SIGKILL mid-send.

Workers are separate Python processes (tests/_crash_worker.py) sending through
TelegramSender to a local Bot-API-shaped server that sometimes drops the connection after
delivering and sometimes answers 429. Every worker sends as its own bot id, so the server's
``on_request`` hook knows whose request is in flight: half of the kills are aimed from that
hook, on the server's thread, after a delivery and before its answer is written, so they
provably land mid-send; the other half land at random moments (claiming, recording,
sweeping). Killed workers are restarted. Every loop is bounded in count and time; all
traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from notifyonce.testing import BotAPIServer, Reply, Request

from ._databases import Backend, backend_params, drop_table, make_backend

WORKER = Path(__file__).with_name("_crash_worker.py")
PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
SUBJECTS = 40

pytestmark = pytest.mark.slow


@pytest.fixture(params=backend_params(["sqlite", "postgres-asyncpg", "mariadb"]))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def table(backend: Backend) -> Iterator[str]:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)


class Workers:
    """Worker processes, one bot id each, which the server's hook can SIGKILL mid-send."""

    def __init__(self, config: dict[str, object]) -> None:
        self.config = config
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._procs: dict[int, asyncio.subprocess.Process] = {}  # bot id -> live worker
        self._armed = False
        self._hit = threading.Event()
        self._sending = threading.Event()  # set by the first request of any worker
        self._victim: asyncio.subprocess.Process | None = None
        self.mid_send: list[Request] = []  # the requests in flight when a worker was killed
        self.random_kills = 0

    @property
    def kills(self) -> int:
        return len(self.mid_send) + self.random_kills

    async def spawn(self) -> None:
        bot_id = next(self._ids)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            json.dumps({**self.config, "bot_id": bot_id}),
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKER.parent.parent), *PATH])},
        )
        with self._lock:
            self._procs[bot_id] = proc

    def on_request(self, request: Request) -> None:
        """The server's hook: when armed, kill the worker whose send this is, right now."""
        self._sending.set()
        with self._lock:
            proc = self._procs.get(request.bot_id) if request.bot_id is not None else None
            if not (self._armed and request.reply.delivers) or proc is None:
                return
            if proc.returncode is not None:
                return
            # The server has delivered and not answered: the worker is mid-send.
            os.kill(proc.pid, signal.SIGKILL)
            del self._procs[request.bot_id]  # type: ignore[arg-type]
            self._armed = False
            self._victim = proc
            self.mid_send.append(request)
            self._hit.set()

    async def _aimed_kill(self, patience: float) -> asyncio.subprocess.Process | None:
        with self._lock:
            self._hit.clear()
            self._armed = True
        for _ in range(int(patience / 0.005)):
            if self._hit.is_set():
                break
            await asyncio.sleep(0.005)
        with self._lock:
            self._armed = False
            return self._victim if self._hit.is_set() else None

    def _random_kill(self, rng: random.Random) -> asyncio.subprocess.Process | None:
        with self._lock:
            running = [b for b, p in self._procs.items() if p.returncode is None]
            if not running:
                return None
            proc = self._procs.pop(rng.choice(running))
            os.kill(proc.pid, signal.SIGKILL)
            self.random_kills += 1
            return proc

    async def run(
        self,
        workers: int,
        kills: int,
        randomness: int,
        pause: tuple[float, float] = (0.15, 0.5),
        patience: float = 1.0,
    ) -> list[int]:
        """Start ``workers``, make ``kills`` kills (even ones aimed mid-send, waiting up to
        ``patience`` seconds for a send; odd ones at a random moment), restarting each
        victim; return the exit codes of the last ones."""
        rng = random.Random(randomness)
        for _ in range(workers):
            await self.spawn()
        for _ in range(3000):  # the first kill waits for the first send (bounded: 30 s)
            if self._sending.is_set():
                break
            await asyncio.sleep(0.01)
        for n in range(kills):
            await asyncio.sleep(rng.uniform(*pause))
            victim = await self._aimed_kill(patience) if n % 2 == 0 else None
            victim = victim or self._random_kill(rng)  # nothing in flight: kill anyway
            if victim is None:
                break  # every worker finished
            await victim.wait()
            await self.spawn()
        with self._lock:
            last = list(self._procs.values())
        return list(await asyncio.wait_for(asyncio.gather(*(p.wait() for p in last)), 150))


async def setup_table(backend: Backend, table: str, pgbouncer: bool = False) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, pgbouncer_options

    options = pgbouncer_options(backend.async_url) if pgbouncer else {}
    engine = create_async_engine(backend.async_url, **options)
    await AsyncLedger(engine, table_name=table).create_schema()
    await engine.dispose()


async def slot_attempts(backend: Backend, table: str) -> dict[str, int]:
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT subject, attempt FROM {table}")).all()
    engine.dispose()
    # MariaDB hands the (binary-collated) subject column back as bytes.
    return {
        subject.decode() if isinstance(subject, bytes) else str(subject): int(attempt)
        for subject, attempt in rows
    }


def flaky_server(
    randomness: int, chats: int, drop: float, flood: float, latency: float, hook: Any = None
) -> BotAPIServer:
    """A server whose first answer to a chat is sometimes lost after delivery, or a 429."""
    rng = random.Random(randomness)
    server = BotAPIServer(latency=latency, on_request=hook).start()
    for chat in range(1, chats + 1):
        roll = rng.random()
        if roll < drop:
            server.script(str(chat), [Reply.drop_after_delivery()])
        elif roll < drop + flood:
            server.script(str(chat), [Reply.flood(1)])
    return server


@dataclass(frozen=True)
class Figures:
    """What a run did, from the server's side."""

    chats: int
    kills: int
    mid_send: int
    lost: int  # chats that never got their message
    duplicates: int  # deliveries beyond the first, over all chats
    dropped: int  # answers dropped after a delivery
    seconds: float

    @classmethod
    def of(cls, server: BotAPIServer, chats: int, workers: Workers, started: float) -> Figures:
        counts = Counter(d.chat_id for d in server.deliveries)
        return cls(
            chats=chats,
            kills=workers.kills,
            mid_send=len(workers.mid_send),
            lost=chats - len(counts),
            duplicates=sum(n - 1 for n in counts.values()),
            dropped=sum(1 for r in server.requests if r.reply.drop == "after_delivery"),
            seconds=round(time.monotonic() - started, 1),
        )


@pytest.mark.storm
async def test_parallel_worker_processes_send_each_slot_once(backend: Backend, table: str) -> None:
    """Four worker processes over the same notifications: every chat gets exactly one message."""
    server = BotAPIServer(latency=0.01).start()
    try:
        config = {
            "db_url": backend.async_url, "table": table, "server": server.url,
            "mode": "at_most_once", "lease": 30, "max_attempts": 3,
            "subjects": SUBJECTS, "seconds": 60, "batch_size": 8, "concurrency": 8,
        }  # fmt: skip
        await setup_table(backend, table)
        codes = await Workers(config).run(workers=4, kills=0, randomness=0)
        assert [0, 0, 0, 0] == codes
        counts = Counter(d.chat_id for d in server.deliveries)
        assert {str(s): 1 for s in range(1, SUBJECTS + 1)} == dict(counts)
    finally:
        server.stop()


@dataclass(frozen=True)
class Storm:
    """A kill-and-restart run: its workers, its kills, its flaky server."""

    chats: int
    workers: int
    kills: int
    drop: float  # share of chats whose first answer is dropped after delivery
    flood: float  # share of chats whose first answer is a 429
    latency: float  # the server's answer delay
    pause: tuple[float, float]  # seconds between kills
    patience: float  # how long an aimed kill waits for a delivered request
    options: dict[str, object]  # worker options: lease, max_attempts, batch_size, ...

    async def run(
        self, backend: Backend, table: str, mode: str, randomness: int
    ) -> tuple[Figures, Counter[str]]:
        """Run it; return the figures and the deliveries per chat, as the server saw them."""
        config = {
            "db_url": backend.async_url, "table": table, "mode": mode,
            "subjects": self.chats, **self.options,
        }  # fmt: skip
        workers = Workers(config)
        hook = workers.on_request
        server = flaky_server(randomness, self.chats, self.drop, self.flood, self.latency, hook)
        try:
            config["server"] = server.url
            await setup_table(backend, table, pgbouncer=bool(self.options.get("pgbouncer")))
            started = time.monotonic()
            codes = await workers.run(
                self.workers, self.kills, randomness, self.pause, self.patience
            )
            figures = Figures.of(server, self.chats, workers, started)
            print(f"storm {mode}: {figures}")  # shown with -s, and in the failure report
            assert all(code == 0 for code in codes), (codes, figures)
            return figures, Counter(d.chat_id for d in server.deliveries)
        finally:
            server.stop()


# 40 chats, 6 kills (3 aimed mid-send), a quarter of first answers dropped, 15% 429s.
SMALL = Storm(
    chats=SUBJECTS, workers=3, kills=6, drop=0.25, flood=0.15, latency=0.03,
    pause=(0.05, 0.3), patience=3.0,
    options={"lease": 1.5, "max_attempts": 10, "seconds": 45, "batch_size": 8,
             "concurrency": 8},
)  # fmt: skip


async def test_sigkill_at_most_once_never_duplicates(backend: Backend, table: str) -> None:
    """At most once: workers killed mid-send and at random; no chat ever gets two messages."""
    figures, _ = await SMALL.run(backend, table, "at_most_once", randomness=11)
    assert figures.mid_send >= 1, figures  # at least one kill provably landed mid-send
    assert 0 == figures.duplicates, figures
    # A lost chat is an UNKNOWN, never a dup: at most the victim's batch (8) per kill.
    assert figures.lost <= figures.kills * 8, figures


async def test_sigkill_at_least_once_loses_nothing(backend: Backend, table: str) -> None:
    """At least once: workers killed mid-send and at random; every chat is served, and
    duplicates are bounded by the uncertain outcomes."""
    figures, counts = await SMALL.run(backend, table, "at_least_once", randomness=12)
    assert (figures.kills >= 2, figures.mid_send >= 1) == (True, True), figures
    assert 0 == figures.lost, figures
    # Each claim of a slot sends at most once, so a chat's deliveries never exceed the
    # slot's attempts, which never exceed max_attempts.
    attempts = await slot_attempts(backend, table)
    assert [] == [c for c, n in counts.items() if n > attempts[c]]
    assert max(attempts.values()) <= 10
    # An uncertain outcome is an answer lost after delivery, or a send the worker made
    # but could not record before it was killed: at most one batch (8) per kill.
    assert figures.duplicates <= figures.dropped + figures.kills * 8, figures


# -- the storm: the blast radius of a kill, at realistic scale --------------------------------

STORM_CHATS = 1000
STORM_KILLS = 24


@pytest.fixture
def storm_table(tmp_path: Path) -> Iterator[tuple[Backend, str]]:
    backend = make_backend("postgres-asyncpg", tmp_path)
    name = backend.unique_table()
    yield backend, name
    drop_table(backend, name)


# Issue-scale: 4 workers, 1,000 chats, 24 SIGKILLs (half aimed mid-send), each worker at
# Telegram's 30 msg/s, ~3% of answers dropped after delivering and ~2% answered with 429.
STORM = Storm(
    chats=STORM_CHATS, workers=4, kills=STORM_KILLS, drop=0.03, flood=0.02, latency=0.005,
    pause=(0.08, 0.25), patience=1.0,
    options={"lease": 2.0, "max_attempts": 10, "seconds": 75, "rate_limit": True},
)  # fmt: skip


@pytest.mark.postgres
@pytest.mark.storm
async def test_storm_at_most_once_loses_only_what_was_in_flight(
    storm_table: tuple[Backend, str],
) -> None:
    """At most once under a SIGKILL storm: no duplicate, and at most 3 chats lost per kill
    (the sends in flight), not whole batches of claims."""
    figures, _ = await STORM.run(*storm_table, mode="at_most_once", randomness=21)
    assert 0 == figures.duplicates, figures
    assert figures.lost <= 3 * figures.kills, figures
    assert (figures.kills >= 20, figures.mid_send >= 1) == (True, True), figures


@pytest.mark.postgres
@pytest.mark.storm
async def test_storm_at_least_once_repeats_only_what_was_in_flight(
    storm_table: tuple[Backend, str],
) -> None:
    """At least once under a SIGKILL storm: nothing lost, and extra deliveries at most the
    answers dropped after delivery plus 3 per kill."""
    figures, _ = await STORM.run(*storm_table, mode="at_least_once", randomness=22)
    assert 0 == figures.lost, figures
    assert figures.duplicates <= figures.dropped + 3 * figures.kills, figures
    assert (figures.kills >= 20, figures.mid_send >= 1) == (True, True), figures
