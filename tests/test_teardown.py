"""A test's teardown cannot hold the run: dropping its table gives up on a lock that a
session the test left behind still holds, instead of waiting for ever."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from . import _databases
from ._databases import backend_params, drop_table, make_backend


@pytest.mark.parametrize("name", backend_params(["postgres-psycopg", "mariadb"]))
def test_dropping_a_table_another_session_holds_fails_instead_of_hanging(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session left in a transaction that wrote to the table (a test's task still running
    when the test failed): the DROP waits the helper's lock wait (1 s here), then fails;
    once that session ends, the table goes."""
    monkeypatch.setattr(_databases, "DROP_LOCK_WAIT_SECONDS", 1)
    backend = make_backend(name, tmp_path)
    table = backend.unique_table()
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {table} (n INTEGER)"))
        holder = engine.connect()
        holder.begin()
        holder.execute(sa.text(f"INSERT INTO {table} VALUES (1)"))
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError):
            drop_table(backend, table)
        assert time.monotonic() - started < 30  # the 1 s wait, not for ever
        holder.rollback()
        holder.close()
        drop_table(backend, table)
        assert not sa.inspect(engine).has_table(table)
    finally:
        engine.dispose()
