"""The tables senders keep in the ledger's database: rate limits and file ids.

Each lives beside a ledger table, named after it, and is created by its store's
``create_schema`` or by the shipped Alembic migration; both name it the same way.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._ledger.table import DEFAULT_TABLE_NAME

__all__ = ["beside_ledger", "check_store_args", "primary_key_name"]


def beside_ledger(ledger_table: str, *, default: str, suffix: str) -> str:
    """The name of a table beside ``ledger_table``: ``default`` beside the default ledger
    table, ``<ledger table><suffix>`` beside another."""
    if ledger_table == DEFAULT_TABLE_NAME:
        return default
    return f"{ledger_table}{suffix}"


def primary_key_name(table_name: str) -> str:
    """The primary key constraint's name (shared by create_schema and the migration)."""
    return f"pk_{table_name}"


def check_store_args(engine: object, table_name: object) -> None:
    """Refuse what a store could not keep its table in, before anything is built."""
    if not isinstance(engine, AsyncEngine):
        raise ValidationTypeError(
            "engine", f"must be a SQLAlchemy AsyncEngine, got {type(engine).__name__}"
        )
    if not isinstance(table_name, str) or not table_name:
        raise ValidationError("table_name", "must be a non-empty str")
