"""Audience and AsyncAudience: who is gone and who opted out, kept in the ledger's database.

Every method is a short transaction of plain inserts, deletes and primary-key reads, so
two processes that learn the same thing at once end with one row (an upsert), and a run
asks for a whole batch of recipients in one statement. The work is written once, as sync
functions over a ``Connection``; the async class runs it as the engine's driver runs the
ledger's work (on a SQLite file, in the queue the ledger's calls wait in).

Who imports this: the notifier and the broadcast (to skip before they claim and to
remember what a refusal taught), the bot helpers, the command line and the console.
Nothing here imports any of them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce._audience.table import (
    DEFAULT_RECIPIENT_TABLE_NAME,
    GONE,
    MAX_CATEGORY_LENGTH,
    MAX_DETAIL_LENGTH,
    MAX_RECIPIENT_LENGTH,
    GoneReason,
    build_recipient_table,
    default_recipient_table,
)
from notifyonce._drivers import Driver, driver_for
from notifyonce._drivers.errors import DATABASE_ERRORS, in_transaction, translate
from notifyonce._drivers.execute import Compiled
from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import check_text

__all__ = [
    "AsyncAudience",
    "Audience",
    "AudienceCheck",
    "AudienceCounts",
    "AudienceRow",
    "Gone",
    "OptOut",
    "RecipientState",
    "normalize_category",
    "normalize_recipient",
    "skip_reason",
]

logger = logging.getLogger("notifyonce.audience")
T = TypeVar("T")
_WORD = 32  # the longest `how` and `source`
_IN_CHUNK = 500  # recipients per look-up statement: below every driver's bind limit
_WRITE_CHUNK = 500
_RETRIES = 3  # a deadlock between two writers of the same rows is run again


# -- input -------------------------------------------------------------------------------


def normalize_recipient(recipient: object, field: str = "recipient") -> str:
    """A recipient as stored: a chat id (an int or its text) or ``@channelname``.

    Raises:
        ValidationTypeError: Not an int or a str (a bool is refused too).
        ValidationError: Empty, blank, with spaces around it, longer than 128 characters,
            or with control characters.
    """
    if isinstance(recipient, bool) or not isinstance(recipient, (int, str)):
        raise ValidationTypeError(
            field, f"must be a chat id (an int or a str), got {type(recipient).__name__}"
        )
    text = str(recipient)
    check_text(field, text, MAX_RECIPIENT_LENGTH)
    if text != text.strip():
        raise ValidationError(field, "must not start or end with spaces")
    return text


def normalize_category(category: object) -> str:
    """A category's name (by default a notification's is its action's).

    Raises:
        ValidationTypeError: Not a str.
        ValidationError: Empty, blank, longer than 64 characters or with control characters.
    """
    if not isinstance(category, str):
        raise ValidationTypeError("category", f"must be a str, got {type(category).__name__}")
    return check_text("category", category, MAX_CATEGORY_LENGTH)


def _reason(reason: object) -> GoneReason:
    if isinstance(reason, GoneReason):
        return reason
    if isinstance(reason, str):
        try:
            return GoneReason(reason)
        except ValueError:
            pass
    known = ", ".join(r.value for r in GoneReason)
    raise ValidationError("reason", f"must be a GoneReason ({known}), got {reason!r}")


def _word(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationTypeError(field, f"must be a str, got {type(value).__name__}")
    return check_text(field, value, _WORD)


def _detail(detail: object) -> str | None:
    if detail is None:
        return None
    if not isinstance(detail, str):
        raise ValidationTypeError("detail", f"must be a str or None, got {type(detail).__name__}")
    return detail[:MAX_DETAIL_LENGTH] or None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


# -- what a recipient's rows say -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gone:
    """A recipient that cannot be reached any more.

    Attributes:
        reason: Why (see [`GoneReason`][notifyonce.GoneReason]).
        since: When it was first learned.
        source: Who told: ``"refusal"`` (a send was refused), ``"update"`` (the bot's
            updates), ``"import"``, ``"api"`` (your code), ``"command line"``.
        detail: The provider's words for a refusal, if that is how it was learned.
    """

    reason: GoneReason
    since: dt.datetime
    source: str
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class OptOut:
    """A recipient's opt-out of one category.

    Attributes:
        category: The category opted out of.
        how: How they said so (``"command"``, ``"button"``, ``"import"``, ``"api"``...).
        since: When.
        source: Who recorded it.
    """

    category: str
    how: str
    since: dt.datetime
    source: str


@dataclass(frozen=True, slots=True)
class RecipientState:
    """What the audience knows of one recipient.

    Attributes:
        recipient: The recipient.
        gone: Why it is gone, or None when it can be reached.
        opted_out: Its opt-outs, by category.
    """

    recipient: str
    gone: Gone | None = None
    opted_out: dict[str, OptOut] = field(default_factory=dict)

    def skip_reason(self, category: str, *, transactional: bool = False) -> str | None:
        """Why a notification of ``category`` is not sent to this recipient, or None.

        Examples:
            >>> import datetime as dt
            >>> since = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
            >>> promo = OptOut("promo", "button", since, "api")
            >>> state = RecipientState("42", opted_out={"promo": promo})
            >>> state.skip_reason("promo"), state.skip_reason("trial_6h")
            ('opted out of promo', None)
            >>> state.skip_reason("promo", transactional=True) is None
            True
        """
        if self.gone is not None:
            return f"gone: {self.gone.reason.value}"
        if not transactional and category in self.opted_out:
            return f"opted out of {category}"
        return None


def skip_reason(
    rows: Iterable[tuple[str, str]], category: str, *, transactional: bool, skip_gone: bool
) -> str | None:
    """Why to skip, from a recipient's ``(category, reason)`` rows; None: send.

    A gone row wins over an opt-out; a transactional category ignores opt-outs;
    ``skip_gone=False`` sends to a gone recipient anyway (and its refusal is learned again).
    """
    opted_out = False
    for row_category, reason in rows:
        if row_category == GONE:
            if skip_gone:
                return f"gone: {reason}"
        elif row_category == category and not transactional:
            opted_out = True
    return f"opted out of {category}" if opted_out else None


@dataclass(frozen=True, slots=True)
class AudienceRow:
    """One row of the audience, as listed and exported.

    Attributes:
        recipient: The recipient.
        category: ``None`` for a gone recipient, else the category opted out of.
        reason: The gone reason's value, or how the opt-out was made.
        source: Who recorded it.
        since: When.
        detail: The provider's words, for a recipient learned gone from a refusal.
    """

    recipient: str
    category: str | None
    reason: str
    source: str
    since: dt.datetime
    detail: str | None = None

    @property
    def gone(self) -> bool:
        """Whether this row says the recipient is gone (not an opt-out)."""
        return self.category is None


@dataclass(frozen=True, slots=True)
class AudienceCounts:
    """How many recipients are gone, per reason, and opted out, per category.

    Attributes:
        gone: Recipients gone, per reason's value.
        opted_out: Opt-outs, per category.
    """

    gone: dict[str, int] = field(default_factory=dict)
    opted_out: dict[str, int] = field(default_factory=dict)

    @property
    def total_gone(self) -> int:
        """Every recipient that is gone."""
        return sum(self.gone.values())


# -- the work, once, on a connection ------------------------------------------------------


class _Work:
    """The statements of an audience table, as sync functions over a Connection."""

    def __init__(self, table: sa.Table, driver: Driver) -> None:
        self.table = table
        self.driver = driver
        self._compiled_upsert: Compiled | None = None

    def upsert(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Insert ``rows``; a row that is there takes the new reason, source and detail and
        keeps its first ``since``: two writers of one row end with one. One statement,
        compiled once, run for many rows (the driver's executemany)."""
        compiled = self._upsert(conn.dialect)
        # Sorted: two writers of overlapping rows lock them in the same order.
        rows = sorted(rows, key=lambda r: (r["recipient"], r["category"]))
        for start in range(0, len(rows), _WRITE_CHUNK):
            chunk = rows[start : start + _WRITE_CHUNK]
            conn.exec_driver_sql(compiled.sql, [compiled.args(row) for row in chunk])

    def _upsert(self, dialect: Dialect) -> Compiled:
        # Compiled here once: SQLAlchemy 2.0 has no cache key for an upsert whose update
        # names the excluded (inserted) row, and compiled it on every call.
        if self._compiled_upsert is None:
            t = self.table
            names = ("reason", "source", "detail")
            insert = self.driver.insert(t)
            if self.driver.upsert_returning:  # PostgreSQL and SQLite: ON CONFLICT
                statement = insert.on_conflict_do_update(
                    index_elements=[t.c.recipient, t.c.category],
                    set_={n: insert.excluded[n] for n in names},
                )
            else:  # MySQL and MariaDB
                statement = insert.on_duplicate_key_update({n: insert.inserted[n] for n in names})
            self._compiled_upsert = Compiled(statement, dialect)
        return self._compiled_upsert

    def delete(self, conn: Connection, where: sa.ColumnElement[bool]) -> int:
        return int(conn.execute(sa.delete(self.table).where(where)).rowcount or 0)

    def _by_recipient(
        self, conn: Connection, recipients: Sequence[str], columns: Sequence[sa.Column[Any]]
    ) -> list[Any]:
        """The rows of ``recipients`` (recipient first, then ``columns``), found through the
        primary key: one statement per 500, its plan the driver's."""
        t = self.table
        query = self.driver.rows_by_key(t, t.c.recipient, columns, "recipients")
        found: list[Any] = []
        for start in range(0, len(recipients), _IN_CHUNK):
            chunk = list(recipients[start : start + _IN_CHUNK])
            found += conn.execute(query, {"recipients": chunk}).all()
        return found

    def rows_of(self, conn: Connection, recipients: Sequence[str]) -> list[Any]:
        t = self.table
        columns = [t.c.category, t.c.reason, t.c.source, t.c.since, t.c.detail]
        return self._by_recipient(conn, recipients, columns)

    def screen(
        self, conn: Connection, recipients: Sequence[str]
    ) -> dict[str, list[tuple[str, str]]]:
        t = self.table
        found: dict[str, list[tuple[str, str]]] = {}
        rows = self._by_recipient(conn, recipients, [t.c.category, t.c.reason])
        for recipient, category, reason in rows:
            found.setdefault(recipient, []).append((category, reason))
        return found

    def counts(self, conn: Connection) -> AudienceCounts:
        t = self.table
        gone = conn.execute(
            sa.select(t.c.reason, sa.func.count()).where(t.c.category == GONE).group_by(t.c.reason)
        ).all()
        opted = conn.execute(
            sa.select(t.c.category, sa.func.count())
            .where(t.c.category != GONE)
            .group_by(t.c.category)
        ).all()
        return AudienceCounts(
            gone={str(r): int(n) for r, n in sorted(gone)},
            opted_out={str(c): int(n) for c, n in sorted(opted)},
        )

    def listing(
        self,
        conn: Connection,
        *,
        gone: bool | None,
        reason: str | None,
        category: str | None,
        source: str | None,
        after: tuple[str, str] | None,
        limit: int,
    ) -> list[AudienceRow]:
        t = self.table
        query = sa.select(
            t.c.recipient, t.c.category, t.c.reason, t.c.source, t.c.since, t.c.detail
        )
        if gone is True:
            query = query.where(t.c.category == GONE)
        elif gone is False:
            query = query.where(t.c.category != GONE)
        if reason is not None:
            query = query.where(t.c.reason == reason)
        if category is not None:
            query = query.where(t.c.category == category)
        if source is not None:
            query = query.where(t.c.source == source)
        if after is not None:
            # Keyset paging along the primary key: each page costs the same, however deep.
            # Written as a range on the key's first column, which every planner seeks:
            # MariaDB read the row-value comparison (recipient, category) > (...) as a
            # walk of the key from its start, so each page cost the pages before it.
            recipient, category = after
            query = query.where(
                t.c.recipient >= recipient,
                sa.or_(t.c.recipient > recipient, t.c.category > category),
            )
        query = query.order_by(t.c.recipient, t.c.category).limit(limit)
        return [_row(r) for r in conn.execute(query)]


