"""What the console's pages read: each one an index look-up or an aggregate with a bound.

Every function here is plain sync code on a SQLAlchemy ``Connection`` and reads only:

- counts go through the status index ``(status, action, cycle)`` and stop at a cap (the
  page says "10,000+"), so a ledger of ten million sent rows costs what ten thousand do;
- actions are found by stepping through the key index (one look-up per action), never by
  a ``DISTINCT`` over the table;
- sends per minute read the last hour's deliveries of one action through the
  ``(action, sent_at)`` index;
- a subject's history reads the ``(subject, sent_at)`` index, leases the
  ``(status, lease_until)`` one;
- errors are grouped over a sample of at most a few thousand rows per status;
- a campaign's state reads its own keys only: its live claims (the status index), its
  last 30 seconds of sends (the ``(action, sent_at)`` index) and, for a campaign that
  may be finished, its rows up to its recorded total (the unique key);
- long lists (campaigns, a subject's slots, a status's slots, a search) go a page at a
  time after the last row shown (keyset), so a later page costs what the first does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from notifyonce._campaign import (
    CAMPAIGN_ACTION,
    LANGUAGES_ACTION,
    RESERVED_ACTIONS,
    REVISION_ACTION,
    LanguageCounts,
    cancel_note,
)
from notifyonce._drivers import driver_class
from notifyonce._ledger.records import CAPPED_NOTE
from notifyonce._ledger.side_tables import build_digest_table, default_digest_table
from notifyonce._ledger.table import SlotStatus

__all__ = [
    "ActionSummary",
    "CampaignProgress",
    "CampaignState",
    "CampaignSummary",
    "Count",
    "DigestSummary",
    "ErrorGroup",
    "FloodWait",
    "LeaseRow",
    "LeaseSummary",
    "SlotRow",
    "action_summaries",
    "campaign_progress",
    "campaign_summaries",
    "digest_summaries",
    "error_groups",
    "error_slots",
    "flood_waits",
    "leases",
    "problem_slots",
    "subject_history",
]

#: Counts on the overview stop here: a count past it is shown as "10,000+".
COUNT_CAP = 10_000
#: Rows of one status read to group errors.
ERROR_SAMPLE = 5_000
#: Actions shown on the overview (each is one look-up of the key index).
MAX_ACTIONS = 50
#: Campaigns a page of the overview lists (each is a handful of index look-ups).
MAX_CAMPAIGNS = 50
#: Slots a page of a list shows (a subject's history, a status's slots, an error search).
PAGE = 200
#: A campaign with a send this recent is running (between two batches, no claim held).
RECENT_SEND = dt.timedelta(seconds=30)
MINUTES = 60
STATUSES = tuple(s.value for s in SlotStatus)
_RELEASED = SlotStatus.RELEASED.value
_SETTLED_DONE = (SlotStatus.SENT.value, SlotStatus.FAILED.value, SlotStatus.UNKNOWN.value)


@dataclass(frozen=True)
class Count:
    """A count that may have stopped at a cap: the true one is at least ``value``."""

    value: int
    capped: bool = False

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


class CampaignState:
    """What a campaign is doing, as the pages name it (plain strings: a template shows
    them, a badge's class is made of them)."""

    SCHEDULED = "scheduled"  # waiting for its start time (--at), nothing sent
    NEVER_STARTED = "never started"  # recorded, no delivery slot, no start to wait for
    RUNNING = "running"  # a run's heartbeat, or a claim with a live lease or a recent send
    #: Claims with live leases but no run sending them: the run's heartbeat ran out (it
    #: was killed). The leases run out, then a run (or the sweep) settles those chats.
    STALLED = "stalled"
    STOPPED = "stopped"  # chats left to try and no run sending: resume it
    CANCELLED = "cancelled"  # cancelled from the console
    FINISHED = "finished"  # every recipient of its recorded total has a settled row
    ALL = (SCHEDULED, NEVER_STARTED, RUNNING, STALLED, STOPPED, CANCELLED, FINISHED)
    #: States in which a rate, an ETA and a cancel button mean nothing.
    ENDED = (CANCELLED, FINISHED)
    #: States a run of the same command picks up from where it stopped.
    RESUMABLE = (STALLED, STOPPED, CANCELLED)


@dataclass(frozen=True)
class ActionSummary:
    """One action: its slots per status and its sends in each of the last 60 minutes."""

    action: str
    counts: dict[str, Count]
    per_minute: list[int]


@dataclass(frozen=True)
class CampaignSummary:
    """One broadcast campaign (an action and a campaign id) with its slots per status."""

    id: int  # its row's id: where the next page starts
    action: str
    campaign: str
    started_at: dt.datetime
    counts: dict[str, Count]
    cancel: str | None = None  # its cancel request from the console, if any
    total: int | None = None  # the recipients the broadcast said it has
    state: str = CampaignState.STOPPED
    scheduled_at: dt.datetime | None = None  # the start it waits for (--at), if any
    waiting: int = 0  # a local-time campaign's recipients waiting for their hour

    @property
    def running(self) -> bool:
        """Some of its chats are claimed right now."""
        return self.counts[SlotStatus.CLAIMED.value].value > 0

    @property
    def cancel_state(self) -> str | None:
        return _cancel_state(self.cancel, self.running)

    @property
    def done(self) -> Count:
        """Its settled chats (sent, failed, unknown); capped when one of the counts is."""
        return _done(self.counts)


def _done(counts: dict[str, Count]) -> Count:
    return Count(
        sum(counts[s].value for s in _SETTLED_DONE), any(counts[s].capped for s in _SETTLED_DONE)
    )


def _cancel_state(cancel: str | None, running: bool) -> str | None:
    """What a page says of a campaign's cancel request: still stopping, or stopped."""
    if cancel is None:
        return None
    return "cancel requested" if running else "cancelled"


@dataclass(frozen=True)
class CampaignProgress:
    """A campaign while it runs: counts, rate, what is left and when it should end."""

    action: str
    campaign: str
    started_at: dt.datetime | None
    counts: dict[str, Count]
    per_minute: list[int]
    rate: float  # sends per second over the last few minutes
    total: int | None  # the recipients the broadcast said it has, when it said so
    last_sent_at: dt.datetime | None
    cancel: str | None = None  # its cancel request from the console, if any
    state: str = CampaignState.STOPPED
    scheduled_at: dt.datetime | None = None  # the start it waits for (--at), if any
    waiting: int = 0  # a local-time campaign's recipients waiting for their hour
    #: Of its released slots, the chats a frequency cap held back (skipped "capped").
    capped: int = 0

    @property
    def known(self) -> bool:
        """The campaign has its row (a run recorded its message): it can be cancelled."""
        return self.started_at is not None

    @property
    def exists(self) -> bool:
        """The ledger knows the campaign: its row, or a slot of its own."""
        return self.known or any(c.value for c in self.counts.values())

    @property
    def cancel_state(self) -> str | None:
        return _cancel_state(self.cancel, self.counts[SlotStatus.CLAIMED.value].value > 0)

    @property
    def done(self) -> int:
        return sum(self.counts[s].value for s in _SETTLED_DONE)

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(self.total - self.done, 0)

    @property
    def eta_seconds(self) -> float | None:
        remaining = self.remaining
        if remaining is None or self.rate <= 0 or self.state == CampaignState.STALLED:
            return None  # a stalled campaign's recent rate is a dead run's
        if self.waiting:
            return None  # rows wait for their hour: the end is not the rate's to tell
        return remaining / self.rate

    def as_json(self) -> dict[str, Any]:
        """What the live page polls: numbers and times only, never a message."""
        return {
            "action": self.action,
            "campaign": self.campaign,
            "counts": {s: c.value for s, c in self.counts.items()},
            "done": self.done,
            "total": self.total,
            "remaining": self.remaining,
            "rate": round(self.rate, 2),
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds),
            "unknown": self.counts[SlotStatus.UNKNOWN.value].value,
            "per_minute": self.per_minute,
            "last_sent_at": None if self.last_sent_at is None else self.last_sent_at.isoformat(),
            "cancel": self.cancel,
            "cancel_state": self.cancel_state,
            "state": self.state,
            "waiting": self.waiting,
            "capped": self.capped,
        }


