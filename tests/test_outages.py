"""A run whose database goes away mid-run waits for it, then goes on: nothing twice, nothing lost.

The cut is made where it hurts most: right after a statement committed, before its answer
came back (a claim won, an outcome written, both in one write), so the run does not know
what landed. The database itself stays up here, so the run's probe finds it back at once;
tests/test_database_restarts.py restarts a real server under ``notifyonce broadcast``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa

from notifyonce import (
    AsyncLedger,
    LedgerUnavailableError,
    Message,
    Notification,
    Notifier,
    Outcome,
    ValidationError,
)
from notifyonce._drivers.outage import Outage
from notifyonce._ledger.core import Plan
from notifyonce.testing import FakeSender

from ._clocks import WallClock

UTC = dt.timezone.utc
CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
ACTION = "trial_6h"


def items(count: int) -> list[Notification]:
    return [Notification(s, CYCLE, Message("reminder")) for s in range(count)]


def _statement(plan: Plan[Any]) -> str:
    """Which of the run's statements ``plan`` is: claim_keys, write, mark_many, lookup..."""
    body = plan.body
    name = getattr(getattr(body, "func", body), "__name__", "")
    return "lookup" if name == "body" else name


class CutLedger(AsyncLedger):
    """A database whose connection is cut after the chosen statements ran (committed, for
    a write), ``times`` times in all: the caller gets LedgerUnavailableError."""

    def __init__(self, *args: Any, cut: set[str], times: int, skip: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cut, self.times, self.skip = cut, times, skip
        self.cuts: Counter[str] = Counter()

    async def _run_owned(self, plan: Plan[Any], keeper: Any) -> Any:
        result = await super()._run_owned(plan, keeper)
        name = _statement(plan)
        if name in self.cut and self.times:
            if self.skip:
                self.skip -= 1
                return result
            self.times -= 1
            self.cuts[name] += 1
            raise LedgerUnavailableError(
                "database unavailable (OSError: connection reset)"
            ) from OSError("connection reset")
        return result


async def statuses(ledger: AsyncLedger) -> Counter[str]:
    async with ledger.engine.connect() as conn:
        rows = await conn.execute(sa.select(ledger.table.c.status))
        return Counter(row.status for row in rows)


def _said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param({"claim_keys", "write"}, id="claims"),
        pytest.param({"mark_many", "write"}, id="outcomes"),
        pytest.param({"lookup"}, id="look-ups"),
    ],
)
async def test_a_statement_cut_after_it_committed_is_run_again_once_the_database_is_back(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture, cut: set[str]
) -> None:
    """Claims won and outcomes written by a statement whose answer was lost are neither
    lost nor doubled: every recipient gets one send, every row ends sent, nothing is
    reported lease lost, and the run says once that the database went away."""
    cutting = CutLedger(
        ledger.engine, table_name=ledger.table_name, clock=clock, cut=cut, times=3, skip=2
    )
    sender = FakeSender()
    caplog.set_level(logging.WARNING, logger="notifyonce")
    notifier = Notifier(cutting, sender, concurrency=4, batch_size=10)
    report = await notifier.send_many(ACTION, items(60))

    assert 3 == sum(cutting.cuts.values()), cutting.cuts
    assert {Outcome.SENT: 60} == {k: v for k, v in report.counts.items() if v}
    assert {"sent": 60} == dict(await statuses(ledger))
    assert Counter({str(s): 1 for s in range(60)}) == Counter(r.recipient for r in sender.records)
    assert 3 == len(_said(caplog, "the database is away"))
    assert 3 == len(_said(caplog, "the database is back"))
    assert 1 == len(_said(caplog, "the database was away 3 times"))


