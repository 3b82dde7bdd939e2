"""Where the test databases come from.

Order of preference for PostgreSQL and MariaDB/MySQL:

1. a URL in the environment (``NOTIFYONCE_TEST_POSTGRES_URL``, ``NOTIFYONCE_TEST_MYSQL_URL``),
   which ``make test`` sets for the services it starts;
2. a throwaway container through testcontainers, where a Docker engine answers;
3. otherwise the tests skip with a message saying how to enable them, except in CI
   (``CI=true``), where a missing database fails the run.

SQLite always runs, on a file in the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

POSTGRES_ENV = "NOTIFYONCE_TEST_POSTGRES_URL"
MYSQL_ENV = "NOTIFYONCE_TEST_MYSQL_URL"

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# Every database and driver the tests run on, with the marker that selects it.
MARKS = {
    "sqlite": pytest.mark.sqlite,
    "postgres-asyncpg": pytest.mark.postgres,
    "postgres-psycopg": pytest.mark.postgres,
    "mariadb": pytest.mark.mariadb,
}
SYNC_NAMES = ("sqlite", "postgres-psycopg", "mariadb")


def backend_params(names: Iterable[str], prefix: str = "") -> list[Any]:
    """``pytest.param`` for each backend name, marked, with ``prefix`` in its id."""
    return [pytest.param(name, marks=MARKS[name], id=f"{prefix}{name}") for name in names]


@dataclass(frozen=True)
class Backend:
    """One database to run a test against, with a sync and an async URL to it."""

    name: str
    dialect: str  # "sqlite", "postgresql" or "mysql"
    sync_url: str
    async_url: str

    def unique_table(self) -> str:
        return f"nfo_t_{uuid.uuid4().hex[:12]}"


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unavailable(what: str, env: str, example: str) -> None:
    message = (
        f"{what} is not available: set {env} (e.g. {env}={example}), "
        "run `make test` which starts the local services, or start a Docker engine"
    )
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def _check_reachable(sync_url: str, what: str, env: str, example: str) -> None:
    engine = sa.create_engine(sync_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # any driver error means "cannot use it"
        reason = f"{what} at {make_url(sync_url).render_as_string(hide_password=True)} "
        reason += f"did not answer ({type(exc).__name__})"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"{reason}; set {env} (e.g. {env}={example}) or run `make test`")
    finally:
        engine.dispose()


_started: dict[str, str] = {}


def _from_container(kind: str) -> str:
    if kind in _started:
        return _started[kind]
    if kind == "postgres":
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver=None)
    else:
        from testcontainers.mysql import MySqlContainer

        container = MySqlContainer("mariadb:11", dialect=None)
    container.start()
    _started[kind] = container.get_connection_url()
    return _started[kind]


# Each server kind: its variable, its name in messages and an example URL.
_SERVERS = {
    "postgres": (POSTGRES_ENV, "PostgreSQL", "postgresql://root@127.0.0.1:5432/test"),
    "mysql": (MYSQL_ENV, "MariaDB/MySQL", "mysql://root@127.0.0.1:3306/test"),
}


def _base_url(kind: str) -> str:
    """The server's URL: from its variable, else a container's (where Docker answers)."""
    env, what, example = _SERVERS[kind]
    url = os.environ.get(env)
    if not url:
        if IN_CI or not _docker_available():
            _unavailable(what, env, example)
        url = _from_container(kind)
    return url


def _reachable(sync_url: str, kind: str) -> None:
    env, what, example = _SERVERS[kind]
    _check_reachable(sync_url, what, env, example)


def _with_driver(url: str, drivername: str) -> str:
    return make_url(url).set(drivername=drivername).render_as_string(hide_password=False)


def make_backend(name: str, tmp_path: Path) -> Backend:
    """Build the backend called ``name``, skipping (or failing in CI) when it is missing."""
    if name == "sqlite":
        path = tmp_path / "ledger.sqlite3"
        return Backend(name, "sqlite", f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}")
    if name.startswith("postgres"):
        base = _base_url("postgres")
        sync_url = _with_driver(base, "postgresql+psycopg")
        async_driver = "postgresql+asyncpg" if name == "postgres-asyncpg" else "postgresql+psycopg"
        backend = Backend(name, "postgresql", sync_url, _with_driver(base, async_driver))
        _reachable(sync_url, "postgres")
        return backend
    if name == "mariadb":
        base = _base_url("mysql")
        sync_url = _with_driver(base, "mysql+pymysql")
        backend = Backend(name, "mysql", sync_url, _with_driver(base, "mysql+asyncmy"))
        _reachable(sync_url, "mysql")
        return backend
    raise ValueError(f"unknown backend {name!r}")


# How long a test's DROP TABLE waits for a lock before it fails: a session the test left
# in a transaction (a task still running when its test failed) would otherwise hold the
# teardown, and with it the whole run, for ever.
DROP_LOCK_WAIT_SECONDS = 60


def drop_table(backend: Backend, table: str) -> None:
    """Drop a test's ledger table and the tables its create_schema() made beside it
    (recipients, digest events, cap seats), and nothing else, on ``backend``; fails after
    `DROP_LOCK_WAIT_SECONDS` if another session holds a lock on them."""
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            if backend.dialect == "postgresql":
                conn.execute(sa.text(f"SET LOCAL lock_timeout = '{DROP_LOCK_WAIT_SECONDS}s'"))
            elif backend.dialect == "mysql":
                conn.execute(sa.text(f"SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_SECONDS}"))
            side = (f"{table}_recipients", f"{table}_digest_events", f"{table}_cap_seats")
            for name in (table, *side):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    finally:
        engine.dispose()


REDIS_ENV = "NOTIFYONCE_TEST_REDIS_URL"


def redis_url() -> str:
    """The test Redis's URL, skipping (or failing in CI) when it does not answer."""
    example = "redis://127.0.0.1:6379/0"
    url = os.environ.get(REDIS_ENV)
    if not url:
        _unavailable("Redis", REDIS_ENV, example)
        raise AssertionError("unreachable")  # _unavailable skips or fails
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:  # any client error means "cannot use it"
        reason = f"Redis at {url} did not answer ({type(exc).__name__})"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"{reason}; set {REDIS_ENV} (e.g. {REDIS_ENV}={example}) or run `make test`")
    finally:
        client.close()
    return url
