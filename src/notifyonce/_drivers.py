"""Database drivers: which extra installs the driver a URL needs, for the error that says so,
and what notifyonce notes on a driver's connection.

SQLAlchemy imports a URL's driver when the engine is made; a driver that is missing is a
bare ``ModuleNotFoundError`` naming a module the reader may never have heard of.
"""

from __future__ import annotations

__all__ = ["DRIVER_EXTRAS", "SQLITE_BUSY_TIMEOUT_INFO", "missing_driver"]

# The driver modules notifyonce's extras install, and the extra that installs each.
DRIVER_EXTRAS = {
    "asyncpg": "postgres",
    "psycopg": "postgres",
    "asyncmy": "mysql",
    "pymysql": "mysql",
    "aiosqlite": "sqlite",
}
# The key under which a SQLite connection's ``info`` remembers the busy timeout last set
# on it (``PRAGMA busy_timeout``). The ledger and the SQL rate store each want their own on
# a connection they may share: each sets it when the value noted here is not its own.
SQLITE_BUSY_TIMEOUT_INFO = "notifyonce_busy_timeout_ms"
# Drivers SQLAlchemy picks for a bare scheme that no extra installs, and the URL scheme
# of the driver that the extra does install.
_OTHER_DRIVERS = {
    "psycopg2": ("postgres", "postgresql+psycopg://"),
    "MySQLdb": ("mysql", "mysql+pymysql://"),
    "aiomysql": ("mysql", "mysql+asyncmy://"),
}


def missing_driver(exc: BaseException) -> str | None:
    """The sentence for a database driver that is not installed, or None if ``exc`` is not
    about one.

    Examples:
        >>> missing_driver(ModuleNotFoundError("No module named 'asyncpg'", name="asyncpg"))
        'the database driver asyncpg is not installed: pip install "notifyonce[postgres]"'
        >>> missing_driver(ModuleNotFoundError("No module named 'x'", name="x")) is None
        True
    """
    if not isinstance(exc, ImportError) or exc.name is None:
        return None
    module = exc.name.partition(".")[0]
    extra = DRIVER_EXTRAS.get(module)
    if extra is not None:
        return f'the database driver {module} is not installed: pip install "notifyonce[{extra}]"'
    other = _OTHER_DRIVERS.get(module)
    if other is not None:
        extra, scheme = other
        return (
            f"the URL asks for the driver {module}, which is not installed: write the URL "
            f'as {scheme}... and pip install "notifyonce[{extra}]", or install {module}'
        )
    return None