def _row(row: Any) -> AudienceRow:
    recipient, category, reason, source, since, detail = row
    return AudienceRow(recipient, category or None, reason, source, since, detail)


def _state(recipient: str, rows: Iterable[Any]) -> RecipientState:
    gone: Gone | None = None
    opted: dict[str, OptOut] = {}
    for _, category, reason, source, since, detail in rows:
        if category == GONE:
            gone = Gone(_stored_reason(reason), since, source, detail)
        else:
            opted[category] = OptOut(category, reason, since, source)
    return RecipientState(recipient, gone, opted)


def _stored_reason(value: str) -> GoneReason:
    try:
        return GoneReason(value)
    except ValueError:  # written by a later release, or by hand
        return GoneReason.OTHER


# -- the two front doors ----------------------------------------------------------------


class _Base:
    """What the sync and async audiences share: the table, the checks, the plans."""

    def __init__(
        self,
        engine: sa.Engine | AsyncEngine,
        *,
        table_name: str = DEFAULT_RECIPIENT_TABLE_NAME,
        schema: str | None = None,
    ) -> None:
        if not isinstance(table_name, str) or not table_name:
            raise ValidationError("table_name", "must be a non-empty str")
        self._driver = driver_for(engine)
        self.engine = engine
        self.metadata = sa.MetaData()
        self.table = build_recipient_table(self.metadata, table_name, schema)
        self._work = _Work(self.table, self._driver)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table_name={self.table.name!r})"

    # Each public method is a check of its input (before anything is written) and a plan:
    # sync work on a connection, in a transaction of its own.

    def _plan_gone(
        self, recipients: Iterable[object], reason: object, source: object, detail: object
    ) -> Callable[[Connection], int]:
        why, words = _reason(reason), _detail(detail)
        return self._plan_gone_rows(
            ((normalize_recipient(r), why, words) for r in recipients), _word("source", source)
        )

    def _plan_learned(
        self, learned: Sequence[tuple[str, str, str | None]]
    ) -> Callable[[Connection], int]:
        """What a run learned from refusals: (recipient, reason, provider's words) each."""
        return self._plan_gone_rows(
            (
                (recipient, _reason(reason), _detail(detail))
                for recipient, reason, detail in learned
            ),
            "refusal",
        )

    def _plan_gone_rows(
        self, gone: Iterable[tuple[str, GoneReason, str | None]], source: str
    ) -> Callable[[Connection], int]:
        """One upsert of the gone rows, each recipient once (its last reason)."""
        since = _now()
        rows = {
            recipient: {
                "recipient": recipient,
                "category": GONE,
                "reason": reason.value,
                "source": source,
                "detail": detail,
                "since": since,
            }
            for recipient, reason, detail in gone
        }
        batch = list(rows.values())

        def work(conn: Connection) -> int:
            if batch:
                self._work.upsert(conn, batch)
            return len(batch)

        return work

    def _plan_back(self, recipient: object) -> Callable[[Connection], bool]:
        who = normalize_recipient(recipient)
        t = self.table
        where = sa.and_(t.c.recipient == who, t.c.category == GONE)
        return lambda conn: self._work.delete(conn, where) > 0

    def _plan_opt_out(
        self, recipient: object, category: object, how: object, source: object
    ) -> Callable[[Connection], None]:
        row = {
            "recipient": normalize_recipient(recipient),
            "category": normalize_category(category),
            "reason": _word("how", how),
            "source": _word("source", source),
            "detail": None,
            "since": _now(),
        }
        return lambda conn: self._work.upsert(conn, [row])

    def _plan_opt_in(self, recipient: object, category: object) -> Callable[[Connection], bool]:
        who, what = normalize_recipient(recipient), normalize_category(category)
        t = self.table
        where = sa.and_(t.c.recipient == who, t.c.category == what)
        return lambda conn: self._work.delete(conn, where) > 0

    def _plan_forget(self, recipients: Iterable[object]) -> Callable[[Connection], int]:
        who = sorted({normalize_recipient(r) for r in recipients})
        t = self.table

        def work(conn: Connection) -> int:
            deleted = 0
            for start in range(0, len(who), _IN_CHUNK):
                chunk = who[start : start + _IN_CHUNK]
                deleted += self._work.delete(conn, t.c.recipient.in_(chunk))
            return deleted

        return work

    def _plan_forget_gone(
        self, source: object, since: object, reason: object
    ) -> Callable[[Connection], int]:
        t = self.table
        where: list[sa.ColumnElement[bool]] = [t.c.category == GONE]
        if source is not None:
            where.append(t.c.source == _word("source", source))
        if since is not None:
            if not isinstance(since, dt.datetime) or since.utcoffset() is None:
                raise ValidationError("since", "must be an aware datetime or None")
            where.append(t.c.since >= since)
        if reason is not None:
            where.append(t.c.reason == _reason(reason).value)
        if len(where) == 1:
            raise ValidationError(
                "source",
                "name a source, a since or a reason: forgetting every gone recipient "
                "at once is `forget` of each, on purpose",
            )
        clause = sa.and_(*where)
        return lambda conn: self._work.delete(conn, clause)

    def _plan_state(self, recipient: object) -> Callable[[Connection], RecipientState]:
        who = normalize_recipient(recipient)
        return lambda conn: _state(who, self._work.rows_of(conn, [who]))

    def _plan_states(
        self, recipients: Iterable[object]
    ) -> Callable[[Connection], dict[str, RecipientState]]:
        who = list(dict.fromkeys(normalize_recipient(r) for r in recipients))

        def work(conn: Connection) -> dict[str, RecipientState]:
            rows: dict[str, list[Any]] = {r: [] for r in who}
            for row in self._work.rows_of(conn, who):
                rows[row[0]].append(row)
            return {r: _state(r, found) for r, found in rows.items()}

        return work

    def _plan_listing(
        self,
        gone: bool | None,
        reason: object,
        category: object,
        source: object,
        after: AudienceRow | None,
        limit: object,
    ) -> Callable[[Connection], list[AudienceRow]]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit", f"must be a positive int, got {limit!r}")
        why = None if reason is None else _reason(reason).value
        what = None if category is None else normalize_category(category)
        who = None if source is None else _word("source", source)
        key = None if after is None else (after.recipient, after.category or GONE)
        return lambda conn: self._work.listing(
            conn, gone=gone, reason=why, category=what, source=who, after=key, limit=limit
        )

    def _in_transaction(self, body: Callable[[Connection], T]) -> Callable[[sa.Engine], T]:
        return in_transaction(self._driver, body, _RETRIES)

    def _read(self, body: Callable[[Connection], T]) -> Callable[[sa.Engine], T]:
        """``body``, which only reads, on a connection in autocommit where the database
        makes that cheaper: no BEGIN and no ROLLBACK around one SELECT (a run asks once
        per batch)."""
        driver = self._driver

        def work(engine: sa.Engine) -> T:
            try:
                with engine.connect() as conn:
                    if driver.autocommit_connections:
                        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                    return body(conn)
            except DATABASE_ERRORS as exc:
                raise translate(driver, exc) from exc

        return work

    def _has_table(self, engine: sa.Engine) -> bool:
        t = self.table
        with engine.connect() as conn:
            return sa.inspect(conn).has_table(t.name, schema=t.schema)


