"""The ledger behind PgBouncer in transaction mode, on asyncpg and on psycopg.

PgBouncer in transaction mode gives each transaction (each statement, outside one) to
whichever server connection is free, so a named prepared statement a driver made on one
server connection is missing on the next: asyncpg's ``__asyncpg_stmt_15__ does not exist``
from the first claims, psycopg's ``_pg3_0 already exists`` once a query has run five
times. An engine made with `pgbouncer_options` prepares nothing that outlives its
statement, and the ledger's own fast path (asyncpg's connection, in autocommit) goes
through it unchanged: asyncpg sends each statement unnamed and parses it again with its
values. Nothing else the ledger does on PostgreSQL stays on a server session: its only
setting, ``lock_timeout``, is ``SET LOCAL``.

Each test starts a PgBouncer of its own (`PgBouncer`) in front of the shared PostgreSQL's
database and never touches that server's configuration; the tables are made and dropped
on the server directly.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Outcome,
    ValidationError,
    pgbouncer_options,
)
from notifyonce._cli import main
from notifyonce._cli.common import ledger_tables
from notifyonce.migrations import default_version_table
from notifyonce.testing import BotAPIServer, FakeSender

from . import test_ledger_races as races  # its tests' bodies, run through the bouncer
from ._databases import Backend, drop_table, make_backend
from ._ledger_env import Env
from ._private_servers import PgBouncer
from .test_crash import SMALL

pytestmark = pytest.mark.postgres

# (flavour, driver): the async ledger on asyncpg and psycopg, the sync one on psycopg.
FLAVOURS = [
    pytest.param(("async", "asyncpg"), id="async-asyncpg"),
    pytest.param(("async", "psycopg"), id="async-psycopg"),
    pytest.param(("sync", "psycopg"), id="sync-psycopg"),
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """The shared PostgreSQL, reached directly (tables are made and dropped there)."""
    return make_backend("postgres-psycopg", tmp_path_factory.mktemp("pg"))


@pytest.fixture(scope="module")
def bouncer(shared: Backend) -> Iterator[PgBouncer]:
    """A PgBouncer of this module's own, in transaction mode, in front of ``shared``."""
    with PgBouncer(shared.sync_url, pool_size=10, max_client_conn=200) as server:
        yield server


def _through(bouncer: PgBouncer, driver: str) -> Backend:
    """The bouncer's URLs, the async one on ``driver``."""
    async_url = bouncer.async_url.replace("+asyncpg", f"+{driver}")
    return Backend(f"pgbouncer-{driver}", "postgresql", bouncer.url, async_url)


def _engine(flavour: str, backend: Backend) -> AsyncEngine | sa.Engine:
    """An engine through the bouncer, with its options, pooled for the races."""
    url = backend.async_url if flavour == "async" else backend.sync_url
    options = {"pool_size": 20, "max_overflow": 20, **pgbouncer_options(url)}
    if flavour == "async":
        return create_async_engine(url, **options)
    return sa.create_engine(url, **options)


@pytest.fixture(params=FLAVOURS, name="benv")
async def bouncer_env(
    request: pytest.FixtureRequest, shared: Backend, bouncer: PgBouncer
) -> AsyncIterator[Env]:
    """A fresh ledger table on the shared server, its ledgers reached through the bouncer."""
    flavour, driver = request.param
    backend = _through(bouncer, driver)
    env = Env(flavour, backend, backend.unique_table(), _engine(flavour, backend))
    await env.make().create_schema()
    yield env
    if isinstance(env.engine, AsyncEngine):
        await env.engine.dispose()
    else:
        env.engine.dispose()
    drop_table(shared, env.table)


async def test_racing_claims_through_the_bouncer_have_one_winner_per_key(benv: Env) -> None:
    """The claim race of test_ledger_races through PgBouncer (16 workers, 12 keys, each
    worker's statement run more than five times, psycopg's threshold): one winner per key,
    also when they race again for the expired claims."""
    await races.test_racing_claims_have_exactly_one_winner_per_key(benv)


async def test_racing_claim_many_through_the_bouncer_split_the_keys_exactly(benv: Env) -> None:
    """The claim_many race of test_ledger_races through PgBouncer (transactions of several
    statements, with ``SET LOCAL``): every one of 300 keys won exactly once."""
    await races.test_overlapping_claim_many_batches_split_the_keys_exactly(benv)


