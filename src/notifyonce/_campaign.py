"""A campaign remembers its message: a fingerprint kept in the ledger, checked on resume.

A broadcast resumed after a crash sends to the chats not handled yet. If its text or
media changed in between, those chats would get another message than the first ones,
without a word. So the first run of a campaign records a fingerprint of its message (a
sha256 of the text, the formatting and the media's content) and every later run compares.

The fingerprint lives in the ledger table itself, in one row per campaign under the action
``notifyonce.campaign`` (subject: the broadcast's action; cycle: the campaign id; status
``sent``; the fingerprint where a message id goes). It is written in one statement, so it
is there or not, never half; a purge with ``opaque_finished_before`` removes it with the
campaign's slots. When the broadcast knows how many recipients it has, the row's ``token``
(a fencing token no claim of this row ever uses) keeps that number, for the operator
console's remaining count and ETA; 0 means not known.

The same row carries a cancel request from the operator console: its ``last_error`` (which
a campaign's row otherwise leaves empty) set to ``CANCEL_NOTE`` and the time, by one
``UPDATE`` through the unique key. A running broadcast reads it every few seconds (one
look-up of that key) and stops gently; a later run refuses to start until it is told to
resume, which clears it.

A campaign that speaks to each recipient (a template, languages, the recipient's own hour)
keeps its recipients per language in a row of its own too, under the action
``notifyonce.languages``: this run's counts per variant and how many wait for their hour,
as a short JSON text in its ``last_error`` (see `LanguageCounts`), rewritten every few
seconds while the run lasts, for the operator console.

A broadcast running the campaign keeps the row's ``lease_until`` ahead of the clock: every
``HEARTBEAT`` seconds it sets it ``HEARTBEAT_LEASE`` ahead (one ``UPDATE`` through the unique
key), so the operator console tells a run that sends from one that was killed: claims
with live leases whose campaign row's heartbeat ran out belong to no run sending
("stalled"), until their leases run out and the sweep settles them. The row is written with
``lease_until`` equal to its ``created_at``: a run that never beat (an older version) leaves
it so, and the console then judges by claims and recent sends alone.

The campaign's progress message in an admin's chat (see ``_progress_chat``) is remembered
in a row of its own, under the action ``notifyonce.progress`` (same subject and cycle as
the campaign row; ``message_id`` holds ``<chat>:<message id>``), so a resumed run edits
the message the first run posted instead of posting another. Not in the campaign row:
its columns are spoken for (above), and a campaign whose message is a function of the chat
has no campaign row at all, yet can show its progress. The chat is kept with the id
because message ids count per chat: the same id in another chat is another message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from notifyonce._drivers.errors import DATABASE_ERRORS, database_detail
from notifyonce._errors import LedgerError, ValidationError
from notifyonce._keys import SlotKey, make_key
from notifyonce._ledger.table import MAX_ERROR_LENGTH, SlotStatus
from notifyonce._media import Album, Copy, Media, file_sha256

if TYPE_CHECKING:
    from notifyonce._ledger.ledger import AsyncLedger
    from notifyonce._message import Message

__all__ = [
    "CAMPAIGN_ACTION",
    "CANCEL_NOTE",
    "CANCEL_POLL",
    "HEARTBEAT",
    "HEARTBEAT_LEASE",
    "LANGUAGES_ACTION",
    "PROGRESS_ACTION",
    "RESERVED_ACTIONS",
    "REVISION_ACTION",
    "LanguageCounts",
    "beat",
    "campaign_started",
    "cancel_requested",
    "cancel_statement",
    "check_message",
    "clear_cancel",
    "compare_message",
    "fingerprint",
    "keep_progress_message",
    "own_row",
    "pin",
    "progress_message",
    "record_campaign",
    "record_languages",
    "record_total",
    "request_cancel",
]

logger = logging.getLogger("notifyonce.broadcast")

# What a failed statement raises: SQLAlchemy's errors, and what a driver lets through
# unwrapped (asyncpg's OSError for a refused connection when the server is gone).
_DATABASE_ERRORS = (SQLAlchemyError, *DATABASE_ERRORS)

CAMPAIGN_ACTION = "notifyonce.campaign"
PROGRESS_ACTION = "notifyonce.progress"
#: The rows of a campaign's revisions (its edits and its delete; see ``_revision``).
REVISION_ACTION = "notifyonce.revision"
#: The row of a personalised campaign's recipients per language (see `LanguageCounts`).
LANGUAGES_ACTION = "notifyonce.languages"
#: Actions of the ledger's own rows, which no broadcast may use (and the console hides).
RESERVED_ACTIONS = frozenset({CAMPAIGN_ACTION, PROGRESS_ACTION, REVISION_ACTION, LANGUAGES_ACTION})
_PREFIX = "msg-sha256:"
#: What a cancel request stored in a campaign's row starts with (the time follows).
#: Seconds between two heartbeats of a broadcast running the campaign (see the module).
HEARTBEAT = 10.0
#: How far ahead of the clock a heartbeat sets the campaign row's ``lease_until``: a run
#: silent this long is no longer sending (three beats missed).
HEARTBEAT_LEASE = dt.timedelta(seconds=30)

CANCEL_NOTE = "cancelled from the console"
#: Seconds between a running broadcast's reads of its cancel request.
CANCEL_POLL = 2.0


async def fingerprint(
    message: Message, variants: Mapping[str, Message] | None = None, extra: Sequence[str] = ()
) -> str:
    """A stable fingerprint of what the recipients see: text, parse mode, media content,
    buttons, and for a personalised campaign each language's variant and ``extra`` (that
    it is a template, its defaults).

    A part is added only when present, so a campaign without buttons or variants keeps
    the fingerprint it had before they were covered.

    Raises:
        ValidationError: The media file cannot be read (nothing was sent).
    """
    parts = await _parts(message)
    for language in sorted(variants or {}):
        parts += ["variant", language, *await _parts((variants or {})[language])]
    parts += extra
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass"))
    return _PREFIX + digest.hexdigest()


async def _parts(message: Message) -> list[str]:
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
    if message.reply_markup is not None:
        parts += ["buttons", json.dumps(message.reply_markup, sort_keys=True, default=_stable)]
    return parts


def _stable(value: object) -> object:
    """A value JSON has no form for, in one that is the same on every run: a pydantic
    model's fields (an aiogram button), else its type's name (never a repr, which may hold
    a memory address and would make every resume look changed)."""
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else type(value).__name__


async def pin(message: Message) -> Message:
    """``message`` with each file on disk pinned to the sha256 of its bytes now.

    A campaign's fingerprint is made of those digests, and a sender refuses to send a
    pinned file whose bytes are no longer those (see ``UploadOnce.key``): a file rewritten
    while the campaign runs stops it, instead of reaching the chats not handled yet as
    another message than the first ones got, under the first one's fingerprint.

    Raises:
        ValidationError: A media file cannot be read (nothing was sent).
    """
    media = message.media
    if isinstance(media, Album):
        pinned: Album | Media = Album([await _pinned(item) for item in media.items])
    elif media is not None and not isinstance(media, Copy):
        pinned = await _pinned(media)
    else:
        return message
    return dataclasses.replace(message, media=pinned)


async def _pinned(media: Media) -> Media:
    if not isinstance(media.source, os.PathLike):
        return media
    digest = await _content(media)
    copy = dataclasses.replace(media)
    object.__setattr__(copy, "_digest", digest)  # a file's: the bytes it must still hold
    return copy


async def _content(media: Media) -> str:
    """What names a file's content: the sha256 of its bytes (the one it was pinned to),
    or its file_id or URL."""
    source = media.source
    if media._digest is not None:
        return media._digest
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()
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
    variants: Mapping[str, Message] | None = None,
    extra: Sequence[str] = (),
) -> None:
    """Record the campaign's message on its first run; on a later run, refuse another one
    unless ``allow_changed`` (then the new one is recorded). A dry run records nothing.

    Raises:
        ValidationError: The message differs from the one the campaign started with.
        LedgerError: The database failed.
    """
    wanted = await compare_message(
        ledger,
        action,
        campaign,
        message,
        allow_changed=allow_changed,
        variants=variants,
        extra=extra,
    )
    if not dry_run:
        await record_campaign(ledger, action, campaign, wanted)


async def compare_message(
    ledger: AsyncLedger,
    action: str,
    campaign: str,
    message: Message,
    *,
    allow_changed: bool,
    variants: Mapping[str, Message] | None = None,
    extra: Sequence[str] = (),
) -> str:
    """The message's fingerprint, once compared with the one the campaign started with
    (if it did): reads only, so a run refused later (a bad recipient) writes nothing.

    Raises:
        ValidationError: The message differs and ``allow_changed`` is False.
        LedgerError: The database failed.
    """
    _, where = _row(ledger.table, action, campaign)
    wanted = await fingerprint(message, variants, extra)
    try:
        stored = await _stored(ledger, where)
    except _DATABASE_ERRORS as exc:
        raise LedgerError(
            f"the campaign's message could not be checked ({database_detail(exc)})"
        ) from exc
    if stored is None or stored == wanted:
        return wanted
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
    return wanted


async def record_campaign(
    ledger: AsyncLedger,
    action: str,
    campaign: str,
    wanted: str,
    *,
    cycle_at: dt.datetime | None = None,
    total: int | None = None,
) -> None:
    """Write the campaign's row once every check before its first send has passed: its
    message's fingerprint ``wanted`` (from `compare_message`), its scheduled start
    ``cycle_at`` when it waits for one (the console shows it scheduled), and its number
    of recipients ``total`` when known. A row there already gets the values given.

    Raises:
        LedgerError: The database failed.
    """
    table = ledger.table
    key, where = _row(table, action, campaign)
    now = ledger.now()
    values: dict[str, Any] = {"message_id": wanted}
    if cycle_at is not None:
        values["cycle_at"] = cycle_at.astimezone(dt.timezone.utc)
    if total is not None:
        values["token"] = max(total, 0)
    try:
        stored = await _stored(ledger, where)
        if stored is None:
            try:
                async with ledger.engine.begin() as conn:
                    await conn.execute(
                        sa.insert(table).values({**own_row(key, now, wanted), **values})
                    )
                return
            except IntegrityError:
                pass  # another first run was quicker: its row gets ours below
        async with ledger.engine.begin() as conn:
            await conn.execute(sa.update(table).where(where).values(**values, updated_at=now))
    except _DATABASE_ERRORS as exc:
        raise LedgerError(
            f"the campaign's message could not be recorded ({database_detail(exc)})"
        ) from exc


def own_row(key: SlotKey, now: dt.datetime, value: str) -> dict[str, Any]:
    """A new row of the campaign's own (its message, its progress message): settled, not
    a delivery, ``value`` where a message id goes."""
    return {
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
        "message_id": value,
    }


def _row(
    table: sa.Table, action: str, campaign: str, kind: str = CAMPAIGN_ACTION
) -> tuple[SlotKey, sa.ColumnElement[bool]]:
    """The campaign row's key (or its progress row's, ``kind=PROGRESS_ACTION``) and the
    filter that finds it through the unique key."""
    key = make_key(kind, action, campaign)
    where = sa.and_(
        table.c.action == key.action, table.c.subject == key.subject, table.c.cycle == key.cycle
    )
    return key, where


async def campaign_started(ledger: AsyncLedger, action: str, campaign: str) -> dt.datetime | None:
    """When the campaign's first run recorded its message (None before, or in a dry run):
    the start a local-time campaign counts each recipient's hour from, on every run."""
    _, where = _row(ledger.table, action, campaign)
    query = sa.select(ledger.table.c.created_at).where(where)
    async with ledger.engine.connect() as conn:
        value = (await conn.execute(query)).scalar_one_or_none()
    if not isinstance(value, dt.datetime):
        return None
    return value if value.utcoffset() is not None else value.replace(tzinfo=dt.timezone.utc)