class AsyncAudience(_Base):
    """Who cannot be reached and who opted out of what, remembered in your database.

    A recipient the audience knows to be gone (blocked the bot, deleted the account,
    removed the bot from its group) is skipped by every Notifier and Broadcast on this
    database before any claim or request, until it comes back; one opted out of a
    category is skipped by the notifications of that category. The Notifier keeps it up
    to date from what Telegram answers; your bot tells it what its updates say (the
    aiogram and python-telegram-bot helpers do that for you).

    Works on PostgreSQL, MySQL/MariaDB and SQLite. The table is made by the ledger's
    ``create_schema()``, this class's, or the shipped Alembic migration (revision
    ``notifyonce_0007``).

    Args:
        engine: An ``AsyncEngine``; the ledger's is the usual one.
        table_name: The table: ``notifyonce_recipients`` beside the default ledger table,
            ``<ledger table>_recipients`` beside another (see `beside`).
        schema: Its schema.

    Examples:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> async def main() -> list[object]:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     audience = AsyncAudience(engine)
        ...     await audience.create_schema()
        ...     await audience.mark_gone(42, GoneReason.BLOCKED)
        ...     await audience.opt_out(7, "promo", how="button")
        ...     states = await audience.states([42, 7, 8])
        ...     await engine.dispose()
        ...     return [s.skip_reason("promo") for s in states.values()]
        >>> asyncio.run(main())
        ['gone: blocked', 'opted out of promo', None]
    """

    engine: AsyncEngine

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_name: str = DEFAULT_RECIPIENT_TABLE_NAME,
        schema: str | None = None,
    ) -> None:
        given: object = engine
        if not isinstance(given, AsyncEngine):
            hint = "; use Audience for a sync Engine" if isinstance(given, sa.Engine) else ""
            raise ValidationTypeError(
                "engine", f"must be a SQLAlchemy AsyncEngine, got {type(given).__name__}{hint}"
            )
        super().__init__(engine, table_name=table_name, schema=schema)
        self._found: bool | None = None

    @classmethod
    def beside(cls, ledger: Any) -> AsyncAudience:
        """The audience whose table sits beside ``ledger``'s (an ``AsyncLedger``), on its
        engine: the one its Notifier uses unless given another."""
        t = ledger.table
        return cls(ledger.engine, table_name=default_recipient_table(t.name), schema=t.schema)

    async def _do(self, body: Callable[[Connection], T]) -> T:
        return await self._driver.run(self._in_transaction(body))

    async def create_schema(self) -> None:
        """Create the table unless it exists (production: ``notifyonce migrate``)."""
        await self._do(self.metadata.create_all)
        self._found = True

    async def exists(self) -> bool:
        """Whether the table is there (asked once; a Notifier skips nobody without it)."""
        if self._found is None:
            try:
                self._found = await self._driver.run(self._has_table)
            except DATABASE_ERRORS as exc:
                raise translate(self._driver, exc) from exc
        return self._found

    async def mark_gone(
        self,
        recipient: int | str,
        reason: GoneReason | str = GoneReason.BLOCKED,
        *,
        source: str = "api",
        detail: str | None = None,
    ) -> None:
        """Remember that ``recipient`` cannot be reached, until `come_back`.

        Learning it again changes its reason and keeps the first ``since``.

        Raises:
            ValidationError: A bad recipient, reason or source; nothing was written.
            LedgerError: The database failed.
        """
        await self._do(self._plan_gone([recipient], reason, source, detail))

    async def mark_gone_many(
        self,
        recipients: Iterable[int | str],
        reason: GoneReason | str = GoneReason.OTHER,
        *,
        source: str = "import",
    ) -> int:
        """`mark_gone` for many recipients, in one transaction; how many were given
        (each once). Every recipient is checked before anything is written."""
        return await self._do(self._plan_gone(recipients, reason, source, None))

    async def come_back(self, recipient: int | str) -> bool:
        """Forget that ``recipient`` is gone (it unblocked the bot, sent ``/start``, added
        the bot back); its opt-outs stay. Whether it was gone."""
        return await self._do(self._plan_back(recipient))

    async def opt_out(
        self, recipient: int | str, category: str, *, how: str = "api", source: str = "api"
    ) -> None:
        """Stop notifications of ``category`` to ``recipient`` (not transactional ones)."""
        await self._do(self._plan_opt_out(recipient, category, how, source))

    async def opt_in(self, recipient: int | str, category: str) -> bool:
        """Undo `opt_out`; whether there was one."""
        return await self._do(self._plan_opt_in(recipient, category))

    async def forget(self, *recipients: int | str) -> int:
        """Forget everything about ``recipients`` (gone and opt-outs); rows deleted. For a
        recipient marked gone by mistake."""
        return await self._do(self._plan_forget(recipients))

    async def forget_gone(
        self,
        *,
        source: str | None = None,
        since: dt.datetime | None = None,
        reason: GoneReason | str | None = None,
    ) -> int:
        """Forget every gone recipient recorded by ``source``, ``since`` a time, for a
        ``reason`` (at least one of them): how a mistaken import is undone. Rows deleted."""
        return await self._do(self._plan_forget_gone(source, since, reason))

    async def state(self, recipient: int | str) -> RecipientState:
        """What is known of ``recipient``."""
        return await self._do(self._plan_state(recipient))

    async def states(self, recipients: Iterable[int | str]) -> dict[str, RecipientState]:
        """What is known of each recipient (one look-up per 500), keyed by its text."""
        return await self._do(self._plan_states(recipients))

    async def counts(self) -> AudienceCounts:
        """Recipients gone per reason, and opt-outs per category."""
        return await self._do(self._work.counts)

    async def rows(
        self,
        *,
        gone: bool | None = None,
        reason: GoneReason | str | None = None,
        category: str | None = None,
        source: str | None = None,
        after: AudienceRow | None = None,
        limit: int = 1000,
    ) -> list[AudienceRow]:
        """A page of rows in recipient order: gone ones (``gone=True``), opt-outs
        (``False``) or both; pass the last row as ``after`` for the next page."""
        return await self._do(self._plan_listing(gone, reason, category, source, after, limit))

    async def _screen(self, recipients: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """The rows of each of ``recipients`` that has any: one statement per 500."""
        return await self._driver.run(self._read(lambda conn: self._work.screen(conn, recipients)))

    async def _learn(self, learned: Sequence[tuple[str, str, str | None]]) -> int:
        return await self._do(self._plan_learned(learned))


class Audience(_Base):
    """[`AsyncAudience`][notifyonce.AsyncAudience] for sync code, on a sync ``Engine``:
    the same methods, the same table.

    Examples:
        >>> import sqlalchemy as sa
        >>> engine = sa.create_engine("sqlite://")
        >>> audience = Audience(engine)
        >>> audience.create_schema()
        >>> audience.mark_gone("-1001234567890", "kicked", source="update")
        >>> audience.state("-1001234567890").gone.reason
        <GoneReason.KICKED: 'kicked'>
        >>> audience.come_back("-1001234567890")
        True
        >>> engine.dispose()
    """

    engine: sa.Engine

    def __init__(
        self,
        engine: sa.Engine,
        *,
        table_name: str = DEFAULT_RECIPIENT_TABLE_NAME,
        schema: str | None = None,
    ) -> None:
        given: object = engine
        if not isinstance(given, sa.Engine):
            hint = (
                "; use AsyncAudience for an AsyncEngine" if isinstance(given, AsyncEngine) else ""
            )
            raise ValidationTypeError(
                "engine", f"must be a SQLAlchemy Engine, got {type(given).__name__}{hint}"
            )
        super().__init__(engine, table_name=table_name, schema=schema)

    @classmethod
    def beside(cls, ledger: Any) -> Audience:
        """The audience whose table sits beside ``ledger``'s (a ``Ledger``), on its engine."""
        t = ledger.table
        return cls(ledger.engine, table_name=default_recipient_table(t.name), schema=t.schema)

    def _do(self, body: Callable[[Connection], T]) -> T:
        return self._driver.run_sync(self._in_transaction(body))

    def create_schema(self) -> None:
        """See [`AsyncAudience.create_schema`][notifyonce.AsyncAudience.create_schema]."""
        self._do(self.metadata.create_all)

    def mark_gone(
        self,
        recipient: int | str,
        reason: GoneReason | str = GoneReason.BLOCKED,
        *,
        source: str = "api",
        detail: str | None = None,
    ) -> None:
        """See [`AsyncAudience.mark_gone`][notifyonce.AsyncAudience.mark_gone]."""
        self._do(self._plan_gone([recipient], reason, source, detail))

    def mark_gone_many(
        self,
        recipients: Iterable[int | str],
        reason: GoneReason | str = GoneReason.OTHER,
        *,
        source: str = "import",
    ) -> int:
        """See [`AsyncAudience.mark_gone_many`][notifyonce.AsyncAudience.mark_gone_many]."""
        return self._do(self._plan_gone(recipients, reason, source, None))

    def come_back(self, recipient: int | str) -> bool:
        """See [`AsyncAudience.come_back`][notifyonce.AsyncAudience.come_back]."""
        return self._do(self._plan_back(recipient))

    def opt_out(
        self, recipient: int | str, category: str, *, how: str = "api", source: str = "api"
    ) -> None:
        """See [`AsyncAudience.opt_out`][notifyonce.AsyncAudience.opt_out]."""
        self._do(self._plan_opt_out(recipient, category, how, source))

    def opt_in(self, recipient: int | str, category: str) -> bool:
        """See [`AsyncAudience.opt_in`][notifyonce.AsyncAudience.opt_in]."""
        return self._do(self._plan_opt_in(recipient, category))

    def forget(self, *recipients: int | str) -> int:
        """See [`AsyncAudience.forget`][notifyonce.AsyncAudience.forget]."""
        return self._do(self._plan_forget(recipients))

    def forget_gone(
        self,
        *,
        source: str | None = None,
        since: dt.datetime | None = None,
        reason: GoneReason | str | None = None,
    ) -> int:
        """See [`AsyncAudience.forget_gone`][notifyonce.AsyncAudience.forget_gone]."""
        return self._do(self._plan_forget_gone(source, since, reason))

    def state(self, recipient: int | str) -> RecipientState:
        """See [`AsyncAudience.state`][notifyonce.AsyncAudience.state]."""
        return self._do(self._plan_state(recipient))

    def states(self, recipients: Iterable[int | str]) -> dict[str, RecipientState]:
        """See [`AsyncAudience.states`][notifyonce.AsyncAudience.states]."""
        return self._do(self._plan_states(recipients))

    def counts(self) -> AudienceCounts:
        """See [`AsyncAudience.counts`][notifyonce.AsyncAudience.counts]."""
        return self._do(self._work.counts)

    def rows(
        self,
        *,
        gone: bool | None = None,
        reason: GoneReason | str | None = None,
        category: str | None = None,
        source: str | None = None,
        after: AudienceRow | None = None,
        limit: int = 1000,
    ) -> list[AudienceRow]:
        """See [`AsyncAudience.rows`][notifyonce.AsyncAudience.rows]."""
        return self._do(self._plan_listing(gone, reason, category, source, after, limit))


@dataclass(frozen=True, slots=True)
class AudienceCheck:
    """How one run asks its audience: whom to skip for its category, and where to write
    what its refusals taught.

    Attributes:
        audience: The audience asked (its table exists).
        category: The run's category (its action's name unless given).
        transactional: Opt-outs do not apply (a password reset, a receipt).
        skip_gone: Recipients known to be gone are skipped (the default); False sends
            to them anyway.
    """

    audience: AsyncAudience
    category: str
    transactional: bool = False
    skip_gone: bool = True

    async def skips(self, recipients: Sequence[str]) -> dict[str, str]:
        """The recipients to skip, with why: one look-up per 500 recipients."""
        found = await self.audience._screen(list(dict.fromkeys(recipients)))
        skipped: dict[str, str] = {}
        for recipient, rows in found.items():
            reason = skip_reason(
                rows, self.category, transactional=self.transactional, skip_gone=self.skip_gone
            )
            if reason is not None:
                skipped[recipient] = reason
        return skipped

    async def learn(self, learned: Sequence[tuple[str, str, str | None]]) -> int:
        """Remember recipients a refusal showed gone: (recipient, reason, the provider's
        words) each."""
        return await self.audience._learn(learned)
