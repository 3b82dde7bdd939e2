"""The SQL window filters select exactly the rows window_at would pick, on real databases."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from notifyonce import (
    ValidationError,
    ValidationTypeError,
    deadline_filter,
    schedule_filter,
    window_filter,
    window_filters,
)

from .test_schedule import MSK, UTC, trial_schedule

td = dt.timedelta
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SCHEDULE = trial_schedule()


def users_table(name: str, timezone: bool) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("deadline", sa.DateTime(timezone=timezone), nullable=False),
    )


def sample_deadlines(random_state: int, whole_seconds: bool) -> list[dt.datetime]:
    """A few hundred deadlines around NOW, with every window boundary hit exactly and by
    one second (or microsecond) either side."""
    rng = random.Random(random_state)
    deadlines = []
    for window in SCHEDULE:
        for bound in (window.opens_before, window.closes_before):
            for nudge in (-1, 0, 1):
                step = td(seconds=nudge) if whole_seconds else td(microseconds=nudge)
                deadlines.append(NOW + bound + step)
    while len(deadlines) < 300:
        offset = td(seconds=rng.randint(-3600, 8 * 3600))
        if not whole_seconds:
            offset += td(microseconds=rng.randint(0, 999_999))
        deadlines.append(NOW + offset)
    return deadlines


def stored_form(deadline: dt.datetime, dialect: str, timezone: bool) -> dt.datetime:
    """What the application writes: aware (in any zone) into timestamptz, UTC otherwise."""
    if dialect == "postgresql" and timezone:
        return deadline.astimezone(MSK)
    return deadline.astimezone(UTC).replace(tzinfo=None)


# A session zone far from UTC, so a value bound with the wrong awareness selects wrong rows.
SET_SESSION_ZONE = sa.text("SET LOCAL TIME ZONE 'Asia/Tokyo'")


def read_back(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def moments(rows: dict[int, dt.datetime], random_state: int) -> list[dt.datetime]:
    """NOW, random moments, and moments that put stored deadlines exactly on a boundary."""
    rng = random.Random(random_state)
    stored = sorted(rows.values())
    nows = [NOW, NOW.astimezone(MSK)]
    nows += [NOW + td(seconds=rng.randint(-3600, 3600)) for _ in range(3)]
    for _ in range(3):
        window = rng.choice(SCHEDULE.windows)
        bound = rng.choice([window.opens_before, window.closes_before])
        nows.append(rng.choice(stored) - bound)
    return nows


def expected_actions(rows: dict[int, dt.datetime], now: dt.datetime) -> dict[int, str]:
    found = {}
    for row_id, deadline in rows.items():
        window = SCHEDULE.window_at(deadline, now)
        if window is not None:
            found[row_id] = window.action
    return found


def queries(table: sa.Table, now: dt.datetime) -> Iterator[tuple[str, sa.Select[tuple[int]]]]:
    """One query per window, then the OR of all windows."""
    for window, where in window_filters(table.c.deadline, SCHEDULE, now):
        yield window.action, sa.select(table.c.id).where(where)
    yield "*", sa.select(table.c.id).where(schedule_filter(table.c.deadline, SCHEDULE, now))


def check(expected: dict[int, str], found: dict[str, set[int]]) -> None:
    for window in SCHEDULE:
        wanted = {row_id for row_id, action in expected.items() if action == window.action}
        assert wanted == found[window.action]
    assert set(expected) == found["*"]


@pytest.mark.parametrize("timezone", [True, False], ids=["tz", "naive"])
def test_sync_filters_agree_with_window_at(
    sync_engine: sa.Engine, sync_table: str, timezone: bool
) -> None:
    """For every moment, each window's filter returns exactly the rows whose stored deadline
    window_at puts in that window, boundaries included; the schedule filter returns them all."""
    dialect = sync_engine.dialect.name
    table = users_table(sync_table, timezone)
    table.metadata.create_all(sync_engine)
    deadlines = sample_deadlines(1, whole_seconds=dialect == "mysql")
    with sync_engine.begin() as conn:
        if dialect == "postgresql":
            conn.execute(SET_SESSION_ZONE)
        conn.execute(
            table.insert(),
            [
                {"id": i, "deadline": stored_form(d, dialect, timezone)}
                for i, d in enumerate(deadlines)
            ],
        )
        rows = {i: read_back(d) for i, d in conn.execute(sa.select(table.c.id, table.c.deadline))}
        assert len(deadlines) == len(rows)
        checked = 0
        for now in moments(rows, 2):
            found = {name: set(conn.scalars(query)) for name, query in queries(table, now)}
            expected = expected_actions(rows, now)
            check(expected, found)
            checked += len(expected)
        assert checked > 0
        # The deadlines whose windows fell entirely inside a 2-hour outage.
        last, now = NOW - td(hours=2), NOW
        for window, skipped in SCHEDULE.missed(last, now):
            selected = set(
                conn.scalars(
                    sa.select(table.c.id).where(deadline_filter(table.c.deadline, skipped))
                )
            )
            wanted = {i for i, d in rows.items() if window in SCHEDULE.missed_windows(d, last, now)}
            assert wanted == selected


@pytest.mark.parametrize("timezone", [True, False], ids=["tz", "naive"])
async def test_async_filters_agree_with_window_at(
    async_engine: AsyncEngine, async_table: str, timezone: bool
) -> None:
    """The same agreement through each async driver (asyncpg binds types strictly)."""
    dialect = async_engine.dialect.name
    table = users_table(async_table, timezone)
    async with async_engine.begin() as conn:
        await conn.run_sync(table.metadata.create_all)
        if dialect == "postgresql":
            await conn.execute(SET_SESSION_ZONE)
        deadlines = sample_deadlines(3, whole_seconds=dialect == "mysql")
        await conn.execute(
            table.insert(),
            [
                {"id": i, "deadline": stored_form(d, dialect, timezone)}
                for i, d in enumerate(deadlines)
            ],
        )
        result = await conn.execute(sa.select(table.c.id, table.c.deadline))
        rows = {i: read_back(d) for i, d in result}
        for now in moments(rows, 4):
            found = {
                name: set((await conn.scalars(query)).all()) for name, query in queries(table, now)
            }
            check(expected_actions(rows, now), found)


class _Base(DeclarativeBase):
    pass


class _User(_Base):
    __tablename__ = "users_orm_example"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    trial_ends_at: Mapped[dt.datetime] = mapped_column(sa.DateTime(timezone=True))


@pytest.mark.sqlite
def test_orm_attribute_on_sqlite(tmp_path: object) -> None:
    """A mapped attribute works as the column, and SQLite's naive text compares as UTC."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/orm.sqlite3")
    _Base.metadata.create_all(engine)
    window = SCHEDULE.window("trial_1h")
    inside = NOW + td(hours=1)
    with Session(engine) as session:
        session.add_all(
            [
                _User(id=1, trial_ends_at=inside.replace(tzinfo=None)),
                _User(id=2, trial_ends_at=(NOW + td(hours=2)).replace(tzinfo=None)),
                _User(id=3, trial_ends_at=NOW + window.closes_before),  # closed exactly then
            ]
        )
        session.commit()
        query = sa.select(_User.id).where(
            window_filter(_User.trial_ends_at, window, NOW.astimezone(MSK))
        )
        assert [1] == list(session.scalars(query))
    engine.dispose()


def test_filter_argument_errors() -> None:
    """Bad arguments name the field: a naive now, a non-column, a non-window."""
    table = users_table("users", True)
    window = SCHEDULE.window("trial_1h")
    with pytest.raises(ValidationError) as naive:
        window_filter(table.c.deadline, window, NOW.replace(tzinfo=None))
    assert "now" == naive.value.field
    with pytest.raises(ValidationTypeError) as column:
        window_filter("deadline", window, NOW)  # type: ignore[arg-type]
    assert "column" == column.value.field
    with pytest.raises(ValidationTypeError) as not_window:
        window_filter(table.c.deadline, "trial_1h", NOW)  # type: ignore[arg-type]
    assert "window" == not_window.value.field
    with pytest.raises(ValidationTypeError) as not_schedule:
        schedule_filter(table.c.deadline, [window], NOW)  # type: ignore[arg-type]
    assert "schedule" == not_schedule.value.field
