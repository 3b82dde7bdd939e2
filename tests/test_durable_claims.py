"""A ledger asked for ``synchronous_commit`` makes each claim's commit wait for a standby.

The setting rides in the claim's own statement (``set_config(..., true)``: local to its
transaction), so the commit of a claim waits for the synchronous standby and nothing
else does: marks commit as the server says, and no statement is added to any call. The
private server here names a standby that never connects (``synchronous_standby_names =
'nobody'``) with the server's default ``synchronous_commit = local``: a commit that asks
for the standby waits for ever (until its backend is cancelled, when PostgreSQL commits
it locally), one that does not returns at once. tests/test_failover.py fails a real
primary over to its standby.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Ledger, SlotStatus, ValidationError
from notifyonce._errors import ValidationTypeError

from ._databases import Backend
from ._failover import _Node

CYCLE = "2026-12"


@pytest.fixture(scope="module")
def waiting_server() -> Any:
    """A private PostgreSQL whose synchronous standby never comes: a commit that waits for
    it waits until cancelled."""
    node = _Node({"synchronous_standby_names": "'nobody'", "synchronous_commit": "local"})
    try:
        node.start()
        yield node
    finally:
        node.close()


@pytest.fixture(params=["asyncpg", "psycopg"])
async def waiting_engine(
    request: pytest.FixtureRequest, waiting_server: _Node
) -> AsyncIterator[Any]:
    """An AsyncEngine on the waiting server, with each PostgreSQL driver."""
    engine = create_async_engine(
        f"postgresql+{request.param}://postgres@127.0.0.1:{waiting_server.port}/postgres"
    )
    yield engine
    await engine.dispose()


async def _released_once_waiting(server: _Node, call: Awaitable[Any]) -> Any:
    """Run ``call``; it must come to wait for the synchronous standby (``SyncRep``), which
    the test then cancels (PostgreSQL commits it locally); its result."""
    task = asyncio.ensure_future(call)
    waiting = ""
    deadline = time.monotonic() + 60
    while not waiting and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        waiting = await asyncio.to_thread(
            server.psql, "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        )
    assert (False, True) == (task.done(), bool(waiting)), "the commit did not wait"
    await asyncio.to_thread(server.psql, f"SELECT pg_cancel_backend({waiting.split()[0]})")
    return await asyncio.wait_for(task, 60)


@pytest.mark.postgres
async def test_a_claim_waits_for_the_synchronous_standby_and_a_mark_does_not(
    waiting_engine: Any, waiting_server: _Node
) -> None:
    """With synchronous_commit='on', claim_slot's and claim_many's commits wait for the
    standby; the marks after them and a ledger without the option commit at once."""
    table = f"durable_{waiting_engine.dialect.driver}"
    plain = AsyncLedger(waiting_engine, table_name=table)
    await plain.create_schema()
    durable = AsyncLedger(waiting_engine, table_name=table, synchronous_commit="on")

    assert await asyncio.wait_for(plain.claim_slot("news", 1, CYCLE), 60) is not None
    claim = await _released_once_waiting(waiting_server, durable.claim_slot("news", 2, CYCLE))
    assert claim is not None
    assert True is await asyncio.wait_for(durable.mark_sent(claim, message_id=7), 60)
    many = await _released_once_waiting(
        waiting_server, durable.claim_many("news", [(3, CYCLE), (4, CYCLE)])
    )
    assert ["3", "4"] == [c.key.subject for c in many]
    assert [True, True] == await asyncio.wait_for(
        durable.mark_many([(c, SlotStatus.SENT, None) for c in many]), 60
    )


@pytest.mark.postgres
async def test_the_first_claim_says_whether_a_failover_can_lose_it(
    waiting_engine: Any, waiting_server: _Node, caplog: pytest.LogCaptureFixture
) -> None:
    """check_durability reads synchronous_standby_names and the level the claims commit at:
    a standby named and waited for keeps them; the server's own level (local) does not."""
    caplog.set_level(logging.INFO, logger="notifyonce.ledger")
    durable = AsyncLedger(waiting_engine, synchronous_commit="remote_apply")
    plain = AsyncLedger(waiting_engine)
    assert (
        "a failover to a synchronous standby keeps every committed claim: each claim's commit "
        "waits for synchronous_standby_names (the ledger's synchronous_commit = remote_apply)"
    ) == await durable.check_durability()
    assert (
        "a failover can lose a committed claim: claims commit with synchronous_commit = local "
        "(the server's), which does not wait for the synchronous standby; give the ledger "
        "synchronous_commit='on'"
    ) == await plain.check_durability()
    # Not asked for the option: said at INFO, not as a warning.
    assert [logging.INFO, logging.INFO] == [r.levelno for r in caplog.records]


