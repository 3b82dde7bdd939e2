"""The public ledgers: ``AsyncLedger`` over an AsyncEngine, ``Ledger`` over an Engine.

Both are thin shells over `LedgerCore`: they validate the
arguments, check out a connection and hand a plain sync function to the core. The async
shell runs that function through ``AsyncConnection.run_sync`` (SQLAlchemy's greenlet
bridge onto the async driver), so the SQL and the transaction rules exist once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.engine import Dialect as SADialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from notifyonce._drivers import driver_for
from notifyonce._drivers.execute import Link, status_count
from notifyonce._drivers.outage import Outage
from notifyonce._errors import LedgerError, LedgerUnavailableError
from notifyonce._keys import (
    Cycle,
    SlotKey,
    Subject,
    make_key,
    normalize_action,
    normalize_cycle,
    normalize_subject,
)
from notifyonce._ledger.checks import (
    ClaimOptions,
    CycleMemo,
    check_aware,
    check_bool,
    check_claim,
    check_lease,
    check_mark_results,
    check_message_id,
    check_positive_int,
    check_statuses,
    check_text,
    memo_cycle,
    normalize_items,
    normalize_subjects,
    storable_detail,
)
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.core import (
    MARK_CHUNK,
    Chain,
    Held,
    Keeper,
    LedgerCore,
    Mark,
    Plan,
    Shape,
    Spare,
    Statement,
    fresh_token,
)
from notifyonce._ledger.records import LedgerStats, SlotRecord, SweepResult
from notifyonce._ledger.table import DEFAULT_TABLE_NAME, SlotStatus
from notifyonce._ledger.transitions import sources
from notifyonce._outcome import DeliveryMode

__all__ = ["AsyncLedger", "Ledger"]

T = TypeVar("T")
_UNSET = object()
# How many cycles' normal forms a ledger keeps for claim_slot (then it starts again).
_CYCLES_KEPT = 1024
# `AsyncLedger._run_direct`: the plan is to run the usual way.
_AGAIN = object()
Body = Callable[[Connection], T]


EngineT = TypeVar("EngineT", AsyncEngine, sa.Engine)
# What requeue may put back: settled outcomes, never a live claim or a delivery.
_REQUEUEABLE = sources("requeue")


def raise_type(field: str, expected: str, value: object) -> NoReturn:
    from notifyonce._errors import ValidationTypeError

    raise ValidationTypeError(field, f"must be {expected}, got {type(value).__name__}")


class _LedgerBase(Generic[EngineT]):
    """What both ledgers share: construction, argument checks and the plan of each call.

    The ``_plan_*`` methods validate a call's arguments (before any SQL) and return the
    `Plan` the core runs: its body and the `Shape` of transaction it needs (``claim_many``
    returns a `Chain` of them). Each public method is one line: its plan, run.
    """

    _engine_kind: ClassVar[tuple[type, str]]
    #: What to run when the ledger's tables are missing, where a framework keeps the
    #: migrations (the Django app sets ``python manage.py migrate notifyonce``); None:
    #: notifyonce's own (``notifyonce migrate``).
    migrate_command: str | None = None

    def __init__(
        self,
        engine: EngineT,
        *,
        table_name: str = DEFAULT_TABLE_NAME,
        schema: str | None = None,
        lease: dt.timedelta = dt.timedelta(minutes=5),
        clock: Callable[[], dt.datetime] | None = None,
        busy_timeout: dt.timedelta = dt.timedelta(seconds=30),
        retries: int = 5,
        synchronous_commit: str | None = None,
    ) -> None:
        expected, hint = self._engine_kind
        if not isinstance(cast(object, engine), expected):
            raise_type("engine", hint, engine)
        self._engine: EngineT = engine
        self._driver = driver_for(engine)
        self._core = LedgerCore(
            self._driver,
            table_name=table_name,
            schema=schema,
            lease=lease,
            clock=clock,
            busy_timeout=busy_timeout,
            retries=retries,
            synchronous_commit=synchronous_commit,
        )
        # A call may hand its connection to the next one of the same moment (see Spare).
        self._spare = Spare(self._driver) if self._driver.keeps_connections else None
        # The normal forms of the cycles claim_slot was given lately (see `memo_cycle`).
        self._cycles: CycleMemo = {}

    # -- the send path: statements on a Link -------------------------------------------

    def _plan_claim(
        self,
        action: object,
        subject: object,
        cycle: object,
        lease: object,
        take_expired: object,
        max_attempts: object,
    ) -> Plan[Claim | None]:
        options = self._core.claim_options(lease, take_expired, max_attempts)
        claim = self._plan_claim_keys([make_key(action, subject, cycle)], options)

        def body(link: Link) -> Claim | None:
            return _first(claim.body(link))

        def statement(sa_dialect: SADialect) -> Statement[Claim | None] | None:
            made = claim.statement(sa_dialect) if claim.statement is not None else None
            return None if made is None else made.then(_first)

        return Plan(body, claim.shape, undo=claim.undo, statement=statement)

    def _plan_claim_many(
        self,
        action: object,
        items: object,
        lease: object,
        take_expired: object,
        max_attempts: object,
        chunk_size: object,
    ) -> Chain[list[Claim]]:
        """One plan per chunk of ``chunk_size`` keys (one statement and one transaction
        each), the won claims in input order, and the release of what earlier chunks won
        when a later one fails. Every item is validated first: a bad one raises before
        anything is claimed."""
        options = self._core.claim_options(lease, take_expired, max_attempts)
        size = (
            self._core.dialect.claim_chunk
            if chunk_size is None
            else check_positive_int("chunk_size", chunk_size)
        )
        keys = normalize_items(action, items)
        steps = [
            self._plan_claim_keys(keys[start : start + size], options)
            for start in range(0, len(keys), size)
        ]
        return Chain(
            steps,
            join=lambda chunks: _in_order(keys, [claim for chunk in chunks for claim in chunk]),
            compensate=lambda chunks: self._plan_release_won(
                [c for chunk in chunks for c in chunk]
            ),
        )

    def _plan_claim_keys(self, keys: list[SlotKey], options: ClaimOptions) -> Plan[list[Claim]]:
        """Claim ``keys`` (checked, distinct, one action): one statement, one transaction.

        If it fails, the rows it may have won are released by their tokens (``undo``).
        """
        return self._plan_claim_ordered(*self._core.claim_batch(keys), options)

    def _plan_claim_ordered(
        self, ordered: list[SlotKey], tokens: list[int], options: ClaimOptions
    ) -> Plan[list[Claim]]:
        """`_plan_claim_keys` of keys in index order, each with its token (`claim_batch`)."""
        core = self._core
        undo = Plan(
            partial(core.release_lost, keys=ordered, tokens=tokens), Shape.ALONE, on_link=False
        )
        action = ordered[0].action
        body = partial(core.claim_keys, action=action, keys=ordered, options=options, tokens=tokens)
        statement = partial(
            core.claim_statement, action=action, keys=ordered, options=options, tokens=tokens
        )
        one = core.dialect.claim_is_one_statement
        return Plan(body, Shape.ALONE if one else Shape.TOGETHER, undo=undo, statement=statement)

    def _plan_release_won(self, won: Sequence[Claim]) -> Plan[list[bool]] | None:
        """Free what earlier chunks of a failed ``claim_many`` won, so the next run wins them
        again instead of waiting for their leases to expire (at most once: as UNKNOWN)."""
        if not won:
            return None
        note = "claim_many failed in a later chunk"
        return self._plan_marks([(c, SlotStatus.RELEASED, note, False) for c in won])

    def _plan_sent(self, claim: object, message_id: object) -> Plan[bool]:
        return self._plan_mark(claim, SlotStatus.SENT, check_message_id(message_id))

    def _plan_failed(self, claim: object, error: object) -> Plan[bool]:
        return self._plan_mark(claim, SlotStatus.FAILED, check_text("error", error, optional=False))

    def _plan_unknown(self, claim: object, error: object) -> Plan[bool]:
        return self._plan_mark(claim, SlotStatus.UNKNOWN, check_text("error", error, optional=True))

    def _plan_release(self, claim: object, error: object, may_have_delivered: object) -> Plan[bool]:
        """A release gives its attempt back unless its send may have delivered."""
        detail = check_text("error", error, optional=True)
        counted = check_bool("may_have_delivered", may_have_delivered)
        return self._plan_mark(claim, SlotStatus.RELEASED, detail, counted=counted)

    def _plan_mark(
        self, claim: object, status: SlotStatus, detail: str | None, *, counted: bool = True
    ) -> Plan[bool]:
        body = partial(
            self._core.mark, claim=check_claim(claim), status=status, detail=detail, counted=counted
        )
        return Plan(body, Shape.ALONE)

    def _plan_mark_many(
        self, results: Sequence[tuple[Claim, SlotStatus, str | None]]
    ) -> Plan[list[bool]]:
        """``mark_many`` of a caller's results: a release gives its attempt back."""
        released = SlotStatus.RELEASED
        return self._plan_marks(
            [(c, status, d, status is not released) for c, status, d in check_mark_results(results)]
        )

    def _plan_marks(self, results: Sequence[Mark], *, checked: bool = False) -> Plan[list[bool]]:
        """``checked``: the results come from the Notifier, which made the claims and
        statuses itself; only the details (from a sender) are made storable."""
        if checked:
            results = _storable(results)
        core = self._core
        # One statement needs no transaction around it; several must land together.
        one = len(results) <= 1 or (
            core.dialect.mark_is_one_statement and len(results) <= MARK_CHUNK
        )
        return Plan(
            partial(core.mark_many, results=results), Shape.ALONE if one else Shape.TOGETHER
        )

    def _plan_write(
        self, results: Sequence[Mark], keys: list[SlotKey], options: ClaimOptions
    ) -> Plan[tuple[list[bool], list[Claim]]]:
        """Record the Notifier's ``results`` (as `_plan_marks` with ``checked``) and claim
        ``keys`` (as `_plan_claim_keys`) together: one statement where the database
        allows, else one transaction, so a run's outcomes ride on its next claim's round
        trip and commit. If it fails, the rows the claim may have won are released by
        their tokens (``undo``)."""
        core = self._core
        marks = _storable(results)
        ordered, tokens = core.claim_batch(keys)
        undo = Plan(
            partial(core.release_lost, keys=ordered, tokens=tokens), Shape.ALONE, on_link=False
        )
        body = partial(
            core.write,
            results=marks,
            action=keys[0].action,
            keys=ordered,
            options=options,
            tokens=tokens,
        )
        one = core.dialect.write_is_one_statement and len(marks) <= MARK_CHUNK
        return Plan(body, Shape.ALONE if one else Shape.TOGETHER, undo=undo)

    def _plan_renew(self, claims: object, lease: object) -> Plan[list[bool]]:
        if isinstance(claims, (str, bytes)) or not isinstance(claims, Iterable):
            raise_type("claims", "an iterable of Claim", claims)
        checked = [check_claim(c) for c in claims]
        length = self._core.lease if lease is None else check_lease(lease)
        # Each renewal is its own compare-and-set: they need not land together.
        return Plan(partial(self._core.renew, claims=checked, lease=length), Shape.ALONE)

    def _plan_lookup(
        self, action: object, items: object, take_expired: object, max_attempts: object
    ) -> Plan[list[SlotKey]]:
        options = self._core.claim_options(None, take_expired, max_attempts)
        return self._plan_lookup_keys(normalize_items(action, items), options)

    def _plan_lookup_keys(self, keys: list[SlotKey], options: ClaimOptions) -> Plan[list[SlotKey]]:
        core = self._core

        def body(link: Link) -> list[SlotKey]:
            if not keys:
                return []
            taken = core.not_claimable(link, keys[0].action, keys, options)
            return [k for k in keys if (k.cycle, k.subject) in taken]

        return Plan(body, Shape.READ)

    # -- the operator's calls: SQLAlchemy Core on a Connection ---------------------------

    def _plan_sweep(
        self,
        mode: object,
        max_attempts: object,
        limit: object,
        actions: object,
        cycle: object = None,
    ) -> Plan[SweepResult]:
        if not isinstance(mode, DeliveryMode):
            raise_type("mode", "a DeliveryMode", mode)
        checked: list[str] | None = None
        if actions is not None:
            if isinstance(actions, str) or not isinstance(actions, Iterable):
                raise_type("actions", "an iterable of action names or None", actions)
            checked = [normalize_action(a) for a in actions]
        body = partial(
            self._core.sweep,
            mode=mode,
            max_attempts=check_positive_int("max_attempts", max_attempts),
            limit=check_positive_int("limit", limit),
            actions=checked,
            cycle=None if cycle is None else normalize_cycle(cycle)[0],
        )
        return Plan(body, Shape.TOGETHER, on_link=False)

    def _plan_purge(
        self, older_than: object, opaque_finished_before: object, dry_run: object
    ) -> Plan[int]:
        dry = check_bool("dry_run", dry_run)
        body = partial(
            self._core.purge,
            older_than=check_lease(older_than, "older_than"),
            opaque_finished_before=None
            if opaque_finished_before is None
            else check_aware("opaque_finished_before", opaque_finished_before),
            dry_run=dry,
        )
        return Plan(body, Shape.READ if dry else Shape.TOGETHER, on_link=False)

    def _plan_requeue(
        self,
        action: object,
        status: object,
        since: object,
        subjects: object,
        dry_run: object,
        cycle: object = None,
    ) -> Plan[list[SlotKey]]:
        dry = check_bool("dry_run", dry_run)
        body = partial(
            self._core.requeue,
            action=normalize_action(action),
            statuses=check_statuses(status, allowed=_REQUEUEABLE),
            since=None if since is None else check_aware("since", since),
            subjects=None if subjects is None else normalize_subjects(subjects),
            dry_run=dry,
            cycle=None if cycle is None else normalize_cycle(cycle)[0],
        )
        return Plan(body, Shape.READ if dry else Shape.TOGETHER, on_link=False)

    def _plan_slots(
        self,
        status: object,
        action: object,
        since: object,
        subjects: object,
        limit: object,
        cycle: object = None,
    ) -> Plan[list[SlotRecord]]:
        body = partial(
            self._core.slots,
            action=None if action is None else normalize_action(action),
            statuses=check_statuses(status, allowed=frozenset(SlotStatus)),
            since=None if since is None else check_aware("since", since),
            subjects=None if subjects is None else normalize_subjects(subjects),
            limit=check_positive_int("limit", limit),
            cycle=None if cycle is None else normalize_cycle(cycle)[0],
        )
        return Plan(body, Shape.READ, on_link=False)

    def _plan_get(self, action: object, subject: object, cycle: object) -> Plan[SlotRecord | None]:
        key = make_key(action, subject, cycle)
        return Plan(partial(self._core.get, key=key), Shape.READ, on_link=False)

    def _plan_last_sent(self, subjects: object, since: object) -> Plan[dict[str, dt.datetime]]:
        body = partial(
            self._core.last_sent,
            subjects=normalize_subjects(subjects),
            since=check_aware("since", since),
        )
        return Plan(body, Shape.READ, on_link=False)

    def _plan_stats(self) -> Plan[LedgerStats]:
        return Plan(self._core.stats, Shape.READ, on_link=False)

    def _plan_check_durability(self) -> Plan[str]:
        return Plan(self._core.check_durability, Shape.READ)

    def _plan_create_schema(self) -> Plan[None]:
        return Plan(self._core.create_schema, Shape.TOGETHER, on_link=False)

    # -- properties ---------------------------------------------------------------------

    @property
    def table(self) -> sa.Table:
        """The ledger's SQLAlchemy ``Table`` (for your own queries and Alembic autogenerate)."""
        return self._core.table

    @property
    def engine(self) -> EngineT:
        """The engine the ledger runs on."""
        return self._engine

    @property
    def table_name(self) -> str:
        """The ledger table's name."""
        return self._core.table.name

    @property
    def schema(self) -> str | None:
        """The ledger table's schema, or None for the default one."""
        return self._core.table.schema

    def now(self) -> dt.datetime:
        """The ledger's current time (aware, UTC); the Notifier uses the same clock.

        Without a ``clock`` of yours this is the database server's time on PostgreSQL and
        MySQL (this host's clock corrected by a reading of the server's, taken at most a
        minute ago by any call that talks to the database), so workers whose host clocks
        disagree still agree on when a lease ends. On SQLite it is this host's clock.
        """
        return self._core.now()

    @property
    def lease(self) -> dt.timedelta:
        """The default lease of a claim."""
        return self._core.lease

    @property
    def _claim_lanes(self) -> int:
        """How many claim statements a run may have out at once on this database."""
        return self._core.dialect.claim_lanes


