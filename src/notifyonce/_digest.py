"""Digests: many events for a subject, one message per window, each window a slot.

How an event travels:

1. ``add`` stores it once per ``(action, subject, event_key)`` with the window its time
   falls in (an interval aligned to the epoch, or a recipient-local day ending at a local
   hour) and when that window becomes due (its end; earlier with ``max_wait``,
   ``flush_at`` or a critical event).
2. ``flush`` reads the windows that are due, and sends each subject's digest through the
   Notifier under the digest's action with the window's start as the cycle: the slot is
   claimed before anything else. Only the claim's holder then binds the window's waiting
   events to its slot (one UPDATE), reads what it bound, renders and sends. Binding before
   sending is what makes an event belong to one digest: an event added to the window
   after that UPDATE stays unbound.
3. A window whose slot is already finished (sent, failed, unknown) and still has unbound
   events got them late (added while or after its digest was made): a flush moves them to
   the next window that is still to come, never lost, never in two digests.

A flush killed mid-run resumes by running again: a slot that was sent is a duplicate and
its events stay with it; one never claimed is claimed now; one whose claim outlived its
worker is settled by the Notifier's sweep as its delivery mode says (at most once: its
bound events are in no sent digest; at least once: it is claimed again and sends them).

Who imports this: the package's public names. It imports the notifier, the ledger's
tables and the drivers.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import zoneinfo
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeAlias, TypeVar

import sqlalchemy as sa

from notifyonce._caps import insert_new, inserted
from notifyonce._drivers import Driver, driver_for
from notifyonce._drivers.errors import in_transaction
from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import Subject, check_text, make_key, normalize_action, normalize_subject
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._ledger.side_tables import (
    MAX_EVENT_KEY_LENGTH,
    build_digest_table,
    default_digest_table,
)
from notifyonce._ledger.table import SlotStatus, UtcDateTime
from notifyonce._message import Message
from notifyonce._notifier import Notifier
from notifyonce._outcome import Outcome
from notifyonce._results import Notification, Result

__all__ = ["Digest", "DigestEvent", "DigestReport", "Render"]

T = TypeVar("T")
UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_RETRIES = 3
_PURGE_CHUNK = 500
# What a digest's notification carries until its claim is won and its events rendered.
_PLACEHOLDER = Message("digest")
_FINISHED = frozenset({SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN})
# The outcomes after which a digest's slot is finished.
_MADE = frozenset({Outcome.SENT, Outcome.FAILED, Outcome.UNKNOWN})


@dataclass(frozen=True, slots=True)
class DigestEvent:
    """One event of a digest, as ``render`` gets it.

    Attributes:
        key: The event's key (stored once per subject and digest).
        data: What ``add`` was given (through JSON: dicts, lists, str, numbers, None).
        at: When it happened (aware, UTC).
    """

    key: str
    data: Any
    at: dt.datetime


Render: TypeAlias = Callable[[str, list[DigestEvent]], Message | Awaitable[Message]]
"""``render(subject, events) -> Message`` (or an awaitable of one): one digest's message."""


@dataclass
class DigestReport:
    """What one [`Digest.flush`][notifyonce.Digest.flush] did.

    Attributes:
        now: The time it flushed for.
        windows: The (subject, window) pairs that were due.
        counts: Digests per outcome, as the Notifier reported them (``SENT``: delivered;
            ``DUPLICATE``: made by another flush, or by this one before; ``SKIPPED``: the
            recipient is gone, opted out, capped...).
        skips: Skipped digests per reason.
        events_sent: Events in the digests delivered by this flush.
        dropped: Events dropped with the digest of a recipient gone or opted out.
        moved: Events that came late for a window whose digest was made, moved to the
            next window.
        purged: Events deleted by the retention purge.
    """

    now: dt.datetime
    windows: int = 0
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    skips: dict[str, int] = field(default_factory=dict)
    events_sent: int = 0
    dropped: int = 0
    moved: int = 0
    purged: int = 0

    @property
    def sent(self) -> int:
        """Digests delivered by this flush."""
        return self.counts[Outcome.SENT]

    def __repr__(self) -> str:
        shown = ", ".join(f"{o.value}={n}" for o, n in self.counts.items() if n)
        return (
            f"DigestReport({self.now.isoformat()}, windows={self.windows}, "
            f"{shown or 'nothing sent'}, events_sent={self.events_sent}, moved={self.moved}, "
            f"dropped={self.dropped}, purged={self.purged})"
        )