async def _stored(ledger: AsyncLedger, where: sa.ColumnElement[bool]) -> str | None:
    """The fingerprint recorded for the campaign, or None when there is none yet."""
    query = sa.select(ledger.table.c.message_id).where(where)
    async with ledger.engine.connect() as conn:
        value = (await conn.execute(query)).scalar_one_or_none()
    return value if isinstance(value, str) and value.startswith(_PREFIX) else None


async def record_total(ledger: AsyncLedger, action: str, campaign: str, total: int) -> None:
    """Keep the campaign's number of recipients in its row (see the module's docs).

    Best effort: the number only feeds the operator console's ETA, so a failure is
    logged and the broadcast goes on.
    """
    table = ledger.table
    _, where = _row(table, action, campaign)
    try:
        async with ledger.engine.begin() as conn:
            await conn.execute(sa.update(table).where(where).values(token=max(total, 0)))
    except _DATABASE_ERRORS as exc:
        logger.warning(
            "campaign %s/%s: its number of recipients could not be recorded (%s)",
            action,
            campaign,
            type(exc).__name__,
        )


async def beat(ledger: AsyncLedger, action: str, campaign: str) -> None:
    """The running broadcast's heartbeat: the campaign row's ``lease_until`` set
    `HEARTBEAT_LEASE` ahead of the ledger's clock (see the module's docs).

    Best effort: it only feeds the operator console's state, so a failure is logged at
    DEBUG (a database gone is told once by the run itself) and the broadcast goes on.
    """
    table = ledger.table
    _, where = _row(table, action, campaign)
    try:
        async with ledger.engine.begin() as conn:
            await conn.execute(
                sa.update(table).where(where).values(lease_until=ledger.now() + HEARTBEAT_LEASE)
            )
    except _DATABASE_ERRORS as exc:
        logger.debug(
            "campaign %s/%s: its heartbeat could not be written (%s)",
            action,
            campaign,
            type(exc).__name__,
        )