def _storable(results: Sequence[Mark]) -> list[Mark]:
    """The Notifier's marks with their details made storable (its claims and statuses are
    its own; the details come from a sender)."""
    return [
        (claim, status, None if detail is None else storable_detail(status, detail), n)
        for claim, status, detail, n in results
    ]


def _first(won: list[Claim]) -> Claim | None:
    """The claim of a one-key claim's plan, if it won."""
    return won[0] if won else None


def _in_order(keys: list[SlotKey], won: list[Claim]) -> list[Claim]:
    """The won claims of ``claim_many`` in input order (each chunk claims in index order).

    A won claim holds the very key object it was claimed with, so the claims are found by
    the keys' identities: an int's hash, where a key's hash builds and hashes a tuple of
    its four parts (a tenth of a 40,000-key call's CPU). Should a claim hold an equal key
    that is another object, they are found by value.
    """
    by_id = {id(claim.key): claim for claim in won}
    ordered = [claim for key in keys if (claim := by_id.get(id(key))) is not None]
    if len(ordered) == len(won):
        return ordered
    by_key = {claim.key: claim for claim in won}
    return [by_key[key] for key in keys if key in by_key]


class AsyncLedger(_LedgerBase[AsyncEngine]):
    """The claim ledger on an ``AsyncEngine`` (asyncpg, psycopg 3, aiosqlite, asyncmy).

    Every method that the ledger runs on its own connection commits before it returns:
    a returned [`Claim`][notifyonce.Claim] is durable, so the message can be sent.

    Args:
        engine: Where the ledger table lives: PostgreSQL, MySQL/MariaDB or SQLite.
        table_name: The table's name.
        schema: The table's schema (it must exist), or None for the default.
        lease: How long a claim holds its slot unless marked first.
        clock: Returns the current aware time; tests inject one to simulate time.
        busy_timeout: SQLite only: how long a write waits for another connection's lock.
        retries: How many times a transaction is run when the database picked it as a
            deadlock victim (it was rolled back, so running it again is safe).
        synchronous_commit: PostgreSQL only: ``"on"``, ``"remote_write"`` or
            ``"remote_apply"`` makes every claim's commit wait for the synchronous
            standby (``synchronous_standby_names``) at that level, so that a failover to
            it cannot lose a claim and send its message twice. Only the claim's own
            transaction waits (the setting rides in the claim's statement: no round trip
            more); marks and reads commit as the server says. The first claim checks once
            whether the server names a synchronous standby and logs a warning if it does
            not (see [`check_durability`][notifyonce.AsyncLedger.check_durability]).
            None (the default): the server's own ``synchronous_commit``.

    Raises:
        ValidationError: An argument is invalid; ``synchronous_commit`` on MariaDB,
            MySQL or SQLite, which have no per-transaction wait for a standby.

    Examples:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> async def main() -> bool:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     ledger = AsyncLedger(engine)
        ...     await ledger.create_schema()
        ...     claim = await ledger.claim_slot("trial_6h", 42, "2026-12")
        ...     again = await ledger.claim_slot("trial_6h", 42, "2026-12")
        ...     marked = await ledger.mark_sent(claim)
        ...     await engine.dispose()
        ...     return again is None and marked
        >>> asyncio.run(main())
        True
    """

    _engine_kind = (AsyncEngine, "an AsyncEngine (use Ledger for an Engine)")

    async def _run(
        self,
        plan: Plan[T],
        *,
        connection: AsyncConnection | None = None,
        keeper: Keeper | None = None,
        outage: Outage | None = None,
    ) -> T:
        """Run ``plan`` on ``connection`` or on one of its own; with ``outage``, a database
        that went away is waited for and ``plan`` run again (see `_rerun`)."""
        if connection is not None:
            return await connection.run_sync(self._core.run, plan, owned=False)
        try:
            return await self._run_owned(plan, keeper)
        except LedgerUnavailableError as exc:
            if outage is None:
                await self._undo(plan)
                raise
            return await self._rerun(plan, exc, outage)
        except LedgerError:
            await self._undo(plan)
            raise

    async def _undo(self, plan: Plan[Any]) -> None:
        """Undo what a failed ``plan`` may have committed: a best effort."""
        if plan.undo is not None:
            with contextlib.suppress(Exception):  # the failure is what the caller sees
                await self._run_owned(plan.undo, None)

    async def _rerun(self, plan: Plan[T], exc: LedgerUnavailableError, outage: Outage) -> T:
        """Run ``plan`` again once its database is back (see ``notifyonce._drivers.outage``).

        The failed run may have committed before its connection was cut: its undo (the
        claims it may have won, released by their tokens) runs first, on the database
        that is back, so the claims are won again instead of held by tokens nobody has.
        """
        since = time.monotonic()
        while True:
            try:
                await outage.wait(exc)
            except LedgerError:
                await self._undo(plan)
                raise
            try:
                if plan.undo is not None:
                    await self._run_owned(plan.undo, None)
                return await self._run_owned(plan, None)
            except LedgerUnavailableError as again:
                exc = again
                persisting = outage.persisting(exc, since)
                if persisting is not None:
                    await self._undo(plan)
                    raise persisting from exc
            except LedgerError:
                await self._undo(plan)
                raise

    async def _run_owned(self, plan: Plan[T], keeper: Keeper | None) -> T:
        # The whole call (checkout, statements, commit, checkin) as one piece of sync work,
        # run as the engine's driver runs work (see notifyonce._drivers).
        spare = keeper or self._spare
        if spare is not None and plan.statement is not None:
            pooled = spare.take()
            if pooled is not None:
                ran = await self._run_direct(plan, pooled, spare)
                if ran is not _AGAIN:
                    return cast(T, ran)
        work = partial(self._core.run_owned, plan=plan, spare=spare)
        return await self._driver.run(work)

    async def _run_direct(self, plan: Plan[T], pooled: Any, spare: Keeper) -> T | object:
        """Run ``plan``'s one statement on the connection the previous call left (``pooled``),
        awaited on asyncpg's own connection: no greenlet, no checkout, no check-in, which
        cost a claim as much CPU as asyncpg's execution of it. `_AGAIN` when the plan is
        to run the usual way instead (it has no such statement, or a deadlock the server
        rolled back); failures are handled as the usual way handles them."""
        core = self._core
        statement = core.direct_statement(self._engine.sync_engine, plan)
        if statement is None:
            if not spare.give(pooled):
                await greenlet_spawn(pooled.close)
            return _AGAIN
        compiled = statement.compiled
        try:
            rows = await pooled.driver_connection.fetch(
                compiled.sql, *compiled.args(statement.params)
            )
        except BaseException as exc:
            if await greenlet_spawn(core.direct_failed, pooled, exc, compiled.sql):
                return _AGAIN
            raise  # pragma: no cover - direct_failed raises
        if not spare.give(pooled):
            await greenlet_spawn(pooled.close)
        return statement.finish(rows)

    # -- one key: claim_slot and the single marks ---------------------------------------
    #
    # A call of one key on the connection the previous call left (asyncpg) is awaited on
    # the driver's own connection with nothing built but its statement's values: no plan,
    # closure, partial or `Statement`. The statement and its values are those the plan
    # would run (`LedgerCore.one_claim`, `LedgerCore.one_mark`); a failure is handled by
    # the same code as `_run_direct`'s (`LedgerCore.direct_failed`), a claim's undo run as
    # `_run` runs it; every other case (no connection kept, the clock or the standby's
    # check due, an observed engine, a deadlock to run again) runs the plan of the same
    # key, token and values the usual way.

    async def _claim_one(
        self,
        action: object,
        subject: object,
        cycle: object,
        lease: object,
        take_expired: object,
        max_attempts: object,
    ) -> Claim | None:
        """`claim_slot` on a connection of the ledger's own."""
        core = self._core
        options = core.claim_options(lease, take_expired, max_attempts)
        key = self._one_key(action, subject, cycle)
        token = fresh_token()
        spare = self._spare
        engine = self._driver.engine
        if spare is not None and core.direct_ready(engine, claims=True):
            pooled = spare.take()
            made = None if pooled is None else core.one_claim(engine.dialect, key, token, options)
            if made is not None:
                compiled, params = made
                try:
                    rows = await pooled.driver_connection.fetch(
                        compiled.sql, *compiled.args(params)
                    )
                except BaseException as exc:
                    plan = self._plan_claim_ordered([key], [token], options)
                    try:
                        await greenlet_spawn(core.direct_failed, pooled, exc, compiled.sql)
                    except LedgerError:
                        await self._undo(plan)
                        raise
                    return _first(await self._run_again(plan))
                if not spare.give(pooled):
                    await greenlet_spawn(pooled.close)
                return core.one_won(key, token, rows, params["lease_until"])
            if pooled is not None and not spare.give(pooled):
                await greenlet_spawn(pooled.close)
        return _first(await self._run(self._plan_claim_ordered([key], [token], options)))

    def _one_key(self, action: object, subject: object, cycle: object) -> SlotKey:
        """`make_key`, its cycle's normal form kept for the next claims of the same cycle
        (a run claims many subjects of a few cycles)."""
        action_text = normalize_action(action)
        subject_text = normalize_subject(subject)
        if len(self._cycles) >= _CYCLES_KEPT:
            self._cycles.clear()
        cycle_text, cycle_at = memo_cycle(cycle, self._cycles)
        return SlotKey(action_text, subject_text, cycle_text, cycle_at)

    async def _mark_one(
        self, claim: object, status: SlotStatus, detail: str | None, counted: bool
    ) -> bool:
        """A single mark (``mark_sent``, ``mark_failed``, ``mark_unknown``, ``release``) of
        a checked ``detail``."""
        checked = check_claim(claim)
        core = self._core
        spare = self._spare
        engine = self._driver.engine
        if spare is not None and core.direct_ready(engine, claims=False):
            pooled = spare.take()
            if pooled is not None:
                compiled, params = core.one_mark(engine.dialect, checked, status, detail, counted)
                try:
                    done = await pooled.driver_connection.execute(
                        compiled.sql, *compiled.args(params)
                    )
                except BaseException as exc:
                    # Raises what the usual way raises; returns on a deadlock to run again.
                    await greenlet_spawn(core.direct_failed, pooled, exc, compiled.sql)
                    return await self._run_again(
                        self._plan_mark(checked, status, detail, counted=counted)
                    )
                if not spare.give(pooled):
                    await greenlet_spawn(pooled.close)
                return status_count(done) == 1
        return await self._run(self._plan_mark(checked, status, detail, counted=counted))

    async def _run_again(self, plan: Plan[T]) -> T:
        """Run ``plan`` the usual way after its statement, awaited directly, was rolled back
        by the server (a deadlock): as `_run_owned` does after `_run_direct`, with
        ``plan``'s undo when it fails as `_run` runs it."""
        work = partial(self._core.run_owned, plan=plan, spare=self._spare)
        try:
            return await self._driver.run(work)
        except LedgerError:
            await self._undo(plan)
            raise

    async def _run_chain(self, chain: Chain[T]) -> T:
        done: list[Any] = []
        try:
            for step in chain.steps:
                done.append(await self._run(step))
        except BaseException:
            undo = chain.compensate(done)
            if undo is not None:
                with contextlib.suppress(Exception):  # the failure is what the caller sees
                    await self._run(undo)
            raise
        return chain.join(done)

    # -- the Notifier's entry points: input it has already checked ----------------------

    def _options(self, *, take_expired: bool, max_attempts: int | None) -> ClaimOptions:
        """Claim options for a run: checked once, used by every statement of it."""
        return self._core.claim_options(None, take_expired, max_attempts)

    def _keepers(self, count: int) -> list[Held] | None:
        """Connections a run may keep for its loops (claim lanes, the recorder), or None.

        Only where a connection goes back to the pool without awaiting (asyncpg on a queue
        pool) and the pool keeps more connections than the run would hold, so the run
        never waits for its own.
        """
        pool = self._engine.sync_engine.pool
        if not self._driver.keeps_connections or not isinstance(pool, sa.pool.QueuePool):
            return None
        if pool.size() <= count:
            return None
        return [Held() for _ in range(count)]

    async def _release(self, keepers: Sequence[Held]) -> None:
        """Give what ``keepers`` hold back to the pool."""
        for keeper in keepers:
            await greenlet_spawn(keeper.close)

    async def _drop(self, keepers: Sequence[Held]) -> None:
        """Discard what ``keepers`` hold: the database went away and cut it."""
        for keeper in keepers:
            await greenlet_spawn(keeper.drop)

    async def _claim_keys(
        self,
        keys: list[SlotKey],
        options: ClaimOptions,
        keeper: Keeper | None = None,
        outage: Outage | None = None,
    ) -> list[Claim]:
        """``claim_many`` of checked, distinct keys of one action, in one statement."""
        if not keys:
            return []
        return await self._run(self._plan_claim_keys(keys, options), keeper=keeper, outage=outage)

    async def _not_claimable_keys(
        self, keys: list[SlotKey], options: ClaimOptions, outage: Outage | None = None
    ) -> list[SlotKey]:
        """``not_claimable`` of checked keys."""
        return await self._run(self._plan_lookup_keys(keys, options), outage=outage)

    async def _write(
        self,
        results: Sequence[Mark],
        keys: list[SlotKey],
        options: ClaimOptions,
        keeper: Keeper | None = None,
        outage: Outage | None = None,
    ) -> tuple[list[bool], list[Claim]]:
        """`_mark_checked` of ``results`` and `_claim_keys` of ``keys`` in one round trip
        where the database allows (one transaction elsewhere)."""
        epoch = outage.epoch if outage is not None else 0
        plan = self._plan_write(results, keys, options)
        landed, claims = await self._run(plan, keeper=keeper, outage=outage)
        if outage is not None and outage.epoch != epoch:
            landed = await self._confirm(results, landed)
        return landed, claims

    async def _mark_checked(
        self, results: Sequence[Mark], keeper: Keeper | None = None, outage: Outage | None = None
    ) -> list[bool]:
        """``mark_many`` of results the Notifier made (valid claims, statuses, details, and
        whether each attempt counts)."""
        epoch = outage.epoch if outage is not None else 0
        plan = self._plan_marks(results, checked=True)
        landed = await self._run(plan, keeper=keeper, outage=outage)
        if outage is not None and outage.epoch != epoch:
            landed = await self._confirm(results, landed)
        return landed

    async def _confirm(self, results: Sequence[Mark], landed: list[bool]) -> list[bool]:
        """``landed`` with the marks that a write cut by an outage committed before it
        was run again: that run found the row no longer claimed (by its own first run),
        so its row, holding the claim's token and the mark's status, says it landed."""
        doubtful = [mark for mark, ok in zip(results, landed, strict=True) if not ok]
        if not doubtful:
            return landed
        found = await self._run(
            Plan(partial(self._core.marked, results=doubtful), Shape.READ, on_link=False)
        )
        return [ok or mark[0].id in found for mark, ok in zip(results, landed, strict=True)]

    async def check_durability(self) -> str:
        """Say in one line whether a failover can lose a claim this ledger committed.

        On PostgreSQL: whether the server names a synchronous standby
        (``synchronous_standby_names``) and the claims' commits wait for it (the
        ledger's ``synchronous_commit``, else the server's). Without both, a claim
        committed on a primary that dies may be missing on the promoted standby, and won
        and sent again there. The line is logged too (logger ``notifyonce.ledger``): a
        warning when the ledger was asked for ``synchronous_commit`` and the claims can
        still be lost. MariaDB and MySQL: notifyonce does not read their replication
        settings, and says so; SQLite has no failover.

        Returns:
            The line, starting "a failover can lose a committed claim" or "a failover to
            a synchronous standby keeps every committed claim" on PostgreSQL.

        Raises:
            LedgerUnavailableError: The database cannot be reached.

        Examples:
            >>> import asyncio
            >>> from sqlalchemy.ext.asyncio import create_async_engine
            >>> async def main() -> bool:
            ...     engine = create_async_engine("sqlite+aiosqlite://")
            ...     line = await AsyncLedger(engine).check_durability()
            ...     await engine.dispose()
            ...     return line.startswith("SQLite has no standby and no failover")
            >>> asyncio.run(main())
            True
        """
        return await self._run(self._plan_check_durability())

    async def create_schema(self) -> None:
        """Create the table and its indexes unless they exist (for quick starts and tests),
        and the recipients table beside it (see [`AsyncAudience`][notifyonce.AsyncAudience]).

        Production deployments use the shipped Alembic migration instead; see the
        Alembic guide. Both create the same tables.
        """
        await self._run(self._plan_create_schema())

    async def claim_slot(
        self,
        action: str,
        subject: Subject,
        cycle: Cycle,
        *,
        lease: dt.timedelta | None = None,
        take_expired: bool = False,
        max_attempts: int | None = None,
        connection: AsyncConnection | None = None,
    ) -> Claim | None:
        """Claim one slot; the [`Claim`][notifyonce.Claim] if this call won it, else None.

        A claim wins when the slot has no row yet, when it was released, or (with
        ``take_expired=True``) when its holder's lease expired. One statement decides it,
        so across processes and hosts exactly one caller wins.

        Args:
            action: What is sent, e.g. ``"trial_6h"``.
            subject: Who it is for (an int or str id).
            cycle: Which cycle: an aware datetime, a date, an int or a str.
            lease: How long the claim holds the slot; defaults to the ledger's lease.
            take_expired: Also take a slot whose holder's lease expired (at-least-once).
            max_attempts: Take a slot over only while its attempts are below this.
            connection: Run inside the caller's connection and transaction. **Nothing is
                committed by the ledger then: commit before you send**, or a rollback
                leaves a message sent without a claim.

        Returns:
            The claim, committed (when the ledger owns the transaction), or None when the
            slot is held, sent, failed, unknown, or out of attempts.

        Raises:
            ValidationError: a bad argument; nothing was written.
            LedgerUnavailableError: the database was unreachable or lost mid-call; no
                claim is returned, and a later claim finds out whether the row exists.
            LedgerError: any other database error.

        Examples:
            >>> import asyncio
            >>> from sqlalchemy.ext.asyncio import create_async_engine
            >>> async def main() -> None:
            ...     engine = create_async_engine("sqlite+aiosqlite://")
            ...     ledger = AsyncLedger(engine)
            ...     await ledger.create_schema()
            ...     claim = await ledger.claim_slot("trial_6h", 42, "2026-12")
            ...     again = await ledger.claim_slot("trial_6h", 42, "2026-12")
            ...     print(claim is not None, again)  # send here, then record it:
            ...     print(await ledger.mark_sent(claim, message_id=7))
            ...     await engine.dispose()
            >>> asyncio.run(main())
            True None
            True
        """
        if connection is None:
            return await self._claim_one(action, subject, cycle, lease, take_expired, max_attempts)
        return await self._run(
            self._plan_claim(action, subject, cycle, lease, take_expired, max_attempts),
            connection=connection,
        )

    async def claim_many(
        self,
        action: str,
        items: Iterable[tuple[Subject, Cycle]],
        *,
        lease: dt.timedelta | None = None,
        take_expired: bool = False,
        max_attempts: int | None = None,
        chunk_size: int | None = None,
    ) -> list[Claim]:
        """Claim many slots of one action; return the won ones, in input order.

        Duplicates in ``items`` are collapsed. Each chunk of ``chunk_size`` keys is one
        statement and one transaction, its keys sorted in index order so that concurrent
        batches cannot deadlock each other. The default chunk is 5,000 keys on PostgreSQL
        (one statement of arrays, whatever its size) and 500 elsewhere. Every item is
        validated before any SQL runs. If a chunk fails, the claims of the chunks already
        committed are released and the error is raised.

        Examples:
            >>> import asyncio
            >>> from sqlalchemy.ext.asyncio import create_async_engine
            >>> async def main() -> list[str]:
            ...     engine = create_async_engine("sqlite+aiosqlite://")
            ...     ledger = AsyncLedger(engine)
            ...     await ledger.create_schema()
            ...     await ledger.claim_slot("trial_6h", 43, "2026-12")
            ...     claims = await ledger.claim_many("trial_6h", [(42, "2026-12"), (43, "2026-12")])
            ...     await engine.dispose()
            ...     return [c.key.subject for c in claims]
            >>> asyncio.run(main())
            ['42']
        """
        plan = self._plan_claim_many(action, items, lease, take_expired, max_attempts, chunk_size)
        return await self._run_chain(plan)

    async def mark_sent(self, claim: Claim, *, message_id: int | str | None = None) -> bool:
        """Record the claim as sent; False if its lease was lost (nothing changed).

        Examples:
            ```python
            if not await ledger.mark_sent(claim, message_id=receipt.message_id):
                ...  # the lease expired and another worker took the slot over
            ```
        """
        return await self._mark_one(claim, SlotStatus.SENT, check_message_id(message_id), True)

    async def mark_failed(self, claim: Claim, error: str) -> bool:
        """Record a permanent failure (never retried); False if the lease was lost."""
        detail = check_text("error", error, optional=False)
        return await self._mark_one(claim, SlotStatus.FAILED, detail, True)

    async def mark_unknown(self, claim: Claim, error: str | None = None) -> bool:
        """Record that the send may or may not have arrived; False if the lease was lost."""
        detail = check_text("error", error, optional=True)
        return await self._mark_one(claim, SlotStatus.UNKNOWN, detail, True)

    async def release(
        self, claim: Claim, error: str | None = None, *, may_have_delivered: bool = False
    ) -> bool:
        """Free the slot for the next claim; False if the lease was lost.

        A release says the send certainly did not deliver (a 429, a refused connection),
        so the claim gives its attempt back: ``max_attempts`` counts only the attempts
        that may have delivered. Pass ``may_have_delivered=True`` to release a slot whose
        send may have arrived (at least once, retrying an uncertain send): its attempt
        then counts.
        """
        detail = check_text("error", error, optional=True)
        counted = check_bool("may_have_delivered", may_have_delivered)
        return await self._mark_one(claim, SlotStatus.RELEASED, detail, counted)

    async def mark_many(
        self, results: Sequence[tuple[Claim, SlotStatus, str | None]]
    ) -> list[bool]:
        """Apply many marks in one transaction and two statements; one bool per entry.

        Each entry is ``(claim, status, detail)`` with status SENT, FAILED, UNKNOWN or
        RELEASED; ``detail`` is the provider's message id for SENT and the error text
        otherwise. An entry is False when its lease was lost, or when the same claim
        appears earlier in ``results``. A RELEASED entry gives its attempt back, as
        `release` does.
        """
        return await self._run(self._plan_mark_many(results))

    async def renew(
        self, claims: Iterable[Claim], *, lease: dt.timedelta | None = None
    ) -> list[bool]:
        """Extend the leases of claims still in progress; one bool per claim.

        Each lease runs again for ``lease`` (default: the ledger's) from now. False for a
        claim that no longer holds its row (marked, or taken over after its lease ran
        out). The Notifier renews the claims whose sends take long, so that no other
        worker takes over a send that is still going on.
        """
        return await self._run(self._plan_renew(claims, lease))

    async def not_claimable(
        self,
        action: str,
        items: Iterable[tuple[Subject, Cycle]],
        *,
        take_expired: bool = False,
        max_attempts: int | None = None,
    ) -> list[SlotKey]:
        """The keys among ``items`` that a claim with these options would not win now.

        Sent, failed, unknown, held by a live lease, or (with ``take_expired``) expired
        but out of attempts. One read per 500 keys, nothing locked or written: the answer
        is a snapshot, and only a claim decides. The Notifier uses it to skip finished
        slots without claiming them (and without waiting for a rate-limit turn).
        """
        return await self._run(self._plan_lookup(action, items, take_expired, max_attempts))

    async def get(self, action: str, subject: Subject, cycle: Cycle) -> SlotRecord | None:
        """The stored record of a slot, or None if it was never claimed (or was purged)."""
        return await self._run(self._plan_get(action, subject, cycle))

    async def sweep(
        self,
        mode: DeliveryMode,
        *,
        max_attempts: int = 3,
        limit: int = 1000,
        actions: Iterable[str] | None = None,
        cycle: Cycle | None = None,
    ) -> SweepResult:
        """Settle claims whose lease expired (a worker crashed or hung).

        At-most-once: every expired claim becomes UNKNOWN (it may have been sent).
        At-least-once: an expired claim with attempts below ``max_attempts`` is released
        for another try, the rest become UNKNOWN. Either way the old fencing token can no
        longer mark the slot. At most ``limit`` rows per call, oldest leases first.

        Pass ``actions`` to settle only those actions' slots: when several jobs with
        different delivery modes share one ledger table, each must sweep only its own
        (an at-least-once sweep of an at-most-once job's slots would send them again).
        Pass ``cycle`` as well to settle only that cycle's: a campaign's run sweeps its
        own, since the campaigns of one action may run in different modes.
        """
        return await self._run(self._plan_sweep(mode, max_attempts, limit, actions, cycle))

    async def purge(
        self,
        *,
        older_than: dt.timedelta,
        opaque_finished_before: dt.datetime | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete old slots that can no longer fire; return how many rows went.

        A row goes when its cycle (as a point in time) is more than ``older_than`` in the
        past and no live claim holds it. This assumes the cycle, e.g. the deadline, is the
        last moment its windows can fire: once it has passed by more than the widest
        window, deleting the row cannot let a reminder be sent twice. Rows with int or str
        cycles have no time; they are kept unless ``opaque_finished_before`` is given, in
        which case those last changed before it go too.

        With ``dry_run=True`` nothing is deleted: it counts the rows that would go now.
        """
        return await self._run(self._plan_purge(older_than, opaque_finished_before, dry_run))

    async def last_sent(
        self, subjects: Iterable[Subject], *, since: dt.datetime
    ) -> dict[str, dt.datetime]:
        """The latest ``sent_at`` per subject (as text) at or after ``since``, any action."""
        return await self._run(self._plan_last_sent(subjects, since))

    async def stats(self) -> LedgerStats:
        """Counts per action and status, live claims and expired leases."""
        return await self._run(self._plan_stats())

    async def requeue(
        self,
        action: str,
        *,
        status: SlotStatus | str | Iterable[SlotStatus | str],
        since: dt.datetime | None = None,
        subjects: Iterable[Subject] | None = None,
        dry_run: bool = False,
        cycle: Cycle | None = None,
    ) -> list[SlotKey]:
        """Put settled slots back, so the next run sends them: a deliberate resend.

        For an operator who fixed the cause: after a wrong token or a receiver outage
        recorded slots as ``unknown`` or ``failed``, requeue exactly those and the next
        claim wins them again. An ``unknown`` slot may have been delivered, so requeueing
        it accepts a possible duplicate: look at them first (`slots`, or
        ``dry_run=True``). Live claims and sent slots are never touched.

        Args:
            action: The action whose slots to put back.
            status: ``"unknown"``, ``"failed"`` or both (SlotStatus values work too).
            since: Only slots whose outcome was recorded at or after this aware datetime.
            subjects: Only these subjects.
            dry_run: Change nothing; return what would be requeued.
            cycle: Only the slots of this cycle (the operator console requeues the slots
                chosen on a page this way, one cycle at a time).

        Returns:
            The keys of the slots released (or that would be, with ``dry_run``).

        Examples:
            ```python
            keys = await ledger.requeue("trial_6h", status="unknown", since=outage_start)
            ```
        """
        return await self._run(self._plan_requeue(action, status, since, subjects, dry_run, cycle))

    async def slots(
        self,
        *,
        status: SlotStatus | str | Iterable[SlotStatus | str],
        action: str | None = None,
        since: dt.datetime | None = None,
        subjects: Iterable[Subject] | None = None,
        limit: int = 100,
        cycle: Cycle | None = None,
    ) -> list[SlotRecord]:
        """The slots with a status (e.g. every ``unknown`` one), most recently changed first.

        Args:
            status: One status or several (``"unknown"``, ``SlotStatus.FAILED``, ...).
            action: Only this action's slots.
            since: Only slots that changed at or after this aware datetime.
            subjects: Only these subjects.
            limit: At most this many records.
            cycle: Only the slots of this cycle.
        """
        return await self._run(self._plan_slots(status, action, since, subjects, limit, cycle))


class Ledger(_LedgerBase[sa.Engine]):
    """The claim ledger on a sync ``Engine``: [`AsyncLedger`][notifyonce.AsyncLedger] for sync code.

    Same arguments, methods and guarantees as [`AsyncLedger`][notifyonce.AsyncLedger];
    ``connection`` is a sync ``Connection``.

    Examples:
        >>> ledger = Ledger(sa.create_engine("sqlite://"))
        >>> ledger.create_schema()
        >>> claim = ledger.claim_slot("trial_6h", 42, "2026-12")
        >>> ledger.claim_slot("trial_6h", 42, "2026-12") is None
        True
    """

    _engine_kind = (sa.Engine, "an Engine (use AsyncLedger for an AsyncEngine)")

    def _run(self, plan: Plan[T], *, connection: Connection | None = None) -> T:
        if connection is not None:
            return self._core.run(connection, plan, owned=False)
        try:
            return self._run_owned(plan)
        except LedgerError:
            if plan.undo is not None:
                with contextlib.suppress(Exception):  # the failure is what the caller sees
                    self._run_owned(plan.undo)
            raise

    def _run_owned(self, plan: Plan[T]) -> T:
        return self._driver.run_sync(partial(self._core.run_owned, plan=plan))

    def _run_chain(self, chain: Chain[T]) -> T:
        done: list[Any] = []
        try:
            for step in chain.steps:
                done.append(self._run(step))
        except BaseException:
            undo = chain.compensate(done)
            if undo is not None:
                with contextlib.suppress(Exception):  # the failure is what the caller sees
                    self._run(undo)
            raise
        return chain.join(done)

    def check_durability(self) -> str:
        """See [`AsyncLedger.check_durability`][notifyonce.AsyncLedger.check_durability]."""
        return self._run(self._plan_check_durability())

    def create_schema(self) -> None:
        """See [`AsyncLedger.create_schema`][notifyonce.AsyncLedger.create_schema]."""
        self._run(self._plan_create_schema())

    def claim_slot(
        self,
        action: str,
        subject: Subject,
        cycle: Cycle,
        *,
        lease: dt.timedelta | None = None,
        take_expired: bool = False,
        max_attempts: int | None = None,
        connection: Connection | None = None,
    ) -> Claim | None:
        """See [`AsyncLedger.claim_slot`][notifyonce.AsyncLedger.claim_slot].

        With ``connection``, commit it before sending.
        """
        return self._run(
            self._plan_claim(action, subject, cycle, lease, take_expired, max_attempts),
            connection=connection,
        )

    def claim_many(
        self,
        action: str,
        items: Iterable[tuple[Subject, Cycle]],
        *,
        lease: dt.timedelta | None = None,
        take_expired: bool = False,
        max_attempts: int | None = None,
        chunk_size: int | None = None,
    ) -> list[Claim]:
        """See [`AsyncLedger.claim_many`][notifyonce.AsyncLedger.claim_many]."""
        plan = self._plan_claim_many(action, items, lease, take_expired, max_attempts, chunk_size)
        return self._run_chain(plan)

    def mark_sent(self, claim: Claim, *, message_id: int | str | None = None) -> bool:
        """See [`AsyncLedger.mark_sent`][notifyonce.AsyncLedger.mark_sent]."""
        return self._run(self._plan_sent(claim, message_id))

    def mark_failed(self, claim: Claim, error: str) -> bool:
        """See [`AsyncLedger.mark_failed`][notifyonce.AsyncLedger.mark_failed]."""
        return self._run(self._plan_failed(claim, error))

    def mark_unknown(self, claim: Claim, error: str | None = None) -> bool:
        """See [`AsyncLedger.mark_unknown`][notifyonce.AsyncLedger.mark_unknown]."""
        return self._run(self._plan_unknown(claim, error))

    def release(
        self, claim: Claim, error: str | None = None, *, may_have_delivered: bool = False
    ) -> bool:
        """See [`AsyncLedger.release`][notifyonce.AsyncLedger.release]."""
        return self._run(self._plan_release(claim, error, may_have_delivered))

    def mark_many(self, results: Sequence[tuple[Claim, SlotStatus, str | None]]) -> list[bool]:
        """See [`AsyncLedger.mark_many`][notifyonce.AsyncLedger.mark_many]."""
        return self._run(self._plan_mark_many(results))

    def renew(self, claims: Iterable[Claim], *, lease: dt.timedelta | None = None) -> list[bool]:
        """See [`AsyncLedger.renew`][notifyonce.AsyncLedger.renew]."""
        return self._run(self._plan_renew(claims, lease))

    def not_claimable(
        self,
        action: str,
        items: Iterable[tuple[Subject, Cycle]],
        *,
        take_expired: bool = False,
        max_attempts: int | None = None,
    ) -> list[SlotKey]:
        """See [`AsyncLedger.not_claimable`][notifyonce.AsyncLedger.not_claimable]."""
        return self._run(self._plan_lookup(action, items, take_expired, max_attempts))

    def get(self, action: str, subject: Subject, cycle: Cycle) -> SlotRecord | None:
        """See [`AsyncLedger.get`][notifyonce.AsyncLedger.get]."""
        return self._run(self._plan_get(action, subject, cycle))

    def sweep(
        self,
        mode: DeliveryMode,
        *,
        max_attempts: int = 3,
        limit: int = 1000,
        actions: Iterable[str] | None = None,
        cycle: Cycle | None = None,
    ) -> SweepResult:
        """See [`AsyncLedger.sweep`][notifyonce.AsyncLedger.sweep]."""
        return self._run(self._plan_sweep(mode, max_attempts, limit, actions, cycle))

    def purge(
        self,
        *,
        older_than: dt.timedelta,
        opaque_finished_before: dt.datetime | None = None,
        dry_run: bool = False,
    ) -> int:
        """See [`AsyncLedger.purge`][notifyonce.AsyncLedger.purge]."""
        return self._run(self._plan_purge(older_than, opaque_finished_before, dry_run))

    def last_sent(
        self, subjects: Iterable[Subject], *, since: dt.datetime
    ) -> dict[str, dt.datetime]:
        """See [`AsyncLedger.last_sent`][notifyonce.AsyncLedger.last_sent]."""
        return self._run(self._plan_last_sent(subjects, since))

    def stats(self) -> LedgerStats:
        """See [`AsyncLedger.stats`][notifyonce.AsyncLedger.stats]."""
        return self._run(self._plan_stats())

    def requeue(
        self,
        action: str,
        *,
        status: SlotStatus | str | Iterable[SlotStatus | str],
        since: dt.datetime | None = None,
        subjects: Iterable[Subject] | None = None,
        dry_run: bool = False,
        cycle: Cycle | None = None,
    ) -> list[SlotKey]:
        """See [`AsyncLedger.requeue`][notifyonce.AsyncLedger.requeue]."""
        return self._run(self._plan_requeue(action, status, since, subjects, dry_run, cycle))

    def slots(
        self,
        *,
        status: SlotStatus | str | Iterable[SlotStatus | str],
        action: str | None = None,
        since: dt.datetime | None = None,
        subjects: Iterable[Subject] | None = None,
        limit: int = 100,
        cycle: Cycle | None = None,
    ) -> list[SlotRecord]:
        """See [`AsyncLedger.slots`][notifyonce.AsyncLedger.slots]."""
        return self._run(self._plan_slots(status, action, since, subjects, limit, cycle))
