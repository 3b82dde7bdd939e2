"""The recipients table: who is gone and who opted out of what, and the words for why.

One row per (recipient, category). A row whose category is ``""`` says the recipient is
gone for every notification (blocked the bot, deleted the account, removed the bot from
its group); any other row says the recipient opted out of that one category. The primary
key is the only index a look-up needs: a run asks for its batch's recipients by it.

``AsyncAudience.create_schema()`` and the shipped Alembic migration (revision
``notifyonce_0007``) build the same table; a test compares the two.
"""

from __future__ import annotations

import enum

import sqlalchemy as sa

from notifyonce._ledger.table import DEFAULT_TABLE_NAME, KeyText, UtcDateTime

__all__ = [
    "DEFAULT_RECIPIENT_TABLE_NAME",
    "GONE",
    "MAX_CATEGORY_LENGTH",
    "MAX_DETAIL_LENGTH",
    "MAX_RECIPIENT_LENGTH",
    "GoneReason",
    "build_recipient_table",
    "default_recipient_table",
    "recipient_pk_name",
]

DEFAULT_RECIPIENT_TABLE_NAME = "notifyonce_recipients"
#: The category of the row that says a recipient is gone for every category.
GONE = ""
MAX_RECIPIENT_LENGTH = 128  # as a slot's subject: a recipient is often the subject itself
MAX_CATEGORY_LENGTH = 64  # as an action: a category is an action's name by default
MAX_DETAIL_LENGTH = 255
_MAX_WORD = 32


class GoneReason(str, enum.Enum):
    """Why a recipient can no longer be reached.

    Attributes:
        BLOCKED: The user blocked the bot (Telegram: 403 "bot was blocked by the user",
            or a ``my_chat_member`` update to ``kicked`` in a private chat).
        DEACTIVATED: The user deleted their account (403 "user is deactivated").
        KICKED: The bot was removed from the group or channel, or is not a member of it
            any more (403 "bot was kicked from the group chat", "bot is not a member of
            the channel chat").
        CHAT_NOT_FOUND: The chat does not exist for this bot (400 "chat not found", a
            wrong id from an import).
        NOT_STARTED: The user never opened the bot, which cannot write first (403 "bot
            can't initiate conversation with a user"); a ``/start`` brings them in.
        BOT: The recipient is another bot (403 "bot can't send messages to bots").
        MIGRATED: The group became a supergroup and Telegram gave no new id.
        DELETED: The chat was deleted (403 "the group chat was deleted").
        OTHER: Told by your code for a reason of its own.
    """

    BLOCKED = "blocked"
    DEACTIVATED = "deactivated"
    KICKED = "kicked"
    CHAT_NOT_FOUND = "chat_not_found"
    NOT_STARTED = "not_started"
    BOT = "bot"
    MIGRATED = "migrated"
    DELETED = "deleted"
    OTHER = "other"


def default_recipient_table(ledger_table: str) -> str:
    """The recipients table beside a ledger table: ``notifyonce_recipients`` beside the
    default one, ``<ledger table>_recipients`` beside another."""
    if ledger_table == DEFAULT_TABLE_NAME:
        return DEFAULT_RECIPIENT_TABLE_NAME
    return f"{ledger_table}_recipients"


def recipient_pk_name(table_name: str) -> str:
    """The primary key's name (shared by create_schema and the migration)."""
    return f"pk_{table_name}"


def build_recipient_table(
    metadata: sa.MetaData, name: str = DEFAULT_RECIPIENT_TABLE_NAME, schema: str | None = None
) -> sa.Table:
    """Define the recipients table on ``metadata``."""
    return sa.Table(
        name,
        metadata,
        sa.Column("recipient", KeyText(MAX_RECIPIENT_LENGTH), nullable=False),
        # "" (GONE): gone for every category; else the category opted out of.
        sa.Column("category", KeyText(MAX_CATEGORY_LENGTH), nullable=False),
        # Gone: a GoneReason's value. Opted out: how ("command", "button", "import"...).
        sa.Column("reason", sa.String(_MAX_WORD), nullable=False),
        # Who told: "refusal" (a send was refused), "update" (the bot's updates), "api",
        # "import", "command line".
        sa.Column("source", sa.String(_MAX_WORD), nullable=False),
        # The provider's words for a refusal ("[403] Forbidden: bot was blocked by the user").
        sa.Column("detail", sa.String(MAX_DETAIL_LENGTH), nullable=True),
        sa.Column("since", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("recipient", "category", name=recipient_pk_name(name)),
        schema=schema,
    )