# -- a personalised campaign's recipients per language ---------------------------------

#: The counts of one variant, in the order they are stored.
LANGUAGE_COUNTS = ("recipients", "sent", "unknown", "earlier", "other", "waiting")


@dataclasses.dataclass(frozen=True)
class LanguageCounts:
    """A personalised run's recipients per variant of its message, as the console shows it.

    Attributes:
        languages: Per variant (``""``: the default message, every other language), this
            run's counts: ``recipients`` read, ``sent``, ``unknown``, ``earlier`` (handled
            by an earlier run), ``other`` (failed, skipped, given back) and ``waiting``
            for their hour.
        waiting: Recipients of a local-time campaign whose hour has not come.
        next_due: When the next of them is due (aware, UTC), or None.
        left_out: Variants left out to fit the row (the smallest ones).
    """

    languages: dict[str, dict[str, int]]
    waiting: int = 0
    next_due: dt.datetime | None = None
    left_out: int = 0

    def text(self, limit: int = MAX_ERROR_LENGTH) -> str:
        """The JSON kept in the row, within ``limit`` characters: the variants with the
        fewest recipients left out (and counted) when they are too many to fit."""
        order = sorted(self.languages.items(), key=lambda item: -item[1].get("recipients", 0))
        left_out = self.left_out
        while True:
            record: dict[str, Any] = {
                "v": [
                    [name, *(counts.get(c, 0) for c in LANGUAGE_COUNTS)] for name, counts in order
                ],
                "w": self.waiting,
            }
            if self.next_due is not None:
                record["n"] = self.next_due.astimezone(dt.timezone.utc).isoformat()
            if left_out:
                record["x"] = left_out
            value = json.dumps(record, separators=(",", ":"), ensure_ascii=True)
            if len(value) <= limit or not order:
                return value
            order, left_out = order[:-1], left_out + 1

    @classmethod
    def read(cls, value: object) -> LanguageCounts | None:
        """The counts kept in a row's ``last_error``; None for none or an unreadable one."""
        try:
            record = json.loads(str(value)) if value else None
            if not isinstance(record, dict):
                return None
            languages = {
                str(item[0]): dict(zip(LANGUAGE_COUNTS, map(int, item[1:]), strict=True))
                for item in record.get("v", [])
            }
            due = record.get("n")
            next_due = dt.datetime.fromisoformat(due) if isinstance(due, str) else None
            return cls(languages, int(record.get("w", 0)), next_due, int(record.get("x", 0)))
        except (ValueError, TypeError, IndexError):
            return None


