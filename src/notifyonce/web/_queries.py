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
- errors are grouped over a sample of at most a few thousand rows per status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from notifyonce._campaign import CAMPAIGN_ACTION, RESERVED_ACTIONS, cancel_note
from notifyonce._drivers import driver_class
from notifyonce._ledger.table import SlotStatus

__all__ = [
    "ActionSummary",
    "CampaignProgress",
    "CampaignSummary",
    "Count",
    "ErrorGroup",
    "FloodWait",
    "LeaseRow",
    "LeaseSummary",
    "SlotRow",
    "action_summaries",
    "campaign_progress",
    "campaign_summaries",
    "error_groups",
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
MAX_CAMPAIGNS = 30
MINUTES = 60
STATUSES = tuple(s.value for s in SlotStatus)
_SETTLED_DONE = (SlotStatus.SENT.value, SlotStatus.FAILED.value, SlotStatus.UNKNOWN.value)


@dataclass(frozen=True)
class Count:
    """A count that may have stopped at a cap: the true one is at least ``value``."""

    value: int
    capped: bool = False

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


@dataclass(frozen=True)
class ActionSummary:
    """One action: its slots per status and its sends in each of the last 60 minutes."""

    action: str
    counts: dict[str, Count]
    per_minute: list[int]


@dataclass(frozen=True)
class CampaignSummary:
    """One broadcast campaign (an action and a campaign id) with its slots per status."""

    action: str
    campaign: str
    started_at: dt.datetime
    counts: dict[str, Count]
    cancel: str | None = None  # its cancel request from the console, if any

    @property
    def running(self) -> bool:
        """Some of its chats are claimed right now."""
        return self.counts[SlotStatus.CLAIMED.value].value > 0

    @property
    def cancel_state(self) -> str | None:
        return _cancel_state(self.cancel, self.running)


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

    @property
    def known(self) -> bool:
        """The campaign has its row (a run recorded its message): it can be cancelled."""
        return self.started_at is not None

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
        if remaining is None or self.rate <= 0:
            return None
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


def campaign_summaries(
    conn: Connection, t: sa.Table, cap: int = COUNT_CAP
) -> list[CampaignSummary]:
    """The latest campaigns (from the rows broadcasts keep of their message), newest first."""
    stmt = (
        sa.select(t.c.subject, t.c.cycle, t.c.created_at, t.c.last_error)
        .where(t.c.action == CAMPAIGN_ACTION)
        .order_by(t.c.created_at.desc(), t.c.id.desc())
        .limit(MAX_CAMPAIGNS)
    )
    return [
        CampaignSummary(
            row.subject,
            row.cycle,
            row.created_at,
            _status_counts(conn, t, row.subject, row.cycle, cap),
            cancel_note(row.last_error),
        )
        for row in conn.execute(stmt)
    ]


def campaign_progress(
    conn: Connection, t: sa.Table, action: str, campaign: str, now: dt.datetime
) -> CampaignProgress:
    """One campaign's exact counts (its own rows only), rate over 5 minutes, ETA."""
    started_at, total, cancel = None, None, None
    row = conn.execute(
        sa.select(t.c.created_at, t.c.token, t.c.last_error).where(
            t.c.action == CAMPAIGN_ACTION, t.c.cycle == campaign, t.c.subject == action
        )
    ).first()
    if row is not None:
        started_at = row.created_at
        # The broadcast records its number of recipients in the row's token (0: unknown).
        total = int(row.token) or None
        cancel = cancel_note(row.last_error)
    counts = _status_counts(conn, t, action, campaign, None)
    # The action's sends, not only this campaign's: read from the (action, sent_at) index
    # alone, without a visit to each row for its cycle (two campaigns of one action seldom
    # run at once).
    per_minute = _per_minute(conn, t, action, now)
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
    )


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


def subject_history(conn: Connection, t: sa.Table, subject: str, limit: int = 200) -> list[SlotRow]:
    """Every slot of one subject across actions and cycles, latest change first."""
    stmt = (
        sa.select(*_slot_columns(t))
        .where(t.c.subject == subject, t.c.action.not_in(sorted(RESERVED_ACTIONS)))
        .order_by(t.c.updated_at.desc(), t.c.id.desc())
        .limit(limit)
    )
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
    limit: int = 200,
) -> list[SlotRow]:
    """Up to ``limit`` slots of one status and action (with one error text, if given)."""
    where = sa.and_(t.c.status == status, t.c.action == action)
    if error is not None:
        where = sa.and_(where, t.c.last_error.is_(None) if error == "" else t.c.last_error == error)
    rows = conn.execute(sa.select(*_slot_columns(t)).where(where).limit(limit)).all()
    return sorted((_slot(r) for r in rows), key=lambda s: (s.updated_at, s.id), reverse=True)


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
