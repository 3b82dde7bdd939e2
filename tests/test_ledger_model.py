"""The ledger against a simple in-memory model, in random orders of operations (hypothesis)."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass, replace

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
)

from notifyonce import Claim, DeliveryMode, Ledger, SlotStatus

from ._clocks import WallClock
from ._databases import make_backend
from ._ledger_env import START, drop_table

DEADLINE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=dt.timezone.utc)
LEASE = dt.timedelta(minutes=5)
SUBJECTS = ["k0", "k1", "k2"]
MARKS = [SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN, SlotStatus.RELEASED]


@dataclass(frozen=True)
class ModelRow:
    """What the model expects the ledger to hold for one slot."""

    status: SlotStatus
    attempt: int
    token: int
    lease_until: dt.datetime


class LedgerModel(RuleBasedStateMachine):
    """Claims, take-overs, marks, time and sweeps must agree with a dict of rows."""

    sync_url: str = ""
    dialect: str = "sqlite"

    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        self.clock = WallClock(START)
        if self.dialect == "sqlite":
            self.tmp = tempfile.TemporaryDirectory()
            url = f"sqlite:///{os.path.join(self.tmp.name, 'model.sqlite3')}"
        else:
            url = self.sync_url
        self.url = url
        self.table = f"nfo_m_{os.urandom(6).hex()}"
        self.engine = sa.create_engine(url)
        self.ledger = Ledger(self.engine, table_name=self.table, lease=LEASE, clock=self.clock)
        self.ledger.create_schema()
        self.model: dict[str, ModelRow] = {}

    def teardown(self) -> None:
        self.engine.dispose()
        if self.dialect == "sqlite":
            self.tmp.cleanup()
        else:
            from ._databases import Backend

            drop_table(Backend("model", self.dialect, self.url, self.url), self.table)

    @rule(
        target=claims,
        subject=st.sampled_from(SUBJECTS),
        take_expired=st.booleans(),
        max_attempts=st.none() | st.integers(1, 3),
    )
    def claim(self, subject: str, take_expired: bool, max_attempts: int | None) -> object:
        now = self.clock.now
        row = self.model.get(subject)
        expired = (
            take_expired
            and row is not None
            and row.status is SlotStatus.CLAIMED
            and row.lease_until < now
            and (max_attempts is None or row.attempt < max_attempts)
        )
        wins = row is None or row.status is SlotStatus.RELEASED or expired
        claim = self.ledger.claim_slot(
            "m", subject, DEADLINE, take_expired=take_expired, max_attempts=max_attempts
        )
        assert wins == (claim is not None)
        if claim is None:
            return multiple()
        attempt = 1 if row is None else row.attempt + 1
        assert (attempt, now + LEASE) == (claim.attempt, claim.lease_until)
        self.model[subject] = ModelRow(SlotStatus.CLAIMED, attempt, claim.token, now + LEASE)
        return claim

    @rule(claim=claims, status=st.sampled_from(MARKS))
    def mark(self, claim: Claim, status: SlotStatus) -> None:
        row = self.model[claim.key.subject]
        holds = row.status is SlotStatus.CLAIMED and row.token == claim.token
        marks = {
            SlotStatus.SENT: self.ledger.mark_sent,
            SlotStatus.FAILED: lambda c: self.ledger.mark_failed(c, "refused"),
            SlotStatus.UNKNOWN: self.ledger.mark_unknown,
            SlotStatus.RELEASED: self.ledger.release,
        }
        assert holds == marks[status](claim)
        if holds:
            self.model[claim.key.subject] = replace(row, status=status)

    # 5 lands exactly on a lease's end (not expired yet), 6 just past it.
    @rule(minutes=st.sampled_from([0, 1, 5, 6]))
    def advance_clock(self, minutes: int) -> None:
        self.clock.advance(dt.timedelta(minutes=minutes))

    @rule(mode=st.sampled_from(DeliveryMode), max_attempts=st.integers(1, 3))
    def sweep(self, mode: DeliveryMode, max_attempts: int) -> None:
        now = self.clock.now
        expected: dict[SlotStatus, set[str]] = {
            SlotStatus.UNKNOWN: set(),
            SlotStatus.RELEASED: set(),
        }
        for subject, row in self.model.items():
            if row.status is SlotStatus.CLAIMED and row.lease_until < now:
                retry = mode is DeliveryMode.AT_LEAST_ONCE and row.attempt < max_attempts
                status = SlotStatus.RELEASED if retry else SlotStatus.UNKNOWN
                expected[status].add(subject)
                self.model[subject] = replace(row, status=status)
        result = self.ledger.sweep(mode, max_attempts=max_attempts)
        assert expected[SlotStatus.UNKNOWN] == {k.subject for k in result.unknown}
        assert expected[SlotStatus.RELEASED] == {k.subject for k in result.released}

    @invariant()
    def rows_match_the_model(self) -> None:
        for subject in SUBJECTS:
            record = self.ledger.get("m", subject, DEADLINE)
            row = self.model.get(subject)
            if row is None:
                assert record is None
            else:
                assert record is not None
                assert (row.status, row.attempt, row.token, row.lease_until) == (
                    record.status,
                    record.attempt,
                    record.token,
                    record.lease_until,
                )


MODEL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.sqlite
def test_ledger_matches_the_model_on_sqlite() -> None:
    """Random sequences of claims, marks, clock moves and sweeps agree with the model (SQLite)."""
    LedgerModel.dialect = "sqlite"
    LedgerModel.TestCase.settings = MODEL_SETTINGS
    LedgerModel.TestCase().runTest()


@pytest.mark.postgres
@pytest.mark.slow
def test_ledger_matches_the_model_on_postgres(tmp_path: object) -> None:
    """The same model check on PostgreSQL (psycopg 3)."""
    backend = make_backend("postgres-psycopg", tmp_path)  # type: ignore[arg-type]

    class OnPostgres(LedgerModel):
        sync_url = backend.sync_url
        dialect = "postgresql"

    OnPostgres.TestCase.settings = settings(MODEL_SETTINGS, max_examples=20)
    OnPostgres.TestCase().runTest()


@pytest.mark.mariadb
@pytest.mark.slow
def test_ledger_matches_the_model_on_mariadb(tmp_path: object) -> None:
    """The same model check on MariaDB (PyMySQL)."""
    backend = make_backend("mariadb", tmp_path)  # type: ignore[arg-type]

    class OnMariaDB(LedgerModel):
        sync_url = backend.sync_url
        dialect = "mysql"

    OnMariaDB.TestCase.settings = settings(MODEL_SETTINGS, max_examples=20)
    OnMariaDB.TestCase().runTest()