@dataclass(frozen=True, slots=True)
class _Group:
    subject: str
    start: dt.datetime
    end: dt.datetime
    tz: str | None


class Digest:
    """Many events for a subject, one message per window, sent once.

    A window is a slot: ``(action, subject, window start)``. Each closed window with events
    gives its subject one message, rendered from the window's events and sent through a
    [`Notifier`][notifyonce.Notifier], claimed before the send like any reminder, so two
    flushers at once, or a flush killed and run again, send each digest once and each
    event in one digest. Windows without events send nothing.

    Args:
        ledger: The ledger whose database keeps the events (in a table beside its own,
            made by ``create_schema()`` and ``notifyonce migrate``).
        action: The digest's name; its slots are claimed under it.
        every: Windows of this length, aligned to the epoch (an hour's run from :00 to
            :00 UTC). Whole seconds, at least one.
        at_local: Instead of ``every``: one window a day per recipient, ending at this
            local time (a naive ``datetime.time``) in the recipient's zone: the ``tz``
            given to ``add``, else ``default_tz``.
        default_tz: The zone of recipients added without one (a zone name or a
            ``ZoneInfo``); default UTC.
        max_wait: A window is due at most this long after its first event, even if it
            has not ended (the digest goes out early; later events of that window go to
            the next one).
        flush_at: A window is due as soon as it holds this many events.
        keep: How long after a window ended its events are kept (for looking back at
            what each digest held); ``flush`` deletes older ones. Keep it longer than
            your flushes may be down, or waiting events are deleted unsent.
        category: What recipients opt out of and what caps count (default: ``action``).

    Raises:
        ValidationError: Neither or both of ``every`` and ``at_local``, a period of zero
            or less, a bad zone, ``max_wait``, ``flush_at`` or ``keep``; the field named.

    Examples:
        ```python
        digest = Digest(ledger, "replies", every=timedelta(hours=1))
        await digest.add(chat_id, f"reply:{reply.id}", {"from": reply.author})

        def render(subject: str, events: list[DigestEvent]) -> Message:
            return Message(f"{len(events)} new replies")

        report = await digest.flush(notifier, render)  # every few minutes
        ```
    """

    def __init__(
        self,
        ledger: AsyncLedger,
        action: str,
        *,
        every: dt.timedelta | None = None,
        at_local: dt.time | None = None,
        default_tz: str | dt.tzinfo | None = None,
        max_wait: dt.timedelta | None = None,
        flush_at: int | None = None,
        keep: dt.timedelta = dt.timedelta(days=7),
        category: str | None = None,
        batch_size: int = 500,
    ) -> None:
        if not isinstance(ledger, AsyncLedger):
            raise ValidationTypeError(
                "ledger", f"must be an AsyncLedger, got {type(ledger).__name__}"
            )
        self.ledger = ledger
        self.action = normalize_action(action)
        if (every is None) == (at_local is None):
            raise ValidationError(
                "every",
                "give either every (a fixed interval) or at_local (a local time), "
                + ("not both" if every is not None else "got neither"),
            )
        if every is not None:
            if not isinstance(every, dt.timedelta):
                raise ValidationTypeError(
                    "every", f"must be a timedelta, got {type(every).__name__}"
                )
            if every <= dt.timedelta(0):
                raise ValidationError("every", f"must be positive, got {every}")
            if every.microseconds or every < dt.timedelta(seconds=1):
                raise ValidationError("every", "must be whole seconds, at least one")
        if at_local is not None:
            if not isinstance(at_local, dt.time):
                raise ValidationTypeError(
                    "at_local", f"must be a datetime.time, got {type(at_local).__name__}"
                )
            if at_local.tzinfo is not None:
                raise ValidationError(
                    "at_local", "must be a local time without tzinfo (the recipient's zone applies)"
                )
            at_local = at_local.replace(microsecond=0)
        self.every = every
        self.at_local = at_local
        self.default_tz = _zone_name("default_tz", "UTC" if default_tz is None else default_tz)
        for name, value in (("max_wait", max_wait), ("keep", keep)):
            if value is not None and (
                not isinstance(value, dt.timedelta) or value <= dt.timedelta(0)
            ):
                raise ValidationError(name, "must be a positive timedelta")
        if flush_at is not None and (
            isinstance(flush_at, bool) or not isinstance(flush_at, int) or flush_at < 1
        ):
            raise ValidationError("flush_at", f"must be an int of at least 1, got {flush_at!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError("batch_size", f"must be an int of at least 1, got {batch_size!r}")
        self.max_wait = max_wait
        self.flush_at = flush_at
        self.keep = keep
        self.batch_size = batch_size
        self.category = self.action if category is None else check_text("category", category, 64)
        t = ledger.table
        self.table = build_digest_table(sa.MetaData(), default_digest_table(t.name), t.schema)
        self._driver: Driver = driver_for(ledger.engine)

    def __repr__(self) -> str:
        period = f"every={self.every}" if self.every is not None else f"at_local={self.at_local}"
        return f"Digest({self.action!r}, {period})"

    # -- windows: pure ---------------------------------------------------------------------

    def window(self, at: dt.datetime, tz: str | None = None) -> tuple[dt.datetime, dt.datetime]:
        """The window ``at`` falls in, ``[start, end)`` in UTC, for a recipient of ``tz``.

        Examples:
            >>> import datetime as dt
            >>> digest = Digest.__new__(Digest)
            >>> digest.every, digest.at_local = dt.timedelta(hours=1), None
            >>> at = dt.datetime(2026, 12, 1, 9, 40, tzinfo=dt.timezone.utc)
            >>> [w.strftime("%H:%M") for w in digest.window(at)]
            ['09:00', '10:00']
        """
        if self.every is not None:
            start = _EPOCH + ((at - _EPOCH) // self.every) * self.every
            return start, start + self.every
        assert self.at_local is not None
        zone = zoneinfo.ZoneInfo(tz or self.default_tz)
        day = at.astimezone(zone).date()
        start = self._local(day, zone)
        if start > at:
            day -= dt.timedelta(days=1)
            start = self._local(day, zone)
        return start, self._local(day + dt.timedelta(days=1), zone)

    def _local(self, day: dt.date, zone: dt.tzinfo) -> dt.datetime:
        assert self.at_local is not None
        return dt.datetime.combine(day, self.at_local, tzinfo=zone).astimezone(UTC)

    def _due(self, end: dt.datetime, first: dt.datetime) -> dt.datetime:
        return end if self.max_wait is None else min(end, first + self.max_wait)

    # -- add ----------------------------------------------------------------------------

    async def add(
        self,
        subject: Subject,
        event_key: str | int,
        data: Any = None,
        at: dt.datetime | None = None,
        tz: str | dt.tzinfo | None = None,
        *,
        critical: bool = False,
    ) -> bool:
        """Store one event for ``subject``'s digest, once per ``event_key``.

        The event belongs to the window its time ``at`` falls in (for ``at_local``
        digests, in the zone ``tz``). Adding the same key again stores nothing.

        Args:
            subject: Whom the digest is for (its message goes to ``str(subject)``).
            event_key: What makes the event itself (a reply's id); stored once.
            data: What ``render`` gets back as ``DigestEvent.data``: anything JSON holds.
            at: When it happened (aware); default: the ledger's clock.
            tz: The recipient's zone (a name or a ``ZoneInfo``); default: ``default_tz``.
            critical: Make its window due at once: the next flush sends the subject's
                digest, this event in it, without waiting for the window to end.

        Returns:
            Whether it was stored (False: that key was there already).

        Raises:
            ValidationError: A bad subject, an event key over the key limits (128
                characters, no control characters), a naive ``at``, a bad zone, data
                JSON cannot hold; nothing was stored.
        """
        who = normalize_subject(subject)
        key = _event_key(event_key)
        if not isinstance(critical, bool):
            raise ValidationTypeError("critical", "must be a bool")
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationTypeError(
                "data", f"must be what JSON holds (dicts, lists, str, numbers): {exc}"
            ) from None
        zone = None if tz is None else _zone_name("tz", tz)
        now = self.ledger.now()
        when = now if at is None else _aware("at", at)
        when = when.astimezone(UTC)
        start, end = self.window(when, zone)
        due = when if critical else self._due(end, when)
        row = {
            "action": self.action,
            "subject": who,
            "event_key": key,
            "window_start": start,
            "window_end": end,
            "due_at": due,
            "at": when,
            "tz": zone,
            "data": text,
            "slot_id": None,
            "created_at": now,
        }
        return await self._do(lambda conn: self._insert(conn, row, when))

    def _insert(self, conn: sa.Connection, row: dict[str, Any], when: dt.datetime) -> bool:
        t = self.table
        stored = inserted(self._driver, conn, insert=insert_new(self._driver, t, row))
        if stored and self.flush_at is not None:
            group = self._group_where(row["subject"], row["window_start"])
            waiting = conn.execute(
                sa.select(sa.func.count()).select_from(t).where(group, t.c.slot_id.is_(None))
            ).scalar_one()
            if int(waiting) >= self.flush_at:
                conn.execute(
                    sa.update(t)
                    .where(group, t.c.slot_id.is_(None), t.c.due_at > when)
                    .values(due_at=when)
                )
        return stored

    # -- flush --------------------------------------------------------------------------

    async def flush(
        self, notifier: Notifier, render: Render, now: dt.datetime | None = None
    ) -> DigestReport:
        """Send every due window's digest, one message per subject and window.

        For each window that is due (ended, or early by ``max_wait``, ``flush_at`` or a
        critical event) and holds events, the subject's slot ``(action, subject, window
        start)`` is claimed through ``notifier`` (its delivery mode, audience and caps
        apply: a gone or opted-out recipient is skipped before the claim and that
        window's events are dropped), then its events are bound to the slot, rendered
        with ``render(subject, events)`` and sent. Events that came for a window whose
        digest was already made go to the next window. Run it as often as you like, from
        as many workers as you like.

        Args:
            notifier: Sends the digests (on the same database as this digest's ledger).
            render: ``render(subject, events) -> Message`` (or an async one); events in
                the order they happened. What it raises gives that digest's slot back
                for a later flush, except a ValidationError (or a message the sender's
                ``check`` refuses, or not a Message): that digest is ``FAILED``.
            now: The time to flush for; default: the ledger's clock.

        Returns:
            A [`DigestReport`][notifyonce.DigestReport].

        Raises:
            ValidationError: A bad notifier, render or now; nothing was written.
            LedgerError: The database failed.
        """
        if not isinstance(notifier, Notifier):
            raise ValidationTypeError(
                "notifier", f"must be a Notifier, got {type(notifier).__name__}"
            )
        mine, theirs = self.ledger.table, notifier.ledger.table
        if (mine.name, mine.schema) != (theirs.name, theirs.schema):
            raise ValidationError(
                "notifier",
                f"sends through the ledger table {theirs.name!r}, this digest keeps its "
                f"events beside {mine.name!r}: give both the same ledger table",
            )
        if not callable(render):
            raise ValidationTypeError("render", "must be a callable render(subject, events)")
        at = self.ledger.now() if now is None else _aware("now", now).astimezone(UTC)
        report = DigestReport(at)
        after: tuple[dt.datetime, int] | None = None
        seen: set[tuple[str, dt.datetime]] = set()
        while True:
            page, after = await self._do(partial(self._due_page, now=at, after=after))
            groups = [g for g in page if (g.subject, g.start) not in seen]
            seen.update((g.subject, g.start) for g in groups)
            if groups:
                report.windows += len(groups)
                await self._send(notifier, render, groups, at, report)
            if after is None:
                break
        report.purged = await self.purge(at)
        return report

    async def _send(
        self,
        notifier: Notifier,
        render: Render,
        groups: list[_Group],
        now: dt.datetime,
        report: DigestReport,
    ) -> None:
        by_key = {(g.subject, g.start): g for g in groups}
        results: list[Result] = []
        bound: dict[tuple[str, dt.datetime], int] = {}

        binder = _Binder(self)

        async def prepare(notification: Notification, claim: Claim) -> Message:
            subject = str(notification.subject)
            start = notification.cycle
            assert isinstance(start, dt.datetime)
            events = await binder.bind(subject, start, claim.id)
            if not events:
                raise LookupError("no events bound to the digest")
            message = render(subject, events)
            if inspect.isawaitable(message):
                message = await message
            if not isinstance(message, Message):
                raise ValidationTypeError(
                    "render", f"must return a Message, got {type(message).__name__}"
                )
            if notifier._sender_check is not None:
                notifier._sender_check(notification.target, message)
            bound[(subject, start)] = len(events)
            return message

        notifications = [Notification(g.subject, g.start, _PLACEHOLDER) for g in groups]
        await notifier._send_many(
            self.action,
            notifications,
            category=self.category,
            on_result=results.append,
            prepare=prepare,
        )
        made: list[_Group] = []
        gone: list[_Group] = []
        duplicates: list[_Group] = []
        for result in results:
            subject = str(result.notification.subject)
            start = result.notification.cycle
            assert isinstance(start, dt.datetime)
            group = by_key[(subject, start)]
            outcome = result.outcome
            report.counts[outcome] += 1
            if outcome in _MADE:
                if outcome is Outcome.SENT:
                    report.events_sent += bound.get((subject, start), 0)
                made.append(group)
            elif outcome is Outcome.SKIPPED:
                reason = result.reason or ""
                report.skips[reason] = report.skips.get(reason, 0) + 1
                if reason.startswith(("gone", "opted out")):
                    gone.append(group)
            elif outcome is Outcome.DUPLICATE:
                duplicates.append(group)
            # RETRY: given back; its bound events stay due for the next claim of the slot.
        if not (made or gone or duplicates):
            return
        dropped, moved = await self._do(
            partial(self._settle, made=made, gone=gone, duplicates=duplicates, now=now)
        )
        report.dropped += dropped
        report.moved += moved

    def _settle(
        self,
        conn: sa.Connection,
        made: list[_Group],
        gone: list[_Group],
        duplicates: list[_Group],
        now: dt.datetime,
    ) -> tuple[int, int]:
        """After a page's run, in one transaction: the digests made stop being due, the
        events of recipients skipped as gone or opted out are dropped, and the late events
        of windows whose slot another flush finished move on; (dropped, moved)."""
        for group in made:
            self._made(conn, group)
        dropped = sum(self._drop(conn, group) for group in gone)
        finished = self._finished(conn, duplicates)
        moved = sum(
            self._move_late(conn, group, now)
            for group in duplicates
            if (group.subject, group.start) in finished
        )
        return dropped, moved

    def _finished(self, conn: sa.Connection, groups: list[_Group]) -> set[tuple[str, dt.datetime]]:
        """Which of ``groups`` have a finished slot (sent, failed, unknown): one look-up
        per few hundred, by the slots' unique key."""
        slots = self.ledger.table
        found: set[tuple[str, dt.datetime]] = set()
        done = [status.value for status in _FINISHED]
        for first in range(0, len(groups), 200):
            chunk = groups[first : first + 200]
            cycles = {make_key(self.action, g.subject, g.start).cycle: g.start for g in chunk}
            rows = conn.execute(
                sa.select(slots.c.subject, slots.c.cycle).where(
                    slots.c.action == self.action,
                    slots.c.cycle.in_(list(cycles)),
                    slots.c.subject.in_(sorted({g.subject for g in chunk})),
                    slots.c.status.in_(done),
                )
            )
            found.update((str(subject), cycles[str(cycle)]) for subject, cycle in rows)
        return found

    def _group_where(self, subject: str, start: dt.datetime) -> sa.ColumnElement[bool]:
        t = self.table
        return sa.and_(t.c.action == self.action, t.c.subject == subject, t.c.window_start == start)

    def _due_page(
        self, conn: sa.Connection, now: dt.datetime, after: tuple[dt.datetime, int] | None
    ) -> tuple[list[_Group], tuple[dt.datetime, int] | None]:
        """The windows of the next ``batch_size`` due events, in the order of the due index
        (each page reads its own rows, however many are due: a window still due after a
        page, held by another flusher, is not read again); and where the next page starts,
        None after the last."""
        t = self.table
        query = sa.select(
            t.c.due_at, t.c.id, t.c.subject, t.c.window_start, t.c.window_end, t.c.tz
        ).where(t.c.action == self.action, t.c.due_at <= now)
        if after is not None:
            due, last = after
            query = query.where(sa.or_(t.c.due_at > due, sa.and_(t.c.due_at == due, t.c.id > last)))
        rows = conn.execute(query.order_by(t.c.due_at, t.c.id).limit(self.batch_size)).all()
        groups: dict[tuple[str, dt.datetime], _Group] = {}
        for _, _, subject, start, end, tz in rows:
            key = (str(subject), _utc(start))
            if key not in groups:
                groups[key] = _Group(key[0], key[1], _utc(end), tz)
        following = (rows[-1][0], int(rows[-1][1])) if len(rows) == self.batch_size else None
        return list(groups.values()), following

    def _bind(
        self, conn: sa.Connection, batch: list[tuple[str, dt.datetime, int]]
    ) -> dict[int, list[DigestEvent]]:
        """Bind each window's waiting events to the slot just claimed for it (one UPDATE
        per window, run as one batch); each slot's events, by slot id."""
        t = self.table
        # due_at stays until the slot is finished: a flush killed after this still finds
        # the window, and its next run settles or resends it as the slot says.
        update = (
            sa.update(t)
            .where(
                t.c.action == self.action,
                t.c.subject == sa.bindparam("b_subject"),
                t.c.window_start == sa.bindparam("b_start", type_=UtcDateTime()),
                t.c.slot_id.is_(None),
            )
            .values(slot_id=sa.bindparam("b_slot"))
        )
        conn.execute(
            update,
            [{"b_subject": s, "b_start": w, "b_slot": slot} for s, w, slot in batch],
        )
        events: dict[int, list[DigestEvent]] = {slot: [] for _, _, slot in batch}
        rows = conn.execute(
            sa.select(t.c.slot_id, t.c.event_key, t.c.data, t.c.at)
            .where(
                t.c.action == self.action,
                t.c.subject.in_(sorted({s for s, _, _ in batch})),
                t.c.window_start.in_(sorted({w for _, w, _ in batch})),
                t.c.slot_id.in_(list(events)),
            )
            .order_by(t.c.at, t.c.id)
        )
        for slot, key, data, at in rows:
            events[int(slot)].append(
                DigestEvent(key, json.loads(data) if data is not None else None, _utc(at))
            )
        return events

    def _drop(self, conn: sa.Connection, group: _Group) -> int:
        t = self.table
        where = sa.and_(self._group_where(group.subject, group.start), t.c.slot_id.is_(None))
        return int(conn.execute(sa.delete(t).where(where)).rowcount or 0)

    def _move_late(self, conn: sa.Connection, group: _Group, now: dt.datetime) -> int:
        """The events that came after the window's digest was made go to the window that
        follows both it and ``now``; those bound to it stop being due."""
        t = self.table
        where = self._group_where(group.subject, group.start)
        self._made(conn, group)
        start, end = self.window(max(now, group.end), group.tz)
        moved = conn.execute(
            sa.update(t)
            .where(where, t.c.slot_id.is_(None))
            .values(window_start=start, window_end=end, due_at=self._due(end, now))
        )
        return int(moved.rowcount or 0)

    def _made(self, conn: sa.Connection, group: _Group) -> None:
        """The window's digest is finished: its events stop being due."""
        t = self.table
        where = self._group_where(group.subject, group.start)
        conn.execute(
            sa.update(t)
            .where(where, t.c.slot_id.is_not(None), t.c.due_at.is_not(None))
            .values(due_at=None)
        )

    # -- retention ----------------------------------------------------------------------

    async def purge(self, now: dt.datetime | None = None) -> int:
        """Delete the events of windows that ended more than ``keep`` ago; how many.

        ``flush`` calls it; call it yourself if you flush rarely.
        """
        at = self.ledger.now() if now is None else _aware("now", now)
        before = at - self.keep
        total = 0
        while True:
            deleted = await self._do(lambda conn: self._purge_some(conn, before))
            total += deleted
            if deleted < _PURGE_CHUNK:
                return total

    def _purge_some(self, conn: sa.Connection, before: dt.datetime) -> int:
        t = self.table
        ids = [
            row[0]
            for row in conn.execute(
                sa.select(t.c.id)
                .where(t.c.action == self.action, t.c.window_end < before)
                .limit(_PURGE_CHUNK)
            )
        ]
        if not ids:
            return 0
        return int(conn.execute(sa.delete(t).where(t.c.id.in_(ids))).rowcount or 0)

    # -- looking at it ------------------------------------------------------------------

    async def events(self, subject: Subject) -> list[tuple[DigestEvent, dt.datetime, int | None]]:
        """Every stored event of ``subject``: the event, its window's start, and the id of
        the slot of the digest that took it (None while it waits)."""
        who = normalize_subject(subject)
        t = self.table
        query = (
            sa.select(t.c.event_key, t.c.data, t.c.at, t.c.window_start, t.c.slot_id)
            .where(t.c.action == self.action, t.c.subject == who)
            .order_by(t.c.at, t.c.id)
        )

        def read(conn: sa.Connection) -> list[tuple[DigestEvent, dt.datetime, int | None]]:
            return [
                (DigestEvent(k, json.loads(d) if d is not None else None, _utc(a)), _utc(w), s)
                for k, d, a, w, s in conn.execute(query)
            ]

        return await self._do(read)

    # -- plumbing -----------------------------------------------------------------------

    async def _do(self, body: Callable[[sa.Connection], T]) -> T:
        return await self._driver.run(in_transaction(self._driver, body, _RETRIES))


class _Binder:
    """The binds of the digests whose claims were won together, in one transaction: the
    workers of a run come back from their claim statement together, and one round trip
    each cost a flush more than its sends."""

    _LINGER = 0.002  # seconds a bind waits for others to share its transaction

    def __init__(self, digest: Digest) -> None:
        self.digest = digest
        self.waiting: list[tuple[str, dt.datetime, int, asyncio.Future[list[DigestEvent]]]] = []
        self.task: asyncio.Task[None] | None = None

    async def bind(self, subject: str, start: dt.datetime, slot_id: int) -> list[DigestEvent]:
        future: asyncio.Future[list[DigestEvent]] = asyncio.get_running_loop().create_future()
        self.waiting.append((subject, start, slot_id, future))
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())
        return await future

    async def _run(self) -> None:
        await asyncio.sleep(self._LINGER)
        batch, self.waiting, self.task = self.waiting, [], None
        try:
            found = await self.digest._do(
                partial(self.digest._bind, batch=[(s, w, slot) for s, w, slot, _ in batch])
            )
        except BaseException as exc:
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for _, _, slot, future in batch:
            if not future.done():  # its worker may have been cancelled meanwhile
                future.set_result(found[slot])


def _utc(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _aware(field: str, value: object) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise ValidationTypeError(field, f"must be a datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise ValidationError(field, "must be an aware datetime (naive given)")
    return value


def _event_key(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValidationTypeError(
            "event_key", f"must be a str or an int, got {type(value).__name__}"
        )
    return check_text("event_key", str(value), MAX_EVENT_KEY_LENGTH)


def _zone_name(field: str, value: object) -> str:
    """A zone as stored: its IANA name."""
    if isinstance(value, zoneinfo.ZoneInfo):
        return value.key
    if value is dt.timezone.utc:
        return "UTC"
    if not isinstance(value, str):
        raise ValidationTypeError(
            field, f"must be a zone name or a ZoneInfo, got {type(value).__name__}"
        )
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(field, f"{value[:40]!r} is not a time zone name") from None
    if len(value) > 64:
        raise ValidationError(field, "is longer than 64 characters")
    return value
