"""The ledger against a simple in-memory model, in random orders of operations (hypothesis).

Every move of a slot the ledger makes here (read back from the database after each call)
must be one of ``notifyonce._ledger.transitions.TRANSITIONS``, the table the state diagram
of docs/concepts/slots.md is checked against; and a scripted walk makes every move of that
table, so the table holds what the ledger does and nothing else.
"""

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
from notifyonce._ledger.transitions import MARK_CALLS, moves

from ._clocks import WallClock
from ._databases import make_backend
from ._ledger_env import START, drop_table

# A cycle that ended a day before the clock starts, so that purge may delete its rows.
DEADLINE = START - dt.timedelta(days=1)
LEASE = dt.timedelta(minutes=5)
SUBJECTS = ["k0", "k1", "k2"]
MARKS = [SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN, SlotStatus.RELEASED]
Move = tuple["SlotStatus | None", "SlotStatus | None", str]


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
        # What the database held for each slot after the last call: (status, token).
        self.stored: dict[str, tuple[SlotStatus, int] | None] = dict.fromkeys(SUBJECTS)
        self.moves: set[Move] = set()

    def teardown(self) -> None:
        self.engine.dispose()
        if self.dialect == "sqlite":
            self.tmp.cleanup()
        else:
            from ._databases import Backend

            drop_table(Backend("model", self.dialect, self.url, self.url), self.table)

    def observe(self, by: str, per_subject: dict[str, str] | None = None) -> None:
        """Read each slot back after the call ``by`` (``per_subject``: the call for each
        slot, where one call did several things): whatever moved must be in the table."""
        for subject in SUBJECTS:
            record = self.ledger.get("m", subject, DEADLINE)
            now = None if record is None else (record.status, record.token)
            before = self.stored[subject]
            if now != before:
                call = (per_subject or {}).get(subject, by)
                old = None if before is None else before[0]
                move = (old, None if now is None else now[0], call)
                assert move in moves(), f"{subject}: {move} is not in transitions.TRANSITIONS"
                self.moves.add(move)
            self.stored[subject] = now

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
        self.observe("claim")
        assert wins == (claim is not None)
        if claim is None:
            return multiple()
        attempt = 1 if row is None else row.attempt + 1
        assert (attempt, now + LEASE) == (claim.attempt, claim.lease_until)
        self.model[subject] = ModelRow(SlotStatus.CLAIMED, attempt, claim.token, now + LEASE)
        return claim

    def holds(self, claim: Claim) -> bool:
        row = self.model.get(claim.key.subject)
        return row is not None and row.status is SlotStatus.CLAIMED and row.token == claim.token

    @rule(claim=claims, status=st.sampled_from(MARKS))
    def mark(self, claim: Claim, status: SlotStatus) -> None:
        holds = self.holds(claim)
        marks = {
            SlotStatus.SENT: self.ledger.mark_sent,
            SlotStatus.FAILED: lambda c: self.ledger.mark_failed(c, "refused"),
            SlotStatus.UNKNOWN: self.ledger.mark_unknown,
            SlotStatus.RELEASED: self.ledger.release,
        }
        landed = marks[status](claim)
        self.observe(MARK_CALLS[status])
        assert holds == landed
        if holds:
            self.settle(claim, status)

    @rule(claim=claims)
    def release_maybe_delivered(self, claim: Claim) -> None:
        """A release whose send may have arrived keeps its attempt."""
        holds = self.holds(claim)
        landed = self.ledger.release(claim, "read timeout", may_have_delivered=True)
        self.observe(MARK_CALLS[SlotStatus.RELEASED])
        assert holds == landed
        if holds:
            self.settle(claim, SlotStatus.RELEASED, counted=True)

    def settle(self, claim: Claim, status: SlotStatus, *, counted: bool = False) -> None:
        """A mark that landed; a certain release gives its attempt back."""
        row = self.model[claim.key.subject]
        refund = status is SlotStatus.RELEASED and not counted
        self.model[claim.key.subject] = replace(
            row, status=status, attempt=row.attempt - 1 if refund else row.attempt
        )

    @rule(
        marked=st.lists(
            st.tuples(claims, st.sampled_from(MARKS)),
            min_size=1,
            max_size=3,
            unique_by=lambda pair: pair[0].id,
        )
    )
    def mark_many(self, marked: list[tuple[Claim, SlotStatus]]) -> None:
        holds = [self.holds(claim) for claim, _ in marked]
        landed = self.ledger.mark_many([(claim, status, None) for claim, status in marked])
        # mark_many makes the moves of the single marks; the table names those.
        calls = {
            claim.key.subject: MARK_CALLS[status]
            for (claim, status), held in zip(marked, holds, strict=True)
            if held
        }
        self.observe("mark_many", calls)
        assert holds == landed
        for (claim, status), held in zip(marked, holds, strict=True):
            if held:
                self.settle(claim, status)

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
        self.observe("sweep")
        assert expected[SlotStatus.UNKNOWN] == {k.subject for k in result.unknown}
        assert expected[SlotStatus.RELEASED] == {k.subject for k in result.released}

    @rule(
        statuses=st.lists(
            st.sampled_from([SlotStatus.UNKNOWN, SlotStatus.FAILED]), min_size=1, unique=True
        )
    )
    def requeue(self, statuses: list[SlotStatus]) -> None:
        expected = {s for s, row in self.model.items() if row.status in statuses}
        keys = self.ledger.requeue("m", status=statuses)
        self.observe("requeue")
        assert expected == {k.subject for k in keys}
        for subject in expected:
            self.model[subject] = replace(self.model[subject], status=SlotStatus.RELEASED)

    @rule()
    def purge(self) -> None:
        now = self.clock.now
        held = {
            s
            for s, row in self.model.items()
            if row.status is SlotStatus.CLAIMED and row.lease_until >= now
        }
        deleted = self.ledger.purge(older_than=dt.timedelta(hours=1))
        self.observe("purge")
        assert len(self.model) - len(held) == deleted
        self.model = {s: row for s, row in self.model.items() if s in held}

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


