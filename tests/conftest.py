"""Shared fixtures: real databases, each test on its own table, and one wall clock.

The one fixture system of the tests: ``async_backend``/``sync_backend`` (each database),
``async_table``/``sync_table``, ``async_engine``/``sync_engine``, ``env`` (both ledgers on
each database, from ``_ledger_env``), ``clock`` and ``ledger`` (an AsyncLedger on it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger

from ._clocks import WallClock
from ._databases import MARKS, SYNC_NAMES, Backend, backend_params, drop_table, make_backend
from ._leaks import describe, left_open, watch
from ._ledger_env import env_fixture  # noqa: F401 - the `env` fixture, for every test module

# The task queues' worker apps are imported by their workers, with tests/ on sys.path
# (``from _queue_storm import ...``); collected for doctests they would not import.
collect_ignore_glob = ["_*_once_app.py"]

ASYNC_BACKENDS = backend_params(MARKS)
SYNC_BACKENDS = backend_params(SYNC_NAMES)


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it: a lone surrogate becomes its escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Reports that can cross to pytest-xdist's controller: a test of unstorable values logs
    a lone surrogate, which its UTF-8 channel refuses (the whole run would stop)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    if report.longrepr is not None and _utf8(text := str(report.longrepr)) != text:
        report.longrepr = _utf8(text)


def pytest_configure(config: pytest.Config) -> None:
    watch()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test fails if it left a connection open once its event loop closed (``_leaks``):
    otherwise the socket warns in whichever later test the garbage collector runs."""
    result = yield
    left = left_open()
    if left:
        raise AssertionError(
            "the test left connections open (a client not closed): "
            + ", ".join(describe(transport) for transport in left)
        )
    return result


@pytest.fixture(params=ASYNC_BACKENDS)
def async_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each database with its async driver: SQLite (aiosqlite), PostgreSQL (asyncpg and
    psycopg 3) and MariaDB (asyncmy)."""
    return make_backend(request.param, tmp_path)


@pytest.fixture(params=SYNC_BACKENDS)
def sync_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each database with its sync driver: SQLite, PostgreSQL (psycopg 3), MariaDB (PyMySQL)."""
    return make_backend(request.param, tmp_path)


@pytest.fixture
def async_table(async_backend: Backend) -> Iterator[str]:
    """A table name no other test (or concurrent test run) uses; dropped afterwards."""
    name = async_backend.unique_table()
    yield name
    drop_table(async_backend, name)


@pytest.fixture
def sync_table(sync_backend: Backend) -> Iterator[str]:
    """A table name no other test (or concurrent test run) uses; dropped afterwards."""
    name = sync_backend.unique_table()
    yield name
    drop_table(sync_backend, name)


@pytest.fixture
async def async_engine(async_backend: Backend) -> AsyncIterator[AsyncEngine]:
    """An AsyncEngine on each database."""
    engine = (
        create_async_engine(async_backend.async_url, pool_size=20, max_overflow=20)
        if async_backend.dialect != "sqlite"
        else create_async_engine(async_backend.async_url)
    )
    yield engine
    await engine.dispose()


@pytest.fixture
def sync_engine(sync_backend: Backend) -> Iterator[sa.Engine]:
    """An Engine on each database."""
    engine = sa.create_engine(sync_backend.sync_url)
    yield engine
    engine.dispose()


@pytest.fixture(params=["own-client", "httpx-client"])
async def http_client(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Each path an HTTP sender can send through: None (the sender's own client, httpx over
    aiohttp's pool) and a caller's ``httpx.AsyncClient`` (httpx's own transport, httpcore),
    sized as the sender's own. Pass it as ``client=``; a caller's client is closed here."""
    if request.param == "own-client":
        yield None
        return
    import httpx

    from notifyonce._senders.http import DEFAULT_LIMITS

    async with httpx.AsyncClient(limits=DEFAULT_LIMITS) as client:
        yield client


@pytest.fixture
async def sqlite_ledger(tmp_path: Path) -> AsyncIterator[AsyncLedger]:
    """An AsyncLedger on a SQLite file, for tests of what surrounds the ledger."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'ledger.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    yield ledger
    await engine.dispose()


@pytest.fixture
def clock() -> WallClock:
    """The wall clock of one test, shared by its ledgers and notifiers."""
    return WallClock()


@pytest.fixture
async def ledger(async_engine: AsyncEngine, async_table: str, clock: WallClock) -> AsyncLedger:
    """An AsyncLedger with its table, on each database, on the test's clock."""
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=clock)
    await ledger.create_schema()
    return ledger