async def test_observed_engine_races_through_the_bouncer(
    shared: Backend, bouncer: PgBouncer
) -> None:
    """On an asyncpg engine someone watches (a cursor-execute listener, as an SQL tracer
    adds) the ledger's statements go through SQLAlchemy's adapter: the claim race through
    PgBouncer still has one winner per key, and the listener heard the claims."""
    backend = _through(bouncer, "asyncpg")
    env = Env("async", backend, backend.unique_table(), _engine("async", backend))
    assert isinstance(env.engine, AsyncEngine)
    heard: list[str] = []
    sa.event.listen(env.engine.sync_engine, "before_cursor_execute", lambda *a: heard.append(a[2]))
    try:
        await env.make().create_schema()
        await races.test_racing_claims_have_exactly_one_winner_per_key(env)
        assert sum("INSERT INTO" in sql for sql in heard) >= 2 * 16 * 12
    finally:
        await env.engine.dispose()
        drop_table(shared, env.table)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_send_many_through_the_bouncer_sends_each_chat_once(
    driver: str, shared: Backend, bouncer: PgBouncer
) -> None:
    """Notifier.send_many of 3,000 chats through PgBouncer: 3,000 sent, each chat once, and
    a second run sends nothing."""
    backend = _through(bouncer, driver)
    table = backend.unique_table()
    engine = _engine("async", backend)
    assert isinstance(engine, AsyncEngine)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        await ledger.create_schema()
        sender = FakeSender()
        notifier = Notifier(ledger, sender, concurrency=16, keep_results=False)
        items = [Notification(str(i), "2026-12", Message("news")) for i in range(3000)]
        first = await notifier.send_many("news", items)
        second = await notifier.send_many("news", items)
        assert (3000, 0) == (first.counts[Outcome.SENT], second.counts[Outcome.SENT])
        assert {1} == set(collections.Counter(r.recipient for r in sender.records).values())
        assert 3000 == len(sender.records)
    finally:
        await engine.dispose()
        drop_table(shared, table)


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_sigkill_through_the_bouncer_never_duplicates(
    driver: str, shared: Backend, bouncer: PgBouncer
) -> None:
    """Worker processes through PgBouncer, SIGKILLed mid-send and at random and run again
    (at most once): no chat gets two messages, and every chat not lost is served."""
    backend = _through(bouncer, driver)
    table = backend.unique_table()
    storm = dataclasses.replace(SMALL, options={**SMALL.options, "pgbouncer": True})
    try:
        figures, counts = await storm.run(backend, table, "at_most_once", randomness=21)
        assert figures.mid_send >= 1, figures  # at least one kill provably landed mid-send
        assert (0, {1}) == (figures.duplicates, set(counts.values())), figures
        assert figures.lost <= figures.kills * 8, figures
    finally:
        drop_table(shared, table)


def drop_migrated(shared: Backend, table: str) -> None:
    """Drop what `notifyonce migrate` made for ``table`` on the shared server."""
    engine = sa.create_engine(shared.sync_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            for name in [*ledger_tables(table), default_version_table(table)]:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    finally:
        engine.dispose()


def cli_broadcast(url: str, table: str, tmp_path: Path, api: BotAPIServer, *extra: str) -> int:
    """`notifyonce broadcast` of the chats in tmp_path/chats.txt, in this process."""
    return main(
        [
            "broadcast",
            "--database-url",
            url,
            "--table",
            table,
            "--recipients-file",
            str(tmp_path / "chats.txt"),
            "--text-file",
            str(tmp_path / "news.txt"),
            "--action",
            "news",
            "--campaign",
            "bouncer-1",
            "--base-url",
            api.url,
            "--rate",
            "0",
            "--concurrency",
            "16",
            *extra,
        ]
    )


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_the_command_line_with_pgbouncer_sends_each_chat_once(
    driver: str,
    shared: Backend,
    bouncer: PgBouncer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`notifyonce migrate`, `broadcast` (3,000 chats, twice) and `stats` through PgBouncer
    with --pgbouncer: every chat sent once, both broadcasts exit 0 and the second sends
    nothing."""
    chats = 3000
    backend = _through(bouncer, driver)
    table = backend.unique_table()
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", "12345:bouncer")
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, chats + 1)))
    (tmp_path / "news.txt").write_text("The bouncer's news.")
    db = ["--database-url", backend.sync_url, "--table", table, "--pgbouncer"]
    try:
        assert 0 == main(["migrate", *db])
        with BotAPIServer() as api:
            first = cli_broadcast(backend.async_url, table, tmp_path, api, "--pgbouncer")
            second = cli_broadcast(backend.async_url, table, tmp_path, api, "--pgbouncer")
            delivered = collections.Counter(
                r.chat_id for r in api.requests if r.method == "sendMessage" and r.reply.delivers
            )
        capsys.readouterr()
        assert 0 == main(["stats", "--json", *db])
        stats = capsys.readouterr().out
    finally:
        drop_migrated(shared, table)
    assert (0, 0) == (first, second)
    assert (chats, {1}) == (len(delivered), set(delivered.values()))
    assert {"sent": chats} == json.loads(stats)["actions"]["news"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql+asyncmy://app@db/app", "a pooler's options are for PostgreSQL, not 'mysql'"),
        (
            "postgresql://app:hunter2@db/app",
            "name the driver: postgresql+asyncpg:// or postgresql+psycopg://, not postgresql://",
        ),
        ("not a url", "not a valid SQLAlchemy URL"),
    ],
)
def test_pgbouncer_options_refuse_what_they_cannot_configure(url: str, problem: str) -> None:
    """A URL of another database, without a driver or not a URL is a ValidationError
    naming ``url``, and the password is not in it."""
    with pytest.raises(ValidationError) as raised:
        pgbouncer_options(url)
    assert ("url", problem) == (raised.value.field, raised.value.problem)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize("command", ["stats", "broadcast"])
def test_pgbouncer_on_another_database_is_a_usage_error(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--pgbouncer with a SQLite URL: exit 2 naming the option, nothing sent."""
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", "12345:bouncer")
    (tmp_path / "chats.txt").write_text("1\n")
    (tmp_path / "news.txt").write_text("news")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    extra = ["--recipients-file", str(tmp_path / "chats.txt"), "--text-file"]
    extra += [str(tmp_path / "news.txt"), "--action", "a", "--campaign", "c"]
    with pytest.raises(SystemExit) as ended:
        main(
            [
                command,
                "--database-url",
                url,
                "--pgbouncer",
                *(extra if command == "broadcast" else []),
            ]
        )
    assert 2 == ended.value.code
    assert (
        "--pgbouncer: a pooler's options are for PostgreSQL, not 'sqlite'"
        in capsys.readouterr().err
    )