@dataclass(frozen=True)
class SlotRow:
    """One slot as a page shows it: its key, status and times, never a message."""

    id: int
    action: str
    subject: str
    cycle: str
    status: str
    attempt: int
    updated_at: dt.datetime
    sent_at: dt.datetime | None
    last_error: str | None
    lease_until: dt.datetime


@dataclass(frozen=True)
class ErrorGroup:
    """The slots of one status and action that share an error text (within the sample)."""

    status: str
    action: str
    error: str
    count: int


@dataclass(frozen=True)
class LeaseRow:
    """A claim held now, or one whose lease ran out (``sweep`` settles those)."""

    slot: SlotRow
    seconds_left: float


@dataclass(frozen=True)
class LeaseSummary:
    live: Count
    expired: Count
    expiring: Count  # live, but ending within a minute
    rows: list[LeaseRow] = field(default_factory=list)


@dataclass(frozen=True)
class FloodWait:
    """A 429's wait as the SQL rate store keeps it: a bot's, or one chat's."""

    scope: str
    until: float  # seconds since the epoch, the database's clock
    chat: str | None
    seconds_left: float


def _capped(conn: Connection, where: sa.ColumnElement[bool], cap: int | None) -> Count:
    """``count(*)`` of the rows matching ``where``, reading at most ``cap`` + 1 of them."""
    if cap is None:
        return Count(int(conn.execute(sa.select(sa.func.count()).where(where)).scalar_one()))
    inner = sa.select(sa.literal(1).label("one")).where(where).limit(cap + 1).subquery()
    found = int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())
    return Count(min(found, cap), capped=found > cap)


