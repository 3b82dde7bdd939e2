"""What differs between the databases the ledger runs on: one class per database.

`LedgerCore` holds the SQL every database shares and asks its `Dialect` whatever
differs: how a claim statement is built and batched, whether rows can be locked, how the
server's clock is read, which errors are a deadlock worth running again. The core never
compares dialect names.

=================  ======================  ==========================  =====================
                   PostgreSQL              MySQL / MariaDB             SQLite
=================  ======================  ==========================  =====================
claim statement    ON CONFLICT, RETURNING  ON DUPLICATE KEY, read back  ON CONFLICT, RETURNING
many keys          one statement (unnest)  one multi-row VALUES        executemany (cached)
write lock         row locks               row locks                   BEGIN IMMEDIATE
concurrent sweeps  SKIP LOCKED             wait                        one writer
clock              clock_timestamp()       UTC_TIMESTAMP(6)            the host's
deadlock retried   40P01, 40001            1213, 1205                  never
=================  ======================  ==========================  =====================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection

from notifyonce._errors import ValidationError
from notifyonce._keys import SlotKey
from notifyonce._ledger.table import SlotStatus

__all__ = ["Dialect", "MySQL", "PostgreSQL", "SQLite", "dialect_for", "takeover"]

_CLAIMED = SlotStatus.CLAIMED.value
# MySQL/MariaDB: 1213 deadlock victim, 1205 lock wait timeout. The server rolled the
# transaction back, so running it again from the start is safe.
_MYSQL_RETRY_CODES = frozenset({1213, 1205})
# PostgreSQL: deadlock detected, serialization failure (a caller running SERIALIZABLE).
_PG_RETRY_STATES = frozenset({"40P01", "40001"})
# Where a SQLite connection's info remembers the busy timeout the ledger set on it.
_BUSY_TIMEOUT_INFO = "notifyonce_busy_timeout_ms"

Batch = dict[str, Any] | list[dict[str, Any]]


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


def _values(table: sa.Table, rows: int) -> Any:
    """VALUES for ``rows`` rows: per-row key and token, the shared columns bound once.

    One row stays a plain dict: SQLAlchemy caches the compiled form of a single-row
    INSERT, not of a multi-row one.
    """
    t = table.c
    shared = {
        "action": sa.bindparam("action", type_=t.action.type),
        "status": sa.literal(_CLAIMED, t.status.type),
        "attempt": sa.literal(1, t.attempt.type),
        "lease_until": sa.bindparam("lease_until", type_=t.lease_until.type),
        "created_at": sa.bindparam("now", type_=t.created_at.type),
        "updated_at": sa.bindparam("now", type_=t.updated_at.type),
    }
    values = [
        {
            **shared,
            "subject": sa.bindparam(f"subject_{i}", type_=t.subject.type),
            "cycle": sa.bindparam(f"cycle_{i}", type_=t.cycle.type),
            "cycle_at": sa.bindparam(f"cycle_at_{i}", type_=t.cycle_at.type),
            "token": sa.bindparam(f"token_{i}", type_=t.token.type),
        }
        for i in range(rows)
    ]
    return values[0] if rows == 1 else values


def _numbered(params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]) -> None:
    """The per-row parameters of a multi-row VALUES (``subject_0``, ``token_0``...)."""
    for i, (key, token) in enumerate(zip(ordered, tokens, strict=True)):
        params[f"subject_{i}"] = key.subject
        params[f"cycle_{i}"] = key.cycle
        params[f"cycle_at_{i}"] = key.cycle_at
        params[f"token_{i}"] = token


class Dialect:
    """The ledger's questions to one database. Subclasses answer them; one per database."""

    name: ClassVar[str]
    #: SQL that reads the server's clock; None: there is no server (leases on the host's).
    clock_query: ClassVar[str | None] = None
    #: SELECT ... FOR UPDATE locks rows (SQLite locks the whole database instead).
    row_locks: ClassVar[bool] = True
    #: Concurrent sweeps skip each other's locked rows instead of waiting.
    skip_locked: ClassVar[bool] = False
    #: A claim is one statement (so it may run in autocommit where that is cheaper).
    claim_is_one_statement: ClassVar[bool] = True
    #: One statement in its own transaction runs in autocommit (saves BEGIN and COMMIT).
    autocommit_single_statements: ClassVar[bool] = False
    #: An OperationalError means the database is unreachable (SQLite's: "locked", busy).
    operational_error_is_unavailable: ClassVar[bool] = True
    #: One writer at a time (a file lock): the shells queue a process's calls in front of it.
    one_writer: ClassVar[bool] = False

    def __init__(self, table: sa.Table) -> None:
        self.table = table
        # Claim statements per shape (rows, take_expired, max_attempts given), built once.
        self._statements: dict[object, sa.Executable] = {}

    def begin_write(self, conn: Connection, busy_timeout_ms: int) -> None:
        """Start a writing transaction on the ledger's own connection (default: lazily)."""

    def is_retryable(self, orig: object) -> bool:
        """A deadlock or lock timeout whose transaction the server rolled back."""
        return False

    def claim_batch(
        self, params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> tuple[int, Batch]:
        """The parameters of one claim of ``ordered`` and the VALUES rows its statement has."""
        raise NotImplementedError

    def claim_statement(self, rows: int, take_expired: bool, limited: bool) -> sa.Executable:
        """The claim statement for ``rows`` VALUES rows, built once per shape and kept, so
        each call skips building and compiling."""
        shape = (rows, take_expired, limited)
        stmt = self._statements.get(shape)
        if stmt is None:
            stmt = self._statements[shape] = self._build_claim(rows, take_expired, limited)
        return stmt

    def _build_claim(self, rows: int, take_expired: bool, limited: bool) -> sa.Executable:
        raise NotImplementedError

    def run_claim(
        self,
        conn: Connection,
        stmt: sa.Executable,
        batch: Batch,
        action: str,
        ordered: Sequence[SlotKey],
        tokens: Sequence[int],
    ) -> Sequence[Any]:
        """Run the claim; the won rows (``id``, ``token``, ``attempt``)."""
        if self.claim_is_one_statement:  # RETURNING lists exactly the won rows
            return conn.execute(stmt, batch).all()
        conn.execute(stmt, batch)
        return self.read_back(conn, action, ordered, tokens)

    def read_back(
        self, conn: Connection, action: str, ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> Sequence[Any]:
        """Without RETURNING: the rows of ``ordered`` that carry one of ``tokens``."""
        raise NotImplementedError


class _OnConflict(Dialect):
    """PostgreSQL and SQLite: ``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``.

    When the WHERE is false the conflicting row is left alone and returns nothing, as with
    DO NOTHING, so RETURNING lists exactly the won rows.
    """

    insert: ClassVar[Any]

    def _build_claim(self, rows: int, take_expired: bool, limited: bool) -> sa.Executable:
        t = self.table
        stmt = self._insert(rows)
        excluded = stmt.excluded
        claim: sa.Executable = stmt.on_conflict_do_update(
            index_elements=[t.c.action, t.c.cycle, t.c.subject],
            set_={
                "status": _CLAIMED,
                "attempt": t.c.attempt + 1,
                "token": excluded.token,
                "lease_until": excluded.lease_until,
                "updated_at": excluded.updated_at,
                "sent_at": None,
                "message_id": None,
            },
            where=takeover(t, take_expired, limited),
        ).returning(t.c.id, t.c.token, t.c.attempt)
        return claim

    def _insert(self, rows: int) -> Any:
        return type(self).insert(self.table).values(_values(self.table, rows))


class PostgreSQL(_OnConflict):
    name = "postgresql"
    clock_query = "SELECT clock_timestamp()"
    skip_locked = True
    autocommit_single_statements = True
    insert = postgresql.insert

    def is_retryable(self, orig: object) -> bool:
        return getattr(orig, "sqlstate", None) in _PG_RETRY_STATES

    def claim_batch(
        self, params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> tuple[int, Batch]:
        if len(ordered) == 1:
            _numbered(params, ordered, tokens)
            return 1, params
        # Many keys: one statement with four arrays whatever the batch size: no parameter
        # limit, one plan, the same on asyncpg and psycopg. 0 rows: the unnest shape.
        params["subjects"] = [k.subject for k in ordered]
        params["cycles"] = [k.cycle for k in ordered]
        params["cycle_ats"] = [k.cycle_at for k in ordered]
        params["tokens"] = list(tokens)
        return 0, params

    def _insert(self, rows: int) -> Any:
        if rows:
            return super()._insert(rows)
        c = self.table.c
        unnest = (
            sa.func.unnest(
                sa.bindparam("subjects", type_=postgresql.ARRAY(sa.Text)),
                sa.bindparam("cycles", type_=postgresql.ARRAY(sa.Text)),
                sa.bindparam(
                    "cycle_ats", type_=postgresql.ARRAY(postgresql.TIMESTAMP(timezone=True))
                ),
                sa.bindparam("tokens", type_=postgresql.ARRAY(sa.BigInteger)),
            )
            .table_valued("subject", "cycle", "cycle_at", "token")
            .render_derived()
        )
        select = sa.select(
            sa.bindparam("action", type_=c.action.type),
            unnest.c.subject,
            unnest.c.cycle,
            unnest.c.cycle_at,
            sa.literal(_CLAIMED, c.status.type),
            sa.literal(1, c.attempt.type),
            unnest.c.token,
            sa.bindparam("lease_until", type_=c.lease_until.type),
            sa.bindparam("now", type_=c.created_at.type),
            sa.bindparam("now", type_=c.updated_at.type),
        )
        columns = ["action", "subject", "cycle", "cycle_at", "status", "attempt", "token"]
        columns += ["lease_until", "created_at", "updated_at"]
        return postgresql.insert(self.table).from_select(columns, select)


class SQLite(_OnConflict):
    name = "sqlite"
    row_locks = False
    operational_error_is_unavailable = False
    one_writer = True
    insert = sqlite.insert

    def begin_write(self, conn: Connection, busy_timeout_ms: int) -> None:
        # BEGIN IMMEDIATE takes SQLite's write lock up front. A deferred BEGIN would start
        # as a reader and fail with "database is locked" when it tries to upgrade while
        # another connection writes; the busy timeout then makes concurrent claimers queue
        # instead of failing. The busy timeout is set once per DBAPI connection, not on
        # every call: the connection's info lives as long as it does.
        info = conn.connection.info
        if info.get(_BUSY_TIMEOUT_INFO) != busy_timeout_ms:
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            info[_BUSY_TIMEOUT_INFO] = busy_timeout_ms
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    def claim_batch(
        self, params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> tuple[int, Batch]:
        # One cached single-row statement with many parameter sets; SQLAlchemy
        # ("insertmanyvalues") sends them as multi-row VALUES statements with RETURNING,
        # in this order, without compiling a new statement per batch.
        batch = [
            {
                **params,
                "subject_0": key.subject,
                "cycle_0": key.cycle,
                "cycle_at_0": key.cycle_at,
                "token_0": token,
            }
            for key, token in zip(ordered, tokens, strict=True)
        ]
        return 1, batch[0] if len(batch) == 1 else batch


class MySQL(Dialect):
    """MySQL and MariaDB: ``INSERT ... ON DUPLICATE KEY UPDATE``, then read back by token."""

    name = "mysql"
    clock_query = "SELECT UTC_TIMESTAMP(6)"
    claim_is_one_statement = False

    def is_retryable(self, orig: object) -> bool:
        args: tuple[Any, ...] = getattr(orig, "args", ())
        return bool(args) and args[0] in _MYSQL_RETRY_CODES

    def claim_batch(
        self, params: dict[str, Any], ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> tuple[int, Batch]:
        # One multi-row VALUES statement. (PyMySQL's executemany cannot batch an
        # ON DUPLICATE KEY UPDATE clause that has parameters of its own.)
        _numbered(params, ordered, tokens)
        return len(ordered), params

    def _build_claim(self, rows: int, take_expired: bool, limited: bool) -> sa.Executable:
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

    def read_back(
        self, conn: Connection, action: str, ordered: Sequence[SlotKey], tokens: Sequence[int]
    ) -> Sequence[Any]:
        params = {
            "action": action,
            "pairs": [(k.cycle, k.subject) for k in ordered],
            "tokens": list(tokens),
        }
        return conn.execute(self._read_back_statement(), params).all()

    def _read_back_statement(self) -> sa.Executable:
        """The rows of these keys that carry one of these tokens (the won ones)."""
        stmt = self._statements.get("read_back")
        if stmt is None:
            t = self.table
            stmt = sa.select(t.c.id, t.c.token, t.c.attempt).where(
                t.c.action == sa.bindparam("action", type_=t.c.action.type),
                sa.tuple_(t.c.cycle, t.c.subject).in_(sa.bindparam("pairs", expanding=True)),
                t.c.token.in_(sa.bindparam("tokens", expanding=True)),
            )
            self._statements["read_back"] = stmt
        return stmt


_DIALECTS: dict[str, type[Dialect]] = {
    "postgresql": PostgreSQL,
    "mysql": MySQL,
    "mariadb": MySQL,
    "sqlite": SQLite,
}


def dialect_for(name: str, table: sa.Table) -> Dialect:
    """The ledger's dialect for SQLAlchemy's dialect ``name``; a ValidationError otherwise."""
    try:
        return _DIALECTS[name](table)
    except KeyError:
        raise ValidationError(
            "engine", f"dialect {name!r} is not supported (PostgreSQL, MySQL, SQLite)"
        ) from None
