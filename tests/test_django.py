"""The Django app: its migrations build the Alembic schema, its ledgers, admin and commands.

Django is configured once for this process, below, with one alias per database: SQLite
(``default``, where the admin's users live), PostgreSQL and MariaDB. Each alias's test
database is made by Django's own test machinery (``create_test_db``, which runs every
app's migrations) when a test first asks for it, and dropped at the end of the module.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

django = pytest.importorskip("django")

import pymysql  # noqa: E402  (Django's MySQL backend imports MySQLdb: PyMySQL stands in)
from django.conf import settings  # noqa: E402

pymysql.install_as_MySQLdb()

from ._databases import MYSQL_ENV, POSTGRES_ENV, backend_params, make_backend  # noqa: E402

UTC = dt.timezone.utc
_RUN = uuid.uuid4().hex[:10]
_DIR = Path(tempfile.mkdtemp(prefix="nfo-django-"))


def _server(env: str, engine: str, example: str) -> dict[str, Any]:
    """A DATABASES entry for the server the test URL names (read when the alias is used)."""
    import os

    url = make_url(os.environ.get(env) or example)
    return {
        "ENGINE": engine,
        "NAME": url.database,
        "USER": url.username or "",
        "PASSWORD": url.password or "",
        "HOST": url.host or "",
        "PORT": str(url.port or ""),
        "TEST": {"NAME": f"test_nfo_dj_{_RUN}"},
    }


if not settings.configured:
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="not a secret: the test's own",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(_DIR / "default.sqlite3"),
                "TEST": {"NAME": str(_DIR / "test-default.sqlite3")},
            },
            "postgres": _server(
                POSTGRES_ENV, "django.db.backends.postgresql", "postgresql://root@127.0.0.1/test"
            ),
            "mariadb": _server(
                MYSQL_ENV, "django.db.backends.mysql", "mysql://root@127.0.0.1/test"
            ),
            # A database nobody migrated: the guard's message.
            "bare": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(_DIR / "bare.sqlite3")},
        },
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "notifyonce.contrib.django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    )
    django.setup()

from django.contrib import admin  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402
from django.urls import path  # noqa: E402

from notifyonce import Ledger, LedgerError, migrations, once  # noqa: E402
from notifyonce._campaign import CAMPAIGN_ACTION  # noqa: E402
from notifyonce.contrib.django import async_ledger, database_url, ledger  # noqa: E402
from notifyonce.contrib.django.models import Campaign, Slot  # noqa: E402

urlpatterns = [path("admin/", admin.site.urls)]

# The backends' names in tests/_databases.py and their Django aliases.
ALIASES = {"sqlite": "default", "postgres-psycopg": "postgres", "mariadb": "mariadb"}
TABLES = (
    "notifyonce_slots",
    "notifyonce_rate_limits",
    "notifyonce_file_ids",
    "notifyonce_recipients",
    "notifyonce_digest_events",
    "notifyonce_cap_seats",
)
CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)

_made: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _django_test_environment() -> Iterator[None]:
    """Django's test environment (the test client sees the templates' context), and every
    test database Django made here dropped when the module ends. pytest-xdist may run
    the module's tests in more than one stretch on a process (a worker that steals some
    runs them later), so each stretch starts with the directory and no database made."""
    _DIR.mkdir(parents=True, exist_ok=True)
    setup_test_environment()
    yield
    teardown_test_environment()
    for alias, name in _made.items():
        connections[alias].creation.destroy_test_db(name, verbosity=0)
    _made.clear()
    connections.close_all()
    shutil.rmtree(_DIR, ignore_errors=True)


def django_database(backend: str, tmp_path: Path) -> str:
    """The alias of ``backend``, its test database made and migrated by Django (once)."""
    make_backend(backend, tmp_path)  # skips (fails in CI) when the server is missing
    alias = ALIASES[backend]
    if alias not in _made:
        connection = connections[alias]
        old_name = connection.settings_dict["NAME"]
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        _made[alias] = old_name
    return alias


def _shape(inspector: Any, table: str) -> dict[str, Any]:
    """What the schema test compares: columns (name, type, nullability), primary key,
    unique constraints and indexes with their columns, uniqueness and partial condition."""
    columns = [(c["name"], repr(c["type"]), c["nullable"]) for c in inspector.get_columns(table)]
    pk = inspector.get_pk_constraint(table)
    uniques = sorted(
        (u["name"], tuple(u["column_names"])) for u in inspector.get_unique_constraints(table)
    )
    indexes = sorted(
        (
            i["name"],
            tuple(i["column_names"]),
            bool(i["unique"]),
            _where(i.get("dialect_options", {}).get(f"{inspector.dialect.name}_where")),
        )
        for i in inspector.get_indexes(table)
    )
    # Only PostgreSQL keeps a primary key's name (MySQL calls each PRIMARY; SQLite keeps
    # none it can use).
    pk_name = pk["name"] if inspector.dialect.name == "postgresql" else None
    return {
        "columns": columns,
        "pk": (pk_name, tuple(pk["constrained_columns"])),
        "uniques": uniques,
        "indexes": indexes,
    }


def _where(condition: object) -> str | None:
    """A partial index's condition as text, without the quotes and brackets one database
    writes around names and the other does not."""
    if condition is None:
        return None
    return str(condition).replace('"', "").replace("`", "").strip("()")


def _schema(url: str | sa.URL) -> dict[str, Any]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            names = set(inspector.get_table_names())
            return {t: _shape(inspector, t) if t in names else None for t in TABLES}
    finally:
        engine.dispose()


def _fresh_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database on ``backend``'s server; dropped after."""
    server = make_backend(backend, tmp_path)
    if server.dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'alembic.sqlite3'}"
        return
    name = f"nfo_al_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(server.sync_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(server.sync_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.execute(sa.text(f"DROP DATABASE {name}"))
        engine.dispose()


