"""One ledger test environment for both flavours: AsyncLedger and Ledger on each database.

Tests are written once, against ``env.ledger``, whose methods are always awaited: for the
sync ``Ledger`` the wrapper calls the method and returns its result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import AsyncLedger, Ledger

from ._clocks import WallClock
from ._databases import MARKS, SYNC_NAMES, Backend, drop_table, make_backend

UTC = dt.timezone.utc
START = dt.datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FLAVOURS = [
    pytest.param(("async", name), marks=mark, id=f"async-{name}") for name, mark in MARKS.items()
] + [pytest.param(("sync", name), marks=MARKS[name], id=f"sync-{name}") for name in SYNC_NAMES]


class Awaitable:
    """Wraps a Ledger or AsyncLedger so every method can be awaited."""

    def __init__(self, ledger: Ledger | AsyncLedger) -> None:
        self.inner = ledger

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call


@dataclass
class Env:
    """A database, a table on it, an engine of the flavour under test and a fake clock."""

    flavour: str  # "async" or "sync"
    backend: Backend
    table: str
    engine: AsyncEngine | sa.Engine
    clock: WallClock = field(default_factory=lambda: WallClock(START))

    @property
    def dialect(self) -> str:
        return self.backend.dialect

    def make(self, **options: Any) -> Awaitable:
        """A fresh ledger object on the same table (what a restarted process builds)."""
        options.setdefault("clock", self.clock)
        if isinstance(self.engine, AsyncEngine):
            return Awaitable(AsyncLedger(self.engine, table_name=self.table, **options))
        return Awaitable(Ledger(self.engine, table_name=self.table, **options))

    def sql(self, text: str) -> list[Any]:
        """Run raw SQL on a separate sync connection (the tests' own view of the table)."""
        engine = sa.create_engine(self.backend.sync_url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as conn:
                result = conn.execute(sa.text(text.replace("{t}", self.table)))
                return list(result) if result.returns_rows else []
        finally:
            engine.dispose()

    def count(self) -> int:
        """How many rows the ledger table holds."""
        return int(self.sql("SELECT count(*) FROM {t}")[0][0])

    @contextlib.asynccontextmanager
    async def caller_connection(self) -> AsyncIterator[Any]:
        """A connection of the flavour's kind, as a caller's own transaction would be."""
        if isinstance(self.engine, AsyncEngine):
            async with self.engine.connect() as conn:
                yield conn
        else:
            with self.engine.connect() as conn:
                yield conn


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (async connections), else return it."""
    return await value if inspect.isawaitable(value) else value


def make_engine(flavour: str, backend: Backend) -> AsyncEngine | sa.Engine:
    """An engine of the flavour, pooled large enough for the race tests."""
    pool = {} if backend.dialect == "sqlite" else {"pool_size": 20, "max_overflow": 20}
    if flavour == "async":
        return create_async_engine(backend.async_url, **pool)
    return sa.create_engine(backend.sync_url, **pool)


async def dispose(engine: AsyncEngine | sa.Engine) -> None:
    """Close every pooled connection."""
    await maybe_await(engine.dispose())


async def open_env(param: tuple[str, str], tmp_path: Path) -> Env:
    """Build the environment for one flavour parameter and create the table."""
    flavour, name = param
    backend = make_backend(name, tmp_path)
    env = Env(flavour, backend, backend.unique_table(), make_engine(flavour, backend))
    await env.make().create_schema()
    return env


@pytest.fixture(params=FLAVOURS, name="env")
async def env_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Env]:
    """A fresh ledger table on each database, for the async and the sync ledger."""
    environment = await open_env(request.param, tmp_path)
    yield environment
    await dispose(environment.engine)
    drop_table(environment.backend, environment.table)