async def test_outcomes_answered_while_the_database_is_away_are_kept_and_written(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The writes of outcomes fail for a while (the probe finds the database away twice):
    the sends under way finish, their outcomes wait in memory, and are written when it
    is back, none turned unknown; the run's last line says how many were kept."""
    away = {"probes": 0}
    cutting = CutLedger(
        ledger.engine,
        table_name=ledger.table_name,
        clock=clock,
        cut={"mark_many", "write"},
        times=1,
        skip=1,
    )
    caplog.set_level(logging.WARNING, logger="notifyonce")
    with pytest.MonkeyPatch.context() as patch:
        original = Outage._probe_once
        patch.setattr(Outage, "_probe_once", lambda self: _probe(self, away, original))
        report = await Notifier(cutting, FakeSender(), concurrency=4).send_many(ACTION, items(40))
    assert 3 == away["probes"]
    assert 40 == report.counts[Outcome.SENT]
    assert {"sent": 40} == dict(await statuses(ledger))
    [told] = _said(caplog, "outcomes answered meanwhile were kept")
    kept = int(told.split("; ")[1].split(" ")[0].replace(",", ""))
    assert kept >= 1, told


async def test_outcomes_written_alone_across_an_outage_are_written_once(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A write of outcomes alone (no claims left to make beside it) cut after its commit
    is confirmed by its rows once the database is back: every row sent, none reported
    lease lost or written again, and the run's last line counts them as kept."""
    cutting = CutLedger(
        ledger.engine, table_name=ledger.table_name, clock=clock, cut={"mark_many"}, times=1
    )
    caplog.set_level(logging.WARNING, logger="notifyonce")
    report = await Notifier(cutting, FakeSender(), batch_size=10).send_many(ACTION, items(10))
    assert {"mark_many": 1} == dict(cutting.cuts)
    assert {Outcome.SENT: 10} == {k: v for k, v in report.counts.items() if v}
    assert {"sent": 10} == dict(await statuses(ledger))
    [told] = _said(caplog, "outcomes answered meanwhile were kept")
    assert "; 10 outcomes answered meanwhile" in told, told


async def _probe(self: Outage, away: dict[str, int], original: Any) -> None:
    """The first two probes find the database away; the third asks it."""
    away["probes"] += 1
    if away["probes"] <= 2:
        raise OSError("connection refused")
    await original(self)


async def test_a_database_away_past_the_patience_stops_the_run(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A database that does not come back within ``outage_patience`` ends the run with
    LedgerUnavailableError naming the patience, in about that time."""
    cutting = CutLedger(
        ledger.engine,
        table_name=ledger.table_name,
        clock=clock,
        cut={"claim_keys", "write"},
        times=1_000_000,
        skip=1,
    )
    caplog.set_level(logging.WARNING, logger="notifyonce")

    async def never(self: Outage) -> None:
        raise OSError("connection refused")

    notifier = Notifier(
        cutting, FakeSender(), concurrency=2, outage_patience=dt.timedelta(seconds=1)
    )
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Outage, "_probe_once", never)
        with pytest.raises(LedgerUnavailableError, match="the run's patience"):
            await notifier.send_many(ACTION, items(20))
    assert time.monotonic() - started < 30
    assert 1 == len(_said(caplog, "the database is away"))
    assert [] == _said(caplog, "the database is back")


async def test_a_database_that_never_answered_is_not_waited_for(
    ledger: AsyncLedger, clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's first statement fails: a wrong URL or a missing table, not an outage;
    the run ends at once, without waiting its patience."""
    cutting = CutLedger(
        ledger.engine, table_name=ledger.table_name, clock=clock, cut={"lookup"}, times=1
    )
    caplog.set_level(logging.WARNING, logger="notifyonce")
    notifier = Notifier(cutting, FakeSender(), outage_patience=dt.timedelta(minutes=10))
    with pytest.raises(LedgerUnavailableError):
        await notifier.send_many(ACTION, items(5))
    assert [] == _said(caplog, "the database is away")


async def test_patience_zero_stops_at_the_first_failure(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """``outage_patience=timedelta(0)``: the first failure ends the run, as before."""
    cutting = CutLedger(
        ledger.engine,
        table_name=ledger.table_name,
        clock=clock,
        cut={"claim_keys", "write"},
        times=1,
        skip=1,
    )
    notifier = Notifier(cutting, FakeSender(), concurrency=1, outage_patience=dt.timedelta(0))
    with pytest.raises(LedgerUnavailableError):
        await notifier.send_many(ACTION, items(10))


@pytest.mark.parametrize("value", [dt.timedelta(seconds=-1), 60, None])
def test_outage_patience_must_be_a_timedelta_of_zero_or_more(
    ledger: AsyncLedger, value: object
) -> None:
    """A negative or non-timedelta patience is refused, naming the field."""
    with pytest.raises(ValidationError, match="outage_patience"):
        Notifier(ledger, FakeSender(), outage_patience=value)  # type: ignore[arg-type]


class _Away:
    """A database away for ``failures`` probes (for ever: None), on a clock that moves
    only when the outage sleeps between probes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failures: int | None) -> None:
        import asyncio

        import notifyonce._drivers.outage as outage_module

        self.now = 0.0
        self.probes = 0
        self.failures = failures

        async def sleep(seconds: float) -> None:
            self.now += seconds
            await asyncio.sleep(0)

        async def probe(outage: Outage) -> None:
            self.probes += 1
            if self.failures is None or self.probes <= self.failures:
                raise OSError("connection refused")

        fake_asyncio = type(asyncio)("fake_asyncio")
        fake_asyncio.__dict__.update(vars(asyncio))
        fake_asyncio.sleep = sleep  # type: ignore[attr-defined]
        fake_time = type(time)("fake_time")
        fake_time.monotonic = lambda: self.now  # type: ignore[attr-defined]
        monkeypatch.setattr(outage_module, "asyncio", fake_asyncio)
        monkeypatch.setattr(outage_module, "time", fake_time)
        monkeypatch.setattr(Outage, "_probe_once", probe)


def _cut() -> LedgerUnavailableError:
    return LedgerUnavailableError("database unavailable (OSError: connection reset)")


async def test_a_database_away_for_good_is_probed_for_the_patience_and_no_longer(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Patience 5 s, a probe every half second: ten probes, then the wait ends naming the
    patience; a statement that fails afterwards is not waited for again (no new probe)."""
    away = _Away(monkeypatch, failures=None)
    outage = Outage(ledger.engine, patience=5.0)
    outage.armed = True
    with pytest.raises(LedgerUnavailableError, match="the run's patience") as first:
        await outage.wait(_cut())
    probes = away.probes
    later = _cut()
    with pytest.raises(LedgerUnavailableError) as again:
        await outage.wait(later)
    assert 10 == probes
    assert "database unavailable for 5.0 s" in str(first.value)
    assert later is again.value
    assert (10, 1) == (away.probes, outage.absences)


async def test_a_database_back_after_failed_probes_is_waited_for_and_its_lanes_dropped(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two probes fail, the third answers: the wait returns, the run's own connections are
    let go once, and the return is counted (statements from before it are confirmed)."""
    away = _Away(monkeypatch, failures=2)
    dropped: list[int] = []

    async def on_back() -> None:
        dropped.append(away.probes)

    outage = Outage(ledger.engine, patience=60.0, on_back=on_back)
    outage.armed = True
    await outage.wait(_cut())
    assert (3, [3], 1, 1) == (away.probes, dropped, outage.epoch, outage.absences)
    assert 1.5 == outage.waited


@pytest.mark.parametrize("armed", [True, False], ids=["armed", "never-answered"])
async def test_patience_zero_or_a_database_never_reached_raises_the_failure_itself(
    ledger: AsyncLedger,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    armed: bool,
) -> None:
    """Patience zero (or a database the run never reached, whatever the patience): the
    statement's own failure is raised, with no probe and no word of an outage."""
    away = _Away(monkeypatch, failures=None)
    caplog.set_level(logging.WARNING, logger="notifyonce")
    outage = Outage(ledger.engine, patience=0.0 if armed else 60.0)
    outage.armed = armed
    cut = _cut()
    with pytest.raises(LedgerUnavailableError) as raised:
        await outage.wait(cut)
    assert cut is raised.value
    assert (0, 0) == (away.probes, outage.absences)
    assert [] == _said(caplog, "the database is away")


async def test_an_audience_look_up_cut_by_an_outage_waits_for_the_database(
    ledger: AsyncLedger, clock: WallClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audience look-up of a later batch fails because the database went away: the
    run waits for it like its claims do, and every notification is sent once."""
    from notifyonce import AsyncAudience

    original = AsyncAudience._screen
    calls = {"n": 0}

    async def screen(self: AsyncAudience, recipients: list[str]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise _cut()
        return await original(self, recipients)

    monkeypatch.setattr(AsyncAudience, "_screen", screen)
    sender = FakeSender()
    notifier = Notifier(
        ledger, sender, batch_size=5, concurrency=1, outage_patience=dt.timedelta(seconds=30)
    )
    report = await notifier.send_many(ACTION, items(20))
    assert 20 == report.counts[Outcome.SENT]
    assert 20 == len(sender.sent)
    assert calls["n"] >= 3
