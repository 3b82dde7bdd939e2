"""From Django's settings to the ledger: which database (``NOTIFYONCE``), its SQLAlchemy
URL (from ``DATABASES``), and the ledgers built on it.

Imported by the app's public names, its admin and its commands; it imports the core and
Django, never the other way round.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce._drivers import MySQLDriver, PostgreSQLDriver, SQLiteDriver
from notifyonce._drivers.base import Driver
from notifyonce._ledger.ledger import AsyncLedger, Ledger

__all__ = [
    "MIGRATE_COMMAND",
    "async_ledger",
    "database_alias",
    "database_url",
    "ledger",
]

#: What a ledger built here tells to run when its tables are missing.
MIGRATE_COMMAND = "python manage.py migrate notifyonce"

# Django's backends (and their GIS twins) and the notifyonce driver that speaks to them.
_BACKENDS: dict[str, type[Driver]] = {
    "django.db.backends.postgresql": PostgreSQLDriver,
    "django.db.backends.postgresql_psycopg2": PostgreSQLDriver,
    "django.contrib.gis.db.backends.postgis": PostgreSQLDriver,
    "django.db.backends.mysql": MySQLDriver,
    "django.contrib.gis.db.backends.mysql": MySQLDriver,
    "django.db.backends.sqlite3": SQLiteDriver,
    "django.contrib.gis.db.backends.spatialite": SQLiteDriver,
}

# OPTIONS that Django itself reads: they are not the driver's to see.
_DJANGO_OPTIONS = frozenset(
    {
        "isolation_level",
        "pool",
        "server_side_binding",
        "assume_role",
        "transaction_mode",
        "init_command",
        "timeout",
    }
)


def database_alias() -> str:
    """The ``DATABASES`` alias the ledger lives in: ``NOTIFYONCE["DATABASE"]``, else
    ``"default"``.

    Raises:
        ImproperlyConfigured: ``NOTIFYONCE`` is not a dict, or names no database of
            ``DATABASES``.
    """
    config = getattr(settings, "NOTIFYONCE", {})
    if not isinstance(config, Mapping):
        raise ImproperlyConfigured(
            f"settings.NOTIFYONCE must be a dict, not a {type(config).__name__}"
        )
    unknown = sorted(set(config) - {"DATABASE"})
    if unknown:
        raise ImproperlyConfigured(
            f"settings.NOTIFYONCE has unknown keys {unknown}; it knows 'DATABASE'"
        )
    alias = config.get("DATABASE", "default")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"settings.NOTIFYONCE['DATABASE'] is {alias!r}, which is not a database "
            f"of settings.DATABASES ({', '.join(map(repr, settings.DATABASES))})"
        )
    return alias


def database_url(alias: str | None = None, *, asynchronous: bool = False) -> sa.URL:
    """The SQLAlchemy URL of a Django database, with notifyonce's driver for it.

    ENGINE picks the driver (psycopg, or asyncpg for async code, on PostgreSQL; PyMySQL,
    or asyncmy, on MySQL and MariaDB; sqlite3, or aiosqlite); NAME, USER, PASSWORD, HOST
    and PORT become the URL's parts; the OPTIONS that go to the database driver (not
    Django's own, such as ``isolation_level``) become its query. Within a test run, NAME
    is the test database's.

    Args:
        alias: A key of ``DATABASES``; by default the one ``NOTIFYONCE`` names.
        asynchronous: The URL of the async driver, for an ``AsyncEngine``.

    Raises:
        ImproperlyConfigured: The ENGINE is not one notifyonce speaks to, or an OPTION
            cannot go into a URL.
    """
    alias = database_alias() if alias is None else alias
    # Django's own view of DATABASES: within a test run, NAME is the test database's.
    conf = connections.settings[alias]
    engine = conf.get("ENGINE", "")
    driver = _BACKENDS.get(engine)
    if driver is None:
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}]['ENGINE'] is {engine!r}; notifyonce runs on the "
            f"PostgreSQL, MySQL/MariaDB and SQLite backends"
        )
    query: dict[str, str] = {}
    for key, value in (conf.get("OPTIONS") or {}).items():
        if key in _DJANGO_OPTIONS:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}]['OPTIONS'][{key!r}] is a {type(value).__name__}: "
                "build the engine yourself and pass it to AsyncLedger or Ledger"
            )
        query[key] = str(value)
    dbapi = driver.async_dbapi if asynchronous else driver.sync_dbapi
    scheme = f"{driver.backends[0]}+{dbapi}" if dbapi else driver.backends[0]
    name = os.fspath(conf.get("NAME") or "")
    if driver is SQLiteDriver:
        if name.startswith("file:"):  # Django's in-memory test database is a URI
            query["uri"] = "true"
        return sa.URL.create(scheme, database=name or None, query=query)
    port = conf.get("PORT")
    return sa.URL.create(
        scheme,
        username=conf.get("USER") or None,
        password=conf.get("PASSWORD") or None,
        host=conf.get("HOST") or None,
        port=int(port) if port else None,
        database=name or None,
        query=query,
    )


def _told(made: Ledger | AsyncLedger) -> None:
    made.migrate_command = MIGRATE_COMMAND


def ledger(alias: str | None = None, **options: Any) -> Ledger:
    """A `Ledger` on a Django database, for sync code (views, management commands,
    Celery tasks).

    The engine is notifyonce's own (its pool beside Django's connections, with
    ``pool_pre_ping``); build it once per process and keep it, as the engine's pool lives
    as long as the ledger.

    Args:
        alias: A key of ``DATABASES``; by default the one ``NOTIFYONCE`` names.
        **options: The ledger's keyword options (``lease``, ``table_name``, ...).

    Examples:
        ```python
        from notifyonce.contrib.django import ledger

        LEDGER = ledger()  # settings.NOTIFYONCE = {"DATABASE": "default"}
        ```
    """
    engine = sa.create_engine(database_url(alias), pool_pre_ping=True)
    made = Ledger(engine, **options)
    _told(made)
    return made


def async_ledger(alias: str | None = None, **options: Any) -> AsyncLedger:
    """An `AsyncLedger` on a Django database, for async code (an aiogram bot living in
    the Django project, async views, taskiq workers); as
    [`ledger`][notifyonce.contrib.django.ledger] otherwise.

    Args:
        alias: A key of ``DATABASES``; by default the one ``NOTIFYONCE`` names.
        **options: The ledger's keyword options (``lease``, ``table_name``, ...).
    """
    engine: AsyncEngine = create_async_engine(
        database_url(alias, asynchronous=True), pool_pre_ping=True
    )
    made = AsyncLedger(engine, **options)
    _told(made)
    return made
