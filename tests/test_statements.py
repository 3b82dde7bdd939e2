"""The ledger's compiled statements: bound as SQLAlchemy binds them, planned anew as they
run, and run through the engine's Connection whenever someone watches the engine."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import Ledger
from notifyonce._drivers import PostgreSQLDriver, SQLiteDriver
from notifyonce._drivers.execute import Compiled, is_observed
from notifyonce._ledger.dialects import PostgreSQL, SQLite
from notifyonce._ledger.table import build_table

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 1, 18, 0, 0, 123456, tzinfo=UTC)

TABLE = build_table(sa.MetaData())


def statement() -> sa.ClauseElement:
    t = TABLE.c
    return sa.select(t.id).where(
        t.subject == sa.bindparam("subject", type_=t.subject.type),
        t.created_at == sa.bindparam("now", type_=t.created_at.type),
        t.updated_at == sa.bindparam("now", type_=t.updated_at.type),
        t.status == sa.literal("claimed", t.status.type),
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param(
            "postgresql+asyncpg://u@h/d", ("42", NOW, "claimed"), id="asyncpg: numbered, once"
        ),
        pytest.param(
            "postgresql+psycopg://u@h/d",
            {"subject": "42", "now": NOW, "param_1": "claimed"},
            id="psycopg: named",
        ),
        pytest.param(
            "mysql+asyncmy://u@h/d",
            (b"42", NOW.replace(tzinfo=None), NOW.replace(tzinfo=None), "claimed"),
            id="asyncmy: bytes keys, naive UTC",
        ),
        pytest.param(
            "sqlite://",
            ("42", "2026-12-01 18:00:00.123456", "2026-12-01 18:00:00.123456", "claimed"),
            id="sqlite: datetime text",
        ),
    ],
)
def test_binds_are_what_sqlalchemy_would_send(url: str, expected: Any) -> None:
    """Each value passes through its type's bind processor for that driver, in the
    placeholders' order; a literal keeps its value."""
    engine = (
        create_async_engine(url).sync_engine
        if "async" in url or "asyncmy" in url
        else sa.create_engine(url)
    )
    compiled = Compiled(statement(), engine.dialect)
    assert expected == compiled.args({"subject": "42", "now": NOW})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://u@h/d",
        "postgresql+psycopg://u@h/d",
        "mysql+asyncmy://u@h/d",
        "mysql+pymysql://u@h/d",
        "sqlite+aiosqlite://",
        "sqlite://",
    ],
)
@pytest.mark.parametrize("column", ["action", "subject", "cycle", "cycle_at", "lease_until"])
def test_the_ledger_types_bind_as_their_sqlalchemy_processors_do(url: str, column: str) -> None:
    """The ledger's own column types bind through one function of the value, their
    driver looked up once: what SQLAlchemy's processor makes of each value, exactly (a
    zone converted to UTC, naive UTC or text where the column keeps no zone, bytes for
    MySQL's keys, None kept), and a naive datetime refused by both."""
    from notifyonce._drivers.execute import _bind_processor

    sync = "async" not in url and "asyncmy" not in url
    engine = sa.create_engine(url) if sync else create_async_engine(url).sync_engine
    dialect = engine.dialect
    column_type = TABLE.c[column].type
    theirs = column_type.dialect_impl(dialect).bind_processor(dialect)
    ours = _bind_processor(column_type, dialect)
    moscow = dt.timezone(dt.timedelta(hours=3))
    values: list[Any] = (
        [NOW, NOW.astimezone(moscow), None]
        if isinstance(column_type, type(TABLE.c.cycle_at.type))
        else ["trial_6h", "Ann ", "ünï", None]
    )
    for value in values:
        expected = value if theirs is None else theirs(value)
        got = value if ours is None else ours(value)
        assert (expected, type(expected)) == (got, type(got)), value
    if isinstance(column_type, type(TABLE.c.cycle_at.type)):
        assert theirs is not None
        assert ours is not None
        for process in (theirs, ours):
            with pytest.raises(ValueError, match="naive datetime"):
                process(NOW.replace(tzinfo=None))


