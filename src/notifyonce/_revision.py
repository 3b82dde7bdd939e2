"""After the send: a campaign's messages edited or deleted, once per chat, resumable.

A revision of a campaign is a campaign of its own in the ledger: the same action, the
cycle ``<campaign>#edit-<n>`` (the n-th edit) or ``<campaign>#delete``, one slot per chat
the campaign reached. So the slot machinery that sends a broadcast once per chat edits and
deletes once per chat too: claims just in time, outcomes written at once, a killed run
resumed by running it again (the chats done are duplicates), and the sender's rate limit
(an edit or a delete takes its turn like a send). A revision is at-least-once unless told
otherwise, whatever the Notifier's own mode: a retried edit or delete is harmless (see
Telegram's answers below), so a killed run leaves no chat ``unknown``.

What each chat is edited or deleted by is the ``message_id`` the ledger keeps in the
campaign's ``sent`` slots (an album's ids joined by commas: every item is deleted). The
slots are read a page at a time by the unique key (action, cycle, subject), so a
revision of 200,000 chats holds one page in memory, never the campaign.

Which revision an edit is: every revision has a row of its own under the action
``notifyonce.revision`` (subject: the action; cycle: the revision's cycle; where a message
id goes, the fingerprint of what the edit puts in). An edit whose fingerprint is the
latest edit's is that revision again (a resumed or repeated run edits nothing twice);
another edit is the next revision. A campaign has one delete.

Telegram's answers: "message is not modified" is an edit done (it already said that),
and "message to delete not found" a delete done (the message is gone); so an edit or
delete that went through before a crash and is tried again (at-least-once) changes
nothing twice. "message to edit not found" (the user deleted it) and
"message can't be deleted for everyone" are refusals for good, recorded for the chat
(``failed``) and not retried.
Telegram lets a bot delete its messages for 48 hours: the messages older than that by
the ledger's clock are counted before anything is tried, and left out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from notifyonce._broadcast import RecipientSource
from notifyonce._campaign import RESERVED_ACTIONS, REVISION_ACTION, own_row
from notifyonce._drivers.errors import DATABASE_ERRORS, database_detail
from notifyonce._errors import (
    LedgerError,
    PermanentSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._keys import Subject, make_key, normalize_action, normalize_cycle
from notifyonce._ledger.table import SlotStatus
from notifyonce._message import Message, Receipt
from notifyonce._outcome import DeliveryMode

if TYPE_CHECKING:
    from notifyonce._broadcast import BroadcastProgress, BroadcastReport, ProgressFollower
    from notifyonce._ledger.ledger import AsyncLedger
    from notifyonce._notifier import Notifier

__all__ = [
    "DELETE_LIMIT",
    "FOLLOW_UP_STATUSES",
    "REVISION_ACTION",
    "CampaignRevision",
    "Revision",
    "SentMessages",
    "recipients_from_campaign",
    "revision_cycle",
]

#: How long Telegram lets a bot delete a message it sent.
DELETE_LIMIT = dt.timedelta(hours=48)
# Messages this close to the limit are counted past it: the run takes a while, and the
# ledger's sent_at is a little after Telegram's date.
_DELETE_MARGIN = dt.timedelta(minutes=10)
_EDIT_PREFIX = "edit-sha256:"
_DELETE = "delete"
# Where a revision's notification carries the message ids it acts on.
_IDS = "notifyonce_message_ids"
# Slots read per statement when the campaign's sent messages are streamed.
_PAGE = 500
# Revisions looked for in a row when another run is creating the next one.
_TRIES = 5


def revision_cycle(campaign: str, revision: int | None) -> str:
    """The cycle of a campaign's n-th edit (``revision``), or of its delete (None)."""
    return f"{campaign}#{_DELETE if revision is None else f'edit-{revision}'}"