async def record_languages(
    ledger: AsyncLedger, action: str, campaign: str, counts: LanguageCounts
) -> None:
    """Keep a personalised run's counts per language in the campaign's row of them (a new
    row, or the earlier run's rewritten). Best effort: they only feed the operator
    console, so a failure is logged and the broadcast goes on."""
    table = ledger.table
    key, where = _row(table, action, campaign, LANGUAGES_ACTION)
    value = counts.text()
    now = ledger.now()
    try:
        async with ledger.engine.begin() as conn:
            done = await conn.execute(
                sa.update(table).where(where).values(last_error=value, updated_at=now)
            )
            if not done.rowcount:
                await conn.execute(
                    sa.insert(table).values({**own_row(key, now, ""), "last_error": value})
                )
    except _DATABASE_ERRORS as exc:
        logger.warning(
            "campaign %s/%s: its counts per language could not be recorded (%s)",
            action,
            campaign,
            type(exc).__name__,
        )


# -- the progress message in an admin's chat --------------------------------------------


async def progress_message(
    ledger: AsyncLedger, action: str, campaign: str
) -> tuple[str, int] | None:
    """The chat and message id of the campaign's progress message an earlier run posted,
    or None (none yet, or the ledger could not tell: then a new one is posted)."""
    _, where = _row(ledger.table, action, campaign, PROGRESS_ACTION)
    try:
        async with ledger.engine.connect() as conn:
            query = sa.select(ledger.table.c.message_id).where(where)
            value = (await conn.execute(query)).scalar_one_or_none()
    except _DATABASE_ERRORS as exc:
        logger.warning(
            "campaign %s/%s: its progress message could not be looked up (%s)",
            action,
            campaign,
            type(exc).__name__,
        )
        return None
    chat, _, number = str(value or "").rpartition(":")
    return (chat, int(number)) if chat and number.isdigit() else None