@pytest.mark.postgres
async def test_a_durable_ledger_warns_once_when_no_standby_is_named(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """On a PostgreSQL without synchronous_standby_names, the first claim of a ledger
    asked for synchronous_commit logs one warning line; later claims say nothing."""
    from ._databases import drop_table, make_backend

    backend = make_backend("postgres-asyncpg", tmp_path)
    if "''" not in _standby_names(backend):
        pytest.skip("the test PostgreSQL names a synchronous standby")
    table = backend.unique_table()
    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=table, synchronous_commit="on")
        await ledger.create_schema()
        caplog.set_level(logging.INFO, logger="notifyonce.ledger")
        for subject in range(3):
            assert await ledger.claim_slot("news", subject, CYCLE) is not None
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert [
            "ledger: a failover can lose a committed claim: this PostgreSQL names no "
            "synchronous standby (synchronous_standby_names is empty), so no commit waits "
            "for one"
        ] == warned
    finally:
        await engine.dispose()
        drop_table(backend, table)


def _standby_names(backend: Backend) -> str:
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            names = conn.execute(sa.text("SHOW synchronous_standby_names")).scalar_one()
    finally:
        engine.dispose()
    return f"'{names}'"


@pytest.mark.postgres
def test_the_durable_claim_is_one_cached_statement_in_the_echo_log(
    caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """Under echo, each claim of a durable ledger is one statement carrying the setting
    (no SET before it), compiled once (no "[no key" in SQLAlchemy's log), and a mark's
    statement does not carry it."""
    from ._databases import drop_table, make_backend

    backend = make_backend("postgres-psycopg", tmp_path)
    table = backend.unique_table()
    engine = sa.create_engine(backend.sync_url, echo=True)
    try:
        ledger = Ledger(engine, table_name=table, synchronous_commit="on")
        ledger.create_schema()
        ledger.check_durability()  # the once-only check, out of the way
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
        caplog.clear()
        claims = [ledger.claim_slot("news", subject, CYCLE) for subject in range(3)]
        compiled = len(ledger._core.dialect._compiled)
        claims += ledger.claim_many("news", [(subject, CYCLE) for subject in range(3, 9)])
        claims += ledger.claim_many("news", [(subject, CYCLE) for subject in range(9, 15)])
        assert compiled + 1 == len(ledger._core.dialect._compiled)
        assert None not in claims
        ledger.mark_sent(claims[0], message_id=1)
        said = [r.getMessage() for r in caplog.records]
        statements = [m for m in said if m.lstrip().startswith(("INSERT", "WITH", "UPDATE", "SET"))]
        assert [] == [m for m in said if "[no key" in m]
        assert [] == [m for m in statements if m.lstrip().startswith("SET")]
        assert 5 == sum("set_config('synchronous_commit', 'on', true)" in m for m in statements)
        assert 1 == sum(m.lstrip().startswith("UPDATE") for m in statements)
        assert not any("set_config" in m for m in statements if m.lstrip().startswith("UPDATE"))
    finally:
        engine.dispose()
        drop_table(backend, table)


@pytest.mark.parametrize("level", ["local", "off", "ON", "remote-apply", ""])
def test_a_level_that_does_not_wait_for_a_standby_is_refused(level: str) -> None:
    """Only on, remote_write and remote_apply wait for a standby: any other word raises a
    ValidationError naming synchronous_commit, before anything is written."""
    with pytest.raises(ValidationError, match=r"^synchronous_commit: must be one of"):
        Ledger(sa.create_engine("postgresql+psycopg://u@127.0.0.1:1/x"), synchronous_commit=level)


def test_a_level_that_is_not_a_string_is_refused() -> None:
    """synchronous_commit=True is a type error naming the argument."""
    with pytest.raises(ValidationTypeError, match=r"^synchronous_commit: must be a str or None"):
        Ledger(sa.create_engine("sqlite://"), synchronous_commit=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        pytest.param("sqlite://", "SQLite has no standby", id="sqlite"),
        pytest.param("mysql+pymysql://u@127.0.0.1:1/x", "semi-synchronous", id="mariadb"),
    ],
)
def test_synchronous_commit_is_refused_where_a_commit_cannot_ask_for_a_standby(
    url: str, why: str
) -> None:
    """On SQLite, MariaDB and MySQL the option raises (a silent no-op would promise a
    durability the database does not give), saying why."""
    with pytest.raises(ValidationError, match=r"^synchronous_commit: is a PostgreSQL setting") as e:
        Ledger(sa.create_engine(url), synchronous_commit="on")
    assert why in str(e.value)


