"""A campaign remembers its message: a fingerprint kept in the ledger, checked on resume.

A broadcast resumed after a crash sends to the chats not handled yet. If its text or
media changed in between, those chats would get another message than the first ones,
without a word. So the first run of a campaign records a fingerprint of its message (a
sha256 of the text, the formatting and the media's content) and every later run compares.

The fingerprint lives in the ledger table itself, in one row per campaign under the action
``notifyonce.campaign`` (subject: the broadcast's action; cycle: the campaign id; status
``sent``; the fingerprint where a message id goes). It is written in one statement, so it
is there or not, never half; a purge with ``opaque_finished_before`` removes it with the
campaign's slots.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from notifyonce._errors import LedgerError, ValidationError
from notifyonce._keys import make_key
from notifyonce._ledger.table import SlotStatus
from notifyonce._media import Album, Copy, Media, file_sha256

if TYPE_CHECKING:
    from notifyonce._ledger.ledger import AsyncLedger
    from notifyonce._message import Message

__all__ = ["CAMPAIGN_ACTION", "check_message", "fingerprint"]

logger = logging.getLogger("notifyonce.broadcast")

CAMPAIGN_ACTION = "notifyonce.campaign"
_PREFIX = "msg-sha256:"


async def fingerprint(message: Message) -> str:
    """A stable fingerprint of what the recipients see: text, parse mode, media content.

    Raises:
        ValidationError: The media file cannot be read (nothing was sent).
    """
    parts = [message.text, message.parse_mode or ""]
    media = message.media
    if isinstance(media, Copy):
        parts += [media.kind, f"{media.from_chat_id}/{media.message_id}"]
    elif isinstance(media, Album):
        parts.append(media.kind)
        for item in media.items:
            parts += [item.kind, await _content(item)]
    elif media is not None:
        parts += [media.kind, await _content(media)]
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass"))
    return _PREFIX + digest.hexdigest()


async def _content(media: Media) -> str:
    """What names a file's content: the sha256 of its bytes, or its file_id or URL."""
    source = media.source
    if isinstance(source, bytes):
        return media._digest or hashlib.sha256(source).hexdigest()
    if isinstance(source, os.PathLike):
        try:
            return await asyncio.to_thread(file_sha256, os.fspath(source))
        except OSError as exc:
            raise ValidationError(media.kind, f"cannot be read ({type(exc).__name__})") from None
    return source  # a file_id or a URL names the content


async def check_message(
    ledger: AsyncLedger,
    action: str,
    campaign: str,
    message: Message,
    *,
    allow_changed: bool,
    dry_run: bool,
) -> None:
    """Record the campaign's message on its first run; on a later run, refuse another one
    unless ``allow_changed`` (then the new one is recorded). A dry run records nothing.

    Raises:
        ValidationError: The message differs from the one the campaign started with.
        LedgerError: The database failed.
    """
    key = make_key(CAMPAIGN_ACTION, action, campaign)
    table = ledger.table
    where = sa.and_(
        table.c.action == key.action, table.c.subject == key.subject, table.c.cycle == key.cycle
    )
    wanted = await fingerprint(message)
    try:
        stored = await _stored(ledger, where)
        if stored is None and not dry_run:
            now = ledger.now()
            row = {
                "action": key.action,
                "subject": key.subject,
                "cycle": key.cycle,
                "cycle_at": None,
                "status": SlotStatus.SENT.value,
                "attempt": 1,
                "token": 0,
                "lease_until": now,
                "created_at": now,
                "updated_at": now,
                "sent_at": None,  # not a delivery: spacing must not count it
                "last_error": None,
                "message_id": wanted,
            }
            try:
                async with ledger.engine.begin() as conn:
                    await conn.execute(sa.insert(table).values(row))
                return
            except IntegrityError:
                stored = await _stored(ledger, where)  # another first run was quicker
        if stored is None or stored == wanted:
            return
        name = f"{action}/{campaign}"
        if not allow_changed:
            raise ValidationError(
                "message",
                f"differs from the message campaign {name} started with (its text, "
                "formatting or media changed), so the chats not handled yet would get "
                "another message than the others; nothing was sent. Send the first "
                "message, use a new campaign id, or allow the change "
                "(allow_changed_message=True, --allow-changed-message)",
            )
        logger.warning(
            "campaign %s: the message differs from the one it started with; the chats "
            "not handled yet get the new one (allowed)",
            name,
        )
        if not dry_run:
            async with ledger.engine.begin() as conn:
                await conn.execute(
                    sa.update(table).where(where).values(message_id=wanted, updated_at=ledger.now())
                )
    except SQLAlchemyError as exc:
        raise LedgerError(
            f"the campaign's message could not be checked ({type(exc).__name__})"
        ) from exc


async def _stored(ledger: AsyncLedger, where: sa.ColumnElement[bool]) -> str | None:
    """The fingerprint recorded for the campaign, or None when there is none yet."""
    query = sa.select(ledger.table.c.message_id).where(where)
    async with ledger.engine.connect() as conn:
        value = (await conn.execute(query)).scalar_one_or_none()
    return value if isinstance(value, str) and value.startswith(_PREFIX) else None
