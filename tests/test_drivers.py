"""The drivers: one per database, asked by everything that writes SQL.

What each driver says of its database is checked against the database itself (its clock,
its minute text, an upsert's RETURNING, partial indexes, a lock wait that runs out), so a
driver cannot claim what its database does not do. A new driver joins every test here by
being listed in ``DRIVERS``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, Ledger, ValidationError
from notifyonce._drivers import (
    DRIVERS,
    Driver,
    MySQLDriver,
    PostgreSQLDriver,
    SQLiteDriver,
    driver_class,
    driver_for,
    missing_driver,
    url_driver,
)
from notifyonce._drivers.sqlite import BUSY_TIMEOUT_INFO

from ._databases import Backend

UTC = dt.timezone.utc

# Each URL as written, then the URL a sync engine and an async engine get from it.
URLS = [
    ("postgresql://u:p@h/db", "postgresql+psycopg://u:p@h/db", "postgresql+asyncpg://u:p@h/db"),
    ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db", "postgresql+asyncpg://u:p@h/db"),
    ("postgresql+asyncpg://u@h/db", "postgresql+psycopg://u@h/db", "postgresql+asyncpg://u@h/db"),
    ("postgresql+psycopg://h/db", "postgresql+psycopg://h/db", "postgresql+psycopg://h/db"),
    (
        "postgresql+psycopg_async://h/db",
        "postgresql+psycopg://h/db",
        "postgresql+psycopg_async://h/db",
    ),
    ("postgresql+psycopg2://h/db", "postgresql+psycopg2://h/db", "postgresql+asyncpg://h/db"),
    ("postgresql+pg8000://h/db", "postgresql+pg8000://h/db", "postgresql+asyncpg://h/db"),
    ("mysql://r@h/t", "mysql+pymysql://r@h/t", "mysql+asyncmy://r@h/t"),
    ("mysql+pymysql://r@h/t", "mysql+pymysql://r@h/t", "mysql+asyncmy://r@h/t"),
    ("mysql+asyncmy://r@h/t", "mysql+pymysql://r@h/t", "mysql+asyncmy://r@h/t"),
    ("mysql+aiomysql://r@h/t", "mysql+pymysql://r@h/t", "mysql+aiomysql://r@h/t"),
    ("mysql+mysqldb://r@h/t", "mysql+mysqldb://r@h/t", "mysql+asyncmy://r@h/t"),
    ("mariadb://r@h/t", "mariadb+pymysql://r@h/t", "mariadb+asyncmy://r@h/t"),
    ("mariadb+asyncmy://r@h/t", "mariadb+pymysql://r@h/t", "mariadb+asyncmy://r@h/t"),
    ("sqlite:///x.db", "sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ("sqlite+aiosqlite:///x.db", "sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ("sqlite+pysqlite:///x.db", "sqlite+pysqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ("sqlite://", "sqlite://", "sqlite+aiosqlite://"),
]


@pytest.mark.parametrize(("given", "sync", "async_"), URLS, ids=[u[0] for u in URLS])
def test_each_url_gets_a_dbapi_its_engine_can_use(given: str, sync: str, async_: str) -> None:
    """A bare scheme or a DBAPI of the other kind becomes the driver's own default; a
    DBAPI that fits is kept (the password too)."""
    url = make_url(given)
    driver = url_driver(url)
    assert driver is not None
    assert (sync, async_) == (
        driver.sync_url(url).render_as_string(hide_password=False),
        driver.async_url(url).render_as_string(hide_password=False),
    )


def test_a_url_of_another_database_has_no_driver() -> None:
    assert url_driver(make_url("oracle://h/x")) is None


def test_every_database_name_has_exactly_one_driver() -> None:
    """SQLAlchemy's names (and the URL aliases) of the databases map to one driver each."""
    names = [n for d in DRIVERS for n in (*d.backends, *d.aliases)]
    assert len(names) == len(set(names))
    assert {"postgresql", "postgres", "mysql", "mariadb", "sqlite"} == set(names)


