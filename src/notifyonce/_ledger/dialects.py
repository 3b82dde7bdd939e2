"""The ledger's statements on each database: one class per database.

`LedgerCore` holds what every database shares (transactions, tokens, results) and asks
its `Dialect` for the statements of the send path: their SQL, how many keys one
statement carries, and how the statements a call needs are batched and run. What the
database itself is and can do (row locks, its clock, its errors, one writer at a time) is
its driver's (``notifyonce._drivers``), which the dialect is made with. The core never
compares dialect names.

Every statement on the send path finds its rows through an index by the keys it was
given: the unique ``(action, cycle, subject)`` index for claims and look-ups, the primary
key for marks and renewals. None reads the other rows of its campaign, so a campaign's
millionth batch costs what its first did.

=================  =======================  ==========================  ==================
                   PostgreSQL               MySQL / MariaDB             SQLite
=================  =======================  ==========================  ==================
claim              ON CONFLICT, RETURNING   ON DUPLICATE KEY, read back  ON CONFLICT,
                                                                         RETURNING
many keys          one statement (unnest    one multi-row VALUES        one statement per
                   of arrays)                                           key (in process)
look-up            join on unnest(cycles,   (cycle, subject) IN ((..))  one statement per
                   subjects)                                            key (in process)
mark many          one UPDATE ... FROM      lock, then one UPDATE       one UPDATE per row
                   unnest RETURNING         joined to the values        (in process)
marks and claims   one statement (two       one transaction             one transaction
                   data-modifying CTEs)
claim lanes        one                      one                         one
=================  =======================  ==========================  ==================

SQLite is a library in the process: a statement costs no round trip, so it gets the
simplest plan for each key (an index search by the whole key) instead of a batch shape.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect as SADialect

from notifyonce._drivers import Driver, MySQLDriver, PostgreSQLDriver, SQLiteDriver
from notifyonce._drivers.execute import Compiled, Link
from notifyonce._errors import ValidationError
from notifyonce._keys import SlotKey
from notifyonce._ledger.table import SlotStatus, index_names

__all__ = [
    "Dialect",
    "MarkRow",
    "MySQL",
    "PostgreSQL",
    "SQLite",
    "dialect_for",
    "mark_params",
    "takeover",
]

_CLAIMED = SlotStatus.CLAIMED.value
_SENT = SlotStatus.SENT.value
_MARKED = "marked"  # the rows of `PostgreSQL.write` that are marks, not claims

#: One mark of ``mark_many``: (row id, token, status, detail, attempt). ``detail`` is the
#: message id for SENT and the error otherwise (None keeps the stored error); ``attempt`` is
#: the row's attempt count to write: the claim's own, or one less for a release that was
#: certainly not delivered (it gives its attempt back).
MarkRow = tuple[int, int, str, "str | None", int]


def takeover(table: sa.Table, take_expired: bool, limited: bool) -> sa.ColumnElement[bool]:
    """When an existing row may be won again (read from the row before the update)."""
    t = table.c
    # A released slot was certainly not delivered (or its uncertain attempt still had
    # attempts left): it is always won again. max_attempts bounds only the take-over
    # of expired claims, whose worker may have sent before it died.
    cond: sa.ColumnElement[bool] = t.status == SlotStatus.RELEASED.value
    if take_expired:
        now = sa.bindparam("now", type_=t.lease_until.type)
        expired = sa.and_(t.status == _CLAIMED, t.lease_until < now)
        if limited:
            limit = sa.bindparam("max_attempts", type_=sa.Integer())
            expired = sa.and_(expired, t.attempt < limit)
        cond = sa.or_(cond, expired)
    return cond


def _bind(table: sa.Table, column: str, name: str | None = None) -> Any:
    return sa.bindparam(name or column, type_=table.c[column].type)


def _values(table: sa.Table, rows: int) -> Any:
    """VALUES for ``rows`` rows: per-row key and token, the shared columns bound once."""
    shared = {
        "action": _bind(table, "action"),
        "status": sa.literal(_CLAIMED, table.c.status.type),
        "attempt": sa.literal(1, table.c.attempt.type),
        "lease_until": _bind(table, "lease_until"),
        "created_at": _bind(table, "created_at", "now"),
        "updated_at": _bind(table, "updated_at", "now"),
    }
    values = [
        {
            **shared,
            "subject": _bind(table, "subject", f"subject_{i}"),
            "cycle": _bind(table, "cycle", f"cycle_{i}"),
            "cycle_at": _bind(table, "cycle_at", f"cycle_at_{i}"),
            "token": _bind(table, "token", f"token_{i}"),
        }
        for i in range(rows)
    ]
    return values[0] if rows == 1 else values


def _numbered(params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]) -> None:
    """The per-row parameters of a VALUES list (``subject_0``, ``token_0``...)."""
    for i, (key, token) in enumerate(zip(ordered, tokens, strict=True)):
        params[f"subject_{i}"] = key.subject
        params[f"cycle_{i}"] = key.cycle
        params[f"cycle_at_{i}"] = key.cycle_at
        params[f"token_{i}"] = token


def _numbered_one(params: dict[str, Any], key: SlotKey, token: int) -> None:
    """`_numbered` of one row: the same names and values, without formatting them."""
    params["subject_0"] = key.subject
    params["cycle_0"] = key.cycle
    params["cycle_at_0"] = key.cycle_at
    params["token_0"] = token


def _on_conflict_claim(
    table: sa.Table, insert: Any, take_expired: bool, limited: bool
) -> sa.ClauseElement:
    """``insert`` (PostgreSQL's or SQLite's) as a claim: a conflicting row is taken over
    only when `takeover` allows, and RETURNING lists exactly the won rows.

    When the WHERE is false the conflicting row is left alone and returns nothing, as with
    DO NOTHING.
    """
    t = table.c
    excluded = insert.excluded
    claim: sa.ClauseElement = insert.on_conflict_do_update(
        index_elements=[t.action, t.cycle, t.subject],
        set_={
            "status": _CLAIMED,
            "attempt": t.attempt + 1,
            "token": excluded.token,
            "lease_until": excluded.lease_until,
            "updated_at": excluded.updated_at,
            "sent_at": None,
            "message_id": None,
        },
        where=takeover(table, take_expired, limited),
    ).returning(t.id, t.token, t.attempt)
    return claim


# Statements are planned anew after 2**5 runs, then each time their runs double (up to
# 2**25): see `PostgreSQL`.
_REPLAN_AFTER = 5
_REPLAN_LAST = 1 << 20


def _bucket(count: int) -> int:
    """The next power of two: IN lists padded to it share a handful of compiled shapes."""
    return 1 << max(count - 1, 0).bit_length()


def _padded(values: Sequence[Any], size: int) -> list[Any]:
    """``values`` repeated at the end up to ``size`` (harmless inside an IN list)."""
    return [*values, *[values[-1]] * (size - len(values))]


class Dialect:
    """The ledger's statements on one database. Subclasses write them; one per database."""

    #: The driver class of the database these statements are for.
    driver_class: ClassVar[type[Driver]]
    #: A claim is one statement (so it may run in autocommit where that is cheaper).
    claim_is_one_statement: ClassVar[bool] = True
    #: ``mark_many`` of any size is one statement.
    mark_is_one_statement: ClassVar[bool] = False
    #: `write` (marks and a claim together) is one statement.
    write_is_one_statement: ClassVar[bool] = False
    #: ``claim_many``'s default chunk: keys per statement and transaction.
    claim_chunk: ClassVar[int] = 500
    #: Each statement's text changes as its runs double (see `PostgreSQL`).
    replans: ClassVar[bool] = False
    #: Claim statements a run may have out at once: one, for every worker ready, on every
    #: database. Each statement costs both sides about as much as its rows do (a commit, a
    #: round trip; on PostgreSQL, 5,000 notifications, 16 workers, a fresh table: two lanes
    #: of 8 took 47 us of the client's CPU and 48 us of the server's per notification, one
    #: of 16 took 36 and 34, at the same rate on an idle machine and a faster one on a busy
    #: one), and where inserts wait for each other (a gap lock, one writer) a second lane
    #: has nothing to gain.
    claim_lanes: ClassVar[int] = 1
    #: Why a claim's commit cannot be told to wait for a standby here (see
    #: `wait_for_standby`); None where it can.
    no_standby_wait: ClassVar[str | None] = None

    def __init__(self, table: sa.Table, driver: Driver) -> None:
        self.table = table
        self.driver = driver
        # The level every claim's commit asks for (None: the server's own setting).
        self.synchronous_commit: str | None = None
        # Statements per (shape, driver): built and compiled once, kept for the ledger's life.
        self._compiled: dict[tuple[object, ...], Compiled] = {}
        self._runs: dict[tuple[object, ...], int] = {}
        self._generations: dict[tuple[object, ...], tuple[int, Compiled]] = {}

    # -- compiled statements ----------------------------------------------------------

    def compiled(
        self,
        sa_dialect: SADialect,
        shape: tuple[object, ...],
        build: Callable[..., sa.ClauseElement],
        *args: Any,
    ) -> Compiled:
        """The statement of ``shape`` compiled for ``sa_dialect``'s driver, built once (by
        ``build(*args)``: a call that finds it built makes no closure for it)."""
        key = (*shape, sa_dialect.driver, sa_dialect.paramstyle)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = Compiled(build(*args), sa_dialect)
        if not self.replans:
            return found
        runs = self._runs[key] = self._runs.get(key, 0) + 1
        generation = min(max(runs - 1, 0) >> _REPLAN_AFTER, _REPLAN_LAST).bit_length()
        if generation == 0:
            return found
        current = self._generations.get(key)
        if current is None or current[0] != generation:
            # A new text: the driver prepares it anew, and the server plans it afresh.
            variant = found.with_sql(f"{found.sql} /* notifyonce plan {generation} */")
            current = self._generations[key] = (generation, variant)
        return current[1]

    # -- durability across a failover -------------------------------------------------

    def wait_for_standby(self, level: str) -> None:
        """Make every statement that claims commit at ``level`` (``synchronous_commit``),
        checked already: its commit waits for a synchronous standby. Raises
        ValidationError where the database has no such setting."""
        if self.no_standby_wait is not None:
            raise ValidationError("synchronous_commit", self.no_standby_wait)
        self.synchronous_commit = level

    def durability(self, link: Link) -> tuple[bool, str]:
        """Whether a failover can lose a committed claim here, and one line saying why."""
        raise NotImplementedError

    def text(self, value: Any) -> str:
        """A key column as read from the driver, as text."""
        if isinstance(value, (bytes, bytearray, memoryview)):  # a binary key (MySQL)
            return bytes(value).decode("utf-8")
        return value  # type: ignore[no-any-return]

    # -- claims -----------------------------------------------------------------------

    def claim(
        self,
        link: Link,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Sequence[Any]:
        """Claim ``ordered`` (sorted, one action); the won rows (``id``, ``token``, ``attempt``).

        ``params`` holds ``action``, ``lease_until``, ``now`` and, when ``limited``,
        ``max_attempts``.
        """
        raise NotImplementedError

    def claim_compiled(
        self,
        sa_dialect: SADialect,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Compiled | None:
        """`claim` as one compiled statement returning the won rows, its per-key values
        added to ``params``; None where a claim is not one such statement."""
        return None

    def write(
        self,
        link: Link,
        rows: Sequence[MarkRow],
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> tuple[set[int], Sequence[Any]]:
        """`mark_many` of ``rows`` and `claim` of ``ordered``, in the caller's transaction:
        the ids that landed and the won rows. (Default: one after the other.)"""
        landed = self.mark_many(link, rows, params["now"])
        return landed, self.claim(link, params, ordered, tokens, take_expired, limited)

    # -- look-ups ---------------------------------------------------------------------

    def not_claimable(
        self,
        link: Link,
        params: dict[str, Any],
        keys: Sequence[SlotKey],
        take_expired: bool,
        limited: bool,
    ) -> set[tuple[str, str]]:
        """The ``(cycle, subject)`` of ``keys`` whose row a claim would not win now.

        ``params`` holds ``action``, ``now`` and, when ``limited``, ``max_attempts``.
        """
        raise NotImplementedError

    def _lookup_filter(self, take_expired: bool, limited: bool) -> sa.ColumnElement[bool]:
        return sa.not_(takeover(self.table, take_expired, limited))

    # -- marks ------------------------------------------------------------------------

    def mark_one(self, link: Link, columns: tuple[str, ...], params: dict[str, Any]) -> bool:
        """Compare-and-set one row (``m_id``, ``m_token``) to ``columns`` (``m_<column>``)."""
        return link.count(self.mark_compiled(link.dialect, columns), params) == 1

    def mark_compiled(self, sa_dialect: SADialect, columns: tuple[str, ...]) -> Compiled:
        """`mark_one`'s statement for ``columns``, compiled for ``sa_dialect``."""
        return self.compiled(sa_dialect, ("mark", columns), self._build_mark, columns)

    def _build_mark(self, columns: tuple[str, ...]) -> sa.ClauseElement:
        t = self.table
        return (
            sa.update(t)
            .where(
                t.c.id == _bind(self.table, "id", "m_id"),
                t.c.token == _bind(self.table, "token", "m_token"),
                t.c.status == _CLAIMED,
            )
            .values({c: _bind(self.table, c, f"m_{c}") for c in columns})
        )

    def mark_many(self, link: Link, rows: Sequence[MarkRow], now: dt.datetime) -> set[int]:
        """Mark distinct rows, each only while its token holds it; the ids that landed."""
        landed: set[int] = set()
        for row_id, token, status, detail, attempt in rows:
            columns, params = mark_params(row_id, token, status, detail, now, attempt)
            if self.mark_one(link, columns, params):
                landed.add(row_id)
        return landed

    # -- renewals ---------------------------------------------------------------------

    def renew(
        self, link: Link, pairs: Sequence[tuple[int, int]], until: dt.datetime
    ) -> set[tuple[int, int]]:
        """Extend the lease of each (id, token) still claimed by it; the pairs that held."""
        t = self.table

        def build() -> sa.ClauseElement:
            return (
                sa.update(t)
                .where(
                    t.c.id == _bind(t, "id"),
                    t.c.token == _bind(t, "token"),
                    t.c.status == _CLAIMED,
                )
                .values(lease_until=_bind(t, "lease_until", "until"))
            )

        compiled = self.compiled(link.dialect, ("renew-one",), build)
        held: set[tuple[int, int]] = set()
        for row_id, token in pairs:
            if link.count(compiled, {"id": row_id, "token": token, "until": until}) == 1:
                held.add((row_id, token))
        return held


def mark_params(
    row_id: int,
    token: int,
    status: str,
    detail: str | None,
    now: dt.datetime,
    attempt: int | None = None,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The columns one compare-and-set mark writes, and its parameters (`Dialect.mark_one`).

    SENT writes ``sent_at`` and the message id; any other status the error, unless
    ``detail`` is None (the stored error is kept); ``attempt``, when given, the attempt
    count.
    """
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if attempt is not None:
        values["attempt"] = attempt
    if status == _SENT:
        values["sent_at"] = now
        values["message_id"] = detail
    elif detail is not None:
        values["last_error"] = detail
    params = {f"m_{column}": value for column, value in values.items()}
    params["m_id"], params["m_token"] = row_id, token
    return tuple(values), params


class PostgreSQL(Dialect):
    """``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``; many keys as arrays.

    Batches bind one array per column (``unnest``): one statement and one plan whatever
    their size, no parameter limit.

    Plans are made again as the table grows. The drivers prepare a statement that runs
    often, and after five runs PostgreSQL keeps one generic plan for it, estimated from
    the table as it was then. A ledger's first marks run while its table is tiny, where a
    scan of the whole table is the cheapest plan; without a new ANALYZE (autovacuum off, or
    a campaign's first minute before it runs) that plan stayed, and each batch of marks
    read the whole, growing, table. So each statement's text carries a generation that
    changes after 32 runs and whenever its runs double: the driver prepares the new text
    and the server plans it for the table as it is now.
    """

    driver_class = PostgreSQLDriver
    replans = True
    claim_chunk = 5000  # arrays: one statement whatever the size
    mark_is_one_statement = True
    write_is_one_statement = True

    def claim(
        self,
        link: Link,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Sequence[Any]:
        compiled = self.claim_compiled(link.dialect, params, ordered, tokens, take_expired, limited)
        return link.rows(compiled, params)

    def claim_compiled(
        self,
        sa_dialect: SADialect,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Compiled:
        if len(ordered) == 1:
            _numbered_one(params, ordered[0], tokens[0])
            rows = 1
        else:
            _claim_arrays(params, ordered, tokens)
            rows = 0
        shape = ("claim", rows, take_expired, limited)
        return self.compiled(sa_dialect, shape, self._build_claim, rows, take_expired, limited)

    def _build_claim(self, rows: int, take_expired: bool, limited: bool) -> sa.ClauseElement:
        claim = self._claim_insert(rows, take_expired, limited)
        if self.synchronous_commit is None:
            return claim
        claimed = claim.cte("claimed")  # type: ignore[attr-defined]
        return sa.select(claimed.c.id, claimed.c.token, claimed.c.attempt).select_from(
            claimed.join(self._waiting(), sa.true())
        )

    def _claim_insert(self, rows: int, take_expired: bool, limited: bool) -> sa.ClauseElement:
        """The claim's INSERT alone (`write` makes it a CTE of its own statement)."""
        return _on_conflict_claim(self.table, self._insert(rows), take_expired, limited)

    def _waiting(self) -> Any:
        """``set_config('synchronous_commit', <level>, true)`` as a CTE the claim joins.

        The setting is local to the statement's transaction (autocommit: the statement
        itself; inside a caller's transaction: that one), so the commit of the claim waits
        for the synchronous standby and the next statement on the connection (a mark) does
        not: no ``SET`` of its own, no round trip. PostgreSQL reads ``synchronous_commit``
        when it commits, after the statement ran. The CTE calls a volatile function, so it
        is evaluated, not inlined; joined to no won row it need not run: nothing was
        written that a failover could lose. The level is one of three fixed words
        (checked), written into the statement's text."""
        assert self.synchronous_commit is not None
        level = sa.literal_column(f"'{self.synchronous_commit}'", sa.Text)
        name = sa.literal_column("'synchronous_commit'", sa.Text)
        return sa.select(sa.func.set_config(name, level, sa.true()).label("level")).cte("waiting")

    def durability(self, link: Link) -> tuple[bool, str]:
        found = link.scalar(
            "SELECT current_setting('synchronous_standby_names') || '|'"
            " || current_setting('synchronous_commit')"
        )
        names, server_level = str(found).rsplit("|", 1)
        level = self.synchronous_commit or server_level
        source = "the ledger's" if self.synchronous_commit else "the server's"
        if not names.strip():
            return True, (
                "a failover can lose a committed claim: this PostgreSQL names no synchronous "
                "standby (synchronous_standby_names is empty), so no commit waits for one"
            )
        if level not in ("on", "remote_write", "remote_apply"):
            return True, (
                "a failover can lose a committed claim: claims commit with "
                f"synchronous_commit = {level} ({source}), which does not wait for the "
                "synchronous standby; give the ledger synchronous_commit='on'"
            )
        return False, (
            "a failover to a synchronous standby keeps every committed claim: each claim's "
            f"commit waits for synchronous_standby_names ({source} synchronous_commit = {level})"
        )

    def _insert(self, rows: int) -> Any:
        t = self.table
        if rows:
            return postgresql.insert(t).values(_values(t, rows))
        c = t.c
        unnest = (
            sa.func.unnest(
                sa.bindparam("subjects", type_=postgresql.ARRAY(sa.Text)),
                sa.bindparam("cycles", type_=postgresql.ARRAY(sa.Text)),
                sa.bindparam(
                    "cycle_ats", type_=postgresql.ARRAY(postgresql.TIMESTAMP(timezone=True))
                ),
                sa.bindparam("claim_tokens", type_=postgresql.ARRAY(sa.BigInteger)),
            )
            .table_valued("subject", "cycle", "cycle_at", "token")
            .render_derived()
        )
        select = sa.select(
            _bind(t, "action"),
            unnest.c.subject,
            unnest.c.cycle,
            unnest.c.cycle_at,
            sa.literal(_CLAIMED, c.status.type),
            sa.literal(1, c.attempt.type),
            unnest.c.token,
            _bind(t, "lease_until"),
            _bind(t, "created_at", "now"),
            _bind(t, "updated_at", "now"),
        )
        columns = ["action", "subject", "cycle", "cycle_at", "status", "attempt", "token"]
        columns += ["lease_until", "created_at", "updated_at"]
        return postgresql.insert(t).from_select(columns, select)

    def not_claimable(
        self,
        link: Link,
        params: dict[str, Any],
        keys: Sequence[SlotKey],
        take_expired: bool,
        limited: bool,
    ) -> set[tuple[str, str]]:
        # The keys as two arrays, each pair looked up by the whole key in a LATERAL
        # subquery: one index search per pair, whatever the planner knows. (Under
        # ``action = :a``, ``(cycle, subject) IN ((...), ...)`` was planned as a scan of every
        # row of the action and cycle; a plain join on the arrays, once the driver's
        # prepared statement went generic, as a hash join over every row of the action. The
        # LIMIT keeps the subquery from being flattened into such a join.)
        t = self.table

        def build() -> sa.ClauseElement:
            k = _arrays("k", cycles=sa.Text, subjects=sa.Text)
            row = (
                sa.select(t.c.cycle, t.c.subject)
                .where(
                    t.c.action == _bind(t, "action"),
                    t.c.cycle == k.c.cycles,
                    t.c.subject == k.c.subjects,
                    self._lookup_filter(take_expired, limited),
                )
                .limit(sa.literal_column("1"))
                .lateral("x")
            )
            return sa.select(row.c.cycle, row.c.subject).select_from(k.join(row, sa.true()))

        compiled = self.compiled(link.dialect, ("lookup", take_expired, limited), build)
        params["cycles"] = [k.cycle for k in keys]
        params["subjects"] = [k.subject for k in keys]
        return {(cycle, subject) for cycle, subject in link.rows(compiled, params)}

    def mark_many(self, link: Link, rows: Sequence[MarkRow], now: dt.datetime) -> set[int]:
        # One UPDATE joined to the marks as arrays: each mark finds its row by primary key,
        # the compare-and-set is in the WHERE, and RETURNING names the rows that landed.
        # One statement in autocommit: no lock taken beforehand, no BEGIN, no COMMIT.
        if len(rows) == 1:
            return super().mark_many(link, rows, now)
        compiled = self.compiled(link.dialect, ("mark-many",), self._build_marks)
        params: dict[str, Any] = {"now": now}
        _mark_arrays(params, rows)
        return {row_id for (row_id,) in link.rows(compiled, params)}

    def _build_marks(self) -> Any:
        t = self.table
        marks = _arrays(
            "m",
            mark_ids=sa.BigInteger,
            mark_tokens=sa.BigInteger,
            mark_statuses=sa.Text,
            mark_details=sa.Text,
            mark_attempts=sa.Integer,
        )
        # LIMIT (SELECT :mark_count), all of them: a limit the planner cannot read makes
        # it count on a tenth of the marks it expects, one or two, and find each row by its
        # primary key, in the plan made for one call's values as in the one kept for all.
        # (Without it, a young table of a few pages looked cheaper to scan whole and hash
        # against the marks, and a plan made then went on scanning it as it grew: every
        # row of the campaign, in each statement.)
        count = sa.select(sa.bindparam("mark_count", type_=sa.Integer)).scalar_subquery()
        v = sa.select(marks).limit(count).subquery("v")
        return (
            sa.update(t)
            .where(t.c.id == v.c.mark_ids, t.c.token == v.c.mark_tokens, _still_claimed(t))
            .values(_batch_mark_values(t, v.c.mark_statuses, v.c.mark_details, v.c.mark_attempts))
            .returning(t.c.id)
        )

    def write(
        self,
        link: Link,
        rows: Sequence[MarkRow],
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> tuple[set[int], Sequence[Any]]:
        # One statement: the marks' UPDATE and the claims' INSERT as two data-modifying
        # CTEs, their RETURNING rows told apart by a first column ("marked" or "claimed":
        # text, so a test can tell this statement's answer on the wire). They touch distinct
        # rows (a slot is claimed again only once its outcome is written), so neither
        # sees or waits for the other; both commit together, in autocommit.
        def build() -> sa.ClauseElement:
            marked = self._build_marks().cte("marked")
            claim: Any = self._claim_insert(0, take_expired, limited)
            claimed = claim.cte("claimed")
            none = sa.null()
            won = sa.select(sa.literal(_CLAIMED), claimed.c.id, claimed.c.token, claimed.c.attempt)
            if self.synchronous_commit is not None:  # the commit waits (see `_waiting`)
                won = won.select_from(claimed.join(self._waiting(), sa.true()))
            return sa.union_all(
                sa.select(sa.literal(_MARKED), marked.c.id, sa.cast(none, sa.BigInteger), none),
                won,
            )

        compiled = self.compiled(link.dialect, ("write", take_expired, limited), build)
        _mark_arrays(params, rows)
        _claim_arrays(params, ordered, tokens)
        landed: set[int] = set()
        won: list[Any] = []
        for kind, row_id, token, attempt in link.rows(compiled, params):
            if kind == _CLAIMED:
                won.append((row_id, token, attempt))
            else:
                landed.add(row_id)
        return landed, won

    def renew(
        self, link: Link, pairs: Sequence[tuple[int, int]], until: dt.datetime
    ) -> set[tuple[int, int]]:
        t = self.table

        def build() -> sa.ClauseElement:
            v = _arrays("v", ids=sa.BigInteger, tokens=sa.BigInteger)
            return (
                sa.update(t)
                .where(t.c.id == v.c.ids, t.c.token == v.c.tokens, _still_claimed(t))
                .values(lease_until=_bind(t, "lease_until", "until"))
                .returning(t.c.id, t.c.token)
            )

        compiled = self.compiled(link.dialect, ("renew-many",), build)
        params = {"ids": [p[0] for p in pairs], "tokens": [p[1] for p in pairs], "until": until}
        return {(row_id, token) for row_id, token in link.rows(compiled, params)}


def _arrays(name: str, **columns: Any) -> Any:
    """``unnest(:a, :b, ...) AS name(a, b, ...)``: one bound array per column."""
    binds = [sa.bindparam(c, type_=postgresql.ARRAY(item)) for c, item in columns.items()]
    return sa.func.unnest(*binds).table_valued(*columns).render_derived(name=name)


def _claim_arrays(
    params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]
) -> None:
    """The keys and tokens of a claim as the arrays of `PostgreSQL._insert`."""
    params["subjects"] = [k.subject for k in ordered]
    params["cycles"] = [k.cycle for k in ordered]
    params["cycle_ats"] = [k.cycle_at for k in ordered]
    params["claim_tokens"] = list(tokens)


def _mark_arrays(params: dict[str, Any], rows: Sequence[MarkRow]) -> None:
    """Marks as the arrays of `PostgreSQL._build_marks`."""
    params["mark_ids"] = [r[0] for r in rows]
    params["mark_tokens"] = [r[1] for r in rows]
    params["mark_statuses"] = [r[2] for r in rows]
    params["mark_details"] = [r[3] for r in rows]
    params["mark_attempts"] = [r[4] for r in rows]
    params["mark_count"] = len(rows)


def _still_claimed(table: sa.Table) -> sa.ColumnElement[bool]:
    """``status = 'claimed'``, written so that no index serves it: the rows are found by id
    alone, one primary-key search per mark. (With stale statistics a generic plan read the
    status index instead, every claimed row of the table, and joined the marks to them.)"""
    return table.c.status.concat("") == _CLAIMED


def _batch_mark_values(table: sa.Table, status: Any, detail: Any, attempt: Any) -> dict[str, Any]:
    """The SET of a batch mark, from each row's ``status``, ``detail`` and ``attempt``
    (columns of the marks it is joined to): what a single mark writes for that status
    (SENT: sent_at and the message id; otherwise the error, unless the detail is None)."""
    t = table.c
    now = _bind(table, "updated_at", "now")
    sent = status == _SENT
    return {
        "status": status,
        "attempt": attempt,
        "updated_at": now,
        "sent_at": sa.case((sent, _bind(table, "sent_at", "now")), else_=t.sent_at),
        "message_id": sa.case((sent, detail), else_=t.message_id),
        "last_error": sa.case(
            (sa.and_(sa.not_(sent), detail.is_not(None)), detail), else_=t.last_error
        ),
    }


class SQLite(Dialect):
    """``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``, one key per statement.

    A statement is a call into the library, not a round trip: each key gets an index
    search by the whole key, inside one ``BEGIN IMMEDIATE`` transaction per batch.
    """

    driver_class = SQLiteDriver
    no_standby_wait = (
        "is a PostgreSQL setting: SQLite has no standby for a commit to wait for; leave it None"
    )

    def durability(self, link: Link) -> tuple[bool, str]:
        return False, (
            "SQLite has no standby and no failover: a committed claim is lost only with the "
            "database file"
        )

    def claim(
        self,
        link: Link,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Sequence[Any]:
        t = self.table

        def build() -> sa.ClauseElement:
            insert = sqlite.insert(t).values(_values(t, 1))
            return _on_conflict_claim(t, insert, take_expired, limited)

        compiled = self.compiled(link.dialect, ("claim", take_expired, limited), build)
        won: list[Any] = []
        for key, token in zip(ordered, tokens, strict=True):
            params["subject_0"] = key.subject
            params["cycle_0"] = key.cycle
            params["cycle_at_0"] = key.cycle_at
            params["token_0"] = token
            won += link.rows(compiled, params)
        return won

    def not_claimable(
        self,
        link: Link,
        params: dict[str, Any],
        keys: Sequence[SlotKey],
        take_expired: bool,
        limited: bool,
    ) -> set[tuple[str, str]]:
        t = self.table

        def build() -> sa.ClauseElement:
            return sa.select(t.c.cycle, t.c.subject).where(
                t.c.action == _bind(t, "action"),
                t.c.cycle == _bind(t, "cycle"),
                t.c.subject == _bind(t, "subject"),
                self._lookup_filter(take_expired, limited),
            )

        compiled = self.compiled(link.dialect, ("lookup-one", take_expired, limited), build)
        taken: set[tuple[str, str]] = set()
        for key in keys:
            params["cycle"], params["subject"] = key.cycle, key.subject
            if link.rows(compiled, params):
                taken.add((key.cycle, key.subject))
        return taken


class MySQL(Dialect):
    """MySQL and MariaDB: ``INSERT ... ON DUPLICATE KEY UPDATE``, then read back by token.

    Key lists are ``(cycle, subject) IN ((...), ...)`` under ``action = :a``, which both
    servers plan as a range of index searches by the whole key.
    """

    driver_class = MySQLDriver
    claim_is_one_statement = False
    no_standby_wait = (
        "is a PostgreSQL setting: MariaDB and MySQL wait for a replica only as the server is "
        "configured (semi-synchronous replication, rpl_semi_sync_master_wait_point = "
        "AFTER_SYNC), not per transaction; leave it None"
    )

    def durability(self, link: Link) -> tuple[bool, str]:
        return True, (
            "a failover can lose a committed claim unless the server waits for a replica "
            "(semi-synchronous replication, wait point AFTER_SYNC): notifyonce does not read "
            "MariaDB's or MySQL's replication settings"
        )

    def claim(
        self,
        link: Link,
        params: dict[str, Any],
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
        take_expired: bool,
        limited: bool,
    ) -> Sequence[Any]:
        # One multi-row VALUES statement. (PyMySQL's executemany cannot batch an
        # ON DUPLICATE KEY UPDATE clause that has parameters of its own.)
        _numbered(params, ordered, tokens)
        rows = len(ordered)
        shape = ("claim", rows, take_expired, limited)
        compiled = self.compiled(
            link.dialect, shape, lambda: self._build_claim(rows, take_expired, limited)
        )
        link.count(compiled, params)
        return self._read_back(link, params["action"], ordered, tokens)

    def _build_claim(self, rows: int, take_expired: bool, limited: bool) -> sa.ClauseElement:
        """MySQL applies the assignments left to right and each one sees the columns already
        assigned. So the take-over condition is evaluated exactly once, in the first
        assignment (the token); every later assignment asks "does the row now carry this
        statement's fresh token?" instead of re-reading status, lease or attempt, which
        would already be overwritten. rowcount cannot tell a win apart (with
        CLIENT_FOUND_ROWS an untouched duplicate counts too), so the winners are the rows
        that carry our tokens when read back in the same transaction.
        """
        t = self.table
        stmt = mysql.insert(t).values(_values(t, rows))
        new = stmt.inserted
        won = t.c.token == new.token

        def if_won(value: Any, column: sa.Column[Any]) -> Any:
            return sa.func.IF(won, value, column, type_=column.type)

        return stmt.on_duplicate_key_update(
            [
                ("token", sa.func.IF(takeover(t, take_expired, limited), new.token, t.c.token)),
                ("status", if_won(_CLAIMED, t.c.status)),
                ("attempt", if_won(t.c.attempt + 1, t.c.attempt)),
                ("lease_until", if_won(new.lease_until, t.c.lease_until)),
                ("updated_at", if_won(new.updated_at, t.c.updated_at)),
                ("sent_at", if_won(sa.null(), t.c.sent_at)),
                ("message_id", if_won(sa.null(), t.c.message_id)),
            ]
        )

    def _by_key(self, select: sa.Select[Any]) -> sa.Select[Any]:
        """``select`` told to search the ``(action, cycle, subject)`` key. Left to itself,
        MariaDB plans ``(cycle, subject) IN`` a few pairs (4 or 16 of them, not 200) as a
        read of every row of the action, the key's first column only, the pairs a filter:
        323,400 rows read for 64 keys in a campaign of a million, which made the campaign
        quadratic. Named, the key is searched for each pair."""
        key = index_names(self.table.name)["key"]
        return select.with_hint(self.table, f"FORCE INDEX ({key})")

    def _pairs(self, size: int) -> sa.ColumnElement[bool]:
        """``(cycle, subject) IN`` ``size`` bound pairs (``c_0``, ``s_0``...)."""
        t = self.table
        pairs = [
            sa.tuple_(_bind(t, "cycle", f"c_{i}"), _bind(t, "subject", f"s_{i}"))
            for i in range(size)
        ]
        return sa.tuple_(t.c.cycle, t.c.subject).in_(pairs)

    @staticmethod
    def _pair_params(params: dict[str, Any], keys: Sequence[SlotKey], size: int) -> None:
        for i, key in enumerate(_padded(keys, size)):
            params[f"c_{i}"] = key.cycle
            params[f"s_{i}"] = key.subject

    def _read_back(
        self, link: Link, action: str, ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> Sequence[Any]:
        """The rows of ``ordered`` that carry one of ``tokens`` (the won ones)."""
        t = self.table
        size = _bucket(len(ordered))

        def build() -> sa.ClauseElement:
            return self._by_key(
                sa.select(t.c.id, t.c.token, t.c.attempt).where(
                    t.c.action == _bind(t, "action"),
                    self._pairs(size),
                    t.c.token.in_([_bind(t, "token", f"k_{i}") for i in range(size)]),
                )
            )

        compiled = self.compiled(link.dialect, ("read-back", size), build)
        params: dict[str, Any] = {"action": action}
        self._pair_params(params, ordered, size)
        for i, token in enumerate(_padded(tokens, size)):
            params[f"k_{i}"] = token
        return link.rows(compiled, params)

    def not_claimable(
        self,
        link: Link,
        params: dict[str, Any],
        keys: Sequence[SlotKey],
        take_expired: bool,
        limited: bool,
    ) -> set[tuple[str, str]]:
        t = self.table
        size = _bucket(len(keys))

        def build() -> sa.ClauseElement:
            return self._by_key(
                sa.select(t.c.cycle, t.c.subject).where(
                    t.c.action == _bind(t, "action"),
                    self._pairs(size),
                    self._lookup_filter(take_expired, limited),
                )
            )

        compiled = self.compiled(link.dialect, ("lookup", size, take_expired, limited), build)
        self._pair_params(params, keys, size)
        text = self.text
        return {(text(cycle), text(subject)) for cycle, subject in link.rows(compiled, params)}

    def mark_many(self, link: Link, rows: Sequence[MarkRow], now: dt.datetime) -> set[int]:
        # Lock the rows still claimed by these tokens, then one UPDATE joined to the marks
        # of those rows. (The lock makes the landed set exact: MySQL's UPDATE has no
        # RETURNING, and its row count cannot tell which rows matched.)
        if len(rows) == 1:
            return super().mark_many(link, rows, now)
        t = self.table
        size = _bucket(len(rows))

        def build_lock() -> sa.ClauseElement:
            ids = [_bind(t, "id", f"i_{n}") for n in range(size)]
            return (
                sa.select(t.c.id, t.c.token)
                .where(t.c.id.in_(ids), t.c.status == _CLAIMED)
                .with_for_update()
            )

        lock = self.compiled(link.dialect, ("mark-lock", size), build_lock)
        ids = sorted(r[0] for r in rows)
        live = {
            (row_id, token)
            for row_id, token in link.rows(
                lock, {f"i_{n}": row_id for n, row_id in enumerate(_padded(ids, size))}
            )
        }
        mine = [r for r in rows if (r[0], r[1]) in live]
        if not mine:
            return set()
        count = len(mine)

        def build_update() -> sa.ClauseElement:
            v = sa.union_all(
                *[
                    sa.select(
                        _bind(t, "id", f"i_{n}").label("id"),
                        _bind(t, "token", f"k_{n}").label("token"),
                        _bind(t, "status", f"s_{n}").label("status"),
                        sa.bindparam(f"d_{n}", type_=sa.String(500)).label("detail"),
                        _bind(t, "attempt", f"a_{n}").label("attempt"),
                    )
                    for n in range(count)
                ]
            ).subquery("v")
            return (
                sa.update(t)
                .where(t.c.id == v.c.id, t.c.token == v.c.token, t.c.status == _CLAIMED)
                .values(_batch_mark_values(t, v.c.status, v.c.detail, v.c.attempt))
            )

        update = self.compiled(link.dialect, ("mark-update", count), build_update)
        params: dict[str, Any] = {"now": now}
        for n, (row_id, token, status, detail, attempt) in enumerate(mine):
            params[f"i_{n}"], params[f"k_{n}"] = row_id, token
            params[f"s_{n}"], params[f"d_{n}"] = status, detail
            params[f"a_{n}"] = attempt
        link.count(update, params)
        return {r[0] for r in mine}

    def renew(
        self, link: Link, pairs: Sequence[tuple[int, int]], until: dt.datetime
    ) -> set[tuple[int, int]]:
        t = self.table
        size = _bucket(len(pairs))

        def mine() -> sa.ColumnElement[bool]:
            bound = [
                sa.tuple_(_bind(t, "id", f"i_{n}"), _bind(t, "token", f"k_{n}"))
                for n in range(size)
            ]
            return sa.and_(sa.tuple_(t.c.id, t.c.token).in_(bound), t.c.status == _CLAIMED)

        update = self.compiled(
            link.dialect,
            ("renew-update", size),
            lambda: sa.update(t).where(mine()).values(lease_until=_bind(t, "lease_until", "until")),
        )
        select = self.compiled(
            link.dialect, ("renew-select", size), lambda: sa.select(t.c.id, t.c.token).where(mine())
        )
        params: dict[str, Any] = {"until": until}
        for n, (row_id, token) in enumerate(_padded(pairs, size)):
            params[f"i_{n}"], params[f"k_{n}"] = row_id, token
        link.count(update, params)
        return {(row_id, token) for row_id, token in link.rows(select, params)}


_DIALECTS: tuple[type[Dialect], ...] = (PostgreSQL, MySQL, SQLite)


def dialect_for(driver: Driver, table: sa.Table) -> Dialect:
    """The ledger's statements for ``driver``'s database, on ``table``."""
    for dialect in _DIALECTS:
        if isinstance(driver, dialect.driver_class):
            return dialect(table, driver)
    raise ValidationError("engine", f"the ledger has no statements for {driver.label}")
