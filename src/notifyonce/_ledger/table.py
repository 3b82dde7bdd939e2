"""The ledger table: its columns, indexes and the two column types that keep it portable.

One definition serves ``create_schema()``; the shipped Alembic migration writes the same
table out explicitly (a migration is a frozen snapshot) and a test compares the two.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from notifyonce._drivers import DRIVERS, Driver, driver_class

__all__ = [
    "DEFAULT_TABLE_NAME",
    "MAX_ERROR_LENGTH",
    "MAX_MESSAGE_ID_LENGTH",
    "KeyText",
    "SlotStatus",
    "UtcDateTime",
    "build_table",
    "index_names",
]

DEFAULT_TABLE_NAME = "notifyonce_slots"
MAX_ERROR_LENGTH = 500
MAX_MESSAGE_ID_LENGTH = 128


class SlotStatus(str, enum.Enum):
    """Where a slot stands.

    Attributes:
        CLAIMED: Held by a worker until its ``lease_until``; only its fencing token can
            mark or release it.
        SENT: Delivered. Final.
        FAILED: Refused for good (bot blocked, chat not found). Final.
        UNKNOWN: May or may not have been delivered (an uncertain send, or a crash between
            claim and confirmation in at-most-once mode). Never retried automatically.
        RELEASED: Certainly not delivered; the next claim wins it again.
    """

    CLAIMED = "claimed"
    SENT = "sent"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RELEASED = "released"


_UTC = dt.timezone.utc


def _driver(dialect: Dialect) -> type[Driver]:
    # SQLAlchemy's generic dialect (a statement printed with str()) gets the plain types.
    return driver_class(dialect, fallback=Driver)


class UtcDateTime(sa.types.TypeDecorator[dt.datetime]):
    """A timestamp stored in UTC and always read back as an aware UTC datetime.

    PostgreSQL gets ``timestamptz``; MySQL/MariaDB (``DATETIME(6)``) and SQLite have no
    time zone type, so they store naive UTC. Naive datetimes are refused on the way in:
    their meaning would depend on the machine's zone.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(_driver(dialect).timestamp_type())

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return _utc_bind(value, _driver(dialect).aware_timestamps)

    def own_bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        """`process_bind_param` on ``dialect`` as a function of the value alone (for the
        ledger's compiled statements, which bind many values a second: the driver is
        looked up once, not per value)."""
        aware = _driver(dialect).aware_timestamps
        return lambda value: _utc_bind(value, aware)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)


def _utc_bind(value: dt.datetime | None, aware: bool) -> dt.datetime | None:
    """A timestamp as `UtcDateTime` binds it: in UTC, its zone kept where the column
    keeps it (``aware``); a naive one is refused."""
    if value is None:
        return None
    if value.tzinfo is not _UTC:  # the ledger's own clock gives UTC already
        if value.utcoffset() is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(_UTC)
    return value if aware else value.replace(tzinfo=None)