def test_one_driver_per_engine_shared_by_its_async_facade() -> None:
    """Everything on one engine asks the same driver (one SQLite queue); another engine on
    the same database has its own."""
    engine = create_async_engine("sqlite+aiosqlite://")
    other = create_async_engine("sqlite+aiosqlite://")
    assert driver_for(engine) is driver_for(engine.sync_engine)
    assert driver_for(engine) is not driver_for(other)
    assert isinstance(driver_for(engine), SQLiteDriver)


def test_an_unsupported_database_is_refused_by_name() -> None:
    """A ledger, a rate store or a file-id store on a database without a driver says so,
    naming the engine and the databases there are, before anything is built."""
    from sqlalchemy.dialects.oracle.base import OracleDialect

    with pytest.raises(ValidationError) as caught:
        driver_class(OracleDialect())
    assert "engine" == caught.value.field
    assert "dialect 'oracle' is not supported (PostgreSQL, MySQL/MariaDB, SQLite)" == (
        caught.value.problem
    )
    assert Driver is driver_class(OracleDialect(), fallback=Driver)


@pytest.mark.parametrize("driver", DRIVERS, ids=[d.label for d in DRIVERS])
def test_every_driver_writes_its_own_sql(driver: type[Driver]) -> None:
    """The expressions each database writes differently are all there (a new driver that
    forgot one fails here, not on a user's first campaign)."""
    table = sa.Table("t", sa.MetaData(), sa.Column("k", sa.String(10), primary_key=True))
    assert driver.insert(table) is not None
    assert driver.epoch_now() is not None
    assert driver.minute_text(sa.column("at")) is not None
    assert driver.extras, "which extra installs its DBAPIs"
    assert driver.sync_dbapi or driver is SQLiteDriver
    assert driver.async_dbapi in driver.async_only


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("asyncpg", "postgres"),
        ("psycopg", "postgres"),
        ("asyncmy", "mysql"),
        ("aiosqlite", "sqlite"),
    ],
)
def test_a_missing_dbapi_names_the_extra_of_its_driver(module: str, extra: str) -> None:
    exc = ModuleNotFoundError(f"No module named '{module}'", name=module)
    assert f'pip install "notifyonce[{extra}]"' in (missing_driver(exc) or "")


# -- what each driver says, checked against its database ------------------------------


def _driver(engine: AsyncEngine) -> Driver:
    return driver_for(engine)


async def test_the_clock_in_epoch_seconds_is_now(async_engine: AsyncEngine) -> None:
    """``epoch_now`` reads the database's wall clock in seconds since the epoch (the SQL
    rate store's timeline), within a second of this host's."""
    driver = _driver(async_engine)
    async with async_engine.connect() as conn:
        epoch = float((await conn.execute(sa.select(driver.epoch_now()))).scalar_one())
    assert abs(time.time() - epoch) < 1.0