@pytest.mark.parametrize("backend", backend_params(ALIASES))
def test_django_migrations_build_the_alembic_schema(backend: str, tmp_path: Path) -> None:
    """`migrate notifyonce` and `notifyonce migrate` leave the same tables, read back."""
    alias = django_database(backend, tmp_path)
    by_django = _schema(database_url(alias))
    for url in _fresh_database(backend, tmp_path):
        migrations.upgrade(url)
        by_alembic = _schema(url)
    assert all(by_alembic.values())
    assert by_alembic == by_django


def test_the_apps_models_need_no_new_migration() -> None:
    """The models the admin reads match the app's migrations: makemigrations finds nothing."""
    out = io.StringIO()
    call_command("makemigrations", "notifyonce", check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.parametrize("backend", backend_params(ALIASES))
def test_ledgers_from_settings_claim_in_the_django_database(backend: str, tmp_path: Path) -> None:
    """ledger() and async_ledger() work on the database NOTIFYONCE names; the ORM finds
    their rows by key (on MariaDB through the keys' bytes)."""
    alias = django_database(backend, tmp_path)
    action = f"dj_{uuid.uuid4().hex[:8]}"
    with override_settings(NOTIFYONCE={"DATABASE": alias}):
        sync = ledger()
        made = async_ledger()

    async def claim_two() -> list[bool]:
        try:
            won = [await made.claim_slot(action, s, CYCLE) is not None for s in (2, 1)]
        finally:
            await made.engine.dispose()
        return won

    try:
        assert sync.claim_slot(action, 1, CYCLE) is not None
    finally:
        sync.engine.dispose()
    assert [True, False] == asyncio.run(claim_two())
    rows = Slot.objects.using(alias).filter(action=action).order_by("subject")
    assert [("1", "claimed"), ("2", "claimed")] == [(r.subject, r.status) for r in rows]


def test_database_url_maps_each_backend() -> None:
    """ENGINE picks the driver; NAME, USER, PASSWORD, HOST, PORT and OPTIONS fill the URL."""
    databases = {
        "pg": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "app",
            "USER": "bot",
            "PASSWORD": "s3cret",
            "HOST": "db",
            "PORT": "6432",
            "OPTIONS": {"sslmode": "require", "isolation_level": 1},
        },
        "my": {"ENGINE": "django.db.backends.mysql", "NAME": "app", "HOST": "db", "PORT": ""},
        "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": Path("/srv/app.sqlite3")},
        "odd": {"ENGINE": "django.db.backends.oracle", "NAME": "app"},
    }
    # Aliases of this test only, beside the configured ones (DATABASES cannot be overridden).
    for alias, entry in databases.items():
        connections.settings[alias] = entry
    try:
        pg = database_url("pg")
        assert "postgresql+psycopg://bot:s3cret@db:6432/app?sslmode=require" == (
            pg.render_as_string(hide_password=False)
        )
        assert "postgresql+asyncpg" == database_url("pg", asynchronous=True).drivername
        assert "mysql+pymysql://db/app" == str(database_url("my"))
        assert "mysql+asyncmy" == database_url("my", asynchronous=True).drivername
        assert "sqlite:////srv/app.sqlite3" == str(database_url("lite"))
        assert "sqlite+aiosqlite" == database_url("lite", asynchronous=True).drivername
        with pytest.raises(
            ImproperlyConfigured, match=r"\['ENGINE'\] is 'django\.db\.backends\.oracle'"
        ):
            database_url("odd")
    finally:
        for alias in databases:
            del connections.settings[alias]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"DATABASE": "elsewhere"}, r"NOTIFYONCE\['DATABASE'\] is 'elsewhere'"),
        ({"DATABSE": "default"}, r"unknown keys \['DATABSE'\]"),
        ("default", "must be a dict"),
    ],
)
def test_a_wrong_notifyonce_setting_is_named(value: object, problem: str) -> None:
    """A NOTIFYONCE setting that names no database, or has a typo, says so before any SQL."""
    with override_settings(NOTIFYONCE=value), pytest.raises(ImproperlyConfigured, match=problem):
        ledger()


