"""What a ledger error means for the caller: the table missing says to run the migration,
a database that cannot be reached names its URL (the password hidden).

The doors (``once``, the Notifier) call these only when a ledger call already failed:
one more connection to look, never on the way of a claim that works.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import sqlalchemy as sa

from notifyonce._errors import LedgerError

if TYPE_CHECKING:
    from notifyonce._ledger.ledger import AsyncLedger, Ledger

__all__ = ["explained", "explained_sync", "missing_table"]


def missing_table(ledger: AsyncLedger | Ledger) -> LedgerError:
    """The error for a ledger whose table does not exist: how to make it."""
    if ledger.migrate_command is not None:
        how = f"`{ledger.migrate_command}`"
    else:
        how = "(notifyonce.migrations.upgrade, or `notifyonce migrate`) or create_schema()"
    return LedgerError(
        f"the ledger table {ledger.table_name!r} does not exist: run the migration {how} first"
    )


def _why(exc: LedgerError, exists: bool | None, ledger: AsyncLedger | Ledger) -> LedgerError:
    """``exc`` with what to do about it: the table missing (``exists`` False) says to run
    the migration; a database that could not be reached for the check (``exists`` None)
    names its URL; otherwise ``exc`` itself."""
    if exists is False:
        return missing_table(ledger)
    if exists is None:
        url = ledger.engine.url.render_as_string(hide_password=True)
        return type(exc)(
            f"{exc}; the ledger's database {url} could not be reached: check the URL and "
            "that the server is up"
        )
    return exc


def _has_table(connection: sa.Connection, ledger: AsyncLedger | Ledger) -> bool:
    return sa.inspect(connection).has_table(ledger.table_name, schema=ledger.schema)


async def explained(exc: LedgerError, ledger: AsyncLedger) -> LedgerError:
    """The error to raise for ``exc`` from an AsyncLedger's call (``exc`` itself when the
    table is there and the database answers: raise it as it is)."""
    exists: bool | None = None
    with contextlib.suppress(Exception):  # the first error is what the caller sees
        async with ledger.engine.connect() as connection:
            exists = await connection.run_sync(_has_table, ledger)
    return _why(exc, exists, ledger)


def explained_sync(exc: LedgerError, ledger: Ledger) -> LedgerError:
    """`explained` for a sync Ledger."""
    exists: bool | None = None
    with contextlib.suppress(Exception), ledger.engine.connect() as connection:
        exists = _has_table(connection, ledger)
    return _why(exc, exists, ledger)