@dataclass(frozen=True, slots=True)
class SentMessages:
    """What a campaign left in the ledger that a revision can act on.

    Attributes:
        sent: Chats the campaign's message reached whose message id the ledger keeps.
        past_delete_limit: Of those, the ones sent longer ago than Telegram lets a bot
            delete (48 hours, by the ledger's clock, less a margin of ten minutes).
        running: Chats of the campaign claimed right now, their lease still running: a
            run is still sending (a crashed run's claims, their lease out, are not).
        unsent: Chats the campaign tried without a known delivery (failed, unknown).
    """

    sent: int
    past_delete_limit: int
    running: int
    unsent: int

    @property
    def deletable(self) -> int:
        """The messages a delete would try."""
        return self.sent - self.past_delete_limit


@dataclass(frozen=True, slots=True)
class Revision:
    """One revision of a campaign, as the ledger keeps it.

    Attributes:
        cycle: The revision's cycle: ``<campaign>#edit-<n>`` or ``<campaign>#delete``.
        kind: ``"edit"`` or ``"delete"``.
        number: The edit's n (the campaign's first message is revision 1's content, so
            the first edit is 2); None for the delete.
    """

    cycle: str
    kind: str
    number: int | None


class _Editor(Protocol):
    async def edit_message(
        self,
        recipient: str | int,
        message_id: int,
        *,
        text: str | None = None,
        parse_mode: str | None = None,
        reply_markup: Any = None,
        caption: bool = False,
        budget: float | None = None,
    ) -> bool: ...

    async def delete_messages(
        self, recipient: str | int, message_ids: Sequence[int], *, budget: float | None = None
    ) -> None: ...

    def check_edit(
        self,
        text: str | None,
        *,
        parse_mode: str | None = None,
        reply_markup: Any = None,
        caption: bool = False,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class _Edit:
    text: str | None
    parse_mode: str | None
    reply_markup: Any
    caption: bool

    def fingerprint(self) -> str:
        parts = [
            "" if self.text is None else self.text,
            self.parse_mode or "",
            json.dumps(self.reply_markup, sort_keys=True, default=str),
            "caption" if self.caption else "text",
        ]
        digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass"))
        return _EDIT_PREFIX + digest.hexdigest()


class _RevisionSender:
    """The Notifier's sender for a revision: a notification's "send" edits or deletes the
    messages its options name, through the campaign's sender (its rate-limit turns too)."""

    def __init__(self, sender: _Editor, edit: _Edit | None) -> None:
        self.sender = sender
        self.edit = edit

    async def send(self, recipient: str, message: Message) -> Receipt:
        stored = str(message.options[_IDS])
        ids = [int(part) for part in stored.split(",")]
        if self.edit is None:
            try:
                await self.sender.delete_messages(recipient, ids)
            except PermanentSendError as exc:
                # Gone already: the user deleted it, or this very delete went through
                # before a crash and is tried again (at-least-once). Either way it is done.
                if "message to delete not found" not in exc.description.lower():
                    raise
        else:
            edit = self.edit
            # An album's caption is on its first message; "not modified" is done too.
            await self.sender.edit_message(
                recipient,
                ids[0],
                text=edit.text,
                parse_mode=edit.parse_mode,
                reply_markup=edit.reply_markup,
                caption=edit.caption,
            )
        return Receipt(recipient, stored)

    @contextlib.asynccontextmanager
    async def turn(self, recipient: str | int) -> AsyncIterator[None]:
        """The wrapped sender's rate-limit turn, when it has turns."""
        turn = getattr(self.sender, "turn", None)
        if turn is None:
            yield
            return
        async with turn(recipient):
            yield


def _editor(notifier: Notifier) -> _Editor:
    sender = notifier.sender
    needed = ("edit_message", "delete_messages", "check_edit")
    if not all(callable(getattr(sender, name, None)) for name in needed):
        raise ValidationTypeError(
            "sender",
            f"{type(sender).__name__} cannot edit or delete messages (TelegramSender can)",
        )
    return sender  # type: ignore[return-value]


class CampaignRevision:
    """Edit or delete what a campaign sent: each chat's message once, resumable.

    A revision is a campaign of its own in the ledger (see the module's docs): run it
    again after a crash or a cancel and it goes on with the chats not handled yet; run a
    finished one again and it changes nothing.

    Args:
        notifier: The campaign's Notifier: its ledger, its sender (which must edit and
            delete: [`TelegramSender`][notifyonce.telegram.TelegramSender]), its
            concurrency and max_attempts. Its quiet hours and spacing do not apply: an
            edit is no new message; nor does its mode (see ``mode``).
        action: The campaign's action.
        campaign: The campaign id.
        mode: At-least-once by default: an edit or delete tried again after a crash is
            harmless (Telegram answers "message is not modified" or "message to delete
            not found", both done), so a killed run leaves no chat ``unknown``.
            ``DeliveryMode.AT_MOST_ONCE`` records a chat whose request may have gone
            through ``unknown`` and never tries it again.

    Raises:
        ValidationError: A reserved action, a campaign id naming a revision.
        ValidationTypeError: A campaign id that is not a str, a mode that is not a
            DeliveryMode.

    Examples:
        >>> revision = CampaignRevision(notifier, "news", "2026-12")  # doctest: +SKIP
        >>> report = await revision.edit("The sale ends on Sunday")  # doctest: +SKIP
        >>> strict = CampaignRevision(
        ...     notifier, "news", "2026-12", mode=DeliveryMode.AT_MOST_ONCE
        ... )  # doctest: +SKIP
    """

    def __init__(
        self,
        notifier: Notifier,
        action: str,
        campaign: str,
        *,
        mode: DeliveryMode = DeliveryMode.AT_LEAST_ONCE,
    ) -> None:
        if not isinstance(mode, DeliveryMode):
            raise ValidationTypeError("mode", f"must be a DeliveryMode, got {type(mode).__name__}")
        self.mode = mode
        self.action = normalize_action(action)
        if self.action in RESERVED_ACTIONS:
            raise ValidationError(
                "action", f"{self.action!r} is where campaigns keep their own records"
            )
        if not isinstance(campaign, str):
            raise ValidationTypeError("campaign", f"must be a str, got {type(campaign).__name__}")
        self.campaign, _ = normalize_cycle(campaign)
        if "#" in self.campaign:
            raise ValidationError("campaign", "names a revision (it has '#'): name the campaign")
        self.notifier = notifier
        self._ids: str = ""

    def __repr__(self) -> str:
        return (
            f"CampaignRevision({self.action!r}, campaign={self.campaign!r}, "
            f"mode={self.mode.value!r})"
        )

    # -- what the ledger holds ------------------------------------------------------------

    async def messages(self) -> SentMessages:
        """Count what the campaign sent, what is past Telegram's delete limit, and what
        is still claimed (four counts through the unique key and the status index).

        Raises:
            LedgerError: The database failed.
        """
        ledger = self.notifier.ledger
        t = ledger.table
        cutoff = self._cutoff()
        mine = sa.and_(t.c.action == self.action, t.c.cycle == self.campaign)
        sent = sa.and_(mine, t.c.status == SlotStatus.SENT.value, t.c.message_id.is_not(None))
        old = sa.and_(sent, t.c.sent_at < cutoff)
        unsent = sa.and_(
            mine,
            t.c.status.in_([SlotStatus.FAILED.value, SlotStatus.UNKNOWN.value]),
        )
        # A claim whose lease ran out is a crashed run's, not a running one's.
        live = t.c.lease_until > ledger.now()
        running = sa.and_(mine, t.c.status == SlotStatus.CLAIMED.value, live)
        counts = []
        try:
            async with ledger.engine.connect() as conn:
                for where in (sent, old, running, unsent):
                    query = sa.select(sa.func.count()).select_from(t).where(where)
                    counts.append(int((await conn.execute(query)).scalar_one()))
        except (SQLAlchemyError, *DATABASE_ERRORS) as exc:
            raise LedgerError(
                f"the campaign's messages could not be counted ({database_detail(exc)})"
            ) from exc
        return SentMessages(*counts)

    async def revisions(self) -> list[Revision]:
        """The campaign's revisions so far, edits in order, then its delete.

        Raises:
            LedgerError: The database failed.
        """
        return [revision for revision, _ in await self._revisions()]

    # -- running ----------------------------------------------------------------------------

    async def edit(
        self,
        text: str | None = None,
        *,
        parse_mode: str | None = None,
        reply_markup: Any = None,
        caption: bool = False,
        on_progress: Callable[[BroadcastProgress], None] | None = None,
        progress_chat: ProgressFollower | None = None,
    ) -> BroadcastReport:
        """Edit every message the campaign sent, once: the text (a media message's
        caption with ``caption``; a copy is either, and either is tried) and the inline
        keyboard (``reply_markup``; an edit of the text without one removes the message's
        keyboard, as Telegram does). Without ``text``, only the keyboard.

        The same edit run again is the same revision: the chats done are duplicates, so a
        killed edit resumes and a finished one changes nothing. Another edit is the next
        revision, and edits every message again.

        Raises:
            ValidationError: Before anything is claimed or sent: a text over Telegram's
                limit, a bad keyboard, a campaign that sent nothing, one still running
                (chats claimed), one deleted.
            LedgerError: The database failed.
        """
        editor = _editor(self.notifier)
        if not isinstance(caption, bool):
            raise ValidationTypeError("caption", "must be a bool")
        editor.check_edit(text, parse_mode=parse_mode, reply_markup=reply_markup, caption=caption)
        edit = _Edit(text, parse_mode, reply_markup, caption)
        standing = await self.messages()
        self._refuse(standing)
        if any(r.kind == "delete" for r in await self.revisions()):
            raise ValidationError(
                "campaign",
                f"campaign {self._name()} was deleted: there is no message left to edit",
            )
        cycle = await self._edit_cycle(edit.fingerprint())
        return await self._run(
            cycle, _RevisionSender(editor, edit), standing.sent, None, on_progress, progress_chat
        )

    async def delete(
        self,
        *,
        what_is_possible: bool = False,
        on_progress: Callable[[BroadcastProgress], None] | None = None,
        progress_chat: ProgressFollower | None = None,
    ) -> BroadcastReport:
        """Delete every message the campaign sent (an album's every item), once.

        Telegram lets a bot delete a message for 48 hours. When some of the campaign's
        are older (by the ledger's clock), nothing is tried unless ``what_is_possible``:
        then the younger ones are deleted and the older ones left alone.

        Raises:
            ValidationError: Before anything is claimed or sent: a campaign that sent
                nothing, one still running, messages past the limit (without
                ``what_is_possible``; the error says how many).
            LedgerError: The database failed.
        """
        editor = _editor(self.notifier)
        if not isinstance(what_is_possible, bool):
            raise ValidationTypeError("what_is_possible", "must be a bool")
        standing = await self.messages()
        self._refuse(standing)
        if standing.past_delete_limit and not what_is_possible:
            raise ValidationError(
                "campaign",
                f"{standing.past_delete_limit:,} of the {standing.sent:,} messages of campaign "
                f"{self._name()} were sent more than 48 hours ago, and Telegram lets a bot "
                f"delete its messages for 48 hours only; nothing was deleted. Delete the "
                f"other {standing.deletable:,} with what_is_possible=True "
                "(--what-is-possible)",
            )
        cycle = await self._delete_cycle()
        sender = _RevisionSender(editor, None)
        return await self._run(
            cycle, sender, standing.deletable, self._cutoff(), on_progress, progress_chat
        )

    # -- plumbing ---------------------------------------------------------------------------

    def _name(self) -> str:
        return f"{self.action}/{self.campaign}"

    def _cutoff(self) -> dt.datetime:
        return self.notifier.ledger.now() - DELETE_LIMIT + _DELETE_MARGIN

    def _refuse(self, standing: SentMessages) -> None:
        if standing.sent == 0:
            raise ValidationError(
                "campaign",
                f"campaign {self._name()} has no sent message with an id in the ledger "
                "(no such campaign, or it sent nothing): nothing to edit or delete",
            )
        if standing.running:
            raise ValidationError(
                "campaign",
                f"campaign {self._name()} is still running ({standing.running:,} chats are "
                "claimed right now): let it finish (or stop it), then revise it",
            )

    async def _run(
        self,
        cycle: str,
        sender: _RevisionSender,
        total: int,
        cutoff: dt.datetime | None,
        on_progress: Callable[[BroadcastProgress], None] | None,
        progress_chat: ProgressFollower | None,
    ) -> BroadcastReport:
        from notifyonce._broadcast import Broadcast
        from notifyonce._notifier import Notifier

        n = self.notifier
        child = Notifier(
            n.ledger,
            sender,
            mode=self.mode,
            max_attempts=n.max_attempts,
            concurrency=n.concurrency,
            batch_size=n.batch_size,
            sweep_every=n.sweep_every,
            dry_run=n.dry_run,
            keep_results=n.keep_results,
            on_result=n.on_result,
            observer=n.observer,
            audience=n.audience,
            skip_gone=False,
            outage_patience=n.outage_patience,
        )
        broadcast = Broadcast(
            child,
            self.action,
            cycle,
            self._message,
            self._targets(cutoff),
            total=total,
            on_progress=on_progress,
            progress_chat=progress_chat,
            transactional=True,
            skip_gone=False,
        )
        return await broadcast.run()

    def _message(self, chat: Subject) -> Message:
        """The notification of the chat just streamed: its message ids, for the sender."""
        return Message("revision", options={_IDS: self._ids})

    async def _targets(self, cutoff: dt.datetime | None) -> AsyncIterator[Subject]:
        """The chats the campaign reached, with their message ids (kept for `_message`),
        a page at a time by the unique key; with ``cutoff``, only those sent since."""
        ledger = self.notifier.ledger
        t = ledger.table
        last: str | None = None
        while True:
            query = (
                sa.select(t.c.subject, t.c.message_id)
                .where(
                    t.c.action == self.action,
                    t.c.cycle == self.campaign,
                    t.c.status == SlotStatus.SENT.value,
                    t.c.message_id.is_not(None),
                )
                .order_by(t.c.subject)
                .limit(_PAGE)
            )
            if last is not None:
                query = query.where(t.c.subject > last)
            if cutoff is not None:
                query = query.where(t.c.sent_at >= cutoff)
            try:
                async with ledger.engine.connect() as conn:
                    rows = (await conn.execute(query)).all()
            except (SQLAlchemyError, *DATABASE_ERRORS) as exc:
                raise LedgerError(
                    f"the campaign's messages could not be read ({database_detail(exc)})"
                ) from exc
            for subject, stored in rows:
                if not _ids_ok(stored):
                    continue  # not a Telegram message id (another sender's receipt)
                self._ids = stored
                yield subject
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    async def _revisions(self) -> list[tuple[Revision, str | None]]:
        ledger = self.notifier.ledger
        t = ledger.table
        query = sa.select(t.c.cycle, t.c.message_id).where(
            t.c.action == REVISION_ACTION,
            t.c.subject == self.action,
            t.c.cycle.startswith(self.campaign + "#", autoescape=True),
        )
        try:
            async with ledger.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except (SQLAlchemyError, *DATABASE_ERRORS) as exc:
            raise LedgerError(
                f"the campaign's revisions could not be read ({database_detail(exc)})"
            ) from exc
        found = []
        for cycle, value in rows:
            tail = str(cycle)[len(self.campaign) + 1 :]
            if tail == _DELETE:
                found.append((Revision(cycle, "delete", None), value))
            elif tail.startswith("edit-") and tail[5:].isdigit():
                found.append((Revision(cycle, "edit", int(tail[5:])), value))
        found.sort(key=lambda item: (item[0].number is None, item[0].number or 0))
        return found

    async def _edit_cycle(self, fingerprint: str) -> str:
        """The cycle of this edit: the latest edit's when it is the same edit, else a new
        revision's, recorded (two first runs at once agree through the unique key)."""
        for _ in range(_TRIES):
            edits = [(r, v) for r, v in await self._revisions() if r.kind == "edit"]
            if edits and edits[-1][1] == fingerprint:
                return edits[-1][0].cycle
            number = edits[-1][0].number + 1 if edits and edits[-1][0].number else 2
            cycle = revision_cycle(self.campaign, number)
            if await self._record(cycle, fingerprint):
                return cycle
        raise LedgerError("the edit's revision could not be recorded (too many at once)")

    async def _delete_cycle(self) -> str:
        cycle = revision_cycle(self.campaign, None)
        await self._record(cycle, _DELETE)
        return cycle

    async def _record(self, cycle: str, value: str) -> bool:
        """Insert the revision's own row; False when another run's is there already."""
        if self.notifier.dry_run:
            return True
        ledger = self.notifier.ledger
        normalize_cycle(cycle)  # a campaign id near the length limit leaves no room
        row = own_row(make_key(REVISION_ACTION, self.action, cycle), ledger.now(), value)
        try:
            async with ledger.engine.begin() as conn:
                await conn.execute(sa.insert(ledger.table).values(row))
        except IntegrityError:
            return value == _DELETE
        except (SQLAlchemyError, *DATABASE_ERRORS) as exc:
            raise LedgerError(
                f"the revision could not be recorded ({database_detail(exc)})"
            ) from exc
        return True


#: The outcomes a follow-up campaign can be sent to.
FOLLOW_UP_STATUSES = frozenset({"sent", "failed", "unknown"})


class _CampaignRecipients(RecipientSource):
    def __init__(self, ledger: AsyncLedger, action: str, campaign: str, only: str) -> None:
        self.ledger = ledger
        self.action = action
        self.campaign = campaign
        self.only = only

    def _where(self) -> sa.ColumnElement[bool]:
        t = self.ledger.table
        return sa.and_(
            t.c.action == self.action, t.c.cycle == self.campaign, t.c.status == self.only
        )

    async def __aiter__(self) -> AsyncIterator[Subject]:
        t = self.ledger.table
        last: str | None = None
        while True:
            query = sa.select(t.c.subject).where(self._where()).order_by(t.c.subject).limit(_PAGE)
            if last is not None:
                query = query.where(t.c.subject > last)
            async with self.ledger.engine.connect() as conn:
                page = list((await conn.execute(query)).scalars())
            for subject in page:
                yield subject
            if len(page) < _PAGE:
                return
            last = page[-1]

    async def count(self) -> int:
        query = sa.select(sa.func.count()).select_from(self.ledger.table).where(self._where())
        async with self.ledger.engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())


def recipients_from_campaign(
    ledger: AsyncLedger, action: str, campaign: str, *, only: str = "sent"
) -> RecipientSource:
    """The chats of an earlier campaign whose outcome is ``only`` (``"sent"``,
    ``"failed"`` or ``"unknown"``), streamed from the ledger a page at a time: the
    recipients of a follow-up (a reminder to those who got the first message).

    Raises:
        ValidationError: ``only`` is not one of those outcomes, or a bad action or id.
    """
    if only not in FOLLOW_UP_STATUSES:
        raise ValidationError("only", f"must be one of {sorted(FOLLOW_UP_STATUSES)}, got {only!r}")
    if not isinstance(campaign, str):
        raise ValidationTypeError("campaign", f"must be a str, got {type(campaign).__name__}")
    return _CampaignRecipients(ledger, normalize_action(action), normalize_cycle(campaign)[0], only)


def _ids_ok(stored: object) -> bool:
    """Whether a sent slot's ``message_id`` is Telegram's: an id, or an album's ids joined
    by commas (another sender's receipt, a webhook's, is left alone)."""
    parts = str(stored).split(",")
    return 1 <= len(parts) <= 100 and all(p.isdigit() and p != "0" for p in parts)
