"""notifyonce.queues.apscheduler: two APScheduler 3 (or 4) processes firing the same cron
job every second, one of them SIGKILLed mid-job and started again, the job's side effect
counted in a file outside the ledger.

APScheduler 4 and 3 are one import name, so 4 is not in the dev environment: its storm
installs it into a site directory of its own (kept in pytest's cache, see ``site_of``)
that only its scheduler processes put first on their path.
"""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notifyonce import Claim, DeliveryMode, Ledger, SlotStatus, ValidationError
from notifyonce.queues.apscheduler import once_job, run_time

from ._databases import IN_CI
from ._optional import site_of
from ._queue_storm import LEASE, Storm

# Kills of a scheduler inside a job, one every 5.5 to 6.5 seconds: longer than a lease and
# the wait for it, so the survivor takes the dead one's claims over before it is killed
# itself (about a minute of two schedulers)
KILLS = 10
APSCHEDULER_4 = "apscheduler==4.0.0a6"  # the newest 4.x, a pre-release


@pytest.mark.slow
@pytest.mark.storm
@pytest.mark.sqlite
@pytest.mark.parametrize("major", [3, 4])
@pytest.mark.parametrize("mode", [DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE])
def test_two_schedulers_one_killed_again_and_again_run_each_second_once(
    request: pytest.FixtureRequest, tmp_path: Path, mode: DeliveryMode, major: int
) -> None:
    """Two schedulers (APScheduler 3, or 4 with a data store each) fire the same job every
    second while the one inside a job is SIGKILLed ten times, every 5.5 to 6.5 s, and started
    again: at most once, no run time's side effect happened twice (0 doubles); at least
    once, every run time from the first effect to 8 s before the end had its effect (0
    lost)."""
    if major == 3 and not IN_CI:  # a test dependency (the dev extra), not in the legs
        pytest.importorskip("apscheduler")
    app = {3: "_apscheduler_once_app.py", 4: "_apscheduler4_once_app.py"}[major]
    site = [site_of(request.config, APSCHEDULER_4, "apscheduler")] if major == 4 else []
    storm = Storm(tmp_path, mode, [sys.executable, app], {}, site=site)
    ledger, engine = storm.ledger()
    ledger.create_schema()
    live = [storm.start(), storm.start()]
    rng = random.Random(7)
    try:
        while storm.killed < KILLS:
            time.sleep(rng.uniform(5.5, 6.5))
            victim = _holder(tmp_path, live)  # a scheduler inside a job, within 2 s
            live.remove(victim)
            storm.kill(victim)
            storm.killed += 1
            live.append(storm.start())
        stopped = time.time()
        time.sleep(LEASE + 4)  # takeovers of the last kill's claims finish
    finally:
        for proc in live:
            storm.kill(proc)
    ledger.sweep(mode, actions=["effect"])
    effects = storm.effects()
    engine.dispose()
    records = storm.records()
    doubles = sorted(second for second, count in effects.items() if count > 1)
    hit = sum(1 for r in records if r.attempt > 1 or r.status is SlotStatus.UNKNOWN)
    assert effects, storm.logs()
    window = range(min(effects), int(stopped) - 8)
    lost = [second for second in window if second not in effects]
    summary = (
        f"APScheduler {major}, {mode.value}: {len(records)} run times, {storm.killed} kills, "
        f"{len(doubles)} doubled, {len(lost)} lost of {len(window)}, {hit} hit mid-job"
    )
    print(summary)
    assert hit > 0, summary
    if mode is DeliveryMode.AT_MOST_ONCE:
        assert [] == doubles, summary
    else:
        assert [] == lost, summary


def _holder(tmp: Path, live: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A live scheduler holding a claim (its marker file exists), else the oldest."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        holding = {int(p.name.split("-")[1]) for p in tmp.glob("holding-*")}
        for proc in live:
            if proc.pid in holding:
                return proc
        time.sleep(0.02)
    return live[0]


@pytest.mark.sqlite
def test_two_schedulers_firing_within_half_a_period_share_a_slot(tmp_path: Path) -> None:
    """Runs of the same job fired 0.4 s apart around a minute (clocks a little off) claim
    one slot: the body runs once; a period under a second is refused, naming it."""
    import sqlalchemy as sa

    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()
    base = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
    times = iter([base - dt.timedelta(seconds=0.2), base + dt.timedelta(seconds=0.2)])
    runs: list[str] = []

    @once_job(ledger, "digest", period=dt.timedelta(minutes=1), clock=lambda: next(times))
    def digest(claim: Claim) -> str:
        runs.append(claim.key.cycle)
        return "sent"

    assert ["sent", None] == [digest(), digest()]
    assert ["2026-12-01T09:00:00Z"] == runs
    assert base == run_time(base + dt.timedelta(seconds=29), dt.timedelta(minutes=1))
    with pytest.raises(ValidationError) as raised:
        once_job(ledger, "digest", period=dt.timedelta(milliseconds=500))
    assert "period" == raised.value.field
    ledger.engine.dispose()


@pytest.mark.sqlite
def test_under_apscheduler_4_a_run_claims_its_scheduled_fire_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run under APScheduler 4 (its ``current_job`` set) claims the slot of its scheduled
    fire time, not of the moment it started (a run fired for 09:00 claims 09:00 days
    later); with no current job, the system clock's."""
    import contextvars
    import types

    import sqlalchemy as sa

    current: contextvars.ContextVar[object] = contextvars.ContextVar("job_info")
    monkeypatch.setitem(sys.modules, "apscheduler", types.SimpleNamespace(current_job=current))
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()
    runs: list[str] = []

    @once_job(ledger, "digest", period=dt.timedelta(minutes=1))
    def digest(claim: Claim) -> None:
        runs.append(claim.key.cycle)

    fired = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
    token = current.set(types.SimpleNamespace(scheduled_fire_time=fired))
    digest()
    current.reset(token)
    before = dt.datetime.now(dt.timezone.utc)
    digest()
    assert "2026-12-01T09:00:00Z" == runs[0]
    assert run_time(before, dt.timedelta(minutes=1)) <= dt.datetime.strptime(
        runs[1] + "+0000", "%Y-%m-%dT%H:%M:%SZ%z"
    )
    ledger.engine.dispose()