def test_a_guard_without_the_tables_says_to_run_manage_py_migrate() -> None:
    """``once`` on a database never migrated tells the Django way to make the tables."""
    made = ledger("bare")
    try:
        told = pytest.raises(LedgerError, match=r"`python manage\.py migrate notifyonce`")
        with told, once(made, "welcome", 1, CYCLE):
            raise AssertionError("the block ran without a ledger")
    finally:
        made.engine.dispose()


@pytest.mark.parametrize("command", ["notifyonce_sweep", "notifyonce_purge"])
def test_the_commands_on_an_unmigrated_database_say_to_migrate_in_one_line(command: str) -> None:
    """notifyonce_sweep and notifyonce_purge on a database never migrated: one
    CommandError line (exit 1 from manage.py, no traceback) saying to run the app's
    migration, with no database error chained to it."""
    options = ["--older-than", "30d"] if command == "notifyonce_purge" else []
    with override_settings(NOTIFYONCE={"DATABASE": "bare"}), pytest.raises(CommandError) as told:
        call_command(command, *options, stdout=io.StringIO())
    assert (
        "the ledger table 'notifyonce_slots' does not exist in the database 'bare': run "
        "`python manage.py migrate notifyonce` first"
    ) == str(told.value)
    assert (None, True) == (told.value.__cause__, told.value.__suppress_context__)


def _superuser(tmp_path: Path) -> Client:
    from django.contrib.auth.models import User

    django_database("sqlite", tmp_path)  # the users live in the default database
    name = f"op_{uuid.uuid4().hex[:8]}"
    User.objects.create_superuser(name, f"{name}@example.org", "pw")
    client = Client()
    client.force_login(User.objects.get(username=name))
    return client


