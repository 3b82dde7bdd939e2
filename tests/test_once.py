"""``once``: a block of the caller's code run once per slot, on each database and ledger."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import (
    AsyncLedger,
    Claim,
    DeliveryMode,
    Ledger,
    LedgerError,
    NotDoneError,
    OnceGuard,
    Outcome,
    PermanentSendError,
    SlotStatus,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
    once,
    once_call,
)
from notifyonce._ledger.transitions import moves

from ._ledger_env import UTC, Env, maybe_await
from ._ledger_env import Awaitable as Wrapped
from .test_ledger_races import run_workers

CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE


class BoomError(Exception):
    """An exception that says nothing about whether the block did its work."""


Body = Callable[[Claim], None]


@dataclass
class Entry:
    """A guard after its block, with what the block raised (it went on past the guard)."""

    guard: OnceGuard
    raised: list[BaseException]

    outcome = property(lambda self: self.guard.outcome)
    skipped = property(lambda self: self.guard.skipped)
    claim = property(lambda self: self.guard.claim)
    lease_lost = property(lambda self: self.guard.lease_lost)


async def run_once(
    ledger: AsyncLedger | Ledger, body: Body, subject: int = 42, **options: Any
) -> Entry:
    """Run ``body`` under ``once`` the ledger's way (``async with`` or ``with``); the guard
    and what the body raised."""
    raised: list[BaseException] = []
    guard = once(ledger, "charge", subject, CYCLE, **options)
    if isinstance(ledger, AsyncLedger):
        try:
            async with guard:
                if guard.claim is not None:
                    body(guard.claim)
        except Exception as exc:
            raised.append(exc)
    else:
        try:
            with guard:
                if guard.claim is not None:
                    body(guard.claim)
        except Exception as exc:
            raised.append(exc)
    return Entry(guard, raised)


def raising(error: BaseException) -> Body:
    def body(claim: Claim) -> None:
        raise error

    return body


def nothing(claim: Claim) -> None:
    """A block that does its work and returns."""


async def status(ledger: Wrapped, subject: int = 42) -> SlotStatus | None:
    record = await ledger.get("charge", subject, CYCLE)
    return None if record is None else record.status


async def test_a_block_runs_once_and_the_next_is_told_it_was_done(env: Env) -> None:
    """The first entry runs the block and marks the slot sent; a second entry (a redelivered
    task, another ledger object) does not run it and says the slot was done before."""
    runs: list[int] = []
    first = await run_once(env.make().inner, lambda claim: runs.append(claim.token))
    second = await run_once(env.make().inner, lambda claim: runs.append(claim.token))
    assert 1 == len(runs)
    assert (Outcome.SENT, None) == (first.outcome, first.skipped)
    assert (Outcome.DUPLICATE, SlotStatus.SENT, None) == (
        second.outcome,
        second.skipped,
        second.claim,
    )
    record = await env.make().get("charge", 42, CYCLE)
    assert (SlotStatus.SENT, runs[0]) == (record.status, record.token)


async def test_not_done_releases_the_slot_and_gives_the_attempt_back(env: Env) -> None:
    """A block that raises NotDoneError (or TransientSendError) is released with its
    attempt given back, the exception goes on, and the next entry runs the block again."""
    ledger = env.make()
    first = await run_once(ledger.inner, raising(NotDoneError("refused")))
    second = await run_once(ledger.inner, raising(TransientSendError("429")))
    third = await run_once(ledger.inner, nothing)
    assert [Outcome.RETRY, Outcome.RETRY, Outcome.SENT] == [
        first.outcome,
        second.outcome,
        third.outcome,
    ]
    assert [NotDoneError, TransientSendError] == [
        type(first.raised[0]),
        type(second.raised[0]),
    ]
    assert [1, 1, 1] == [g.claim.attempt for g in (first, second, third) if g.claim]
    record = await ledger.get("charge", 42, CYCLE)
    assert "NotDoneError" != record.last_error


async def test_a_caller_named_exception_counts_as_not_done(env: Env) -> None:
    """An exception class passed as ``not_done`` releases the slot as NotDoneError does."""
    guard = await run_once(
        env.make().inner, raising(ConnectionRefusedError()), not_done=(ConnectionRefusedError,)
    )
    assert (Outcome.RETRY, SlotStatus.RELEASED) == (guard.outcome, await status(env.make()))


async def test_at_most_once_an_uncertain_end_is_unknown_and_never_repeated(env: Env) -> None:
    """At most once, a block that raised anything else is recorded unknown (only its class
    name stored), and later entries do not run it."""
    ledger = env.make()
    runs: list[int] = []

    def body(claim: Claim) -> None:
        runs.append(claim.attempt)
        raise BoomError("card 4242 declined")  # a text that must not reach the ledger

    first = await run_once(ledger.inner, body)
    second = await run_once(ledger.inner, body, mode=AMO)
    assert [1] == runs
    assert (Outcome.UNKNOWN, SlotStatus.UNKNOWN) == (first.outcome, second.skipped)
    record = await ledger.get("charge", 42, CYCLE)
    assert (SlotStatus.UNKNOWN, "BoomError") == (record.status, record.last_error)


async def test_at_least_once_an_uncertain_end_is_retried_up_to_max_attempts(env: Env) -> None:
    """At least once, an uncertain end releases the slot with its attempt counted, until the
    attempt that reaches max_attempts, which is recorded unknown; then the block no longer
    runs."""
    ledger = env.make()
    runs: list[int] = []

    def body(claim: Claim) -> None:
        runs.append(claim.attempt)
        raise BoomError

    outcomes = [
        (await run_once(ledger.inner, body, mode=ALO, max_attempts=3)).outcome for _ in range(4)
    ]
    assert [1, 2, 3] == runs
    assert [Outcome.RETRY, Outcome.RETRY, Outcome.UNKNOWN, Outcome.DUPLICATE] == outcomes
    assert SlotStatus.UNKNOWN == await status(ledger)


async def test_a_permanent_send_error_is_recorded_failed(env: Env) -> None:
    """A PermanentSendError from the block records the slot failed, never repeated."""
    ledger = env.make()
    first = await run_once(ledger.inner, raising(PermanentSendError("blocked")), mode=ALO)
    second = await run_once(ledger.inner, nothing, mode=ALO)
    assert (Outcome.FAILED, SlotStatus.FAILED) == (first.outcome, second.skipped)


async def test_a_held_slot_is_skipped_as_claimed(env: Env) -> None:
    """While one block runs, another entry for the same slot does not run and says the slot
    is held (CLAIMED), in either mode."""
    ledger = env.make()
    inner: list[OnceGuard] = []

    def body(claim: Claim) -> None:
        other = env.make().inner
        for mode in (AMO, ALO):
            if isinstance(other, AsyncLedger):
                raise AssertionError("the async flavour nests below")
            with once(other, "charge", 42, CYCLE, mode=mode) as guard:
                inner.append(guard)

    if isinstance(ledger.inner, AsyncLedger):
        async with once(ledger.inner, "charge", 42, CYCLE) as outer:
            for mode in (AMO, ALO):
                async with once(env.make().inner, "charge", 42, CYCLE, mode=mode) as guard:
                    inner.append(guard)
    else:
        outer = await run_once(ledger.inner, body)
    assert [(Outcome.DUPLICATE, SlotStatus.CLAIMED)] * 2 == [(g.outcome, g.skipped) for g in inner]
    assert Outcome.SENT == outer.outcome


@pytest.mark.parametrize("mode", [AMO, ALO])
async def test_a_dead_workers_claim_is_settled_per_mode(env: Env, mode: DeliveryMode) -> None:
    """A worker that died holding the slot (its claim never marked): once its lease expired,
    at most once sweeps it unknown and skips the block; at least once takes it over and
    runs the block as attempt 2."""
    ledger = env.make(lease=dt.timedelta(minutes=1))
    dead = await ledger.claim_slot("charge", 42, CYCLE)
    env.clock.advance(minutes=2)
    runs: list[int] = []
    guard = await run_once(ledger.inner, lambda claim: runs.append(claim.attempt), mode=mode)
    if mode is AMO:
        assert ([], SlotStatus.UNKNOWN, Outcome.DUPLICATE) == (runs, guard.skipped, guard.outcome)
        assert SlotStatus.UNKNOWN == await status(ledger)
    else:
        assert ([2], Outcome.SENT) == (runs, guard.outcome)
        assert False is await ledger.mark_sent(dead)  # the dead worker's token lost the slot


async def test_the_lease_is_renewed_while_the_block_runs(env: Env) -> None:
    """A block that runs longer than the lease keeps its slot: the lease is renewed every
    third of it, so a take-over after the first lease ran out finds the slot held."""
    lease = dt.timedelta(seconds=0.3)
    ledger = env.make(lease=lease)
    taken: list[Claim | None] = []

    def body(claim: Claim) -> None:
        env.clock.advance(seconds=0.25)
        deadline = time.monotonic() + 30
        with other_worker(env, ledger) as other:
            while time.monotonic() < deadline:  # bounded: until a renewal moved the lease
                record = other.get("charge", 42, CYCLE)
                if record is not None and record.lease_until > claim.lease_until:
                    break
                time.sleep(0.02)
            env.clock.advance(seconds=0.25)  # past the first lease, within the renewed one
            taken.append(other.claim_slot("charge", 42, CYCLE, take_expired=True))

    if isinstance(ledger.inner, AsyncLedger):
        async with once(ledger.inner, "charge", 42, CYCLE) as guard:
            await asyncio.to_thread(body, guard.claim)  # type: ignore[arg-type]
    else:
        guard = await run_once(ledger.inner, body)
    assert [None] == taken
    assert (Outcome.SENT, False) == (guard.outcome, guard.lease_lost)


@contextlib.contextmanager
def other_worker(env: Env, ledger: Wrapped) -> Iterator[Ledger]:
    """Another worker's sync Ledger on the same table and clock, usable from any thread."""
    engine = sa.create_engine(env.backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        yield Ledger(engine, table_name=env.table, clock=env.clock, lease=ledger.inner.lease)
    finally:
        engine.dispose()


async def test_a_block_whose_slot_was_taken_over_reports_lease_lost(env: Env) -> None:
    """A block whose lease ran out and whose slot another worker took over records nothing:
    its outcome is LEASE_LOST and the new holder's claim stays."""
    ledger = env.make(lease=dt.timedelta(minutes=1))
    thief: list[Claim] = []

    def body(claim: Claim) -> None:
        env.clock.advance(minutes=2)
        with other_worker(env, ledger) as other:
            taken = other.claim_slot("charge", 42, CYCLE, take_expired=True)
        assert taken is not None
        thief.append(taken)

    guard = await run_once(ledger.inner, body)
    record = await ledger.get("charge", 42, CYCLE)
    assert Outcome.LEASE_LOST == guard.outcome
    assert (SlotStatus.CLAIMED, thief[0].token) == (record.status, record.token)


@pytest.mark.parametrize("mode", [AMO, ALO])
async def test_many_workers_behind_a_barrier_run_the_block_exactly_once(
    env: Env, mode: DeliveryMode
) -> None:
    """16 workers released together on the same 5 slots, each with its own ledger object:
    each slot's block runs exactly once, and every other entry is skipped as held or
    done."""
    runs: list[tuple[int, int]] = []
    lock = threading.Lock()

    async def work(ledger: Wrapped, index: int, start: Callable[[], Awaitable[None]]) -> list[Any]:
        await start()
        guards = []
        for subject in range(5):

            def body(claim: Claim, subject: int = subject) -> None:
                with lock:
                    runs.append((subject, claim.token))

            guard = await run_once(ledger.inner, body, subject=subject, mode=mode)
            guards.append((guard.outcome, guard.skipped))
        return guards

    results = await run_workers(env, 16, work)
    assert [0, 1, 2, 3, 4] == sorted(subject for subject, _ in runs)
    flat = [entry for worker in results for entry in worker]
    assert 5 == flat.count((Outcome.SENT, None))
    assert 75 == sum(
        1
        for outcome, skipped in flat
        if outcome is Outcome.DUPLICATE
        and skipped
        in {
            SlotStatus.CLAIMED,
            SlotStatus.SENT,
        }
    )
    assert [SlotStatus.SENT] * 5 == [await status(env.make(), s) for s in range(5)]


@pytest.mark.sqlite
async def test_a_cancelled_block_is_recorded_as_uncertain(sqlite_ledger: AsyncLedger) -> None:
    """A block cancelled while it runs may have done its work: at most once it is recorded
    unknown, at least once released with the attempt counted; the cancellation goes on."""
    for subject, mode in ((1, AMO), (2, ALO)):
        guard = once(sqlite_ledger, "charge", subject, CYCLE, mode=mode)

        async def block(guard: OnceGuard = guard) -> None:
            async with guard:
                await asyncio.sleep(30)

        task = asyncio.ensure_future(block())
        for _ in range(500):  # bounded: until the block runs
            if guard.claim is not None:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        record = await sqlite_ledger.get("charge", subject, CYCLE)
        expected = SlotStatus.UNKNOWN if mode is AMO else SlotStatus.RELEASED
        assert (expected, 1) == (record.status, record.attempt)


@pytest.mark.parametrize(
    ("subject", "cycle", "field"),
    [
        (42, dt.datetime(2026, 12, 1, 18, 0), "cycle"),
        ("", CYCLE, "subject"),
        (None, CYCLE, "subject"),
    ],
)
async def test_arguments_that_make_no_key_are_refused_before_any_sql(
    env: Env, subject: Any, cycle: Any, field: str
) -> None:
    """A naive datetime cycle or an empty subject raises ValidationError naming the part,
    before anything is claimed (the table stays empty)."""
    with pytest.raises(ValidationError) as raised:
        once(env.make().inner, "charge", subject, cycle)
    assert field == raised.value.field
    assert 0 == env.count()


@pytest.mark.sqlite
def test_bad_options_are_refused_naming_the_option(tmp_path: Path) -> None:
    """A bad mode, max_attempts, not_done or ledger raises ValidationError naming it."""
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    cases: list[tuple[str, Callable[[], object]]] = [
        ("mode", lambda: once(ledger, "a", 1, 1, mode="twice")),
        ("max_attempts", lambda: once(ledger, "a", 1, 1, max_attempts=0)),
        ("not_done", lambda: once(ledger, "a", 1, 1, not_done=(ValueError, "x"))),  # type: ignore[arg-type]
        ("ledger", lambda: once(object(), "a", 1, 1)),  # type: ignore[arg-type]
    ]
    fields = []
    for _, call in cases:
        with pytest.raises(ValidationError) as raised:
            call()
        fields.append(raised.value.field)
    assert [name for name, _ in cases] == fields
    ledger.engine.dispose()


async def test_a_guard_of_the_wrong_flavour_is_refused(env: Env) -> None:
    """``with`` on an AsyncLedger's guard, or ``async with`` on a Ledger's, raises
    ValidationTypeError naming the ledger, and claims nothing."""
    guard = once(env.make().inner, "charge", 42, CYCLE)
    enter = guard.__enter__ if env.flavour == "async" else guard.__aenter__
    with pytest.raises(ValidationTypeError) as raised:
        await maybe_await(enter())
    assert "ledger" == raised.value.field
    assert 0 == env.count()


async def test_a_missing_table_says_to_run_the_migration(env: Env) -> None:
    """A guard on a ledger whose table does not exist raises LedgerError saying to run the
    migration, and the block does not run."""
    if env.flavour == "async":
        ledger: AsyncLedger | Ledger = AsyncLedger(env.engine, table_name="nfo_t_missing")  # type: ignore[arg-type]
    else:
        ledger = Ledger(env.engine, table_name="nfo_t_missing")  # type: ignore[arg-type]
    runs: list[int] = []
    guard = await run_once(ledger, lambda claim: runs.append(1))
    error = guard.raised[0]
    assert (LedgerError, []) == (type(error), runs)
    assert "run the migration" in str(error)
    assert "nfo_t_missing" in str(error)


async def test_once_call_wraps_a_function_per_its_key(env: Env) -> None:
    """A function decorated with once_call runs once per key made from its arguments, gets
    the claim first, and returns a OnceResult saying whether it ran and why not."""
    ledger = env.make().inner
    calls: list[tuple[int, str, int]] = []
    if isinstance(ledger, AsyncLedger):

        @once_call(ledger, "charge", key=lambda user, period: (user, period))
        async def charge_async(claim: Claim, user: int, period: str) -> str:
            calls.append((user, period, claim.attempt))
            return f"charged {user}"

        results = [await charge_async(u, "2026-12") for u in (1, 2, 1)]
    else:

        @once_call(ledger, "charge", key=lambda user, period: (user, period))
        def charge(claim: Claim, user: int, period: str) -> str:
            calls.append((user, period, claim.attempt))
            return f"charged {user}"

        results = [charge(u, "2026-12") for u in (1, 2, 1)]
    assert [(1, "2026-12", 1), (2, "2026-12", 1)] == calls
    assert [("charged 1", True), ("charged 2", True), (None, False)] == [
        (r.value, r.ran) for r in results
    ]
    assert SlotStatus.SENT == results[2].skipped


@pytest.mark.sqlite
def test_once_call_refuses_a_function_of_the_other_flavour(tmp_path: Path) -> None:
    """An async function under a sync Ledger raises ValidationTypeError naming the ledger."""
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))

    async def charge(claim: Claim, user: int) -> None:
        """A coroutine function."""

    with pytest.raises(ValidationTypeError) as raised:
        once_call(ledger, "charge", key=lambda user: (user, 1))(charge)
    assert "ledger" == raised.value.field
    ledger.engine.dispose()


