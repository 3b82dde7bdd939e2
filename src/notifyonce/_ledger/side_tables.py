"""The tables beside the slots that digests and frequency caps keep: their columns and names.

``notifyonce_digest_events``: one row per digest event, unique on ``(action, subject,
event_key)``, carrying the window it was bound to when it was added and, once a digest
took it, the id of that digest's slot. ``notifyonce_cap_seats``: a recipient's ``n`` seats
of one capped category, each holding the time it was last taken.

The ledger's ``create_schema()`` and the shipped Alembic migration (revision
``notifyonce_0008``) build the same tables; a test compares the two. Beside a ledger
table of another name they are ``<ledger table>_digest_events`` and
``<ledger table>_cap_seats``.
"""

from __future__ import annotations

import sqlalchemy as sa

from notifyonce._keys import MAX_ACTION_LENGTH, MAX_SUBJECT_LENGTH
from notifyonce._ledger.table import DEFAULT_TABLE_NAME, KeyText, UtcDateTime

__all__ = [
    "DEFAULT_CAP_TABLE_NAME",
    "DEFAULT_DIGEST_TABLE_NAME",
    "MAX_CATEGORY_LENGTH",
    "MAX_EVENT_KEY_LENGTH",
    "MAX_RECIPIENT_LENGTH",
    "MAX_TZ_LENGTH",
    "build_cap_table",
    "build_digest_table",
    "cap_names",
    "default_cap_table",
    "default_digest_table",
    "digest_names",
]

DEFAULT_DIGEST_TABLE_NAME = "notifyonce_digest_events"
DEFAULT_CAP_TABLE_NAME = "notifyonce_cap_seats"
MAX_EVENT_KEY_LENGTH = 128  # as a subject: often an upstream id (a reply's, an order's)
MAX_TZ_LENGTH = 64
MAX_CATEGORY_LENGTH = 64  # as the audience's categories
MAX_RECIPIENT_LENGTH = 128  # as the audience's recipients


def _beside(ledger_table: str, default: str, suffix: str) -> str:
    return default if ledger_table == DEFAULT_TABLE_NAME else f"{ledger_table}_{suffix}"


def default_digest_table(ledger_table: str) -> str:
    """The digest events table beside a ledger table."""
    return _beside(ledger_table, DEFAULT_DIGEST_TABLE_NAME, "digest_events")


def default_cap_table(ledger_table: str) -> str:
    """The cap seats table beside a ledger table."""
    return _beside(ledger_table, DEFAULT_CAP_TABLE_NAME, "cap_seats")


def digest_names(table_name: str) -> dict[str, str]:
    """The names of the digest table's key and indexes (shared with the migration)."""
    return {
        "pk": f"{table_name}_pkey",
        "key": f"{table_name}_key",
        "due": f"{table_name}_due_idx",
        "window": f"{table_name}_window_idx",
        "ends": f"{table_name}_ends_idx",
    }


def cap_names(table_name: str) -> dict[str, str]:
    """The name of the cap table's primary key (shared with the migration)."""
    return {"pk": f"pk_{table_name}"}


def build_digest_table(
    metadata: sa.MetaData, name: str = DEFAULT_DIGEST_TABLE_NAME, schema: str | None = None
) -> sa.Table:
    """Define the digest events table on ``metadata``."""
    names = digest_names(name)
    return sa.Table(
        name,
        metadata,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("action", KeyText(MAX_ACTION_LENGTH), nullable=False),
        sa.Column("subject", KeyText(MAX_SUBJECT_LENGTH), nullable=False),
        sa.Column("event_key", KeyText(MAX_EVENT_KEY_LENGTH), nullable=False),
        # The window the event is bound to: [window_start, window_end). Its start is the
        # digest slot's cycle.
        sa.Column("window_start", UtcDateTime(), nullable=False),
        sa.Column("window_end", UtcDateTime(), nullable=False),
        # When a flush may take it (the window's end, earlier with a maximum wait, an
        # early flush or a critical event); NULL once the digest that took it is
        # finished, so flushes never read the events of digests already made.
        sa.Column("due_at", UtcDateTime(), nullable=True),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("tz", sa.String(MAX_TZ_LENGTH), nullable=True),
        sa.Column("data", sa.Text(), nullable=True),
        # The id of the slot of the digest that took it; NULL while it waits.
        sa.Column("slot_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=names["pk"]),
        # add(): an event key is stored once.
        sa.UniqueConstraint("action", "subject", "event_key", name=names["key"]),
        # flush: the events that are due now, page by page in (due_at, id) order, whatever
        # the table holds besides.
        sa.Index(names["due"], "action", "due_at", "id"),
        # a digest's own events, and the late ones moved to the next window.
        sa.Index(names["window"], "action", "subject", "window_start"),
        # the retention purge: the windows that ended long ago.
        sa.Index(names["ends"], "action", "window_end"),
        schema=schema,
    )


def build_cap_table(
    metadata: sa.MetaData, name: str = DEFAULT_CAP_TABLE_NAME, schema: str | None = None
) -> sa.Table:
    """Define the cap seats table on ``metadata``."""
    return sa.Table(
        name,
        metadata,
        sa.Column("category", KeyText(MAX_CATEGORY_LENGTH), nullable=False),
        sa.Column("recipient", KeyText(MAX_RECIPIENT_LENGTH), nullable=False),
        sa.Column("seat", sa.Integer(), nullable=False, autoincrement=False),
        # When the seat was last taken: free again once that is a cap's window ago.
        sa.Column("used_at", UtcDateTime(), nullable=False),
        # What used_at was before (given back when the send certainly did not happen).
        sa.Column("previous_at", UtcDateTime(), nullable=True),
        # Who took it last: only that taker gives it back.
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("category", "recipient", "seat", name=cap_names(name)["pk"]),
        schema=schema,
    )