async def test_the_minute_text_is_the_timestamps_minute(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """``minute_text`` renders a stored UTC timestamp as 'YYYY-MM-DD HH:MM' (the console's
    sends per minute)."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    claim = await ledger.claim_slot("a", 1, "c")
    assert claim is not None
    await ledger.mark_sent(claim)
    t = ledger.table
    driver = _driver(async_engine)
    async with async_engine.connect() as conn:
        row = (await conn.execute(sa.select(t.c.sent_at, driver.minute_text(t.c.sent_at)))).one()
    sent_at: dt.datetime = row[0]
    assert sent_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M") == row[1]


async def test_an_upsert_returns_rows_where_the_driver_says_it_does(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """``upsert_returning``: the driver's insert with its conflict clause and RETURNING
    runs (where it says so) and gives the row back."""
    driver = _driver(async_engine)
    table = sa.Table(
        async_table,
        sa.MetaData(),
        sa.Column("k", sa.String(10), primary_key=True),
        sa.Column("n", sa.Integer),
    )
    async with async_engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
    try:
        insert = driver.insert(table).values(k="a", n=1)
        async with async_engine.begin() as conn:
            if driver.upsert_returning:
                upsert = insert.on_conflict_do_update(index_elements=[table.c.k], set_={"n": 2})
                assert [("a", 1)] == (await conn.execute(upsert.returning(table))).all()
                assert [("a", 2)] == (await conn.execute(upsert.returning(table))).all()
            else:
                await conn.execute(insert.on_duplicate_key_update(n=2))
                await conn.execute(insert.on_duplicate_key_update(n=2))
                assert [("a", 2)] == (await conn.execute(sa.select(table))).all()
    finally:
        async with async_engine.begin() as conn:
            await conn.run_sync(table.metadata.drop_all)


async def test_partial_indexes_exist_where_the_driver_says(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """``partial_indexes`` and ``index_where``: the ledger's sent-only index is partial on
    the databases whose driver says they have partial indexes, and whole elsewhere."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    driver = _driver(async_engine)

    def where(conn: sa.Connection) -> Any:
        indexes = sa.inspect(conn).get_indexes(async_table)
        [index] = [i for i in indexes if i["name"].endswith("_action_sent_idx")]
        return index.get("dialect_options", {}).get(driver.index_where())

    async with async_engine.connect() as conn:
        found = await conn.run_sync(where)
    assert (found is not None) == driver.partial_indexes


async def test_binary_keys_and_aware_timestamps_are_what_comes_back(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """``binary_keys``: key columns come back from the DBAPI as bytes; ``aware_timestamps``:
    timestamps come back with their zone."""
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    await ledger.claim_slot("a", 1, "c")
    driver = _driver(async_engine)
    async with async_engine.connect() as conn:
        subject, updated = (
            await conn.exec_driver_sql(f"SELECT subject, updated_at FROM {async_table}")
        ).one()
    assert isinstance(subject, bytes) == driver.binary_keys
    if isinstance(updated, dt.datetime):  # SQLite gives text
        assert (updated.tzinfo is not None) == driver.aware_timestamps


def _hold_and_wait(async_backend: Backend, async_table: str) -> tuple[Driver, Any]:
    """One session holds a row (or SQLite's file) locked; another waits for it with the
    driver's bound of 0.2 s. The waiter's driver, and the DBAPI error that ended the wait."""
    holder = sa.create_engine(async_backend.sync_url)
    # A bound that does not work must not hang the test: PostgreSQL would wait for ever.
    guard = {"options": "-c statement_timeout=10000"} if "postgres" in async_backend.name else {}
    waiter = sa.create_engine(async_backend.sync_url, connect_args=guard)
    table = sa.Table(async_table, sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True))
    table.metadata.create_all(holder)
    with holder.begin() as conn:
        conn.execute(sa.insert(table).values(k=1))
    driver = driver_for(waiter)
    try:
        with holder.connect() as held:
            if isinstance(driver, SQLiteDriver):
                held.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                held.execute(sa.select(table).with_for_update())
            update = sa.update(table).values(k=2)
            started = time.monotonic()
            with (
                waiter.connect() as conn,
                driver.lock_waits_bounded(conn, 0.2),
                pytest.raises(sa.exc.DBAPIError) as caught,
            ):
                conn.execute(update)
            waited = time.monotonic() - started
            held.rollback()
        # Without the bound the databases wait 5 s (SQLite's default busy timeout), 50 s
        # (MySQL's lock wait) or for ever; with it, 0.2 s (MySQL: 1 s, whole seconds).
        assert waited < 4.0
        return driver, caught.value.orig
    finally:
        table.metadata.drop_all(holder)
        holder.dispose()
        waiter.dispose()


def test_a_lock_wait_that_ran_out_is_recognised(async_backend: Backend, async_table: str) -> None:
    """``lock_waits_bounded`` ends a wait for another session's lock, and
    ``lock_wait_ended`` tells that error apart (the SQL rate store fails closed on it)."""
    driver, error = _hold_and_wait(async_backend, async_table)
    assert driver.lock_wait_ended(error)
    assert not driver.lock_wait_ended(ValueError("another error"))
    assert not driver.is_retryable(error) or isinstance(driver, MySQLDriver)  # 1205 is both


# -- SQLite: one writer at a time ----------------------------------------------------------


@pytest.mark.sqlite
async def test_sqlite_queues_a_processs_writers_and_runs_them_in_a_thread(tmp_path: Path) -> None:
    """Work on a SQLite file runs one piece at a time per event loop, each in a worker
    thread on the driver's own engine over the same file."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")
    driver = driver_for(engine)
    inside = 0
    most = 0
    threads: set[int] = set()

    def work(on: sa.Engine) -> str:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        threads.add(threading.get_ident())
        time.sleep(0.01)
        inside -= 1
        return str(on.url.database)

    try:
        done = await asyncio.gather(*[driver.run(work) for _ in range(8)])
    finally:
        await engine.dispose()
    assert {str(tmp_path / "q.db")} == set(done)
    assert 1 == most
    assert threading.get_ident() not in threads


@pytest.mark.sqlite
async def test_sqlites_own_engine_closes_with_the_callers(tmp_path: Path) -> None:
    """The connections the driver keeps open on the file close when the caller disposes
    of the engine (nothing is left open behind the caller's back)."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    await ledger.claim_slot("a", 1, "c")
    own = driver_for(engine)._file_engine  # type: ignore[attr-defined]
    assert own is not None
    assert 1 == own.pool.checkedin()
    await engine.dispose()
    assert 0 == own.pool.checkedin()


@pytest.mark.sqlite
async def test_an_in_memory_sqlite_database_runs_on_the_callers_connection() -> None:
    """A private database has no file to open again: its work runs on the engine given."""
    engine = create_async_engine("sqlite+aiosqlite://")
    driver = driver_for(engine)
    try:
        assert engine.sync_engine is await driver.run(lambda on: on)
    finally:
        await engine.dispose()


@pytest.mark.sqlite
def test_sync_sqlite_writers_of_one_engine_take_turns(tmp_path: Path) -> None:
    """Threads writing through one sync engine take turns in front of the file's lock."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 's.db'}")
    ledger = Ledger(engine)
    ledger.create_schema()
    won: list[int] = []

    def claim(n: int) -> None:
        for k in range(20):
            if ledger.claim_slot("a", n * 100 + k, "c") is not None:
                won.append(1)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.dispose()
    assert 120 == len(won)


@pytest.mark.sqlite
def test_the_busy_timeout_is_set_once_per_connection(tmp_path: Path) -> None:
    """The busy timeout is noted on the connection and set again only when another user of
    the connection wants another value."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'b.db'}")
    driver = driver_for(engine)
    pragmas: list[str] = []
    try:
        with engine.connect() as conn:
            info = conn.connection.info

            def execute(sql: str) -> None:
                pragmas.append(sql)

            driver.begin_write(execute, info, 500)
            driver.begin_write(execute, info, 500)
            driver.begin_write(execute, info, 700)
            assert 700 == info[BUSY_TIMEOUT_INFO]
    finally:
        engine.dispose()
    assert [
        "PRAGMA busy_timeout = 500",
        "BEGIN IMMEDIATE",
        "BEGIN IMMEDIATE",
        "PRAGMA busy_timeout = 700",
        "BEGIN IMMEDIATE",
    ] == pragmas


@pytest.mark.parametrize(
    ("driver", "capable"),
    [
        (PostgreSQLDriver, {"row_locks", "skip_locked", "autocommit_statements"}),
        (MySQLDriver, {"row_locks"}),
        (SQLiteDriver, {"one_writer"}),
    ],
    ids=["PostgreSQL", "MySQL", "SQLite"],
)
def test_what_each_database_can_do(driver: type[Driver], capable: set[str]) -> None:
    """The capabilities the ledger's transactions rest on, per database (the sweep's
    locks, autocommit, one writer at a time), as the delivery docs describe them."""
    names = {"row_locks", "skip_locked", "autocommit_statements", "one_writer"}
    assert capable == {name for name in names if getattr(driver, name)}


@pytest.mark.sqlite
def test_everything_on_one_engine_asks_one_driver(tmp_path: Path) -> None:
    """The ledger, the SQL rate store and the file-id store on one engine share its driver,
    and so, on SQLite, one queue in front of the file's lock."""
    from notifyonce.ratelimit import SQLRateStore
    from notifyonce.telegram import SQLFileIdStore

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}")
    ledger = AsyncLedger(engine)
    rates = SQLRateStore(engine)
    files = SQLFileIdStore(engine)
    assert {id(driver_for(engine))} == {id(ledger._driver), id(rates._driver), id(files._driver)}
