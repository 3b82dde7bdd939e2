"""What the command line tells its user: URLs, migrate, auth failures, --help, dry runs."""

from __future__ import annotations

import datetime as dt
import os
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from notifyonce import Ledger, migrations
from notifyonce._cli import main
from notifyonce._cli.common import database_error, ledger_tables, sync_url

UTC = dt.timezone.utc


@pytest.fixture
def sqlite_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite database, also in NOTIFYONCE_DATABASE_URL."""
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", url)
    return url


def server_url(variable: str) -> str:
    """The test server's URL from ``variable``, or skip."""
    url = os.environ.get(variable)
    if not url:
        pytest.skip(f"set {variable} (scripts/services.sh prints it)")
    return url


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgres://app:pw@db:5433/app", "postgresql+psycopg://app:pw@db:5433/app"),
        ("postgresql://app@db/app", "postgresql+psycopg://app@db/app"),
        ("postgresql+asyncpg://app@db/app", "postgresql+psycopg://app@db/app"),
    ],
)
def test_postgres_scheme_is_an_alias_of_postgresql(given: str, used: str) -> None:
    """postgres:// (what Heroku and libpq print) is read as PostgreSQL with psycopg."""
    assert used == sync_url(given)


@pytest.mark.postgres
def test_postgres_url_works_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """migrate and stats run on a real PostgreSQL reached through a postgres:// URL."""
    url = make_url(server_url("NOTIFYONCE_TEST_POSTGRES_URL")).set(drivername="postgres")
    table = f"cli_{uuid.uuid4().hex[:10]}"
    given = url.render_as_string(hide_password=False)
    try:
        assert 0 == main(["migrate", "--database-url", given, "--table", table])
        assert 0 == main(["stats", "--database-url", given, "--table", table])
        assert "(the ledger is empty)" in capsys.readouterr().out
    finally:
        engine = sa.create_engine(sync_url(given))
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}, {table}_alembic_version"))
        engine.dispose()


def test_migrate_says_when_nothing_changed(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first migrate reports the upgrade; a second one says there was nothing to do."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", "notifyonce:migrations")
    head = ScriptDirectory.from_config(config).get_current_head()
    assert 0 == main(["migrate"])
    first = capsys.readouterr().out
    assert 0 == main(["migrate"])
    second = capsys.readouterr().out
    assert f"ledger table 'notifyonce_slots' upgraded from nothing to {head}\n" == first
    assert f"ledger table 'notifyonce_slots' is already at {head}: nothing to do\n" == second


@pytest.mark.parametrize(
    "message",
    [
        "database unavailable (OperationalError: connection failed: connection to server at "
        '"db", port 5432 failed: FATAL:  password authentication failed for user "app")',
        "database unavailable (InvalidPasswordError: password authentication failed for user "
        '"app")',
        'database unavailable (OperationalError: (1045, "Access denied for user '
        "'app'@'10.0.0.2' (using password: YES)\"))",
        'database error (OperationalError: connection failed: FATAL:  role "app" does not exist)',
    ],
)
def test_credentials_refused_read_as_authentication_failure(message: str) -> None:
    """PostgreSQL's and MySQL's refusals of the credentials are reported as such."""
    text = database_error(message)
    assert text.startswith("authentication failed: the database refused the URL's user")
    assert "unavailable" not in text
    assert "migrate" not in text


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("database unavailable (OperationalError: Connection refused)", False),
        ("database error (OperationalError: no such table: notifyonce_slots)", True),
    ],
)
def test_other_database_errors_are_not_called_authentication(message: str, hint: bool) -> None:
    """A refused connection stays 'unavailable'; a missing table suggests migrate."""
    text = database_error(message)
    assert not text.startswith("authentication failed")
    assert hint == text.endswith("run `notifyonce migrate` first?")


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ('database error (UndefinedTableError: relation "notifyonce_slots" does not exist)', True),
        (
            "database error (ProgrammingError: (1146, \"Table 'test.notifyonce_slots' doesn't "
            'exist"))',
            True,
        ),
        ("database error (OperationalError: no such table: notifyonce_file_ids)", True),
        ('database error (UndefinedTableError: relation "users" does not exist)', False),
        ("database error (OperationalError: no such table: notifyonce_slots_archive)", False),
        ('database unavailable (InvalidCatalogNameError: database "app" does not exist)', False),
        ("database unavailable (OperationalError: (1049, \"Unknown database 'app'\"))", False),
    ],
)
def test_migrate_is_suggested_only_for_the_ledgers_own_tables(message: str, hint: bool) -> None:
    """A missing ledger (or side) table suggests migrate; the user's own table or a missing
    database does not, and a missing database says to create it."""
    text = database_error(message, ledger_tables("notifyonce_slots"))
    assert hint == text.endswith("run `notifyonce migrate` first?")
    assert ("Unknown database" in message or 'database "app"' in message) == text.endswith(
        "the URL names a database the server does not have: create it first"
    )


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("postgresql://app@127.0.0.1/app", "psycopg", "postgres"),
        ("mysql://app@127.0.0.1/app", "pymysql", "mysql"),
    ],
)
def test_a_missing_driver_names_the_extra_that_installs_it(
    url: str,
    module: str,
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without the URL's driver, the command exits 2 and says which extra to install."""
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(SystemExit) as info:
        main(["stats", "--database-url", url])
    assert 2 == info.value.code
    expected = f'the database driver {module} is not installed: pip install "notifyonce[{extra}]"'
    assert f"notifyonce: error: {expected}\n" == capsys.readouterr().err


def test_upgrade_from_a_url_names_the_missing_drivers_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """migrations.upgrade(url) without the driver raises ModuleNotFoundError naming the extra."""
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install \"notifyonce\[postgres\]\""):
        migrations.upgrade("postgresql+asyncpg://app@127.0.0.1/app")