ENDINGS = st.sampled_from(["ok", "not_done", "uncertain", "refused"])
LEGAL = {(source, target) for source, target, _ in moves()}


@pytest.mark.sqlite
def test_any_sequence_of_endings_follows_the_delivery_table(tmp_path: Path) -> None:
    """Any sequence of block endings, in either mode and with any max_attempts: the block
    runs exactly when the slot is claimable, each attempt number, outcome and status is the
    delivery table's, and every move of the slot is a move of the ledger's state machine."""
    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()
    errors = {
        "not_done": NotDoneError(),
        "uncertain": BoomError(),
        "refused": PermanentSendError("x"),
    }
    counter = iter(range(10**6))

    @settings(max_examples=80, deadline=None)
    @given(st.lists(ENDINGS, max_size=8), st.sampled_from([AMO, ALO]), st.integers(1, 3))
    def check(endings: list[str], mode: DeliveryMode, max_attempts: int) -> None:
        action = f"a{next(counter)}"
        state: SlotStatus | None = None
        counted = 0
        for ending in endings:
            ran: list[int] = []
            try:
                with once(ledger, action, 1, 1, mode=mode, max_attempts=max_attempts) as guard:
                    if guard.claim is not None:
                        ran.append(guard.claim.attempt)
                        if ending != "ok":
                            raise errors[ending]
            except (NotDoneError, BoomError, PermanentSendError):
                pass
            claimable = state in (None, SlotStatus.RELEASED)
            assert ([counted + 1] if claimable else []) == ran
            before = state
            if not claimable:
                expected = Outcome.DUPLICATE
            elif ending == "ok":
                state, expected = SlotStatus.SENT, Outcome.SENT
            elif ending == "not_done":
                state, expected = SlotStatus.RELEASED, Outcome.RETRY
            elif ending == "refused":
                state, expected = SlotStatus.FAILED, Outcome.FAILED
            elif mode is ALO and counted + 1 < max_attempts:
                state, expected, counted = SlotStatus.RELEASED, Outcome.RETRY, counted + 1
            else:
                state, expected = SlotStatus.UNKNOWN, Outcome.UNKNOWN
            record = ledger.get(action, 1, 1)
            assert (expected, state) == (guard.outcome, None if record is None else record.status)
            if claimable:  # claim, then the mark: both moves are the state machine's
                assert {(before, SlotStatus.CLAIMED), (SlotStatus.CLAIMED, state)} <= LEGAL

    check()
    ledger.engine.dispose()