# Where a slot can stand, and how to get it there from no row (steps of the model).
SETUPS: dict[str, list[tuple[str, tuple[object, ...]]]] = {
    "no row": [],
    "claimed": [("claim", ("k0", False, None))],
    "claimed, lease expired": [("claim", ("k0", False, None)), ("advance_clock", (6,))],
    **{
        status.value: [("claim", ("k0", False, None)), ("mark", (None, status))] for status in MARKS
    },
}
# Every call the ledger has that may move a slot (with each of its modes).
CALLS: list[tuple[str, tuple[object, ...]]] = [
    ("claim", ("k0", False, None)),
    ("claim", ("k0", True, None)),
    *(("mark", (None, status)) for status in MARKS),
    ("mark_many", (None,)),
    ("sweep", (DeliveryMode.AT_MOST_ONCE, 3)),
    ("sweep", (DeliveryMode.AT_LEAST_ONCE, 3)),
    ("requeue", ([SlotStatus.UNKNOWN],)),
    ("requeue", ([SlotStatus.FAILED],)),
    ("purge", ()),
]


def walk_every_call_from_every_status(model: type[LedgerModel]) -> set[Move]:
    """Put a slot in each status, make each call on it (each on a fresh table), and return
    every move seen; `LedgerModel.observe` fails on a move that is not in the table."""
    seen: set[Move] = set()
    for setup in SETUPS.values():
        for call in CALLS:
            walk = model()
            try:
                claim: object = None
                for rule, args in [*setup, call]:
                    if rule == "mark_many":
                        if claim is None:
                            continue  # no claim to mark
                        args = ([(claim, SlotStatus.SENT)],)
                    elif rule == "mark":
                        if claim is None:
                            continue
                        args = (claim, args[1])
                    result = getattr(walk, rule)(*args)
                    walk.rows_match_the_model()
                    if isinstance(result, Claim):
                        claim = result
                seen |= walk.moves
            finally:
                walk.teardown()
    return seen


# Each database the model runs on (its sync driver), with its dialect's name.
MODEL_BACKENDS = [
    pytest.param("sqlite", "sqlite", marks=pytest.mark.sqlite, id="sqlite"),
    pytest.param(
        "postgres-psycopg",
        "postgresql",
        marks=[pytest.mark.postgres, pytest.mark.slow],
        id="postgres",
    ),
    pytest.param("mariadb", "mysql", marks=[pytest.mark.mariadb, pytest.mark.slow], id="mariadb"),
]


def model_on(backend: str, dialect: str, tmp_path: object) -> type[LedgerModel]:
    """The model on ``backend``: LedgerModel itself on SQLite, else a subclass with the
    server's URL."""
    if dialect == "sqlite":
        return LedgerModel
    url = make_backend(backend, tmp_path).sync_url  # type: ignore[arg-type]

    class OnServer(LedgerModel):
        sync_url = url

    OnServer.dialect = dialect
    return OnServer


@pytest.mark.parametrize(("backend", "dialect"), MODEL_BACKENDS)
def test_every_call_from_every_status_moves_as_the_table_says(
    backend: str, dialect: str, tmp_path: object
) -> None:
    """Each call from each status makes only moves of transitions.TRANSITIONS, and together
    they make all of them: the table, and the diagram checked against it, are the code's."""
    seen = walk_every_call_from_every_status(model_on(backend, dialect, tmp_path))
    assert [] == sorted(moves() - seen, key=str), "moves of the table that never happened"


MODEL_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize(("backend", "dialect"), MODEL_BACKENDS)
def test_ledger_matches_the_model(backend: str, dialect: str, tmp_path: object) -> None:
    """Random sequences of claims, marks, clock moves and sweeps agree with the model, on
    each database (SQLite with 40 examples; PostgreSQL with psycopg 3 and MariaDB with
    PyMySQL, 20 each)."""
    model = model_on(backend, dialect, tmp_path)
    examples = 40 if dialect == "sqlite" else 20
    model.TestCase.settings = settings(MODEL_SETTINGS, max_examples=examples)
    model.TestCase().runTest()