def _utf8(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8")


class KeyText(sa.types.TypeDecorator[str]):
    """A key part (action, subject, cycle) compared byte for byte on every database.

    MySQL/MariaDB's default collations are case-insensitive and ignore trailing spaces,
    so ``"Ann"``, ``"ann"`` and ``"ann "`` would share one slot there while they are three
    slots on PostgreSQL and SQLite. ``VARBINARY`` of the UTF-8 bytes gives exact equality
    on MySQL too; the other databases keep a plain ``VARCHAR``.
    """

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        return dialect.type_descriptor(_driver(dialect).key_type(self.length))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and _driver(dialect).binary_keys:
            return value.encode("utf-8")
        return value

    def own_bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        """`process_bind_param` on ``dialect`` as a function of the value alone, or None
        where it leaves the value as it is (see `UtcDateTime.own_bind_processor`)."""
        return _utf8 if _driver(dialect).binary_keys else None

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8")
        return value  # type: ignore[no-any-return]


def index_names(table_name: str) -> dict[str, str]:
    """The names of the table's constraint and indexes (short enough for every database)."""
    return {
        "pk": f"{table_name}_pkey",
        "key": f"{table_name}_key",
        "lease": f"{table_name}_lease_idx",
        "cycle_at": f"{table_name}_cycle_at_idx",
        "subject_sent": f"{table_name}_subject_sent_idx",
        "status": f"{table_name}_status_idx",
        "action_sent": f"{table_name}_action_sent_idx",
    }


#: The ``(action, sent_at)`` index holds only the rows delivered, where the database has
#: partial indexes (PostgreSQL, SQLite; MySQL has none, and its optimizer counts the rows
#: of a range instead of guessing). Its queries ask for ``sent_at`` in a range, so they can
#: use it; the send path's statements cannot, so no planner takes it for a way to the key:
#: with the statistics of a young table (every table looks tiny before its first ANALYZE)
#: it cost as little as the key, and each look-up through it read every row of the
#: campaign, more with every batch (tests/test_plans.py, the young campaign). A claim,
#: whose row has no ``sent_at`` yet, does not write it either.
def partial_indexes(dialect: Dialect) -> bool:
    """Whether the database has partial indexes (``CREATE INDEX ... WHERE``)."""
    return _driver(dialect).partial_indexes


_SENT_ONLY: dict[str, Any] = {
    driver.index_where(): sa.text("sent_at IS NOT NULL")
    for driver in DRIVERS
    if driver.partial_indexes
}


def build_table(
    metadata: sa.MetaData, table_name: str = DEFAULT_TABLE_NAME, schema: str | None = None
) -> sa.Table:
    """Define the ledger table on ``metadata``."""
    from notifyonce._keys import MAX_ACTION_LENGTH, MAX_CYCLE_LENGTH, MAX_SUBJECT_LENGTH

    names = index_names(table_name)
    return sa.Table(
        table_name,
        metadata,
        # SQLite only auto-increments an INTEGER PRIMARY KEY (its rowid).
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("action", KeyText(MAX_ACTION_LENGTH), nullable=False),
        sa.Column("subject", KeyText(MAX_SUBJECT_LENGTH), nullable=False),
        sa.Column("cycle", KeyText(MAX_CYCLE_LENGTH), nullable=False),
        sa.Column("cycle_at", UtcDateTime(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("lease_until", UtcDateTime(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("sent_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.String(MAX_ERROR_LENGTH), nullable=True),
        sa.Column("message_id", sa.String(MAX_MESSAGE_ID_LENGTH), nullable=True),
        sa.PrimaryKeyConstraint("id", name=names["pk"]),
        # The claim's uniqueness. Cycle before subject: a window run claims many subjects
        # whose cycles (deadlines) fall in a narrow range, so its keys land close together
        # in the index (measured 0.97 of the empty-ledger bulk rate on a 10M-row ledger,
        # against 0.54-0.69 with (action, subject, cycle)).
        sa.UniqueConstraint("action", "cycle", "subject", name=names["key"]),
        # sweep: finds CLAIMED rows whose lease expired without touching finished ones.
        sa.Index(names["lease"], "status", "lease_until"),
        # purge: deletes by how long ago the cycle could last fire.
        sa.Index(names["cycle_at"], "cycle_at"),
        # last_sent: the latest delivery per subject, across actions, for spacing.
        # (And a subject's history in the console: every row of the subject.)
        sa.Index(names["subject_sent"], "subject", "sent_at"),
        # Listings by status (a campaign's unknown and held chats, the operator's list and
        # requeue) read only the rows with that status, of that action and cycle: few,
        # whatever the number of sent rows beside them.
        sa.Index(names["status"], "status", "action", "cycle"),
        # Sends per minute of an action (the operator console's sparklines, a running
        # campaign's rate): a range of the last hour's deliveries, whatever came before.
        sa.Index(names["action_sent"], "action", "sent_at", **_SENT_ONLY),
        schema=schema,
    )
