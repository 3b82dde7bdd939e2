"""SQLAlchemy filters that select the rows whose deadline is in an open window, in the database.

How datetimes are bound: every bound value is computed in UTC. For a column declared
``DateTime(timezone=True)`` it is bound as an aware UTC datetime (PostgreSQL
``timestamptz`` compares instants, whatever the session time zone). For any other
column (``DateTime()``, SQLite, MySQL/MariaDB ``DATETIME``) it is bound as a naive UTC
datetime, so the column must hold UTC wall-clock values: on SQLite, SQLAlchemy stores
datetimes as naive ISO text whatever their ``tzinfo``, so convert to UTC before writing.
SQLAlchemy formats the bound value with the column's own type, so the text comparison
on SQLite matches what it stored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import ColumnElement

from notifyonce._errors import ValidationTypeError
from notifyonce._schedule.schedule import Schedule
from notifyonce._schedule.window import DeadlineRange, Window, to_utc

__all__ = [
    "DeadlineColumn",
    "deadline_filter",
    "schedule_filter",
    "window_filter",
    "window_filters",
]

DeadlineColumn = ColumnElement[Any] | QueryableAttribute[Any]
"""A deadline column: a ``Table`` column (``users.c.trial_ends_at``) or a mapped attribute
(``User.trial_ends_at``)."""


def _column(column: object) -> ColumnElement[Any]:
    if isinstance(column, QueryableAttribute):
        column = column.expression
    if not isinstance(column, ColumnElement):
        raise ValidationTypeError(
            "column",
            f"must be a SQLAlchemy column or mapped attribute, got {type(column).__name__}",
        )
    return column


def _stored_form(column: ColumnElement[Any], value: dt.datetime, naive_utc: bool | None) -> Any:
    if naive_utc is None:
        naive_utc = not getattr(column.type, "timezone", False)
    return value.replace(tzinfo=None) if naive_utc else value


def deadline_filter(
    column: DeadlineColumn, deadlines: DeadlineRange, *, naive_utc: bool | None = None
) -> ColumnElement[bool]:
    """``after < column <= until``: the rows whose deadline is in ``deadlines``.

    Args:
        column: The deadline column or mapped attribute.
        deadlines: The range, e.g. from [`Window.deadline_range`][notifyonce.Window.deadline_range]
            or [`Schedule.missed`][notifyonce.Schedule.missed].
        naive_utc: Bind naive UTC values (True) or aware UTC values (False). By default,
            aware only when the column type is ``DateTime(timezone=True)``.

    Raises:
        ValidationTypeError: ``column`` is not a column or ``deadlines`` not a DeadlineRange.
    """
    col = _column(column)
    if not isinstance(deadlines, DeadlineRange):
        raise ValidationTypeError(
            "deadlines", f"must be a DeadlineRange, got {type(deadlines).__name__}"
        )
    after = _stored_form(col, to_utc("deadlines.after", deadlines.after), naive_utc)
    until = _stored_form(col, to_utc("deadlines.until", deadlines.until), naive_utc)
    return sa.and_(col > after, col <= until)


def window_filter(
    column: DeadlineColumn, window: Window, now: dt.datetime, *, naive_utc: bool | None = None
) -> ColumnElement[bool]:
    """The rows for which ``window`` is open at ``now``: ``window_at(deadline, now) is window``.

    Examples:
        >>> import datetime as dt
        >>> import sqlalchemy as sa
        >>> users = sa.table("users", sa.column("id"),
        ...                  sa.column("trial_ends_at", sa.DateTime(timezone=True)))
        >>> w = Window("trial_1h", opens_before=dt.timedelta(hours=1.2),
        ...            closes_before=dt.timedelta(hours=0.4))
        >>> now = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
        >>> where = window_filter(users.c.trial_ends_at, w, now)
        >>> query = sa.select(users.c.id).where(where)
        >>> sql = str(where.compile(compile_kwargs={"literal_binds": True}))
        >>> print(*sql.split(" AND "), sep=" AND" + chr(10))
        users.trial_ends_at > '2026-11-30 12:24:00+00:00' AND
        users.trial_ends_at <= '2026-11-30 13:12:00+00:00'

    Raises:
        ValidationError: ``now`` is naive; ``column`` or ``window`` has the wrong type.
    """
    if not isinstance(window, Window):
        raise ValidationTypeError("window", f"must be a Window, got {type(window).__name__}")
    return deadline_filter(column, window.deadline_range(now), naive_utc=naive_utc)


def window_filters(
    column: DeadlineColumn, schedule: Schedule, now: dt.datetime, *, naive_utc: bool | None = None
) -> list[tuple[Window, ColumnElement[bool]]]:
    """Each window of ``schedule`` with the filter selecting its rows at ``now``.

    Run one query per window and send that window's action to the rows it returns:

        for window, where in window_filters(users.c.trial_ends_at, trial, now):
            rows = conn.execute(sa.select(users.c.id, users.c.trial_ends_at).where(where))
            ...  # claim and send window.action to each row

    Raises:
        ValidationError: ``now`` is naive; ``column`` or ``schedule`` has the wrong type.
    """
    if not isinstance(schedule, Schedule):
        raise ValidationTypeError("schedule", f"must be a Schedule, got {type(schedule).__name__}")
    return [
        (window, deadline_filter(column, deadlines, naive_utc=naive_utc))
        for window, deadlines in schedule.open_windows(now)
    ]


def schedule_filter(
    column: DeadlineColumn, schedule: Schedule, now: dt.datetime, *, naive_utc: bool | None = None
) -> ColumnElement[bool]:
    """The rows whose deadline is in any open window of ``schedule`` at ``now``.

    Use it to fetch every candidate in one query, then ``schedule.window_at(deadline,
    now)`` tells which window (action) each row is in.

    Raises:
        ValidationError: ``now`` is naive; ``column`` or ``schedule`` has the wrong type.
    """
    return sa.or_(
        *(where for _, where in window_filters(column, schedule, now, naive_utc=naive_utc))
    )