async def keep_progress_message(
    ledger: AsyncLedger, action: str, campaign: str, chat: str, message_id: int
) -> None:
    """Remember the campaign's progress message (a new row, or the row of an earlier one
    that is gone). Best effort: a failure is logged, and a resumed run then posts anew."""
    table = ledger.table
    key, where = _row(table, action, campaign, PROGRESS_ACTION)
    value = f"{chat}:{message_id}"
    now = ledger.now()
    row = own_row(key, now, value)
    try:
        try:
            async with ledger.engine.begin() as conn:
                await conn.execute(sa.insert(table).values(row))
        except IntegrityError:  # an earlier run's message, gone since
            async with ledger.engine.begin() as conn:
                await conn.execute(
                    sa.update(table).where(where).values(message_id=value, updated_at=now)
                )
    except _DATABASE_ERRORS as exc:
        logger.warning(
            "campaign %s/%s: its progress message could not be recorded (%s)",
            action,
            campaign,
            type(exc).__name__,
        )


# -- cancel requests ------------------------------------------------------------------------


def cancel_statement(
    table: sa.Table, action: str, campaign: str, now: dt.datetime, *, cancel: bool
) -> sa.Update:
    """The one ``UPDATE`` that sets (``cancel``) or clears a campaign's cancel request.

    Clearing touches only a cancel request, never another text in the column; setting it
    again keeps the first request's time. Its rowcount says whether the campaign's row was
    there (a campaign is known once its first run recorded its message).
    """
    _, where = _row(table, action, campaign)
    column = table.c.last_error
    requested = column.like(CANCEL_NOTE + "%")
    if cancel:
        note = f"{CANCEL_NOTE} at {now.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
        value: Any = sa.case((requested, column), else_=sa.literal(note))
        return sa.update(table).where(where).values(last_error=value, updated_at=now)
    return sa.update(table).where(where, requested).values(last_error=None, updated_at=now)


def cancel_query(table: sa.Table, action: str, campaign: str) -> sa.Select[tuple[str | None]]:
    """The campaign row's ``last_error``: one look-up of the unique key."""
    _, where = _row(table, action, campaign)
    return sa.select(table.c.last_error).where(where)


def cancel_note(value: object) -> str | None:
    """The cancel request in a campaign row's ``last_error``, or None."""
    return value if isinstance(value, str) and value.startswith(CANCEL_NOTE) else None


async def request_cancel(ledger: AsyncLedger, action: str, campaign: str) -> bool:
    """Ask every run of the campaign to stop, and later runs to refuse to start.

    Returns:
        False when the ledger has no such campaign (no run recorded its message yet).

    Raises:
        LedgerError: The database failed.
    """
    return await _update(ledger, action, campaign, cancel=True)


async def clear_cancel(ledger: AsyncLedger, action: str, campaign: str) -> bool:
    """Withdraw the campaign's cancel request; False when there was none.

    Raises:
        LedgerError: The database failed.
    """
    return await _update(ledger, action, campaign, cancel=False)


async def cancel_requested(ledger: AsyncLedger, action: str, campaign: str) -> str | None:
    """The campaign's cancel request (``"cancelled from the console at <time> UTC"``), or
    None: one look-up of the ledger's unique key.

    Raises:
        LedgerError: The database failed.
    """
    try:
        async with ledger.engine.connect() as conn:
            value = (await conn.execute(cancel_query(ledger.table, action, campaign))).scalar()
    except _DATABASE_ERRORS as exc:
        raise LedgerError(
            f"the campaign's cancel request could not be read ({database_detail(exc)})"
        ) from exc
    return cancel_note(value)


async def _update(ledger: AsyncLedger, action: str, campaign: str, *, cancel: bool) -> bool:
    statement = cancel_statement(ledger.table, action, campaign, ledger.now(), cancel=cancel)
    try:
        async with ledger.engine.begin() as conn:
            result = await conn.execute(statement)
    except _DATABASE_ERRORS as exc:
        what = "set" if cancel else "cleared"
        raise LedgerError(
            f"the campaign's cancel request could not be {what} ({database_detail(exc)})"
        ) from exc
    return bool(result.rowcount)