@pytest.mark.sqlite
def test_check_durability_on_sqlite_says_there_is_no_failover() -> None:
    """SQLite's line: no standby, no failover."""
    assert (
        "SQLite has no standby and no failover: a committed claim is lost only with the "
        "database file"
    ) == Ledger(sa.create_engine("sqlite://")).check_durability()


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["postgres-asyncpg", "postgres-psycopg"])
async def test_a_notifier_run_on_a_durable_ledger_sends_each_chat_once(
    driver: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The Notifier's statements that mark and claim together carry the setting too (seen
    in the echo log): a run of 120 chats in batches of 10 on a durable ledger sends each
    once."""
    import datetime as dt

    from notifyonce import Message, Notification, Notifier, Outcome
    from notifyonce.testing import FakeSender

    from ._databases import drop_table, make_backend

    backend = make_backend(driver, tmp_path)
    table = backend.unique_table()
    engine = create_async_engine(backend.async_url, echo=True)
    try:
        ledger = AsyncLedger(engine, table_name=table, synchronous_commit="remote_write")
        await ledger.create_schema()
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
        sender = FakeSender(latency=0.001)
        cycle = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)
        report = await Notifier(ledger, sender, concurrency=4, batch_size=10).send_many(
            "news", [Notification(chat, cycle, Message("hello")) for chat in range(120)]
        )
        assert {Outcome.SENT: 120} == {k: v for k, v in report.counts.items() if v}
        assert 120 == len({r.recipient for r in sender.records}) == len(sender.records)
        said = [r.getMessage() for r in caplog.records]
        setting = "set_config('synchronous_commit', 'remote_write', true)"
        assert any("marked AS" in m and setting in m for m in said)
    finally:
        await engine.dispose()
        drop_table(backend, table)


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_a_claim_through_pgbouncer_waits_for_the_standby(
    driver: str, waiting_server: _Node
) -> None:
    """Through a PgBouncer in transaction mode (each statement on whichever server
    connection is free), a durable claim still waits for the standby: the setting is
    part of the claim's own statement, not a session's SET."""
    from notifyonce import pgbouncer_options

    from ._private_servers import PgBouncer

    upstream = f"postgresql+psycopg://postgres@127.0.0.1:{waiting_server.port}/postgres"
    with PgBouncer(upstream, pool_size=2) as bouncer:
        url = bouncer.async_url if driver == "asyncpg" else bouncer.url
        engine = create_async_engine(url, **pgbouncer_options(url))
        try:
            table = f"bouncer_{driver}"
            await AsyncLedger(engine, table_name=table).create_schema()
            ledger = AsyncLedger(engine, table_name=table, synchronous_commit="on")
            claim = await _released_once_waiting(
                waiting_server, ledger.claim_slot("news", 1, CYCLE)
            )
            assert claim is not None
            assert True is await asyncio.wait_for(ledger.mark_sent(claim), 60)
        finally:
            await engine.dispose()
