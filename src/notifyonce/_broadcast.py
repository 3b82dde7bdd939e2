"""Broadcasts: one message to a stream of chats, resumable, with progress and an ETA.

A campaign is an action plus a cycle (the campaign id): each chat's slot is
``(action, chat, campaign)``, so running the same campaign again after a crash or a
cancellation sends only to the chats that were not handled yet. The sends go through
[`Notifier.send_many`][notifyonce.Notifier.send_many] (claims just in time, outcomes written
at once), so a crash costs only the sends in flight; in at-most-once mode those are recorded
``unknown`` and `BroadcastReport.unknown` lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import os
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import sqlalchemy as sa

from notifyonce._campaign import (
    CANCEL_POLL,
    HEARTBEAT,
    RESERVED_ACTIONS,
    LanguageCounts,
    beat,
    campaign_started,
    cancel_requested,
    clear_cancel,
    compare_message,
    pin,
    record_campaign,
    record_languages,
    record_total,
)
from notifyonce._dispatch import INTERRUPTED
from notifyonce._drivers import Driver, driver_class
from notifyonce._errors import LedgerError, ValidationError, ValidationTypeError
from notifyonce._keys import (
    Subject,
    make_key,
    normalize_action,
    normalize_cycle,
    normalize_subject,
)
from notifyonce._ledger.explain import explained
from notifyonce._ledger.table import SlotStatus
from notifyonce._message import Message
from notifyonce._outcome import Outcome
from notifyonce._personal import (
    FORMATS,
    LANGUAGE_COLUMN,
    LocalHour,
    Personal,
    Recipient,
    as_recipient,
    check_local_at,
    file_format,
    read_rows,
    recipient_from_row,
)
from notifyonce._results import DRY_RUN_SEND, Notification, Report, Result

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from notifyonce._dispatch import Run
    from notifyonce._notifier import Notifier

__all__ = [
    "RESUME_CANCELLED",
    "Broadcast",
    "BroadcastProgress",
    "BroadcastReport",
    "RecipientSource",
    "command_line_words",
    "held_here",
    "recipients_from_file",
    "recipients_from_query",
    "skipped_text",
    "stop_items",
    "stop_line",
    "waiting_text",
]

Recipients: TypeAlias = (
    "Iterable[Subject | Recipient] | AsyncIterable[Subject | Recipient] | RecipientSource"
)


class ProgressFollower(Protocol):
    """What a broadcast asks of its ``progress_chat`` (a ``ProgressMessage``): to follow the
    run. Named here, not imported, since the progress message imports this module's
    progress snapshots: no import circle, not even one for the type checker."""

    async def follow(self, broadcast: Broadcast) -> None: ...


# Progress rate over this many recent seconds: a resumed campaign skips its finished chats
# in a burst, which must not make the ETA of the rest look short.
_RATE_WINDOW = 10.0
# Seconds between two reads of the campaign's cancel request (one look-up of the unique
# key each): about how long a cancel from the console takes to stop a run.
_CANCEL_POLL = CANCEL_POLL

# The longest a scheduled run sleeps before it reads the clock again.
_START_STEP = 1.0
# The longest a local-time campaign sleeps before it reads the clock again: its job
# period, within which a recipient's hour is met.
_LOCAL_STEP = 1.0
# Seconds between two writes of a personalised run's counts per language (for the console).
_LANGUAGES_EVERY = 5.0

logger = logging.getLogger("notifyonce.broadcast")


@dataclass(frozen=True, slots=True)
class BroadcastProgress:
    """A snapshot of a running broadcast.

    Attributes:
        sent: Delivered in this run.
        failed: Refused for good (blocked the bot, chat not found).
        unknown: May or may not have been delivered (at-most-once); never resent.
        duplicate: Already handled by an earlier run of the campaign (or a repeat in the
            stream): nothing was sent.
        retry: Not delivered; the next run of the campaign tries them again.
        skipped: Skipped without a claim or a request: gone (blocked the bot...) or
            opted out of the campaign's category (``report.skips`` says which), quiet
            hours, spacing, a dry run.
        skips: The skipped recipients per reason (``"gone: blocked"``, ``"opted out of
            promo"``...), counted as ``Report.skips`` counts them: the last snapshot's are
            the report's.
        lease_lost: Sent while another worker had taken the slot over.
        total: How many recipients the stream has, when known.
        elapsed: Seconds since the run started.
        rate: Recipients handled per second over the last few seconds.
        finished: True in the last snapshot of a run.
        waiting: Recipients of a local-time campaign whose hour has not come yet.
        next_due: When the next of them is due (aware, UTC), or None.
        not_tried: Of ``retry``, the recipients for which no request went out (never
            claimed, or claimed and freed unsent); the rest were tried and given back.
        cause: In the last snapshot of a run stopped before its end, why, in the word of
            `BroadcastReport.cause` (``"cancelled"``, ``"interrupted"``...); else None.
    """

    sent: int = 0
    failed: int = 0
    unknown: int = 0
    duplicate: int = 0
    retry: int = 0
    skipped: int = 0
    lease_lost: int = 0
    total: int | None = None
    elapsed: float = 0.0
    rate: float = 0.0
    finished: bool = False
    skips: Mapping[str, int] = field(default_factory=dict)
    waiting: int = 0
    next_due: dt.datetime | None = None
    not_tried: int = 0
    cause: str | None = None

    @property
    def given_back(self) -> int:
        """Of ``retry``, the recipients tried and given back (the next run tries them)."""
        return self.retry - min(self.not_tried, self.retry)

    @property
    def untried(self) -> int:
        """The recipients no request went to: those of ``retry`` never tried and, once a
        run stopped before its end, the rest of the known total (read no further)."""
        rest = (self.remaining or 0) if self.cause is not None else 0
        return min(self.not_tried, self.retry) + rest

    @property
    def handled(self) -> int:
        """The recipients this run reached a result for: `done` without those never tried
        (what the progress line, the summary and the admin chat count as handled)."""
        return self.done - min(self.not_tried, self.retry)

    @property
    def done(self) -> int:
        """Recipients handled so far, whatever their outcome."""
        return (
            self.sent
            + self.failed
            + self.unknown
            + self.duplicate
            + self.retry
            + self.skipped
            + self.lease_lost
        )

    @property
    def remaining(self) -> int | None:
        """Recipients not handled yet, when the total is known."""
        return None if self.total is None else max(self.total - self.done, 0)

    @property
    def eta(self) -> float | None:
        """Seconds until the end at the current rate, when the total and a rate are known;
        None while recipients wait for their hour (the end is not the rate's to tell:
        `next_due` says when the next of them is due)."""
        remaining = self.remaining
        if remaining is None or self.waiting:
            return None
        if remaining == 0:
            return 0.0
        return remaining / self.rate if self.rate > 0 else None


def skipped_text(p: BroadcastProgress) -> str:
    """The recipients skipped without a request and why, largest reason first, in the words
    the command line's progress and summary and the admin chat's message share:
    ``"skipped 3,000 (gone: blocked 2,990, opted out of promo 10)"``; "" when none.

    A dry run's would-be sends are not counted here: they are what it would send.
    """
    count = p.skipped - p.skips.get(DRY_RUN_SEND, 0)
    if count <= 0:
        return ""
    reasons = sorted((-n, reason) for reason, n in p.skips.items() if reason != DRY_RUN_SEND)
    why = ", ".join(f"{reason} {-n:,}" for n, reason in reasons)
    return f"skipped {count:,}" + (f" ({why})" if why else "")


#: How a campaign cancelled from the console is resumed, in Python's words and the
#: command line's: the command line says its flag alone (`command_line_words`).
RESUME_CANCELLED = "resume_cancelled=True (--resume-cancelled)"


def command_line_words(problem: str) -> str:
    """``problem`` as the command line says it: its flag, not the Python argument."""
    return problem.replace(RESUME_CANCELLED, "--resume-cancelled")


# What the chats of a stopped run are told to do next, by cause (see `stop_line`).
_NEXT_STEP = {
    "cancelled": "resume with --resume-cancelled",
    "interrupted": "run the same command again to resume",
    "message refused": "no chat's slot was used up: fix the message (or the post to copy), "
    "then run the same command again (with --allow-changed-message if it changed)",
}
_REFUSED = "the message was refused: "


def stop_line(
    name: str,
    p: BroadcastProgress,
    cause: str,
    stopped: str | None,
    not_tried: int,
    resume_at: dt.datetime | None = None,
) -> str:
    """The one line that ends a run stopped before its end, in the words of its cause,
    shared by the command line's summary and the admin chat's message:
    ``"broadcast news/c1 cancelled from the console at ... UTC: 184 sent, 1,816 not
    tried; resume with --resume-cancelled"``.

    ``cause`` is a `BroadcastReport.cause`, or ``"database"`` (the ledger failed: the
    outcomes it could not record are the run's ``unknown``, settled by the sweep).
    """
    if cause == "cancelled" and stopped:
        head = stopped  # "cancelled from the console at <time> UTC"
    elif cause == "interrupted":
        head = "interrupted"
    elif cause == "flood wait":
        head = f"stopped: Telegram asked the whole bot to wait ({stopped})"
    elif cause == "message refused":
        detail = (stopped or "").removeprefix(_REFUSED)
        head = f"stopped: Telegram refused the message ({detail})"
    elif cause == "database":
        head = f"stopped: the database failed ({stopped})"
    else:
        head = f"stopped ({stopped})"
    if cause == "flood wait":
        step = (
            f"run the same command again after {resume_at:%Y-%m-%d %H:%M:%S} UTC"
            if resume_at is not None
            else "run the same command again once the flood wait is over"
        )
    elif cause == "database":
        step = "run the same command again once the database is back"
    else:
        step = _NEXT_STEP.get(cause, "run the same command again to resume")
    return f"broadcast {name} {head}: {stop_counts(p, not_tried, cause)}; {step}"


def stop_counts(p: BroadcastProgress, not_tried: int, cause: str | None = None) -> str:
    """This run's counts for a stop's line: the sent, then only the counts that are not
    0, the chats given back after a try apart from those never tried."""
    return ", ".join(stop_items(p, not_tried, cause))


def stop_items(p: BroadcastProgress, not_tried: int, cause: str | None = None) -> list[str]:
    """The items of `stop_counts`: ``["184 sent", "1,816 not tried"]``."""
    unknown = "not recorded (the sweep settles them)" if cause == "database" else "unknown"
    # The same tallies as the progress line's (`BroadcastProgress.given_back`, `untried`):
    # a stream stopped is read no further, the rest of its known total was not tried.
    p = replace(p, not_tried=not_tried, cause=cause or "stopped")
    items = [
        (p.failed, "failed"),
        (p.unknown, unknown),
        (p.duplicate, "already done"),
        (p.given_back, "tried and given back"),
        (p.untried, "not tried"),
    ]
    parts = [f"{p.sent:,} sent"] + [f"{n:,} {what}" for n, what in items if n]
    skipped = skipped_text(p)
    return parts + ([skipped] if skipped else [])


def unknown_text(this_run: int, campaign: int) -> str:
    """The campaign's unknown chats, told apart from this run's count (which the progress
    shows): after a resume the campaign may list chats an earlier run left unknown."""
    chats = f"{campaign:,} {'chat' if campaign == 1 else 'chats'}"
    if this_run >= campaign:
        return f"{chats} of the campaign with an unknown outcome, all from this run"
    earlier = campaign - this_run
    return (
        f"{chats} of the campaign with an unknown outcome ({this_run:,} from this run, "
        f"{earlier:,} from earlier runs)"
    )


def waiting_text(p: BroadcastProgress) -> str:
    """The recipients of a local-time campaign whose hour has not come, and when the next
    one's does, in the words the progress line and the admin chat's message share:
    ``"waiting for their hour 1,200 (next 2026-12-02 07:00 UTC)"``; "" when none."""
    if not p.waiting or p.next_due is None:
        return ""
    return f"waiting for their hour {p.waiting:,} (next {p.next_due:%Y-%m-%d %H:%M} UTC)"


@dataclass
class BroadcastReport:
    """What a [`Broadcast.run`][notifyonce.Broadcast.run] did, and where the campaign stands
    in the ledger.

    Attributes:
        action: The broadcast's action.
        campaign: The campaign id (the slots' cycle).
        progress: The last progress snapshot of this run.
        report: The underlying [`Report`][notifyonce.Report] (counts, and the results that
            need attention).
        unknown: Every chat of the campaign whose delivery is unknown, from the ledger
            (this run's and earlier runs', including sends cut short by a crash once their
            lease expired): send them again only after checking by hand.
        held: Chats of the campaign still claimed by another run (or by a crashed one
            whose lease has not expired yet); a later run settles them.
        cancelled: True when [`Broadcast.cancel`][notifyonce.Broadcast.cancel] stopped the
            run (run it again to resume), or when a cancel request from the operator console
            did: then ``report.stopped`` says so and when, the sends under way were finished
            and recorded, the chats not tried came back ``RETRY``, and the campaign runs
            again only with ``resume_cancelled=True``.
        cause: Why the run ended before its end, in a word the summaries share:
            ``"cancelled"`` (from the operator console), ``"interrupted"``
            (`Broadcast.cancel`: Ctrl-C, SIGTERM), ``"flood wait"`` (a flood wait of the
            whole bot), ``"message refused"`` (Telegram refused the message itself, for
            every chat alike: no slot was used up); None when it ran to its end.
        not_tried: Of the ``RETRY`` count, the chats for which no request went out (the
            rest were tried and given back, e.g. a refused message's sends under way).
        resume_at: After a flood wait of the whole bot, when it ends (by the ledger's
            clock): the time to run the campaign again.
    """

    action: str
    campaign: str
    progress: BroadcastProgress
    report: Report
    unknown: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    cancelled: bool = False
    cause: str | None = None
    not_tried: int = 0
    resume_at: dt.datetime | None = None


def held_here(report: BroadcastReport) -> int:
    """Of the chats this run found already claimed (its ``already done``), those another
    run still holds (a live lease, maybe of a killed run): held, not done. The campaign's
    held chats are read from the ledger once the run ended; this run met at most as many
    as it counted already done."""
    return min(len(report.held), report.progress.duplicate)


class RecipientSource:
    """Recipients that can be streamed and, cheaply, counted (for ``remaining`` and ETA).

    Build one with [`recipients_from_file`][notifyonce.recipients_from_file] or
    [`recipients_from_query`][notifyonce.recipients_from_query], or
    subclass it.
    """

    def __aiter__(self) -> AsyncIterator[Subject]:
        raise NotImplementedError

    async def rows(self) -> AsyncIterator[Recipient]:
        """The recipients as rows (their language, time zone and fields): a source that
        has only chat ids gives each as a row of its chat alone."""
        async for chat in self:
            yield as_recipient(chat)

    async def check_rows(self, rule: Callable[[Recipient], None]) -> int | None:
        """Apply ``rule`` to every row before the first send, for a personalised campaign
        (one filled in from the rows); their number, or None. The default checks each
        row as it is sent."""
        return await self.count()

    async def count(self) -> int | None:
        """How many recipients the stream will yield, or None when unknown."""
        return None

    async def check(self, rule: Callable[[Subject], None]) -> int | None:
        """Apply ``rule`` to every recipient before the first send; their number, or None.

        ``rule`` raises [`ValidationError`][notifyonce.ValidationError] for a recipient the
        sender would refuse. The default only counts: a source that cannot be read twice
        cheaply has each recipient checked as it is sent.
        """
        return await self.count()


# Bad recipient lines named in the error (the count says how many more there are).
_BAD_LINES_SHOWN = 5
# How a personalised run counts each outcome per language (the others are "other").
_LANGUAGE_COLUMNS = {
    Outcome.SENT: "sent",
    Outcome.UNKNOWN: "unknown",
    Outcome.DUPLICATE: "earlier",
}
# The fields of a recipient's own problems; a sender's check may also refuse the message.
_RECIPIENT_FIELDS = frozenset({"subject", "recipient"})


class _FileRecipients(RecipientSource):
    def __init__(self, path: str | os.PathLike[str], fmt: str = "auto") -> None:
        self.path = os.fspath(path)
        self.format = file_format(self.path, fmt)

    async def rows(self) -> AsyncIterator[Recipient]:
        for number, _, found in read_rows(self.path, self.format):
            if isinstance(found, ValidationError):
                raise ValidationError("recipients", f"line {number}: {found.problem}")
            yield found

    async def check_rows(self, rule: Callable[[Recipient], None]) -> int:
        return _check_lines(read_rows(self.path, self.format), rule)

    def _lines(self) -> Iterable[tuple[int, str]]:
        with open(self.path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                text = line.strip()
                if text and not text.startswith("#"):
                    yield number, text

    async def __aiter__(self) -> AsyncIterator[Subject]:
        if self.format != "lines":
            async for row in self.rows():
                yield row.chat
            return
        for number, text in self._lines():
            try:
                normalize_subject(text)
            except ValidationError as exc:
                raise ValidationError("recipients", f"line {number}: {exc.problem}") from None
            yield int(text) if _is_int(text) else text

    async def count(self) -> int:
        if self.format != "lines":
            return sum(1 for _ in read_rows(self.path, self.format))
        return sum(1 for _ in self._lines())

    async def check(self, rule: Callable[[Subject], None]) -> int:
        """Every line checked (and counted) before the first send: a bad line is reported
        with its number, and nothing is sent, instead of stopping the broadcast there. A
        problem of the message itself (its text, its media) is raised as it is, once: it
        is no line's."""
        return _check_lines(read_rows(self.path, self.format), lambda row: rule(row.chat))


def _check_lines(
    lines: Iterable[tuple[int, str, Recipient | ValidationError]], rule: Callable[[Recipient], None]
) -> int:
    """Every row of a file checked and counted, streamed: the bad lines named (up to
    ``_BAD_LINES_SHOWN``, and how many in all); a problem of the message itself raised
    as it is, once."""
    count, bad, problems = 0, 0, list[str]()
    for number, text, found in lines:
        count += 1
        try:
            if isinstance(found, ValidationError):
                raise found
            rule(found)
        except ValidationError as exc:
            if exc.field not in _RECIPIENT_FIELDS:
                raise
            bad += 1
            if len(problems) < _BAD_LINES_SHOWN:
                problems.append(f"line {number} ({text[:40]!r}): {exc.field} {exc.problem}")
    if problems:
        more = f"; {bad} bad lines in all" if bad > len(problems) else ""
        raise ValidationError("recipients", "; ".join(problems) + more)
    return count


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit() and not (len(text) > 1 and text.lstrip("-")[0] == "0")


def recipients_from_file(path: str | os.PathLike[str], *, format: str = "auto") -> RecipientSource:
    """Recipients from a file: chat ids one a line, a CSV file with a header, or JSON lines.

    One chat id a line: blank lines and ``#`` comments are ignored. Lines of digits (with
    an optional ``-``, as group chats have) become ints, the others (``@channel`` names)
    stay str. CSV (a header first) and JSON lines (one object a line) give rows: the
    column ``chat_id`` (in a CSV file without one, the first column) is the chat,
    ``language`` picks the message's variant, ``tz`` (an IANA name) is where its local
    hour is read, and every column is a field for a template (see
    [`Recipient`][notifyonce.Recipient]).

    The file is read as it is sent, one line at a time (a million rows take the memory
    of one), and checked once first: a bad line (no chat id, a bad ``tz``, a row of the
    wrong width, a line that is no JSON object) is named with its number and nothing is
    sent.

    Args:
        path: The file.
        format: ``"lines"``, ``"csv"``, ``"jsonl"``, or ``"auto"``: by the extension
            (``.csv``; ``.jsonl``, ``.ndjson``), else by the first line (``{``: JSON
            lines; a comma: CSV; else one chat id a line).
    """
    if format not in FORMATS:
        raise ValidationError("format", f"must be one of {', '.join(FORMATS)}, got {format!r}")
    return _FileRecipients(path, format)


class _QueryRecipients(RecipientSource):
    def __init__(self, engine: AsyncEngine, query: sa.Select[Any], chunk: int) -> None:
        self.engine = engine
        self.query = query
        self.chunk = chunk

    async def __aiter__(self) -> AsyncIterator[Subject]:
        # Any database may hold the users; one notifyonce has no driver for streams.
        if not driver_class(self.engine.dialect, fallback=Driver).streams_reads:
            # An open read on SQLite keeps the ledger's writes on the same file from
            # committing ("database is locked"): read the ids first, then send.
            async with self.engine.connect() as conn:
                chats = (await conn.execute(self.query)).scalars().all()
            for chat in chats:
                yield chat
            return
        async with self.engine.connect() as conn:
            result = await conn.stream(self.query.execution_options(yield_per=self.chunk))
            async for row in result:
                yield row[0]

    async def rows(self) -> AsyncIterator[Recipient]:
        # The first column is the chat id, whatever its name; every column is a field.
        async for row in self._rows():
            yield _query_row(row)

    async def _rows(self) -> AsyncIterator[sa.Row[Any]]:
        if not driver_class(self.engine.dialect, fallback=Driver).streams_reads:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(self.query)).all()
            for row in rows:
                yield row
            return
        async with self.engine.connect() as conn:
            result = await conn.stream(self.query.execution_options(yield_per=self.chunk))
            async for row in result:
                yield row

    async def check_rows(self, rule: Callable[[Recipient], None]) -> int:
        """Every row read and checked before the first send; a bad one is named by its
        number in the query's order (up to five, and how many in all)."""
        count, bad, problems = 0, 0, list[str]()
        async for row in self._rows():
            count += 1
            try:
                rule(_query_row(row))
            except ValidationError as exc:
                if exc.field not in _RECIPIENT_FIELDS:
                    raise
                bad += 1
                if len(problems) < _BAD_LINES_SHOWN:
                    problems.append(f"row {count}: {exc.field} {exc.problem}")
        if problems:
            more = f"; {bad} bad rows in all" if bad > len(problems) else ""
            raise ValidationError("recipients", "; ".join(problems) + more)
        return count

    async def count(self) -> int:
        counted = sa.select(sa.func.count()).select_from(self.query.subquery())
        async with self.engine.connect() as conn:
            return int((await conn.execute(counted)).scalar_one())


def _query_row(row: sa.Row[Any]) -> Recipient:
    values = dict(row._mapping)
    first = next(iter(row._mapping.keys()))
    return recipient_from_row(values, str(first))


def recipients_from_query(
    engine: AsyncEngine, query: sa.Select[Any] | str, *, chunk: int = 1000
) -> RecipientSource:
    """Recipients from a SQL query, streamed ``chunk`` rows at a time: the first column
    is the chat id; every column is kept, as a CSV file's are (``language``, ``tz``, and
    fields for a template; see [`Recipient`][notifyonce.Recipient]).

    On PostgreSQL and MySQL/MariaDB the rows are streamed (a server-side cursor; reads
    there do not block the ledger's writes). On SQLite, where an open read would block
    them, the ids are read in full before the first send.

    Args:
        engine: An ``AsyncEngine`` on the database that has the users (any database).
        query: A SQLAlchemy ``select(...)``, or the text of a ``SELECT``.
        chunk: Rows fetched at a time.

    Examples:
        >>> import sqlalchemy as sa
        >>> users = sa.table("users", sa.column("chat_id"), sa.column("active"))
        >>> query = sa.select(users.c.chat_id).where(users.c.active)
        >>> source = recipients_from_query(engine, query)  # doctest: +SKIP
    """
    if isinstance(query, str):
        query = sa.select(sa.text("*")).select_from(sa.text(f"({query}) AS recipients"))
    if not isinstance(query, sa.Select):
        raise ValidationTypeError("query", f"must be a select() or a str, got {type(query)}")
    return _QueryRecipients(engine, query, chunk)


class Broadcast:
    """One message to many chats under a campaign id: resumable, observable, cancellable.

    Args:
        notifier: Sends the messages (its ledger, sender, delivery mode and concurrency).
        action: What is broadcast, e.g. ``"news"``.
        campaign: The campaign id, e.g. ``"2026-12-tariff"``: the slots' cycle. Running
            the same action and campaign again sends only to chats not handled yet.
        message: The message, or a function building it for one chat.
        recipients: Chat ids: a list or any iterable, an async iterable, or a
            [`RecipientSource`][notifyonce.RecipientSource]
            ([`recipients_from_file`][notifyonce.recipients_from_file],
            [`recipients_from_query`][notifyonce.recipients_from_query]).
        total: How many recipients there are, for ``remaining`` and the ETA. Default:
            ``len`` of a list, ``count()`` of a source, else unknown.
        on_progress: Called with a [`BroadcastProgress`][notifyonce.BroadcastProgress] every
            ``every`` seconds and once at the end.
        every: Seconds between progress snapshots.
        allow_changed_message: The campaign remembers the message it started with (a
            fingerprint of its text, formatting and media, kept in the ledger); a later run
            with another message is refused (`run` raises ValidationError, nothing is
            sent) unless this is True, when the chats not handled yet get the new one. A
            message given as a function of the chat is not compared.
        resume_cancelled: A campaign cancelled from the operator console refuses to run
            again (`run` raises ValidationError, nothing is sent) unless this is True;
            then the cancel request is withdrawn and the chats not handled yet get the
            message. While the run lasts, a cancel request from the console stops it
            within a few seconds, gently (see `BroadcastReport.cancelled`).
        start_at: An aware datetime: `run` waits until then (by the ledger's clock, the
            database server's on PostgreSQL and MySQL) before the first send; a time
            past starts at once. Two schedulers that start the same campaign at that
            moment send each chat once: each chat's slot is claimed by one of them.
            `cancel` ends the wait.
        progress_chat: A [`ProgressMessage`][notifyonce.ProgressMessage]: the progress
            as one message in an admin's chat, edited in place, ending with the summary.
        category: What a recipient opts out of to stop this campaign (default: the
            action's name): chats opted out of it are skipped, as are chats the audience
            knows to be gone (see [`AsyncAudience`][notifyonce.AsyncAudience]).
        transactional: Opt-outs do not apply (a notice every user must get); gone chats
            are still skipped.
        skip_gone: Whether chats known to be gone are skipped; default: the Notifier's.
        template: The texts (and captions, button texts and URLs) are
            ``string.Template``s (``$name``, ``${first_name}``, ``$$`` for a dollar sign)
            filled from each recipient's fields (see [`Recipient`][notifyonce.Recipient]),
            each value escaped for the parse mode so it arrives as written, never as
            markup. A recipient without a field and no default for it is refused before
            anything is claimed; one whose filled-in text is too long for the sender is
            skipped alone, before its claim (``report.skips`` counts it).
        variants: The message in other languages (``{"ru": Message(...)}``), each with
            its own text, caption and buttons, picked by the recipient's ``language``
            (``pt-br`` falls back to ``pt``); ``message`` is every other language's.
        defaults: A value for each field a recipient may lack, for a template.
        start_at_local: A local time of day (``dt.time(10)``): each recipient is sent to
            when it is that time in its own ``tz`` (``default_tz`` for rows without one),
            the first such moment after the campaign started (``start_at``, or its first
            run): the run lasts up to a day, and a resumed run keeps the same hours. The
            recipients must be a source or a list (read once per hour reached).
        default_tz: The time zone of recipients without one (a tzinfo or an IANA name;
            default UTC).

    Examples:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from notifyonce import AsyncLedger, Broadcast, Message, Notifier
        >>> from notifyonce.testing import FakeSender
        >>> async def main() -> str:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     ledger = AsyncLedger(engine)
        ...     await ledger.create_schema()
        ...     notifier = Notifier(ledger, FakeSender())
        ...     news = Message("A new tariff is out")
        ...     first = await Broadcast(notifier, "news", "2026-12", news, [1, 2, 3]).run()
        ...     again = await Broadcast(notifier, "news", "2026-12", news, [1, 2, 3, 4]).run()
        ...     await engine.dispose()
        ...     return f"{first.progress.sent} sent, then {again.progress.sent} more"
        >>> asyncio.run(main())
        '3 sent, then 1 more'
    """

    def __init__(
        self,
        notifier: Notifier,
        action: str,
        campaign: str,
        message: Message | Callable[[Subject], Message],
        recipients: Recipients,
        *,
        total: int | None = None,
        on_progress: Callable[[BroadcastProgress], None] | None = None,
        every: float = 1.0,
        allow_changed_message: bool = False,
        resume_cancelled: bool = False,
        start_at: dt.datetime | None = None,
        progress_chat: ProgressFollower | None = None,
        category: str | None = None,
        transactional: bool = False,
        skip_gone: bool | None = None,
        template: bool = False,
        variants: Mapping[str, Message] | None = None,
        defaults: Mapping[str, str] | None = None,
        start_at_local: dt.time | None = None,
        default_tz: dt.tzinfo | str | None = None,
    ) -> None:
        self.action = normalize_action(action)
        if self.action in RESERVED_ACTIONS:
            raise ValidationError(
                "action", f"{self.action!r} is where campaigns keep their own records"
            )
        if not isinstance(campaign, str):
            raise ValidationTypeError("campaign", f"must be a str, got {type(campaign).__name__}")
        self.campaign, _ = normalize_cycle(campaign)
        if not isinstance(message, Message) and not callable(message):
            raise ValidationTypeError(
                "message", f"must be a Message or a callable, got {type(message).__name__}"
            )
        if isinstance(recipients, (str, bytes)) or not isinstance(
            recipients, (Iterable, AsyncIterable, RecipientSource)
        ):
            raise ValidationTypeError(
                "recipients", f"must be an iterable of chat ids, got {type(recipients).__name__}"
            )
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise ValidationTypeError("total", f"must be an int or None, got {type(total)}")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or every <= 0:
            raise ValidationError("every", "must be a positive number of seconds")
        self.notifier = notifier
        self.message = message
        self.recipients = recipients
        self.total = total
        self.on_progress = on_progress
        self.every = float(every)
        if not isinstance(allow_changed_message, bool):
            raise ValidationTypeError("allow_changed_message", "must be a bool")
        self.allow_changed_message = allow_changed_message
        if not isinstance(resume_cancelled, bool):
            raise ValidationTypeError("resume_cancelled", "must be a bool")
        self.resume_cancelled = resume_cancelled
        self._run: Run | None = None
        self._stopped_by: str | None = None  # the console's cancel request that stopped it
        if start_at is not None:
            if not isinstance(start_at, dt.datetime):
                raise ValidationTypeError(
                    "start_at", f"must be a datetime or None, got {type(start_at).__name__}"
                )
            if start_at.utcoffset() is None:
                raise ValidationError(
                    "start_at", "is a naive datetime; pass an aware one (with its UTC offset)"
                )
        self.start_at = start_at
        self.progress_chat = progress_chat
        # Checked now, with the Notifier's own rules: bad input before anything runs.
        self.category, self.transactional, self.skip_gone = notifier._screen_args(
            self.action, category, transactional, skip_gone
        )
        self._counts = dict.fromkeys(Outcome, 0)
        self._not_tried = 0
        self._skips: dict[str, int] = {}
        self._started: float | None = None
        self._samples: deque[tuple[float, int]] = deque()
        self._watchers: list[asyncio.Queue[BroadcastProgress]] = []
        self._task: asyncio.Task[Report] | None = None
        self._cancel_requested = False
        self._last: BroadcastProgress | None = None
        self._final_standing: tuple[list[str], list[str]] | None = None
        self._personal: Personal | None = None
        if template or variants or defaults:
            if not isinstance(message, Message):
                raise ValidationError(
                    "message", "must be a Message for a template or variants, not a function"
                )
            self._personal = Personal(message, variants, template=template, defaults=defaults)
        self._local_at: tuple[dt.time, dt.tzinfo] | None = None
        if start_at_local is not None:
            self._local_at = check_local_at(start_at_local, default_tz)
            if not isinstance(recipients, (RecipientSource, list, tuple)):
                raise ValidationTypeError(
                    "recipients",
                    "must be a RecipientSource, a list or a tuple with start_at_local: it "
                    "is read again as each hour comes",
                )
        elif default_tz is not None:
            raise ValidationError("default_tz", "applies with start_at_local only")
        self._local: LocalHour | None = None
        self._waiting = 0
        self._next_due: dt.datetime | None = None
        # A personalised run's counts per variant ("" the default message), for the
        # console: this run's outcomes, and the rows of the pass under way and of the last
        # one ended (read, and waiting for their hour).
        self._by_language: dict[str, dict[str, int]] = {}
        self._pass_rows: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self._last_rows: tuple[dict[str, int], dict[str, int]] | None = None
        self._languages_at = -math.inf
        self._beats = False  # the campaign has its row: the run keeps its heartbeat

    def __repr__(self) -> str:
        return f"Broadcast({self.action!r}, campaign={self.campaign!r})"

    # -- running ----------------------------------------------------------------------

    async def run(self) -> BroadcastReport:
        """Send to every recipient not handled yet by this campaign; return the report.

        Raises:
            ValidationError: A bad recipient or message (nothing of that batch written),
                or a message other than the one the campaign started with (nothing sent;
                see ``allow_changed_message``), or a campaign cancelled from the operator
                console (nothing sent; see ``resume_cancelled``).
            SenderConfigError: The sender is set up wrong; the run's claims were freed.
            LedgerError: The ledger failed; what was under way was recorded where possible.
            asyncio.CancelledError: The task running this was cancelled (after the claims
                were settled). `cancel` instead returns a report marked cancelled.
        """
        try:
            return await self._broadcast()
        except LedgerError as exc:
            # A missing table says to migrate, an unreachable database names its URL.
            why = await explained(exc, self.notifier.ledger)
            if why is exc:
                raise
            raise why from exc

    async def _broadcast(self) -> BroadcastReport:
        if self._task is not None:
            raise RuntimeError("this Broadcast is already running or ran; build a new one")
        ledger, dry_run = self.notifier.ledger, self.notifier.dry_run
        resumed = await self._check_cancelled()
        personal = self._personal
        wanted = None
        given = self.message
        if isinstance(given, Message):
            # Its files pinned to the bytes fingerprinted: one rewritten during the run
            # stops it rather than reach the chats left as another message (see `pin`).
            self.message = await pin(given)
            wanted = await compare_message(
                ledger,
                self.action,
                self.campaign,
                self.message,
                allow_changed=self.allow_changed_message,
                variants=None if personal is None else personal.variants,
                extra=[] if personal is None else personal.fingerprint_parts(),
            )
        fixed_total = self.total
        self.total = await self._checked_total(fixed_total)
        # The campaign's row only now that every check has passed: a run refused before
        # it starts leaves none (no campaign of zeros in the console). One that waits for
        # its start has it from the wait's beginning, with the start as its cycle_at.
        self._beats = wanted is not None and not dry_run
        if wanted is not None and not dry_run:
            await record_campaign(
                ledger,
                self.action,
                self.campaign,
                wanted,
                cycle_at=self.start_at,
                total=self.total,
            )
        if resumed is not None and not dry_run:
            # Withdrawn only now, once every check before the first send has passed.
            await clear_cancel(ledger, self.action, self.campaign)
            logger.warning(
                "campaign %s/%s was %s; resumed, the request is withdrawn",
                self.action,
                self.campaign,
                resumed,
            )
        waited = await self._wait_for_start()
        if waited and wanted is not None and isinstance(given, Message):
            # A media file may have been rewritten during the wait: the message is checked
            # again against the one recorded, so what is sent is what the campaign records.
            self.message = await pin(given)
            again = await compare_message(
                ledger,
                self.action,
                self.campaign,
                self.message,
                allow_changed=self.allow_changed_message,
                variants=None if personal is None else personal.variants,
                extra=[] if personal is None else personal.fingerprint_parts(),
            )
            if again != wanted and not dry_run:
                await record_campaign(ledger, self.action, self.campaign, again)
        if waited and fixed_total is None:
            # The recipients may have changed during the wait: counted (and checked) again.
            self.total = await self._checked_total(None)
            if self.total is not None and wanted is not None and not dry_run:
                await record_total(ledger, self.action, self.campaign, self.total)
        if self._local_at is not None:
            self._local = await self._local_hour()
        self._started = time.monotonic()
        # The start is the first sample, so the first snapshot already has a rate (the
        # recipients handled since the start), not 0/s and no ETA.
        self._samples.append((self._started, 0))
        self._task = asyncio.ensure_future(self._send())
        if self._cancel_requested:
            self._task.cancel()
        ticker = asyncio.ensure_future(self._tick())
        done = asyncio.Event()
        watcher = None if self.notifier.dry_run else asyncio.ensure_future(self._watch_cancel(done))
        shown = (
            None
            if self.progress_chat is None
            else asyncio.ensure_future(self.progress_chat.follow(self))
        )
        try:
            await _finish(self._task)
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            if watcher is not None:
                # Told to end, not cancelled: a read under way finishes and gives its
                # connection back (cut short, SQLite's could keep the file locked).
                done.set()
                await _finish(watcher)
            self._publish(finished=True)
            if shown is not None:
                # The summary goes out within the sender's budget; never past a cancel.
                with contextlib.suppress(asyncio.CancelledError):
                    await shown
        if self._tracks_languages and not dry_run:
            await record_languages(ledger, self.action, self.campaign, self._languages())
        killed = self._task.cancelled()
        report = Report(counts=dict(self._counts)) if killed else self._task.result()
        cancelled = killed or self._stopped_by is not None
        unknown, held = await self._standing()
        assert self._last is not None
        run = self._run
        return BroadcastReport(
            self.action,
            self.campaign,
            self._last,
            report,
            unknown,
            held,
            cancelled,
            cause=self._cause(killed),
            not_tried=self._not_tried,
            resume_at=None if run is None else run.resume_at,
        )

    def _cause(self, killed: bool) -> str | None:
        """The word for why the run ended early (see `BroadcastReport.cause`), or None."""
        if self._stopped_by is not None:
            return "cancelled"
        if killed:
            return "interrupted"
        kind = None if self._run is None else self._run.stop_kind
        return None if kind == "halt" else kind

    async def _checked_total(self, total: int | None) -> int | None:
        """Check every recipient a source can read twice, and every row of a list when
        the campaign is personal (before the first send); the number of recipients,
        ``total`` when given, else counted when it can be."""
        personal = self._personal
        if isinstance(self.recipients, RecipientSource):
            if personal is not None or self._local_at is not None:
                checked = await self.recipients.check_rows(self._row_rule())
            else:
                checked = await self.recipients.check(self._recipient_rule())
            return checked if total is None else total
        if isinstance(self.recipients, (list, tuple)) and personal is not None:
            # In memory already: each row checked before the first send, as a file's are.
            rule = self._row_rule()
            for item in self.recipients:
                rule(as_recipient(item))
        if total is None and isinstance(self.recipients, Sized):
            return len(self.recipients)
        return total

    async def _local_hour(self) -> LocalHour:
        """Each recipient's hour, counted from ``start_at`` or the campaign's first run
        (kept in the ledger, so a resumed run keeps the hours), else from now."""
        assert self._local_at is not None
        at, zone = self._local_at
        start = self.start_at
        if start is None and not self.notifier.dry_run:
            start = await campaign_started(self.notifier.ledger, self.action, self.campaign)
        return LocalHour(at, zone, start or self.notifier._now())

    async def _wait_for_start(self) -> bool:
        """Sleep until ``start_at`` by the ledger's clock, a second at a time at most (so
        a clock corrected meanwhile, and `cancel`, are heeded), unless cancelled; whether
        it slept."""
        if self.start_at is None:
            return False
        slept = False
        while not self._cancel_requested:
            left = (self.start_at - self.notifier._now()).total_seconds()
            if left <= 0:
                break
            slept = True
            await asyncio.sleep(min(left, _START_STEP))
        return slept

    def cancel(self) -> None:
        """Stop the run: no new sends; sends under way are cut short and recorded as
        uncertain (``unknown`` in at-most-once mode, so never sent again; released for
        the next run in at-least-once mode), claims not yet sent are freed. `run` then
        returns a report with ``cancelled=True``; run the campaign again to resume."""
        self._cancel_requested = True
        if self._task is not None:
            self._task.cancel()

    async def _check_cancelled(self) -> str | None:
        """Refuse to start a campaign cancelled from the console, unless told to resume it;
        the request to withdraw then (None when there is none)."""
        note = await cancel_requested(self.notifier.ledger, self.action, self.campaign)
        if note is not None and not self.resume_cancelled:
            raise ValidationError(
                "campaign",
                f"campaign {self.action}/{self.campaign} was {note}; nothing was sent. To "
                f"send to the chats not handled yet, run it again with {RESUME_CANCELLED}",
            )
        return note

    def _attach(self, run: Run) -> None:
        self._run = run
        # A stop is told once, by the report's cause and the summary's stop line (with the
        # rest of the stream never read), not also by the run's own line.
        run.stop_told_above = True

    async def _watch_cancel(self, done: asyncio.Event) -> None:
        """Read the campaign's cancel request every ``_CANCEL_POLL`` seconds until ``done``;
        stop the run gently when there is one. A failed read is logged (once a run: a
        database gone fails them all) and tried again. Every ``HEARTBEAT`` seconds, the
        campaign's heartbeat (`beat`), so the console tells this run from a killed one."""
        failed = False
        beaten = -math.inf
        while True:
            now = time.monotonic()
            away = self._run is not None and self._run.outage.away
            if self._beats and not away and now - beaten >= HEARTBEAT:
                # The console tells a run sending from a killed one by it (see `beat`).
                beaten = now
                await beat(self.notifier.ledger, self.action, self.campaign)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), _CANCEL_POLL)
            if done.is_set():
                return
            now = time.monotonic()
            away = self._run is not None and self._run.outage.away
            if self._tracks_languages and not away and now - self._languages_at >= _LANGUAGES_EVERY:
                # Here, not in the ticker: a write under way finishes when the run ends.
                # Not while the database is away: the run said so once already.
                self._languages_at = now
                await record_languages(
                    self.notifier.ledger, self.action, self.campaign, self._languages()
                )
            try:
                note = await cancel_requested(self.notifier.ledger, self.action, self.campaign)
            except LedgerError as exc:
                if self._run is not None and (self._run.outage.away or self._run.outage.absences):
                    # The run said once that the database is away (and stops, or is back).
                    continue
                logger.log(
                    logging.DEBUG if failed else logging.WARNING,
                    "campaign %s/%s: its cancel request could not be read (%s)",
                    self.action,
                    self.campaign,
                    type(exc.__cause__ or exc).__name__,
                )
                failed = True
                continue
            if note is not None and self._run is not None:
                logger.info(
                    "campaign %s/%s was %s: stopping; the sends under way finish",
                    self.action,
                    self.campaign,
                    note,
                )
                self._stopped_by = note
                self._run.halt(note)  # a pass that ended already: the next is not started
                return

    def progress(self) -> BroadcastProgress:
        """The progress right now."""
        return self._snapshot(finished=False)

    async def watch(self) -> AsyncIterator[BroadcastProgress]:
        """Progress snapshots while the broadcast runs (the latest one when the reader is
        slow), ending with the final snapshot. Iterate it in a task next to `run`."""
        queue: asyncio.Queue[BroadcastProgress] = asyncio.Queue(maxsize=1)
        self._watchers.append(queue)
        try:
            while True:
                if self._last is not None and self._last.finished and queue.empty():
                    return
                snapshot = await queue.get()
                yield snapshot
                if snapshot.finished:
                    return
        finally:
            self._watchers.remove(queue)

    # -- plumbing ---------------------------------------------------------------------

    async def _send(self) -> Report:
        """The sends: one stream, or for a local-time campaign one per hour reached (a dry
        run waits for no hour: it counts what the campaign would send)."""
        if self._local is None or self.notifier.dry_run:
            return await self._send_many(self._notifications(None, None))
        # The recipients are read once per hour reached: each pass sends those whose hour
        # came since the last pass (the run's sends of one pass end before it sleeps),
        # counts the others, and sleeps until the next is due.
        handled_until: dt.datetime | None = None
        total = Report(counts=dict.fromkeys(Outcome, 0))
        while True:
            now = self.notifier._now()
            report = await self._send_many(self._notifications(now, handled_until))
            for outcome, n in report.counts.items():
                total.counts[outcome] += n
            total.results += report.results
            for reason, n in report.skips.items():
                total.skips[reason] = total.skips.get(reason, 0) + n
            total.dry_run, total.stopped = report.dry_run, report.stopped
            if self._next_due is None or report.stopped is not None:
                return total
            handled_until = now
            while not self._cancel_requested:
                if self._stopped_by is not None:
                    # Cancelled from the console between two hours: no pass after it.
                    total.stopped = self._stopped_by
                    return total
                left = (self._next_due - self.notifier._now()).total_seconds()
                if left <= 0:
                    break
                await asyncio.sleep(min(left, _LOCAL_STEP))

    async def _send_many(self, notifications: AsyncIterator[Notification]) -> Report:
        return await self.notifier._send_many(
            self.action,
            notifications,
            category=self.category,
            transactional=self.transactional,
            skip_gone=self.skip_gone,
            on_result=self._count,
            on_run=self._attach,
            # Only this campaign's expired claims: another campaign of the action may run
            # in the other mode, and its claims are its own run's to settle.
            sweep_cycle=self.campaign,
        )

    async def _notifications(
        self, now: dt.datetime | None, handled_until: dt.datetime | None
    ) -> AsyncIterator[Notification]:
        """Every recipient's notification; for a local-time campaign (``now`` given) those
        whose hour came after ``handled_until`` and by ``now``, counting the others."""
        local = self._local
        waiting, next_due = 0, None
        rows, waits = self._pass_rows = ({}, {})
        async for row in self._rows():
            language = self._language_of(row.language)
            rows[language] = rows.get(language, 0) + 1
            if local is not None and now is not None:
                due = local.due(row.timezone)
                if due > now:
                    waiting += 1
                    waits[language] = waits.get(language, 0) + 1
                    next_due = due if next_due is None else min(next_due, due)
                    continue
                if handled_until is not None and due <= handled_until:
                    continue
            note = self._notification(row)
            if note is not None:
                yield note
        self._waiting, self._next_due = waiting, next_due
        self._last_rows = self._pass_rows

    @property
    def _tracks_languages(self) -> bool:
        """Whether the run keeps its counts per language (a personalised campaign's)."""
        return self._personal is not None or self._local_at is not None

    def _language_of(self, language: str | None) -> str:
        """The variant a row's ``language`` gets: its key, ``""`` for the default."""
        return "" if self._personal is None else self._personal.language_of(language)

    def _languages(self) -> LanguageCounts:
        """This run's counts per variant, as the console shows them."""
        rows, waits = self._last_rows or self._pass_rows
        names = sorted({*rows, *self._by_language})
        languages = {
            name: {
                **self._by_language.get(name, {}),
                "recipients": rows.get(name, 0),
                "waiting": waits.get(name, 0),
            }
            for name in names
        }
        return LanguageCounts(languages, self._waiting, self._next_due)

    async def _rows(self) -> AsyncIterator[Recipient]:
        source = self.recipients
        if isinstance(source, RecipientSource):
            async for row in source.rows():
                yield row
        elif isinstance(source, AsyncIterable):
            async for chat in source:
                yield as_recipient(chat)
        else:
            for chat in source:
                yield as_recipient(chat)

    def _notification(self, row: Recipient) -> Notification | None:
        """The notification of one recipient; None for one refused alone (its personal
        message is one the sender refuses: too long once filled in), counted as skipped."""
        build = self.message
        chat = row.chat
        fields = row.fields or None
        if self._personal is None:
            message = build if isinstance(build, Message) else build(chat)
            return Notification(chat, self.campaign, message, timezone=row.timezone, fields=fields)
        message = self._personal.render(row)
        note = Notification(chat, self.campaign, message, timezone=row.timezone, fields=fields)
        check = self.notifier._sender_check
        if check is None or not self._personal.template:
            return note
        try:
            check(note.target, message)
        except ValidationError as exc:
            if exc.field in _RECIPIENT_FIELDS:
                return note  # the run refuses it as it refuses any bad chat
            reason = f"refused: {exc.field} too long once filled in"
            logger.warning(
                "campaign %s/%s: chat %s refused alone, before its claim: its %s once "
                "filled in is one the sender refuses",
                self.action,
                self.campaign,
                chat,
                exc.field,
            )
            key = make_key(self.action, chat, self.campaign)
            self._count(Result(self.action, note, key, Outcome.SKIPPED, reason=reason))
            return None
        return note

    def _recipient_rule(self) -> Callable[[Subject], None]:
        """The sender's check of one recipient of this campaign (nothing without one)."""
        check = self.notifier._sender_check
        build = self.message

        def rule(chat: Subject) -> None:
            normalize_subject(chat)
            if check is not None:
                message = build if isinstance(build, Message) else build(chat)
                check(str(chat), message)

        return rule

    def _row_rule(self) -> Callable[[Recipient], None]:
        """The check of one row of a personalised campaign before the first send: its
        chat and its message, filled in. A row without a field of the template is refused
        (naming it); a text that only this row's values make too long is not: that row
        alone is skipped when its turn comes. A problem of the message itself is raised."""
        check = self.notifier._sender_check
        personal = self._personal
        bare: dict[int, ValidationError | None] = {}

        def rule(row: Recipient) -> None:
            normalize_subject(row.chat)
            if personal is None:
                message = self.message if isinstance(self.message, Message) else None
                if check is not None and message is not None:
                    check(str(row.chat), message)
                return
            message = personal.render(row)
            if check is None:
                return
            try:
                check(str(row.chat), message)
            except ValidationError as exc:
                if exc.field in _RECIPIENT_FIELDS or not personal.template:
                    raise
                variant = personal.pick(row.language)
                if id(variant) not in bare:
                    # The variant with every value one letter: what fails so is the message's.
                    try:
                        check(str(row.chat), personal.bare(variant))
                        bare[id(variant)] = None
                    except ValidationError as problem:
                        bare[id(variant)] = problem
                if bare[id(variant)] is not None:
                    raise

        return rule

    def _count(self, result: Result) -> None:
        self._counts[result.outcome] += 1
        if self._tracks_languages:
            given = (result.notification.fields or {}).get(LANGUAGE_COLUMN, "")
            language = self._language_of(given.strip().lower().replace("_", "-") or None)
            column = _LANGUAGE_COLUMNS.get(result.outcome, "other")
            counts = self._by_language.setdefault(language, {})
            counts[column] = counts.get(column, 0) + 1
        if result.outcome is Outcome.RETRY and (
            result.attempt is None or result.error == INTERRUPTED.error
        ):
            self._not_tried += 1  # no request went out: never claimed, or claimed unsent
        # The Report's own rule (Run.finish): a SKIPPED result with its reason.
        if result.outcome is Outcome.SKIPPED and result.reason is not None:
            self._skips[result.reason] = self._skips.get(result.reason, 0) + 1

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            self._publish(finished=False)

    def _snapshot(self, *, finished: bool) -> BroadcastProgress:
        now = time.monotonic()
        started = self._started if self._started is not None else now
        c = self._counts
        done = sum(c.values())
        samples = self._samples
        samples.append((now, done))
        while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW:
            samples.popleft()
        then, done_then = samples[0]
        rate = (done - done_then) / (now - then) if now - then > 0 else 0.0
        return BroadcastProgress(
            sent=c[Outcome.SENT],
            failed=c[Outcome.FAILED],
            unknown=c[Outcome.UNKNOWN],
            duplicate=c[Outcome.DUPLICATE],
            retry=c[Outcome.RETRY],
            skipped=c[Outcome.SKIPPED],
            lease_lost=c[Outcome.LEASE_LOST],
            total=self.total,
            elapsed=now - started,
            rate=rate,
            finished=finished,
            skips=dict(self._skips),
            waiting=self._waiting,
            next_due=self._next_due,
            not_tried=self._not_tried,
            cause=self._final_cause() if finished else None,
        )

    def _final_cause(self) -> str | None:
        """Why the run that just ended stopped before its end (None: it ran to its end)."""
        task = self._task
        if task is None or not task.done():
            return "interrupted" if self._cancel_requested else None
        if not task.cancelled() and isinstance(task.exception(), LedgerError):
            return "database"  # the command line's stop line for it (see `stop_line`)
        return self._cause(task.cancelled())

    def _publish(self, *, finished: bool) -> None:
        snapshot = self._snapshot(finished=finished)
        self._last = snapshot
        for queue in self._watchers:
            if queue.full():
                queue.get_nowait()  # a slow reader gets the latest snapshot only
            queue.put_nowait(snapshot)
        if self.on_progress is not None:
            self.on_progress(snapshot)

    async def _standing(self) -> tuple[list[str], list[str]]:
        """The campaign's unknown and still-claimed chats, from the ledger; read once
        after the run ended (the admin chat's summary and the report share it)."""
        if self.notifier.dry_run:
            return [], []
        if self._final_standing is not None:
            return self._final_standing
        ended = self._task is not None and self._task.done()
        ledger = self.notifier.ledger
        query = standing_query(ledger.table, self.action, self.campaign)
        async with ledger.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        unknown = [str(s) for _, s, status in rows if status == SlotStatus.UNKNOWN.value]
        held = [str(s) for _, s, status in rows if status == SlotStatus.CLAIMED.value]
        if ended:
            self._final_standing = (unknown, held)
        return unknown, held


def standing_query(table: sa.Table, action: str, campaign: str) -> sa.CompoundSelect[Any]:
    """A campaign's unknown and still-claimed slots (subject, status), in claim order.

    One branch per status, each an equality the ledger's status index answers whatever the
    planner knows: only the rows with those statuses are read, not the campaign's sent
    ones. (``status IN (...)`` was planned, without statistics, as a walk over every row of
    the campaign through the unique key.)
    """
    branches = [
        sa.select(table.c.id, table.c.subject, table.c.status).where(
            table.c.status == status.value,
            table.c.action == action,
            table.c.cycle == campaign,
        )
        for status in (SlotStatus.UNKNOWN, SlotStatus.CLAIMED)
    ]
    return sa.union_all(*branches).order_by("id")


async def _finish(task: asyncio.Task[Any]) -> None:
    """Wait for ``task``; if we are cancelled meanwhile, cancel it, let it settle its
    claims, then raise the cancellation."""
    try:
        await asyncio.wait([task])
    except asyncio.CancelledError:
        task.cancel()
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        raise
