"""The databases notifyonce runs on: one `Driver` class each, behind one interface.

``base`` holds the interface, ``postgresql``, ``mysql`` and ``sqlite`` a driver each, and
``execute`` the way compiled statements run straight on a DBAPI connection. Everything
that writes SQL (the ledger, the SQL rate store, the file-id store, a broadcast's
recipients, the console, the command line) asks the driver of its engine what differs
between databases: none of it compares dialect names.

Each engine has one driver (`driver_for`), shared by everything that runs on it: the
SQLite driver queues a process's writers of one file in front of its lock, which only
works when they all queue in one place. That registry of the drivers in use, weak on the
engines, is this package's only state.
"""

from __future__ import annotations

import weakref

import sqlalchemy as sa
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._drivers.base import Driver, Work
from notifyonce._drivers.mysql import MySQLDriver
from notifyonce._drivers.postgresql import PostgreSQLDriver
from notifyonce._drivers.sqlite import SQLiteDriver
from notifyonce._errors import ValidationError

__all__ = [
    "DRIVERS",
    "Driver",
    "MySQLDriver",
    "PostgreSQLDriver",
    "SQLiteDriver",
    "Work",
    "driver_class",
    "driver_for",
    "missing_driver",
    "url_driver",
]

#: Every database notifyonce supports.
DRIVERS: tuple[type[Driver], ...] = (PostgreSQLDriver, MySQLDriver, SQLiteDriver)
_BY_BACKEND: dict[str, type[Driver]] = {
    name: driver for driver in DRIVERS for name in (*driver.backends, *driver.aliases)
}
_SUPPORTED = ", ".join(driver.label for driver in DRIVERS)
# The driver of each engine in use. Weak: an engine nobody holds goes with its driver.
_IN_USE: weakref.WeakKeyDictionary[sa.Engine, Driver] = weakref.WeakKeyDictionary()


def driver_class(dialect: Dialect, fallback: type[Driver] | None = None) -> type[Driver]:
    """The driver of SQLAlchemy's ``dialect``; for a database notifyonce does not support,
    ``fallback`` if given (a column type rendered for SQLAlchemy's generic dialect), else
    a ValidationError naming ``engine``."""
    driver = _BY_BACKEND.get(dialect.name, fallback)
    if driver is None:
        raise ValidationError("engine", f"dialect {dialect.name!r} is not supported ({_SUPPORTED})")
    return driver


def driver_for(engine: sa.Engine | AsyncEngine) -> Driver:
    """The one driver of ``engine`` (an async engine's is its sync facade's); a
    ValidationError naming ``engine`` for a database notifyonce does not support."""
    sync = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    driver = _IN_USE.get(sync)
    if driver is None:
        # setdefault: of two threads making the first one at once, both get the same.
        driver = _IN_USE.setdefault(sync, driver_class(sync.dialect)(sync))
    return driver


def url_driver(url: URL) -> type[Driver] | None:
    """The driver of the database a URL names (by its scheme), or None."""
    return _BY_BACKEND.get(url.drivername.partition("+")[0])


def missing_driver(exc: BaseException) -> str | None:
    """The sentence for a database driver that is not installed, or None if ``exc`` is not
    about one.

    SQLAlchemy imports a URL's DBAPI when the engine is made; one that is missing is a
    bare ``ModuleNotFoundError`` naming a module the reader may never have heard of.

    Examples:
        >>> missing_driver(ModuleNotFoundError("No module named 'asyncpg'", name="asyncpg"))
        'the database driver asyncpg is not installed: pip install "notifyonce[postgres]"'
        >>> missing_driver(ModuleNotFoundError("No module named 'x'", name="x")) is None
        True
    """
    if not isinstance(exc, ImportError) or exc.name is None:
        return None
    module = exc.name.partition(".")[0]
    for driver in DRIVERS:
        extra = driver.extras.get(module)
        if extra is not None:
            return (
                f'the database driver {module} is not installed: pip install "notifyonce[{extra}]"'
            )
        other = driver.other_dbapis.get(module)
        if other is not None:
            extra, scheme = other
            return (
                f"the URL asks for the driver {module}, which is not installed: write the URL "
                f'as {scheme}... and pip install "notifyonce[{extra}]", or install {module}'
            )
    return None