def _status_counts(
    conn: Connection, t: sa.Table, action: str, cycle: str | None, cap: int | None
) -> dict[str, Count]:
    counts = {}
    for status in STATUSES:
        where = sa.and_(t.c.status == status, t.c.action == action)
        if cycle is not None:
            where = sa.and_(where, t.c.cycle == cycle)
        counts[status] = _capped(conn, where.self_group(), cap)
    return counts


def _actions(conn: Connection, t: sa.Table, limit: int) -> list[str]:
    """The distinct actions, in order: one step of the key index per action."""
    found: list[str] = []
    last: str | None = None
    while len(found) < limit:
        stmt = sa.select(t.c.action).order_by(t.c.action).limit(1)
        if last is not None:
            stmt = stmt.where(t.c.action > last)
        last = conn.execute(stmt).scalar_one_or_none()
        if last is None:
            break
        if last not in RESERVED_ACTIONS:
            found.append(last)
    return found


def _minute(conn: Connection, column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    """``column`` (a UTC timestamp) as the text of its minute, 'YYYY-MM-DD HH:MM'."""
    return driver_class(conn.dialect).minute_text(column)


def _per_minute(
    conn: Connection,
    t: sa.Table,
    action: str,
    now: dt.datetime,
    cycle: str | None = None,
    minutes: int = MINUTES,
) -> list[int]:
    """Sends of ``action`` in each of the last ``minutes`` minutes, oldest first."""
    end = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    start = end - dt.timedelta(minutes=minutes)
    minute = _minute(conn, t.c.sent_at).label("minute")
    where = sa.and_(t.c.action == action, t.c.sent_at >= start)
    if cycle is not None:
        where = sa.and_(where, t.c.cycle == cycle)
    stmt = sa.select(minute, sa.func.count()).where(where).group_by(minute)
    by_minute = {row[0]: int(row[1]) for row in conn.execute(stmt)}
    keys = [(start + dt.timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M") for i in range(minutes)]
    return [by_minute.get(key, 0) for key in keys]


def action_summaries(
    conn: Connection, t: sa.Table, now: dt.datetime, cap: int = COUNT_CAP
) -> list[ActionSummary]:
    """Every action (up to ``MAX_ACTIONS``) with capped counts and its last hour's sends."""
    return [
        ActionSummary(a, _status_counts(conn, t, a, None, cap), _per_minute(conn, t, a, now))
        for a in _actions(conn, t, MAX_ACTIONS)
    ]


#: Campaigns found finished by a count past the cap, so the overview (redrawn every few
#: seconds) counts a big finished campaign's rows once per process, not at every redraw.
#: A finished campaign stays finished: a requeue or a new claim makes a slot left to try
#: (checked before this), a cancel is checked first, and a purge removes its row (a new
#: run of the same id after that has a row of another id and time: another key).
_FINISHED: dict[tuple[object, ...], None] = {}
_FINISHED_MAX = 10_000


def _remember_finished(key: tuple[object, ...]) -> None:
    if len(_FINISHED) >= _FINISHED_MAX:
        _FINISHED.clear()
    _FINISHED[key] = None


def _campaign_state(
    conn: Connection,
    t: sa.Table,
    action: str,
    campaign: str,
    now: dt.datetime,
    *,
    counts: dict[str, Count],
    total: int | None,
    cancel: str | None,
    scheduled_at: dt.datetime | None,
    row: tuple[int, dt.datetime] | None,
    heartbeat: dt.datetime | None = None,
) -> str:
    """The campaign's state (see ``CampaignState``), from its counts and its own keys;
    ``row`` is its campaign row's id and creation time, when it has one, ``heartbeat``
    its row's ``lease_until`` once a run has kept it (None before: judged by the claims
    and the recent sends alone)."""
    if cancel is not None:
        return CampaignState.CANCELLED
    if not any(c.value for c in counts.values()):
        if scheduled_at is not None and scheduled_at > now:
            return CampaignState.SCHEDULED
        return CampaignState.NEVER_STARTED
    own = sa.and_(t.c.action == action, t.c.cycle == campaign)
    live = sa.and_(own, t.c.status == SlotStatus.CLAIMED.value, t.c.lease_until >= now)
    recent = sa.and_(t.c.action == action, t.c.sent_at >= now - RECENT_SEND, t.c.cycle == campaign)
    if heartbeat is not None:
        # A run keeps it ahead of the clock while it sends: past, no run is sending.
        if heartbeat >= now:
            return CampaignState.RUNNING
        if _capped(conn, live, 0).capped:
            return CampaignState.STALLED
    elif _capped(conn, live, 0).capped or _capped(conn, recent, 0).capped:
        return CampaignState.RUNNING
    left = counts[SlotStatus.CLAIMED.value].value + counts[SlotStatus.RELEASED.value].value
    if total and not left:
        # No slot left to try: finished when every recipient has its row. When a capped
        # count cannot tell, its own rows are counted through the key, up to the total.
        done = _done(counts)
        key = (str(t.fullname), action, campaign, row, total)
        if done.capped and key not in _FINISHED:
            done = _capped(conn, own, total)
        if done.value >= total or key in _FINISHED:
            _remember_finished(key)
            return CampaignState.FINISHED
    return CampaignState.STOPPED


def _heartbeat(created_at: dt.datetime, lease_until: dt.datetime) -> dt.datetime | None:
    """The campaign row's heartbeat (its ``lease_until``), or None when no run kept one:
    the row is written with the two equal."""
    return lease_until if lease_until > created_at else None


def _holds(column: sa.ColumnElement[Any], text: str) -> sa.ColumnElement[bool]:
    """``column`` (a key part) holds ``text`` in any case, a LIKE wildcard in it taken as
    itself. Cast to text first: MySQL keeps key parts as bytes, which ``lower`` leaves as
    they are."""
    return sa.cast(column, sa.String()).icontains(text, autoescape=True)


def campaign_summaries(
    conn: Connection,
    t: sa.Table,
    now: dt.datetime,
    cap: int = COUNT_CAP,
    *,
    after: int | None = None,
    search: str | None = None,
    limit: int = MAX_CAMPAIGNS,
) -> list[CampaignSummary]:
    """The campaigns (from the rows broadcasts keep of their message), newest first: up to
    ``limit`` after the row ``after`` (a page's last), those whose id or action holds
    ``search`` when it is given."""
    where = t.c.action == CAMPAIGN_ACTION
    if after is not None:
        where = sa.and_(where, t.c.id < after)
    if search:
        found = sa.or_(_holds(t.c.cycle, search), _holds(t.c.subject, search))
        where = sa.and_(where, found)
    stmt = (
        sa.select(
            t.c.id,
            t.c.subject,
            t.c.cycle,
            t.c.created_at,
            t.c.last_error,
            t.c.token,
            t.c.cycle_at,
            t.c.lease_until,
        )
        .where(where)
        .order_by(t.c.id.desc())
        .limit(limit)
    )
    found_rows = conn.execute(stmt).all()
    waiting = _waiting(conn, t, [(row.subject, row.cycle) for row in found_rows])
    campaigns = []
    for row in found_rows:
        counts = _status_counts(conn, t, row.subject, row.cycle, cap)
        total = int(row.token) or None
        cancel = cancel_note(row.last_error)
        state = _campaign_state(
            conn,
            t,
            row.subject,
            row.cycle,
            now,
            counts=counts,
            total=total,
            cancel=cancel,
            scheduled_at=row.cycle_at,
            row=(row.id, row.created_at),
            heartbeat=_heartbeat(row.created_at, row.lease_until),
        )
        campaigns.append(
            CampaignSummary(
                row.id,
                row.subject,
                row.cycle,
                row.created_at,
                counts,
                cancel,
                total,
                state,
                row.cycle_at,
                waiting.get((row.subject, row.cycle), 0),
            )
        )
    return campaigns


def _waiting(
    conn: Connection, t: sa.Table, keys: list[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """How many recipients wait for their hour, per campaign (action, id) of ``keys``
    that keeps counts per language: one statement, each an equality of the unique key."""
    if not keys:
        return {}
    found = conn.execute(
        sa.select(t.c.subject, t.c.cycle, t.c.last_error).where(
            t.c.action == LANGUAGES_ACTION,
            sa.or_(*(sa.and_(t.c.subject == a, t.c.cycle == c) for a, c in keys)),
        )
    ).all()
    waiting = {}
    for subject, cycle, value in found:
        counts = LanguageCounts.read(value)
        if counts is not None and counts.waiting:
            waiting[(str(subject), str(cycle))] = counts.waiting
    return waiting


def campaign_progress(
    conn: Connection, t: sa.Table, action: str, campaign: str, now: dt.datetime
) -> CampaignProgress:
    """One campaign's exact counts (its own rows only), rate over 5 minutes, ETA."""
    started_at, total, cancel, scheduled_at, own_row = None, None, None, None, None
    heartbeat = None
    row = conn.execute(
        sa.select(
            t.c.id, t.c.created_at, t.c.token, t.c.last_error, t.c.cycle_at, t.c.lease_until
        ).where(t.c.action == CAMPAIGN_ACTION, t.c.cycle == campaign, t.c.subject == action)
    ).first()
    if row is not None:
        started_at = row.created_at
        # The broadcast records its number of recipients in the row's token (0: unknown).
        total = int(row.token) or None
        cancel = cancel_note(row.last_error)
        scheduled_at = row.cycle_at
        own_row = (row.id, row.created_at)
        heartbeat = _heartbeat(row.created_at, row.lease_until)
    counts = _status_counts(conn, t, action, campaign, None)
    # This campaign's sends: the action's last hour from the (action, sent_at) index, each
    # row's cycle checked (never a walk through every row the campaign ever sent).
    per_minute = _per_minute(conn, t, action, now, cycle=campaign)
    window = dt.timedelta(minutes=5)
    recent = _capped(
        conn,
        sa.and_(t.c.action == action, t.c.sent_at >= now - window, t.c.cycle == campaign),
        None,
    ).value
    since = now - window if started_at is None else max(now - window, started_at)
    seconds = max((now - since).total_seconds(), 1.0)
    last_sent_at = conn.execute(
        sa.select(t.c.sent_at)
        .where(t.c.action == action, t.c.cycle == campaign, t.c.sent_at.is_not(None))
        .order_by(t.c.sent_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    state = _campaign_state(
        conn,
        t,
        action,
        campaign,
        now,
        counts=counts,
        total=total,
        cancel=cancel,
        scheduled_at=scheduled_at,
        row=own_row,
        heartbeat=heartbeat,
    )
    return CampaignProgress(
        action,
        campaign,
        started_at,
        counts,
        per_minute,
        recent / seconds,
        total,
        last_sent_at,
        cancel,
        state,
        scheduled_at,
        _waiting(conn, t, [(action, campaign)]).get((action, campaign), 0),
        _capped_chats(conn, t, action, campaign) if counts[_RELEASED].value else 0,
    )


@dataclass(frozen=True)
class DigestSummary:
    """One digest (an action with events beside the ledger): its windows waiting and its
    digests made."""

    action: str
    pending: Count  # events waiting for their digest
    windows: Count  # the (subject, window) pairs they wait in
    due: Count  # of those events, the ones a flush now would take
    next_due: dt.datetime | None  # when the first of them is due
    sent: Count  # digests delivered (the action's sent slots)
    capped: Count  # digests a frequency cap held back (released, "capped")


def digest_summaries(
    conn: Connection, t: sa.Table, now: dt.datetime, cap: int = COUNT_CAP
) -> list[DigestSummary]:
    """Every digest beside the ledger (up to ``MAX_ACTIONS``), its counts capped at
    ``cap``; none without the digest events table (a database not migrated since)."""
    e = build_digest_table(sa.MetaData(), default_digest_table(t.name), t.schema)
    if not sa.inspect(conn).has_table(e.name, schema=e.schema):
        return []
    found: list[DigestSummary] = []
    last: str | None = None
    while len(found) < MAX_ACTIONS:
        # The distinct actions, one step of the due index each.
        stmt = sa.select(e.c.action).order_by(e.c.action).limit(1)
        if last is not None:
            stmt = stmt.where(e.c.action > last)
        last = conn.execute(stmt).scalar_one_or_none()
        if last is None:
            break
        waiting = sa.and_(e.c.action == last, e.c.due_at.is_not(None))
        windows = (
            sa.select(e.c.subject, e.c.window_start).where(waiting).distinct().limit(cap + 1)
        ).subquery()
        n_windows = int(conn.execute(sa.select(sa.func.count()).select_from(windows)).scalar_one())
        next_due = conn.execute(
            sa.select(e.c.due_at).where(waiting).order_by(e.c.due_at).limit(1)
        ).scalar_one_or_none()
        slots = t.c.action == last
        found.append(
            DigestSummary(
                last,
                _capped(conn, waiting, cap),
                Count(min(n_windows, cap), capped=n_windows > cap),
                _capped(conn, sa.and_(waiting, e.c.due_at <= now), cap),
                next_due,
                _capped(conn, sa.and_(slots, t.c.status == SlotStatus.SENT.value), cap),
                _capped(
                    conn,
                    sa.and_(slots, t.c.status == _RELEASED, t.c.last_error == CAPPED_NOTE),
                    cap,
                ),
            )
        )
    return found


def _capped_chats(conn: Connection, t: sa.Table, action: str, campaign: str) -> int:
    """A campaign's chats a frequency cap held back: its released slots that keep the
    reason (read through the campaign's own slots, only when it has released ones)."""
    held = sa.and_(
        t.c.action == action,
        t.c.cycle == campaign,
        t.c.status == _RELEASED,
        t.c.last_error == CAPPED_NOTE,
    )
    return _capped(conn, held, None).value


def campaign_languages(
    conn: Connection, t: sa.Table, action: str, campaign: str
) -> LanguageCounts | None:
    """A personalised campaign's recipients per language and how many wait for their
    hour, as its last run kept them (one look-up of its row's key); None for others."""
    value = conn.execute(
        sa.select(t.c.last_error).where(
            t.c.action == LANGUAGES_ACTION, t.c.subject == action, t.c.cycle == campaign
        )
    ).scalar_one_or_none()
    return LanguageCounts.read(value)


@dataclass(frozen=True)
class RevisionCounts:
    """One revision of a campaign (an edit or its delete) with its slots per status."""

    cycle: str
    label: str  # "edit 2", "delete"
    counts: dict[str, Count]


#: The most revisions a campaign's page lists (each costs a count per status).
MAX_REVISIONS = 20


def campaign_revisions(
    conn: Connection, t: sa.Table, action: str, campaign: str
) -> list[RevisionCounts]:
    """A campaign's revisions, from their own rows (the unique key's range of the
    campaign's id and ``#``), each with its exact counts: edits in order, then the
    delete."""
    rows = conn.execute(
        sa.select(t.c.cycle)
        .where(
            t.c.action == REVISION_ACTION,
            t.c.subject == action,
            t.c.cycle.startswith(campaign + "#", autoescape=True),
        )
        .limit(MAX_REVISIONS)
    ).scalars()
    found = []
    for cycle in rows:
        tail = cycle[len(campaign) + 1 :]
        number = tail[5:] if tail.startswith("edit-") and tail[5:].isdigit() else None
        if number is None and tail != "delete":
            continue
        label = "delete" if number is None else f"edit {number}"
        order = (number is None, int(number or 0))
        found.append(
            (order, RevisionCounts(cycle, label, _status_counts(conn, t, action, cycle, None)))
        )
    return [revision for _, revision in sorted(found, key=lambda item: item[0])]


def _slot(row: Any) -> SlotRow:
    return SlotRow(
        id=row.id,
        action=row.action,
        subject=row.subject,
        cycle=row.cycle,
        status=row.status,
        attempt=row.attempt,
        updated_at=row.updated_at,
        sent_at=row.sent_at,
        last_error=row.last_error,
        lease_until=row.lease_until,
    )


def _slot_columns(t: sa.Table) -> list[sa.Column[Any]]:
    # Never message_id: a campaign's row keeps its message's fingerprint there.
    names = ("id", "action", "subject", "cycle", "status", "attempt", "updated_at", "sent_at")
    return [t.c[n] for n in (*names, "last_error", "lease_until")]


def _older(t: sa.Table, after: int | None) -> sa.ColumnElement[bool]:
    """The rows after row ``after`` in the order latest change first (then highest id)."""
    if after is None:
        return sa.true()
    changed = sa.select(t.c.updated_at).where(t.c.id == after).scalar_subquery()
    return sa.or_(t.c.updated_at < changed, sa.and_(t.c.updated_at == changed, t.c.id < after))


def subject_history(
    conn: Connection, t: sa.Table, subject: str, limit: int = PAGE, after: int | None = None
) -> list[SlotRow]:
    """The slots of one subject across actions and cycles, latest change first: up to
    ``limit`` after the slot ``after`` (the last one of the page before)."""
    stmt = (
        sa.select(*_slot_columns(t))
        .where(
            t.c.subject == subject,
            t.c.action.not_in(sorted(RESERVED_ACTIONS)),
            _older(t, after),
        )
        .order_by(t.c.updated_at.desc(), t.c.id.desc())
        .limit(limit)
    )
    return [_slot(row) for row in conn.execute(stmt)]


def error_slots(
    conn: Connection, t: sa.Table, text: str, limit: int = PAGE, after: int | None = None
) -> list[SlotRow]:
    """Slots left unknown, failed or released whose error holds ``text`` (any case), the
    newest first, up to ``limit`` after the slot ``after``: the status index's rows of
    those statuses, never the sent ones."""
    statuses = (SlotStatus.UNKNOWN.value, SlotStatus.FAILED.value, SlotStatus.RELEASED.value)
    where = sa.and_(
        t.c.status.in_(statuses),
        t.c.action.not_in(sorted(RESERVED_ACTIONS)),
        t.c.last_error.icontains(text, autoescape=True),
    )
    if after is not None:
        where = sa.and_(where, t.c.id < after)
    stmt = sa.select(*_slot_columns(t)).where(where).order_by(t.c.id.desc()).limit(limit)
    return [_slot(row) for row in conn.execute(stmt)]


def error_groups(
    conn: Connection,
    t: sa.Table,
    statuses: Sequence[str] = (SlotStatus.UNKNOWN.value, SlotStatus.FAILED.value),
    sample: int = ERROR_SAMPLE,
) -> tuple[list[ErrorGroup], dict[str, bool]]:
    """Slots of each status grouped by action and error, over at most ``sample`` rows of
    each status; the second value says which statuses had more rows than the sample."""
    groups: list[ErrorGroup] = []
    sampled: dict[str, bool] = {}
    for status in statuses:
        inner = (
            sa.select(t.c.action, t.c.last_error)
            .where(t.c.status == status)
            .limit(sample + 1)
            .subquery()
        )
        rows = conn.execute(sa.select(inner.c.action, inner.c.last_error)).all()
        sampled[status] = len(rows) > sample
        counted: dict[tuple[str, str], int] = {}
        for action, error in rows[:sample]:
            key = (action, error or "")
            counted[key] = counted.get(key, 0) + 1
        groups += [ErrorGroup(status, a, e, n) for (a, e), n in counted.items()]
    groups.sort(key=lambda g: (-g.count, g.status, g.action, g.error))
    return groups, sampled


def problem_slots(
    conn: Connection,
    t: sa.Table,
    status: str,
    action: str,
    error: str | None,
    limit: int = PAGE,
    after: int | None = None,
) -> list[SlotRow]:
    """Up to ``limit`` slots of one status and action (with one error text, if given),
    the newest first, after the slot ``after`` (the last one of the page before)."""
    where = sa.and_(t.c.status == status, t.c.action == action)
    if error is not None:
        where = sa.and_(where, t.c.last_error.is_(None) if error == "" else t.c.last_error == error)
    if after is not None:
        where = sa.and_(where, t.c.id < after)
    stmt = sa.select(*_slot_columns(t)).where(where).order_by(t.c.id.desc()).limit(limit)
    return [_slot(r) for r in conn.execute(stmt)]


def leases(conn: Connection, t: sa.Table, now: dt.datetime, limit: int = 100) -> LeaseSummary:
    """Claims held now and those whose lease expired, the soonest to end first."""
    claimed = t.c.status == SlotStatus.CLAIMED.value
    soon = now + dt.timedelta(minutes=1)
    stmt = sa.select(*_slot_columns(t)).where(claimed).order_by(t.c.lease_until).limit(limit)
    rows = [_slot(r) for r in conn.execute(stmt)]
    return LeaseSummary(
        live=_capped(conn, sa.and_(claimed, t.c.lease_until >= now), COUNT_CAP),
        expired=_capped(conn, sa.and_(claimed, t.c.lease_until < now), COUNT_CAP),
        expiring=_capped(
            conn, sa.and_(claimed, t.c.lease_until >= now, t.c.lease_until < soon), COUNT_CAP
        ),
        rows=[LeaseRow(r, (r.lease_until - now).total_seconds()) for r in rows],
    )


def flood_waits(
    conn: Connection, rate: sa.Table, now: float, within: float = 3600.0, limit: int = 100
) -> list[FloodWait]:
    """Flood waits (429s) the SQL rate store holds that ended in the last ``within``
    seconds or have not ended: a bot's own, and each chat's. The rate table has a row per
    scope that was used recently (its purge drops idle ones), not per send."""
    since = now - within
    stmt = (
        sa.select(rate.c.scope, rate.c.flood_until, rate.c.flood_chat, rate.c.chat_flood_until)
        .where(sa.or_(rate.c.flood_until >= since, rate.c.chat_flood_until >= since))
        .limit(limit)
    )
    waits: list[FloodWait] = []
    for row in conn.execute(stmt):
        if row.flood_until >= since:
            waits.append(FloodWait(row.scope, row.flood_until, None, row.flood_until - now))
        if row.chat_flood_until >= since and row.flood_chat is not None:
            until = row.chat_flood_until
            waits.append(FloodWait(row.scope, until, row.flood_chat, until - now))
    waits.sort(key=lambda w: -w.until)
    return waits