@pytest.mark.mariadb
def test_wrong_password_on_mariadb_is_an_authentication_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A wrong password exits 3 saying authentication failed, and never shows the password."""
    url = make_url(server_url("NOTIFYONCE_TEST_MYSQL_URL")).set(password="wrong-hunter2")
    with pytest.raises(SystemExit) as info:
        main(["stats", "--database-url", url.render_as_string(hide_password=False)])
    err = capsys.readouterr().err
    assert 3 == info.value.code
    assert "notifyonce: error: authentication failed" in err
    assert "wrong-hunter2" not in err


def test_purge_dry_run_counts_and_deletes_nothing(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """purge --dry-run prints how many slots purge would delete, and they all stay."""
    assert 0 == main(["migrate"])
    engine = sa.create_engine(sqlite_url)
    ledger = Ledger(engine)
    now = dt.datetime.now(UTC)
    for subject in (1, 2):
        claim = ledger.claim_slot("trial_6h", subject, now - dt.timedelta(days=40))
        assert claim is not None
        ledger.mark_sent(claim)
    assert ledger.claim_slot("trial_6h", 3, now + dt.timedelta(hours=1)) is not None
    capsys.readouterr()

    assert 0 == main(["purge", "--older-than", "30d", "--dry-run"])
    dry = capsys.readouterr().out
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT count(*) FROM notifyonce_slots")).scalar_one()
    assert 0 == main(["purge", "--older-than", "30d"])
    real = capsys.readouterr().out
    engine.dispose()
    assert "would delete 2 slots whose cycle ended more than 30d ago (dry run)\n" == dry
    assert 3 == left
    assert "deleted 2 slots whose cycle ended more than 30d ago\n" == real


def test_purge_deletes_finished_campaigns_when_asked(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Slots with a str cycle (a broadcast's campaign) stay unless --opaque-finished-before
    says they are finished; then the old ones go, and a campaign still running stays."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, Broadcast, Message, Notifier
    from notifyonce.testing import FakeSender

    assert 0 == main(["migrate"])

    async def broadcast() -> None:
        engine = create_async_engine(sqlite_url.replace("sqlite://", "sqlite+aiosqlite://"))
        notifier = Notifier(AsyncLedger(engine), FakeSender())
        await Broadcast(notifier, "news", "2026-11", Message("old news"), [1, 2, 3]).run()
        await engine.dispose()

    asyncio.run(broadcast())
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:  # the November campaign ended 40 days ago
        conn.execute(sa.text("UPDATE notifyonce_slots SET updated_at = '2026-01-01 00:00:00'"))
    Ledger(engine).claim_slot("news", 4, "2026-12")  # December's is under way
    capsys.readouterr()
    assert 0 == main(["purge", "--older-than", "30d"])
    kept = capsys.readouterr().out
    assert 0 == main(["purge", "--older-than", "30d", "--opaque-finished-before", "30d"])
    purged = capsys.readouterr().out
    with engine.connect() as conn:
        left = conn.execute(sa.text("SELECT action, subject, cycle FROM notifyonce_slots")).all()
    engine.dispose()
    assert kept.startswith("deleted 0 slots whose cycle ended more than 30d ago")
    # The three chats and the campaign's remembered message.
    assert purged.startswith("deleted 4 slots whose cycle ended more than 30d ago, or whose")
    assert [("news", "4", "2026-12")] == left


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("stats", ["(default: notifyonce_slots)", "postgresql://user:password@host/db"]),
        ("sweep", ["(default: at-most-once)", "(default: 3)"]),
        ("purge", ["such as 30s, 15m, 12h, 7d, 2w or 1h30m", "no months", "--dry-run"]),
        ("check", ["(default: 72)"]),
        ("migrate", ["(default: head)"]),
    ],
)
def test_help_shows_defaults_and_formats(
    command: str, shown: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's --help states its defaults and the formats it reads."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert [] == [part for part in shown if part not in text]