def _seed(alias: str) -> tuple[str, str]:
    """A broadcast's campaign row and two of its slots, one sent, written by the ledger."""
    action, campaign = f"news_{uuid.uuid4().hex[:6]}", f"c{uuid.uuid4().hex[:6]}"
    made: Ledger = ledger(alias)
    try:
        sent = made.claim_slot(action, 1, campaign)
        assert sent is not None
        assert made.mark_sent(sent)
        assert made.claim_slot(action, 2, campaign) is not None
        row = made.claim_slot(CAMPAIGN_ACTION, action, campaign)
        assert row is not None
        assert made.mark_sent(row)
    finally:
        made.engine.dispose()
    return action, campaign


@pytest.mark.parametrize("backend", backend_params(["sqlite", "postgres-psycopg"]))
def test_admin_shows_slots_and_campaigns_and_changes_nothing(backend: str, tmp_path: Path) -> None:
    """The admin lists the ledger's slots and campaigns; add, change and delete are refused."""
    alias = django_database(backend, tmp_path)
    client = _superuser(tmp_path)
    action, campaign = _seed(alias)
    with override_settings(NOTIFYONCE={"DATABASE": alias}):
        page = client.get("/admin/notifyonce/slot/", {"q": action})
        assert 200 == page.status_code
        # Its two slots, and the campaign row, whose subject is the broadcast's action.
        found = sorted((r.action, r.subject) for r in page.context["cl"].result_list)
        assert sorted([(CAMPAIGN_ACTION, action), (action, "1"), (action, "2")]) == found
        listing = client.get("/admin/notifyonce/campaign/", {"q": campaign})
        assert 200 == listing.status_code
        from django.contrib.admin.templatetags.admin_list import result_headers

        headers = [str(h["text"]) for h in result_headers(listing.context["cl"])]
        assert ["action", "campaign", "recipients", "sent"] == headers[:4]
        assert 1 == len(listing.context["cl"].result_list)
        shown = listing.context["cl"].result_list[0]
        assert campaign == shown.cycle
        assert 1 == admin.site._registry[Campaign].sent(shown)  # of its two slots
        slot = Slot.objects.using(alias).get(action=action, subject="1")
        assert 200 == client.get(f"/admin/notifyonce/slot/{slot.pk}/change/").status_code
        assert 403 == client.get("/admin/notifyonce/slot/add/").status_code
        assert 403 == client.post(f"/admin/notifyonce/slot/{slot.pk}/delete/").status_code
        change = client.post(f"/admin/notifyonce/slot/{slot.pk}/change/", {"status": "released"})
        assert 403 == change.status_code
    assert "sent" == Slot.objects.using(alias).get(pk=slot.pk).status
    assert [campaign] == [c.cycle for c in Campaign.objects.using(alias).filter(subject=action)]


@pytest.mark.parametrize("backend", backend_params(["sqlite", "postgres-psycopg"]))
def test_sweep_and_purge_commands_act_on_the_django_database(backend: str, tmp_path: Path) -> None:
    """notifyonce_sweep settles an expired claim; notifyonce_purge deletes an old cycle."""
    alias = django_database(backend, tmp_path)
    action = f"cmd_{uuid.uuid4().hex[:8]}"
    long_ago = dt.datetime.now(UTC) - dt.timedelta(days=400)
    past = lambda: long_ago  # noqa: E731  (a clock in the past: the lease expired long ago)
    made = ledger(alias, clock=past)
    try:
        assert made.claim_slot(action, 1, long_ago) is not None
    finally:
        made.engine.dispose()
    out = io.StringIO()
    with override_settings(NOTIFYONCE={"DATABASE": alias}):
        call_command("notifyonce_sweep", "--action", action, stdout=out)
        assert "expired leases: 1 now unknown, 0 released" in out.getvalue()
        assert "unknown" == Slot.objects.using(alias).get(action=action).status
        call_command("notifyonce_purge", "--older-than", "30d", "--dry-run", stdout=out)
        assert Slot.objects.using(alias).filter(action=action).exists()
        call_command("notifyonce_purge", "--older-than", "30d", stdout=out)
    assert not Slot.objects.using(alias).filter(action=action).exists()
    assert "deleted " in out.getvalue()
