"""A database's failures in notifyonce's words: which are worth running again, and the
LedgerError (or LedgerUnavailableError) that stands for each.

Every writer of notifyonce's tables (the ledger, the audience) catches `DATABASE_ERRORS`
around its transaction, runs one again when `is_retryable` says so, and raises
`translate`'s error ``from`` the driver's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from notifyonce._drivers.base import Driver
from notifyonce._errors import LedgerError, LedgerUnavailableError

__all__ = ["DATABASE_ERRORS", "database_detail", "in_transaction", "is_retryable", "translate"]

T = TypeVar("T")

# What the database can raise at run time; anything else from SQLAlchemy is a bug here.
# OSError and asyncio's TimeoutError: some async drivers (asyncpg) let a refused or timed
# out connect through unwrapped.
DATABASE_ERRORS = (
    sa.exc.DBAPIError,
    sa.exc.TimeoutError,
    sa.exc.DisconnectionError,
    OSError,
    asyncio.TimeoutError,
)


def is_retryable(driver: Driver, exc: BaseException) -> bool:
    """A deadlock or lock timeout whose transaction the server rolled back."""
    if not isinstance(exc, sa.exc.DBAPIError) or exc.connection_invalidated:
        return False
    return driver.is_retryable(exc.orig)


def database_detail(exc: BaseException) -> str:
    """What a LedgerError says of a driver or SQLAlchemy error: the driver's class and the
    first line of its message (``no such table: notifyonce_slots``), at most 300
    characters. The first line only: never the statement's parameters."""
    orig = getattr(exc, "orig", None) or exc
    detail = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{type(orig).__name__}: {detail}"[:300]


def translate(driver: Driver, exc: BaseException) -> LedgerError:
    """The notifyonce error for a driver or SQLAlchemy error (chain it with ``from``)."""
    message = database_detail(exc)
    unavailable = isinstance(
        exc, (sa.exc.TimeoutError, sa.exc.InterfaceError, OSError, asyncio.TimeoutError)
    ) or (isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated)
    if isinstance(exc, sa.exc.OperationalError) and not is_retryable(driver, exc):
        # SQLite's OperationalError is also "database is locked": the database is
        # there, it is busy, so that one stays a plain LedgerError.
        unavailable = unavailable or driver.operational_error_is_unavailable
    if unavailable:
        return LedgerUnavailableError(f"database unavailable ({message})")
    return LedgerError(f"database error ({message})")


def in_transaction(
    driver: Driver, body: Callable[[sa.Connection], T], retries: int = 3
) -> Callable[[sa.Engine], T]:
    """Work for ``driver.run``: ``body`` in one transaction, run again (up to ``retries``
    runs in all) when the server rolled it back (a deadlock, a lock timeout), any other
    failure raised as `translate`'s error."""

    def work(engine: sa.Engine) -> T:
        attempt = 1
        while True:
            try:
                with engine.begin() as conn:
                    return body(conn)
            except DATABASE_ERRORS as exc:
                if attempt < retries and is_retryable(driver, exc):
                    attempt += 1
                    continue
                raise translate(driver, exc) from exc

    return work
