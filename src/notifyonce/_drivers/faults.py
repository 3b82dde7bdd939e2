"""What the door contract (`notifyonce.testing.contract`) does to a database to make its
faults, in each database's own words: where none answers, a statement bounded in time, a
table held locked by another session, and the scratch tables dropped after.

Only the contract imports this: it is test support, kept beside the drivers because each
piece asks which database it runs on.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

__all__ = ["bound_statements", "drop_tables", "hold_write_lock", "unreachable_url", "where"]


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def unreachable_url(url: str, token: str | None = None) -> str:
    """``url`` pointing where no database answers: a SQLite file in a directory that does
    not exist, a server's port 1 on 127.0.0.1."""
    parsed = make_url(url)
    if _is_sqlite(url):
        missing = f"/nonexistent-notifyonce-{token or uuid.uuid4().hex[:8]}/ledger.sqlite3"
        return parsed.set(database=missing).render_as_string(hide_password=False)
    return parsed.set(host="127.0.0.1", port=1).render_as_string(hide_password=False)


def where(url: str) -> list[str]:
    """What an error about reaching ``url`` should name: the SQLite file, or the server's
    host and port."""
    parsed = make_url(url)
    if _is_sqlite(url):
        return [parsed.database or ""]
    return [f"{parsed.host}:{parsed.port}", f"port {parsed.port}"]


def bound_statements(engine: sa.Engine, seconds: float) -> None:
    """Every connection of ``engine`` gives up on a statement (or a lock wait) after
    ``seconds``: PostgreSQL's ``statement_timeout``, MariaDB's lock wait; SQLite's is the
    ledger's ``busy_timeout``, so nothing is set there."""
    name = engine.dialect.name
    if name == "sqlite":
        return
    setting = (
        f"SET statement_timeout = {max(1, int(seconds * 1000))}"
        if name == "postgresql"
        else f"SET SESSION innodb_lock_wait_timeout = {max(1, round(seconds))}"
    )

    def connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(setting)
        finally:
            cursor.close()
        dbapi_connection.commit()

    sa.event.listen(engine, "connect", connect)


def hold_write_lock(url: str, table: str) -> Callable[[], None]:
    """Hold a write lock on ``table`` from a connection of its own; returns its release."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    conn = engine.connect()
    name = engine.dialect.name
    if name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif name == "postgresql":
        conn.exec_driver_sql(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
    else:
        # Next-key locks over the whole (empty) index: every insert waits for them, as
        # behind another worker's claim in flight, up to innodb_lock_wait_timeout.
        conn.exec_driver_sql(f"SELECT * FROM {table} FOR UPDATE")  # noqa: S608 - our own name

    def release() -> None:
        with contextlib.suppress(Exception):
            conn.rollback()
        conn.close()
        engine.dispose()

    return release


def drop_tables(engine: sa.Engine, table: str) -> None:
    """Drop ``table`` and the tables ``create_schema`` made beside it (their names start
    with its name), waiting at most a minute for another session's lock."""
    with contextlib.suppress(Exception), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL lock_timeout = '60s'")
        elif engine.dialect.name == "mysql":
            conn.exec_driver_sql("SET SESSION lock_wait_timeout = 60")
        names = sa.inspect(conn).get_table_names()
        for name in sorted(n for n in names if n == table or n.startswith(f"{table}_")):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")