def test_a_postgres_statement_is_planned_anew_as_its_runs_double() -> None:
    """Its text changes after 32 runs and whenever its runs double again, so the driver
    prepares it anew and the server plans it for the table as it is then; the binds stay."""
    engine = create_async_engine("postgresql+asyncpg://u@h/d").sync_engine
    dialect = PostgreSQL(TABLE, PostgreSQLDriver(engine))
    sa_dialect = engine.dialect
    texts = [dialect.compiled(sa_dialect, ("s",), statement).sql for _ in range(300)]
    changes = [n + 1 for n in range(1, 300) if texts[n] != texts[n - 1]]
    assert [33, 65, 129, 257] == changes
    assert texts[0] + " /* notifyonce plan 4 */" == texts[-1]
    last = dialect.compiled(sa_dialect, ("s",), statement)
    assert ("42", NOW, "claimed") == last.args({"subject": "42", "now": NOW})


def test_other_databases_keep_one_text() -> None:
    """SQLite plans every statement when it is prepared, from the table as it is: one text."""
    engine = sa.create_engine("sqlite://")
    dialect = SQLite(TABLE, SQLiteDriver(engine))
    sa_dialect = engine.dialect
    assert 1 == len({dialect.compiled(sa_dialect, ("s",), statement).sql for _ in range(200)})


@pytest.mark.sqlite
def test_an_observed_engine_sees_every_statement(tmp_path: Path) -> None:
    """With a cursor-execute listener (logging, tracing) the ledger's statements go through
    the Connection, where the listener hears them; without one they skip that layer."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    plain = sa.create_engine(url)
    watched = sa.create_engine(url)
    heard: list[str] = []
    sa.event.listen(watched, "before_cursor_execute", lambda *args: heard.append(args[2]))
    try:
        assert (False, True, True) == (
            is_observed(plain),
            is_observed(watched),
            is_observed(sa.create_engine(url, echo=True)),
        )
        Ledger(plain).create_schema()
        claim = Ledger(watched).claim_slot("a", 1, "c")
        assert claim is not None
        assert any(s.startswith("INSERT INTO notifyonce_slots") for s in heard)
        heard.clear()
        assert Ledger(plain).claim_slot("a", 2, "c") is not None
        assert [] == heard
    finally:
        plain.dispose()
        watched.dispose()


@pytest.mark.sqlite
async def test_a_watched_async_sqlite_engine_hears_the_ledgers_statements(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a SQLite file the async ledger runs its work on connections of its own, in a
    thread; an engine someone watches (a cursor-execute listener, ``echo``) has the work run
    on its own connections instead, so the listener and the log see every statement."""
    from notifyonce import AsyncLedger

    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    plain, watched, echoed = (
        create_async_engine(url),
        create_async_engine(url),
        create_async_engine(url, echo=True),
    )
    heard: list[str] = []
    sa.event.listen(
        watched.sync_engine, "before_cursor_execute", lambda *args: heard.append(args[2])
    )
    try:
        await AsyncLedger(plain).create_schema()
        assert await AsyncLedger(watched).claim_slot("a", 1, "c") is not None
        assert any(s.startswith("INSERT INTO notifyonce_slots") for s in heard)
        with caplog.at_level("INFO", logger="sqlalchemy.engine.Engine"):
            assert await AsyncLedger(echoed).claim_slot("a", 2, "c") is not None
        logged = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("INSERT INTO notifyonce_slots") for m in logged)
        heard.clear()
        assert await AsyncLedger(plain).claim_slot("a", 3, "c") is not None
        assert [] == heard
    finally:
        for engine in (plain, watched, echoed):
            await engine.dispose()


@pytest.mark.postgres
async def test_back_to_back_calls_share_a_connection_until_the_loop_turns() -> None:
    """Claims awaited one after the other pass one connection along (asyncpg); it is back in
    the pool as soon as the event loop turns, and nothing else is held."""
    from ._databases import make_backend

    backend = make_backend("postgres-asyncpg", Path("."))
    engine = create_async_engine(backend.async_url, pool_size=2, max_overflow=0)
    checkouts: list[object] = []
    sa.event.listen(engine.sync_engine, "checkout", lambda *args: checkouts.append(args))
    table = backend.unique_table()
    try:
        from notifyonce import AsyncLedger

        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        checkouts.clear()
        for subject in range(20):
            assert await ledger.claim_slot("a", subject, "c") is not None
        assert 1 == len(checkouts)
        assert 1 == engine.sync_engine.pool.checkedout()
        await asyncio.sleep(0)
        assert 0 == engine.sync_engine.pool.checkedout()
    finally:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        await engine.dispose()
