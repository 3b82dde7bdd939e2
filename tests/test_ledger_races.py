"""Concurrency and failure: many workers on the same slots, and a connection lost mid-claim."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import random
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import AsyncLedger, Claim, LedgerError, LedgerUnavailableError

from ._ledger_env import UTC, Env
from ._ledger_env import Awaitable as Wrapped

T = TypeVar("T")
DEADLINE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
WORKERS = 16


Work = Callable[[Wrapped, int, Callable[[], Awaitable[None]]], Awaitable[T]]


async def run_workers(env: Env, count: int, work: Work[T]) -> list[T]:
    """Run ``work`` in ``count`` workers, each with its own ledger object, released together
    by a barrier: coroutines on one loop for the async ledger, threads for the sync one."""
    if env.flavour == "async":
        # asyncio.Barrier is 3.11+; the package supports 3.10.
        arrived = 0
        all_in = asyncio.Event()

        async def start_together() -> None:
            nonlocal arrived
            arrived += 1
            if arrived == count:
                all_in.set()
            await all_in.wait()

        return list(
            await asyncio.gather(*(work(env.make(), i, start_together) for i in range(count)))
        )
    thread_barrier = threading.Barrier(count)

    async def start_together_thread() -> None:
        thread_barrier.wait()

    def in_thread(index: int) -> T:
        return asyncio.run(work(env.make(), index, start_together_thread))  # type: ignore[arg-type]

    with ThreadPoolExecutor(count) as pool:
        return list(await asyncio.to_thread(lambda: list(pool.map(in_thread, range(count)))))


async def test_racing_claims_have_exactly_one_winner_per_key(env: Env) -> None:
    """16 workers claiming the same 12 keys in different orders: one winner per key, also
    when they race again to take over the expired claims."""
    subjects = list(range(12))

    async def claim_all(take_expired: bool) -> collections.Counter[str]:
        async def work(
            ledger: Wrapped, index: int, start: Callable[[], Awaitable[None]]
        ) -> list[Claim]:
            order = subjects[:]
            random.Random(index).shuffle(order)
            await start()
            won = []
            for subject in order:
                claim = await ledger.claim_slot(
                    "race", subject, DEADLINE, take_expired=take_expired
                )
                if claim is not None:
                    won.append(claim)
            return won

        results = await run_workers(env, WORKERS, work)
        return collections.Counter(c.key.subject for won in results for c in won)

    assert {str(s): 1 for s in subjects} == dict(await claim_all(take_expired=False))
    env.clock.advance(dt.timedelta(minutes=6))
    assert {str(s): 1 for s in subjects} == dict(await claim_all(take_expired=True))
    ledger = env.make()
    attempts = {(await ledger.get("race", s, DEADLINE)).attempt for s in subjects}
    assert {2} == attempts


async def test_overlapping_claim_many_batches_split_the_keys_exactly(env: Env) -> None:
    """8 workers claim_many the same 300 keys in shuffled and reversed orders: every key is
    won exactly once, and no deadlock reaches the caller."""
    items = [(subject, DEADLINE + dt.timedelta(hours=subject % 7)) for subject in range(300)]

    async def work(
        ledger: Wrapped, index: int, start: Callable[[], Awaitable[None]]
    ) -> list[Claim]:
        batch = items[::-1] if index % 2 else items[:]
        if index >= 4:
            random.Random(index).shuffle(batch)
        await start()
        return list(await ledger.claim_many("bulk", batch, chunk_size=64))

    results = await run_workers(env, 8, work)
    counts = collections.Counter(c.key.subject for won in results for c in won)
    assert 300 == len(counts)
    assert {1} == set(counts.values())
    assert 300 == env.count()


def _backend_pid(driver_connection: Any) -> int:
    """The server process id of a psycopg (sync or async) or asyncpg connection."""
    if hasattr(driver_connection, "get_server_pid"):
        return int(driver_connection.get_server_pid())
    return int(driver_connection.info.backend_pid)


def _kill_backend_at_insert(env: Env) -> Callable[[], None]:
    """Terminate the ledger's PostgreSQL backend just before its claim INSERT is sent."""
    sync_engine = env.engine.sync_engine if isinstance(env.engine, AsyncEngine) else env.engine
    killer = sa.create_engine(env.backend.sync_url, poolclass=sa.pool.NullPool)

    def kill(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT"):
            pid = _backend_pid(conn.connection.driver_connection)
            with killer.begin() as k:
                k.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    sa.event.listen(sync_engine, "before_cursor_execute", kill)

    def remove() -> None:
        sa.event.remove(sync_engine, "before_cursor_execute", kill)
        killer.dispose()

    return remove


async def test_connection_lost_during_claim_raises_and_returns_no_claim(env: Env) -> None:
    """A backend killed under a claim raises LedgerUnavailableError and returns no claim;
    nothing was written, so the next claim wins the slot."""
    if env.dialect != "postgresql":
        pytest.skip("pg_terminate_backend is PostgreSQL's; see the commit-failure test")
    ledger = env.make()
    remove = _kill_backend_at_insert(env)
    try:
        with pytest.raises(LedgerUnavailableError):
            await ledger.claim_slot("a", 1, DEADLINE)
        with pytest.raises(LedgerUnavailableError):
            await ledger.claim_many("a", [(2, DEADLINE), (3, DEADLINE)])
    finally:
        remove()
    assert 0 == env.count()
    assert 1 == (await ledger.claim_slot("a", 1, DEADLINE)).attempt


async def test_commit_failure_raises_and_returns_no_claim(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When COMMIT fails (connection lost at commit), the claim is not returned and the
    row is not there. (PostgreSQL claims autocommit, so they have no separate COMMIT.)"""
    if env.dialect == "postgresql":
        pytest.skip("claims autocommit on PostgreSQL; see the backend-kill test")
    from notifyonce._ledger import core

    def lost_at_commit(connection: Any) -> None:
        connection.rollback()
        raise sa.exc.OperationalError(
            "COMMIT", {}, ConnectionResetError("lost"), connection_invalidated=True
        )

    ledger = env.make()
    monkeypatch.setattr(core, "_commit", lost_at_commit)
    with pytest.raises(LedgerUnavailableError):
        await ledger.claim_slot("a", 1, DEADLINE)
    with pytest.raises(LedgerUnavailableError):
        await ledger.claim_many("a", [(2, DEADLINE), (3, DEADLINE)])
    monkeypatch.undo()
    assert 0 == env.count()
    assert 1 == (await ledger.claim_slot("a", 1, DEADLINE)).attempt


async def test_unreachable_database_raises_unavailable(tmp_path: Path) -> None:
    """A database that does not answer raises LedgerUnavailableError, chaining the cause."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, Ledger

    url = "postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2"
    with pytest.raises(LedgerUnavailableError) as caught:
        Ledger(sa.create_engine(url)).claim_slot("a", 1, DEADLINE)
    assert caught.value.__cause__ is not None
    engine = create_async_engine(url.replace("psycopg", "asyncpg").split("?")[0])
    try:
        with pytest.raises(LedgerUnavailableError):
            await AsyncLedger(engine).claim_slot("a", 1, DEADLINE)
    finally:
        await engine.dispose()


def _usual_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim through ``LedgerCore.claim_keys``, the seam of the tests that fail it:
    none awaited as a statement on asyncpg's own connection (tested below on its own),
    neither a plan's nor ``claim_slot``'s of one key."""
    from notifyonce._ledger.core import LedgerCore

    monkeypatch.setattr(LedgerCore, "claim_statement", lambda *args, **kwargs: None)
    monkeypatch.setattr(LedgerCore, "one_claim", lambda *args, **kwargs: None)


async def test_failed_chunk_releases_the_chunks_already_won(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a later chunk of claim_many fails, the earlier chunks' claims are released, so
    the next run can win them instead of waiting for their leases to expire."""
    from notifyonce import LedgerError, SlotStatus
    from notifyonce._ledger.core import LedgerCore

    real = LedgerCore.claim_keys
    calls = 0

    def second_chunk_fails(self: LedgerCore, *args: Any, **kwargs: Any) -> list[Claim]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise sa.exc.OperationalError("INSERT", {}, RuntimeError("server went away"))
        return real(self, *args, **kwargs)

    ledger = env.make()
    monkeypatch.setattr(LedgerCore, "claim_keys", second_chunk_fails)
    _usual_way(monkeypatch)
    with pytest.raises(LedgerError):
        await ledger.claim_many("a", [(i, DEADLINE) for i in range(4)], chunk_size=2)
    monkeypatch.setattr(LedgerCore, "claim_keys", real)
    statuses = [(await ledger.get("a", i, DEADLINE)) for i in range(4)]
    assert [SlotStatus.RELEASED, SlotStatus.RELEASED, None, None] == [
        r.status if r else None for r in statuses
    ]
    assert 2 == len(await ledger.claim_many("a", [(0, DEADLINE), (1, DEADLINE)]))


class _FakeDeadlockError(Exception):
    """What MySQL (errno 1213) and PostgreSQL (SQLSTATE 40P01) drivers raise on a deadlock."""

    sqlstate = "40P01"

    def __init__(self) -> None:
        super().__init__(1213, "Deadlock found when trying to get lock")


async def test_deadlock_victim_transaction_is_run_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose transaction was chosen as deadlock victim is retried (the server rolled
    it back) on PostgreSQL and MySQL; SQLite has no deadlocks to retry and raises."""
    from notifyonce import LedgerError
    from notifyonce._ledger.core import LedgerCore

    real = LedgerCore.claim_keys
    failures = 2

    def deadlocked(self: LedgerCore, *args: Any, **kwargs: Any) -> list[Claim]:
        nonlocal failures
        if failures:
            failures -= 1
            raise sa.exc.OperationalError("INSERT", {}, _FakeDeadlockError())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LedgerCore, "claim_keys", deadlocked)
    _usual_way(monkeypatch)
    ledger = env.make()
    if env.dialect == "sqlite":
        with pytest.raises(LedgerError):
            await ledger.claim_slot("a", 1, DEADLINE)
        return
    claim = await ledger.claim_slot("a", 1, DEADLINE)
    assert (0, 1) == (failures, claim.attempt)
    failures = 5  # more than the ledger's 5 runs allow
    with pytest.raises(LedgerError) as caught:
        await ledger.claim_slot("a", 2, DEADLINE)
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    assert 1 == env.count()


@pytest.mark.sqlite
def test_sqlite_writes_run_with_the_ledgers_busy_timeout(tmp_path: Path) -> None:
    """Every SQLite write waits up to its ledger's busy timeout for the lock. The PRAGMA is
    sent once per connection, and again when a ledger with another timeout uses it."""
    from notifyonce import Ledger

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ledger.db'}", poolclass=sa.pool.StaticPool)
    pragmas: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("PRAGMA busy_timeout ="):
            pragmas.append(statement)

    def timeout() -> int:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one())

    try:
        patient = Ledger(engine, busy_timeout=dt.timedelta(seconds=1.5))
        hasty = Ledger(engine, busy_timeout=dt.timedelta(seconds=2))
        patient.create_schema()
        for subject in range(3):
            patient.claim_slot("a", subject, DEADLINE)
        assert (["PRAGMA busy_timeout = 1500"], 1500) == (pragmas, timeout())
        hasty.claim_many("a", [(7, DEADLINE), (8, DEADLINE)])
        assert (2000, 2) == (timeout(), len(pragmas))
        patient.claim_slot("a", 9, DEADLINE)
        assert (1500, 3) == (timeout(), len(pragmas))
    finally:
        engine.dispose()


# -- asyncpg: a claim on the connection the previous call left, awaited directly -----------


def _asyncpg_only(ledger: AsyncLedger) -> None:
    if ledger.engine.sync_engine.dialect.driver != "asyncpg":
        pytest.skip("claims are awaited on the driver's own connection on asyncpg only")


def _driver_runs(ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The sync work the ledger's driver runs from now on (in a greenlet), one item each."""
    runs: list[object] = []
    run = ledger._driver.run

    async def counted(work: Any) -> Any:
        runs.append(work)
        return await run(work)

    monkeypatch.setattr(ledger._driver, "run", counted)
    return runs


def _kill_kept_connection(ledger: AsyncLedger, sync_url: str) -> None:
    """Terminate the backend of the connection the ledger's last call left for the next,
    without letting the event loop turn (it would give the connection back)."""
    pooled = ledger._spare._pooled  # type: ignore[union-attr]
    assert pooled is not None, "the last call left no connection"
    killer = sa.create_engine(sync_url, poolclass=sa.pool.NullPool)
    try:
        with killer.begin() as k:
            pid = _backend_pid(pooled.driver_connection)
            k.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        killer.dispose()


async def test_a_claim_right_after_a_claim_needs_no_greenlet_and_wins_the_same(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On asyncpg the second of two claims in a row runs on the connection the first left,
    awaited directly: the driver runs no sync work for it, and it claims exactly as the
    first did (a fresh row at attempt 1, its token and lease; a held slot is not won)."""
    _asyncpg_only(ledger)
    runs = _driver_runs(ledger, monkeypatch)
    first = await ledger.claim_slot("a", 1, DEADLINE)
    second = await ledger.claim_slot("a", 2, DEADLINE)
    held = await ledger.claim_slot("a", 1, DEADLINE)
    many = await ledger.claim_many("a", [(3, DEADLINE), (4, DEADLINE), (1, DEADLINE)])
    assert 1 == len(runs)
    assert first is not None
    assert second is not None
    assert held is None
    assert (1, 1) == (first.attempt, second.attempt)
    assert first.token != second.token
    assert ["3", "4"] == [c.key.subject for c in many]
    record = await ledger.get("a", 2, DEADLINE)
    assert record is not None
    assert (record.id, record.token, record.status) == (second.id, second.token, "claimed")
    assert record.lease_until == second.lease_until


async def test_a_backend_killed_under_a_direct_claim_raises_and_the_connection_is_dropped(
    ledger: AsyncLedger, async_backend: Any
) -> None:
    """A claim on a kept connection whose backend was killed raises LedgerUnavailableError
    (not asyncpg's own error), returns no claim, and the dead connection is discarded: the
    next claim wins the slot, at attempt 1, on a fresh one."""
    _asyncpg_only(ledger)
    assert await ledger.claim_slot("a", 1, DEADLINE) is not None
    _kill_kept_connection(ledger, async_backend.sync_url)
    with pytest.raises(LedgerUnavailableError):
        await ledger.claim_slot("a", 2, DEADLINE)
    again = await ledger.claim_slot("a", 2, DEADLINE)
    assert again is not None
    assert 1 == again.attempt
    await asyncio.sleep(0)  # the kept connection goes back to the pool
    pool = ledger.engine.sync_engine.pool
    assert 0 == pool.checkedout()  # type: ignore[attr-defined]


async def test_a_database_error_under_a_direct_claim_is_a_ledger_error_and_frees_the_connection(
    ledger: AsyncLedger, async_backend: Any
) -> None:
    """A statement the database refuses (its table dropped under it) raises LedgerError
    as the usual way does, and the connection goes back to the pool, still usable."""
    _asyncpg_only(ledger)
    assert await ledger.claim_slot("a", 1, DEADLINE) is not None
    dropper = sa.create_engine(async_backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        with dropper.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {ledger.table_name}"))
    finally:
        dropper.dispose()
    with pytest.raises(LedgerError) as raised:
        await ledger.claim_slot("a", 2, DEADLINE)
    assert not isinstance(raised.value, LedgerUnavailableError)
    await asyncio.sleep(0)
    pool = ledger.engine.sync_engine.pool
    assert 0 == pool.checkedout()  # type: ignore[attr-defined]
    await ledger.create_schema()
    assert await ledger.claim_slot("a", 2, DEADLINE) is not None


async def test_a_deadlock_under_a_direct_claim_runs_the_claim_again(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim on a kept connection chosen as a deadlock victim (rolled back by the server)
    is run again, and wins; one that keeps being chosen raises LedgerError after the
    ledger's runs."""
    _asyncpg_only(ledger)
    import asyncpg

    real = asyncpg.Connection.fetch
    failures = 0

    async def deadlocked(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal failures
        if failures:
            failures -= 1
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetch", deadlocked)
    assert await ledger.claim_slot("a", 1, DEADLINE) is not None
    failures = 1
    claim = await ledger.claim_slot("a", 2, DEADLINE)
    assert (0, 1) == (failures, claim.attempt if claim else None)
    failures = 10
    with pytest.raises(LedgerError):
        await ledger.claim_slot("a", 3, DEADLINE)
    assert await ledger.get("a", 3, DEADLINE) is None


# -- asyncpg: claim_slot and the single marks of one key, without a plan ---------------------


class _Sent:
    """What asyncpg's connection was asked to run: ``(method, sql, args)`` per call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import asyncpg

        self.calls: list[tuple[str, str, tuple[Any, ...]]] = []
        for method in ("fetch", "execute"):
            real = getattr(asyncpg.Connection, method)
            monkeypatch.setattr(asyncpg.Connection, method, self._spy(method, real))

    def _spy(self, method: str, real: Any) -> Any:
        async def spy(conn: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
            if sql.lstrip().startswith(("INSERT", "UPDATE")):
                self.calls.append((method, sql, args))
            return await real(conn, sql, *args, **kwargs)

        return spy


async def test_a_one_key_claim_and_mark_send_what_their_plans_send(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claim_slot and mark_sent of one key on the connection the previous call left run
    with no plan and no greenlet, yet send asyncpg the very statement their plans send
    (the same compiled text, from the same cache entry) with the same values, and leave
    the same row: a claim with the same token and clock sends what the plan sent, and a
    mark differs from the plan's only by its row's id and token."""
    _asyncpg_only(ledger)
    import notifyonce._ledger.core as core_module
    import notifyonce._ledger.ledger as ledger_module

    sent = _Sent(monkeypatch)
    token = 4242
    monkeypatch.setattr(core_module, "_fresh_tokens", lambda count: [token] * count)
    monkeypatch.setattr(ledger_module, "fresh_token", lambda: token)
    runs = _driver_runs(ledger, monkeypatch)
    planned = await ledger.claim_slot("a", 1, DEADLINE)  # no connection kept yet: a plan
    assert planned is not None
    await asyncio.sleep(0)  # the connection goes back to the pool
    assert await ledger.mark_sent(planned, message_id=7)  # a plan again
    assert 2 == len(runs)
    again = await ledger.claim_slot("a", 1, DEADLINE)  # one key, on the kept connection
    lean = await ledger.claim_slot("a", 2, DEADLINE)
    assert lean is not None
    assert await ledger.mark_sent(lean, message_id=7)
    assert 2 == len(runs), "a call of one key ran sync work"
    assert again is None

    (c1, c1_sql, c1_args), (m1, m1_sql, m1_args), (_, c2_sql, c2_args) = sent.calls[:3]
    (c3, c3_sql, c3_args), (m2, m2_sql, m2_args) = sent.calls[3:]
    assert ("fetch", "execute") == (c1, m1) == (c3, m2)
    assert c1_sql == c2_sql == c3_sql
    assert c1_args == c2_args  # the same key, token and clock: the same values
    assert [a for a in c1_args if a != "1"] == [a for a in c3_args if a != "2"]
    assert m1_sql == m2_sql
    swap = {planned.id: lean.id, planned.token: lean.token}
    assert [swap.get(a, a) for a in m1_args] == list(m2_args)
    compiled = ledger._core.dialect._compiled
    assert 1 == sum(1 for shape in compiled if shape[0] == "claim")
    assert 1 == sum(1 for shape in compiled if shape[0] == "mark")
    first, second = await ledger.get("a", 1, DEADLINE), await ledger.get("a", 2, DEADLINE)
    assert first is not None
    assert second is not None
    fields = ("status", "attempt", "token", "lease_until", "created_at", "updated_at")
    assert [getattr(first, f) for f in fields] == [getattr(second, f) for f in fields]
    assert (first.sent_at, first.message_id) == (second.sent_at, second.message_id)


async def test_a_one_key_claim_cancelled_under_way_gives_its_connection_back(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim_slot on the kept connection cancelled while asyncpg runs it raises the
    cancellation, and its connection goes back to the pool, as the plan's does; the
    next claim of the slot wins it."""
    _asyncpg_only(ledger)
    import asyncpg

    real = asyncpg.Connection.fetch
    hang = False
    hanging = asyncio.Event()

    async def hangs(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hang and args and str(args[0]).lstrip().startswith("INSERT"):
            hanging.set()
            await asyncio.Event().wait()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetch", hangs)

    async def two_claims() -> None:
        nonlocal hang
        assert await ledger.claim_slot("a", 1, DEADLINE) is not None
        hang = True
        await ledger.claim_slot("a", 2, DEADLINE)  # on the connection the first left

    task = asyncio.create_task(two_claims())
    await hanging.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(5):
        await asyncio.sleep(0)
    pool = ledger.engine.sync_engine.pool
    assert 0 == pool.checkedout()  # type: ignore[attr-defined]
    hang = False
    won = await ledger.claim_slot("a", 2, DEADLINE)
    assert won is not None
    assert 1 == won.attempt


async def test_a_one_key_claim_whose_answer_is_lost_is_undone(
    ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim_slot on the kept connection whose statement committed but whose answer
    was lost (the connection cut) raises LedgerUnavailableError and releases the row it
    won by its token, as the plan's undo does: the next claim wins the slot at attempt 1
    instead of finding it held by a claim nobody has."""
    _asyncpg_only(ledger)
    import asyncpg

    real = asyncpg.Connection.fetch
    cut = False

    async def answer_lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        rows = await real(self, *args, **kwargs)
        if cut and str(args[0]).lstrip().startswith("INSERT"):
            raise ConnectionResetError("connection reset by peer")
        return rows

    monkeypatch.setattr(asyncpg.Connection, "fetch", answer_lost)
    assert await ledger.claim_slot("a", 1, DEADLINE) is not None
    cut = True
    with pytest.raises(LedgerUnavailableError):
        await ledger.claim_slot("a", 2, DEADLINE)
    cut = False
    record = await ledger.get("a", 2, DEADLINE)
    assert record is not None
    assert ("released", 0) == (record.status, record.attempt)
    won = await ledger.claim_slot("a", 2, DEADLINE)
    assert won is not None
    assert 1 == won.attempt
