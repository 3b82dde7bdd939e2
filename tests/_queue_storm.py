"""The kill-and-redeliver storm every queue adapter is tested with.

Worker processes of a real queue run the same task under ``once`` for N subjects, each
run appending a line to a file (the outside counter); the storm ``SIGKILL``s a whole
worker (its process group: pool children die with it) at least ``kills`` times while
tasks run, starting a fresh worker each time, and waits until every slot is settled.
Then the ledger and the counter are compared:

- at most once: no subject's side effect happened twice (0 doubles); a slot whose worker
  died mid-task is swept ``unknown`` and its effect may be missing;
- at least once: every subject's side effect happened (0 lost); a slot whose worker died
  after the effect may have it twice.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from notifyonce import DeliveryMode, Ledger, SlotRecord, SlotStatus

ROOT = Path(__file__).resolve().parent.parent
TASKS = int(os.environ.get("NOTIFYONCE_STORM_TASKS", "1000"))
KILLS = int(os.environ.get("NOTIFYONCE_STORM_KILLS", "10"))
LEASE = 3.0  # seconds: a dead worker's claim is taken over (at least once) soon after


@dataclass
class Storm:
    """One storm: its files, its workers, and what it counted."""

    tmp: Path
    mode: DeliveryMode
    command: Sequence[str]  # one worker process
    env: dict[str, str]
    workers: int = 2
    site: Sequence[Path] = ()  # directories put first on the workers' path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: int = 0
    progress: list[int] = field(default_factory=list)  # effects counted at each kill
    settling: float = 0.0  # seconds from the last kill until every slot was settled
    # A broker that can lose a message it handed to a worker killed at the wrong moment
    # (kombu's Redis transport: BRPOP, then the unacked record) leaves some slots without
    # a row for ever: it is taken as settled once the ledger stayed the same this long.
    may_lose: float = 0.0
    _seen: tuple[tuple[object, ...], float] | None = None

    @property
    def counter(self) -> Path:
        return self.tmp / "effects.txt"

    @property
    def database(self) -> str:
        return f"sqlite:///{self.tmp / 'ledger.sqlite3'}"

    def worker_env(self) -> dict[str, str]:
        path = os.pathsep.join([*map(str, self.site), str(ROOT / "src"), str(ROOT / "tests")])
        return {
            **os.environ,
            **self.env,
            "PYTHONPATH": path,
            "NFO_COUNTER": str(self.counter),
            "NFO_DATABASE": self.database,
            "NFO_TABLE": "storm_slots",
            "NFO_LEASE": str(LEASE),
            "NFO_MODE": self.mode.value,
        }

    def ledger(self) -> tuple[Ledger, sa.Engine]:
        engine = sa.create_engine(self.database)
        return Ledger(engine, table_name="storm_slots", lease=dt.timedelta(seconds=LEASE)), engine

    def start(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"worker-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            list(self.command),
            cwd=ROOT / "tests",
            env=self.worker_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed whole
        )
        log.close()
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait(30)

    def run(
        self,
        enqueue: Callable[[int], None],
        timeout: float = 300,
        nudge: Callable[[], None] | None = None,
    ) -> collections.Counter[int]:
        """Create the table, enqueue ``TASKS`` tasks, run the workers through ``KILLS``
        kills, wait until every slot is settled (calling ``nudge`` while waiting, for a
        queue that redelivers only when its consumers read); the effects per subject."""
        ledger, engine = self.ledger()
        try:
            ledger.create_schema()
            live = [self.start() for _ in range(self.workers)]
            enqueue(TASKS)
            deadline = time.monotonic() + timeout
            rng = random.Random(TASKS)
            try:
                while self.killed < KILLS and time.monotonic() < deadline:
                    # only while tasks run: 30 more effects since the last kill
                    last = self.progress[-1] if self.progress else 0
                    while sum(self.effects().values()) < last + 30:
                        if time.monotonic() > deadline or self.settled(ledger):
                            break
                        time.sleep(0.05)
                    time.sleep(rng.uniform(0.0, 0.2))
                    victim = self.busiest(live)
                    live.remove(victim)
                    self.kill(victim)
                    self.killed += 1
                    self.progress.append(sum(self.effects().values()))
                    live.append(self.start())
                last_kill = time.monotonic()
                while not self.settled(ledger) and time.monotonic() < deadline:
                    if nudge is not None:
                        nudge()
                    time.sleep(0.5)
                self.settling = time.monotonic() - last_kill
                assert self.settled(ledger), f"not settled within {timeout} s: {self.logs()}"
                if self.mode is DeliveryMode.AT_MOST_ONCE:  # a dead worker's expired claims
                    time.sleep(LEASE)
                    ledger.sweep(self.mode, actions=["effect"])
            finally:
                for proc in live:
                    self.kill(proc)
            return self.effects()
        finally:
            engine.dispose()

    def busiest(self, live: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """The live worker that wrote the latest effect (its process group's id is on
        each line), so the kill lands while it runs tasks: a worker still starting, or one
        whose queue gave every task to the other, would die with nothing in hand. The
        oldest when none of them wrote one yet."""
        lines = self.counter.read_text().splitlines() if self.counter.exists() else []
        groups = {proc.pid: proc for proc in live}
        for line in reversed(lines[-200:]):
            fields = line.split()
            if len(fields) > 2 and int(fields[2]) in groups:
                return groups[int(fields[2])]
        return live[0]

    def settled(self, ledger: Ledger) -> bool:
        """Every slot has a row and no live claim (at least once: every slot sent); with
        ``may_lose``, also every row so, and the ledger unchanged for that long."""
        stats = ledger.stats()
        rows = sum(stats.counts.values())
        sent = stats.counts.get(("effect", SlotStatus.SENT), 0)
        done = sent == rows if self.mode is DeliveryMode.AT_LEAST_ONCE else True
        if rows == TASKS and stats.live_claims == 0 and done:
            return True
        if not self.may_lose or stats.live_claims or not done:
            self._seen = None
            return False
        now, snapshot = time.monotonic(), tuple(sorted(stats.counts.items()))
        if self._seen is None or self._seen[0] != snapshot:
            self._seen = (snapshot, now)
        return now - self._seen[1] >= self.may_lose

    def effects(self) -> collections.Counter[int]:
        lines = self.counter.read_text().splitlines() if self.counter.exists() else []
        return collections.Counter(int(line.split()[0]) for line in lines)

    def records(self) -> list[SlotRecord]:
        """Every slot of the storm, as the ledger has it."""
        ledger, engine = self.ledger()
        try:
            return ledger.slots(status=list(SlotStatus), action="effect", limit=TASKS + 1)
        finally:
            engine.dispose()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-2000:] for p in sorted(self.tmp.glob("worker-*.log"))
        )


def check(storm: Storm, effects: collections.Counter[int]) -> str:
    """Assert the mode's promise; a one-line summary of the storm."""
    doubles = sorted(n for n, count in effects.items() if count > 1)
    lost = sorted(set(range(TASKS)) - set(effects))
    records = storm.records()
    statuses = collections.Counter(record.status.value for record in records)
    retried = sum(1 for record in records if record.attempt > 1)
    # slots without a row: their task never reached a worker's guard (the broker lost it)
    unseen = sorted(set(range(TASKS)) - {int(record.key.subject) for record in records})
    summary = (
        f"{storm.mode.value}: {TASKS} tasks, {storm.killed} kills, {len(doubles)} doubled, "
        f"{len(lost)} lost, {len(unseen)} lost by the broker before any worker ran them, "
        f"{retried} taken over, ledger {dict(statuses)}, "
        f"effects at each kill {storm.progress}, settled {storm.settling:.0f} s after the last"
    )
    assert KILLS <= storm.killed, summary
    hit = retried + statuses["unknown"]
    assert hit > 0, f"no kill landed mid-task: {summary}"
    sent = [int(record.key.subject) for record in records if record.status is SlotStatus.SENT]
    # a killed consumer loses at most the one message it had just popped
    assert len(unseen) <= (storm.killed if storm.may_lose else 0), summary
    if storm.mode is DeliveryMode.AT_MOST_ONCE:
        assert [] == doubles, summary
        assert TASKS - len(unseen) == statuses["sent"] + statuses["unknown"], summary
        # every slot the ledger calls sent had its effect, once
        assert [1] * len(sent) == [effects[n] for n in sent], summary
    else:
        # nothing a worker's guard saw is lost: only what the broker never delivered
        assert unseen == lost, summary
        assert {"sent": TASKS - len(unseen)} == dict(statuses), summary
    return summary


# -- what the worker processes' apps share ------------------------------------------------


def worker_ledger_options() -> tuple[str, dict[str, object]]:
    """A worker's ledger: the storm's database URL and the ledger's options."""
    lease = dt.timedelta(seconds=float(os.environ["NFO_LEASE"]))
    return os.environ["NFO_DATABASE"], {"table_name": os.environ["NFO_TABLE"], "lease": lease}


def record_effect(n: int, token: int) -> None:
    """The side effect: one line per run (the subject, the claim's token and the worker's
    process group), written by one O_APPEND write (a SIGKILL cannot tear it)."""
    fd = os.open(os.environ["NFO_COUNTER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{n} {token} {os.getpgrp()}\n".encode())
    finally:
        os.close(fd)
