"""The ledger's database restarts under a running campaign: the run waits and goes on.

``notifyonce broadcast`` sends 20,000 chats at 500 a second through TelegramSender to the
local Bot-API-shaped server, on a private PostgreSQL or MariaDB (never the shared one)
that is restarted three times while it runs, down for two seconds each time, the way an
administrator's restart or a managed database's failover does it. The run must not exit
at the first restart: it pauses, says so once, goes on when the database is back, and
ends with every chat sent or ``unknown``, none twice; the same command run again then
sends nothing. The same with a PgBouncer in transaction mode between the run and a
PostgreSQL, the bouncer restarted (the command run with ``--pgbouncer``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

import notifyonce
from notifyonce import pgbouncer_options
from notifyonce._cli import main
from notifyonce.testing import BotAPIServer

from ._databases import make_backend
from ._private_servers import PgBouncer, PrivateMariaDB, PrivatePostgres
from .test_pgbouncer import drop_migrated

pytestmark = [pytest.mark.slow, pytest.mark.storm]

SOURCES = str(Path(notifyonce.__file__).resolve().parents[1])
TOKEN = "12345:database-restarts"
CHATS = 20_000
RATE = 500
RESTARTS = 3
DOWN = 2.0
CONCURRENCY = 16


@pytest.fixture(
    params=[
        pytest.param(PrivatePostgres, marks=pytest.mark.postgres, id="postgres"),
        pytest.param(PrivateMariaDB, marks=pytest.mark.mariadb, id="mariadb"),
    ]
)
def server(request: pytest.FixtureRequest) -> object:
    with request.param() as private:
        yield private


def test_a_campaign_goes_on_through_three_database_restarts(
    server: PrivatePostgres | PrivateMariaDB, tmp_path: Path
) -> None:
    """Three restarts of the ledger's database under a 20,000-chat campaign: one run
    ends it, exit 0 or 1, no chat twice, every chat sent or unknown, few unknown."""
    campaign_under_restarts(server, server.url, server.async_url, "ledger", tmp_path)


@pytest.mark.postgres
def test_a_campaign_goes_on_through_three_pgbouncer_restarts(tmp_path: Path) -> None:
    """Three restarts of the PgBouncer (transaction mode) between the campaign and its
    PostgreSQL, the command run with --pgbouncer: the same as a restart of the database,
    and a second run sends nothing."""
    shared = make_backend("postgres-psycopg", tmp_path)
    table = shared.unique_table()
    try:
        with PgBouncer(shared.sync_url, pool_size=10) as bouncer:
            campaign_under_restarts(
                bouncer, bouncer.url, bouncer.async_url, table, tmp_path, "--pgbouncer"
            )
    finally:
        drop_migrated(shared, table)


def campaign_under_restarts(
    server: PrivatePostgres | PrivateMariaDB | PgBouncer,
    url: str,
    async_url: str,
    table: str,
    tmp_path: Path,
    *extra: str,
) -> None:
    """`notifyonce broadcast` of CHATS chats on ``async_url`` while ``server`` is restarted
    RESTARTS times, then the same command again; assert what the module says, and print
    the figures (statuses, time away)."""
    assert 0 == main(["migrate", "--database-url", url, "--table", table, *extra])
    recipients = tmp_path / "chats.txt"
    recipients.write_text("".join(f"{i}\n" for i in range(1, CHATS + 1)))
    text = tmp_path / "news.txt"
    text.write_text("Maintenance tonight from 02:00 to 03:00.")
    sends = {"n": 0}

    def hook(request: object) -> None:
        sends["n"] += 1

    restarted: list[tuple[int, float]] = []

    with BotAPIServer(latency=0.002, on_request=hook) as api:
        command = [
            sys.executable,
            "-m",
            "notifyonce",
            "broadcast",
            "--database-url",
            async_url,
            "--table",
            table,
            "--recipients-file",
            str(recipients),
            "--text-file",
            str(text),
            "--action",
            "news",
            "--campaign",
            "restarts-1",
            "--base-url",
            api.url,
            "--rate",
            str(RATE),
            "--concurrency",
            str(CONCURRENCY),
            *extra,
        ]
        env = {"NOTIFYONCE_BOT_TOKEN": TOKEN, "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCES}
        run = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out: dict[str, str] = {}

        def read() -> None:
            out["stdout"], out["stderr"] = run.communicate(timeout=300)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for at in (CHATS // 5, 2 * CHATS // 5, 3 * CHATS // 5):
                deadline = time.monotonic() + 120
                while sends["n"] < at and run.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                if run.poll() is not None:
                    break
                started = time.monotonic()
                server.restart(down=DOWN)
                restarted.append((sends["n"], time.monotonic() - started))
        finally:
            reader.join(330)
            if run.poll() is None:
                run.kill()
        before_again = sends["n"]
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        sent_again = sends["n"] - before_again
        requests = api.requests

    stderr = out.get("stderr", "")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, **pooled(extra, url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT subject, status FROM {table} WHERE action = 'news'")
            ).all()
    finally:
        engine.dispose()
    status = Counter(state for _, state in rows)
    delivered = Counter(
        str(r.chat_id) for r in requests if r.method == "sendMessage" and r.reply.delivers
    )
    told = [line for line in stderr.splitlines() if "was away" in line]
    print(f"restarts {restarted}; statuses {dict(status)}; exit {run.returncode}; {told}")
    print(stderr[-3000:])

    assert RESTARTS == len(restarted), f"the run ended before the restarts: {stderr[-2000:]}"
    assert run.returncode in (0, 1), stderr[-2000:]
    assert set() == {chat for chat, n in delivered.items() if n > 1}, "a chat got it twice"
    assert CHATS == status["sent"] + status["unknown"], dict(status)
    # What may be unknown: the sends in flight when the database went away, whose answer
    # came while it was down and whose write failed; at most the concurrency per restart.
    assert status["unknown"] <= RESTARTS * CONCURRENCY, dict(status)
    # One line when it goes away and one when it is back: no traceback, no warning.
    assert "Task exception was never retrieved" not in stderr
    assert "Traceback" not in stderr
    assert "Warning" not in stderr
    away = [line for line in stderr.splitlines() if "database" in line and "away" in line]
    assert 1 <= len(away) <= 3 * RESTARTS, stderr[-2000:]
    assert status["sent"] <= len(delivered) <= CHATS
    # The same command again: nothing left to send (exit 1 only for unknown chats).
    expected = 1 if status["unknown"] else 0
    assert (expected, 0) == (again.returncode, sent_again), again.stderr[-2000:]


def pooled(extra: tuple[str, ...], url: str) -> dict[str, object]:
    """The engine options --pgbouncer means, for reading the ledger where the run did."""
    return pgbouncer_options(url) if "--pgbouncer" in extra else {}
