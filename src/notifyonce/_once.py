"""``once``: any side effect, done once per slot, with the ledger's claim around it.

The Notifier claims a slot before a send and records what the send did; ``once`` does the
same for a block of the caller's code (a charge, an e-mail, a row written elsewhere), so a
task queue that runs a task twice (a redelivery after a worker died, a scheduler started
twice) runs the block once:

- **before the block**: the slot is claimed (committed). A slot finished before, or held by
  another worker, is not claimed and the block is told to skip, with the reason;
- **while it runs**: the claim's lease is renewed every third of the lease, as the
  Notifier renews the claims of long sends, so no other worker takes a live block over;
- **after it** (waiting up to half a lease for a database that went away): success marks
  the slot sent; `NotDoneError` (or an exception the caller names
  as certain) releases it; any other exception, a cancellation included, may have done
  the work, so the delivery mode decides: at most once records it ``unknown``, at least
  once releases it for another attempt while attempts are left.

One decision table (`_settle`) and one sequence of ledger calls (`_enter_steps`) serve the
async and the sync ledger: each step is a ledger method's name and arguments, which the
async guard awaits and the sync guard calls.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from typing_extensions import Self

from notifyonce._errors import (
    LedgerError,
    LedgerUnavailableError,
    NotifyOnceError,
    PermanentSendError,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._keys import Cycle, SlotKey, Subject, make_key
from notifyonce._ledger.checks import check_positive_int
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.explain import explained, explained_sync
from notifyonce._ledger.ledger import AsyncLedger, Ledger
from notifyonce._ledger.records import SlotRecord
from notifyonce._ledger.table import SlotStatus
from notifyonce._outcome import DeliveryMode, Outcome

__all__ = ["NotDoneError", "OnceGuard", "OnceResult", "once", "once_call"]

logger = logging.getLogger("notifyonce.once")

P = ParamSpec("P")
R = TypeVar("R")

# Exceptions that say "certainly not done" without being listed by the caller: the
# senders' own (a TransientSendError is raised only when nothing was delivered).
_CERTAIN = (TransientSendError,)
# Seconds between two tries of a mark whose database went away.
_MARK_RETRY_EVERY = 0.5
# Exceptions that say "refused for good": recorded failed, never repeated.
_REFUSED = (PermanentSendError,)


class NotDoneError(NotifyOnceError):
    """Raise inside a ``once`` block to say its side effect certainly did not happen.

    The slot is released (its attempt given back, as a 429 gives it back to the
    Notifier) and the exception goes on, so the task queue retries the task and the retry
    claims the slot again. Raise it from the exception that proved nothing happened
    (``raise NotDoneError("payment API refused the connection") from exc``); only its class
    name is stored in the ledger.
    """


@dataclass(frozen=True, slots=True)
class _Step:
    """One ledger call of the guard: the method's name and its arguments."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _step(method: str, *args: Any, **kwargs: Any) -> _Step:
    return _Step(method, args, kwargs)


# A sequence of ledger calls: yields each step, is sent its result, returns its answer.
Steps = Generator[_Step, Any, "tuple[Claim | None, SlotStatus | None]"]


class OnceGuard:
    """What ``once`` yields: whether the block runs, with which claim, and how it ended.

    A ``with`` block cannot skip itself, so the block tests the guard: it is true when this
    caller won the slot and the block should run.

    Attributes:
        key: The slot's normalised key.
        mode: The delivery mode deciding what an uncertain end records.
        claim: The won claim (pass ``claim.token`` to a downstream system as a fencing
            token), or None when the block must not run.
        skipped: Why the block must not run, as the slot's status: ``SENT`` done before;
            ``CLAIMED`` held by another worker (a live lease, or out of attempts);
            ``UNKNOWN`` or ``FAILED`` settled before and not repeated without
            ``requeue``. None when the block runs.
        outcome: How it ended: ``DUPLICATE`` when skipped; after the block ``SENT``,
            ``RETRY`` (released), ``UNKNOWN``, ``FAILED`` or ``LEASE_LOST`` (another
            worker took the slot over while the block ran; nothing was overwritten).
            None while the block runs.
    """

    __slots__ = (
        "_ledger",
        "_renewer",
        "_stop",
        "claim",
        "key",
        "lease_lost",
        "max_attempts",
        "mode",
        "not_done",
        "outcome",
        "skipped",
    )

    def __init__(
        self,
        ledger: AsyncLedger | Ledger,
        key: SlotKey,
        mode: DeliveryMode,
        max_attempts: int,
        not_done: tuple[type[BaseException], ...],
    ) -> None:
        self._ledger = ledger
        self.key = key
        self.mode = mode
        self.max_attempts = max_attempts
        self.not_done = not_done
        self.claim: Claim | None = None
        self.skipped: SlotStatus | None = None
        self.outcome: Outcome | None = None
        self.lease_lost = False
        self._renewer: asyncio.Task[None] | threading.Thread | None = None
        self._stop = threading.Event()

    def __bool__(self) -> bool:
        return self.claim is not None

    def __repr__(self) -> str:
        state = self.outcome.value if self.outcome is not None else "running"
        return f"OnceGuard({self.key}, mode={self.mode.value}, {state})"

    # -- the shared decisions -------------------------------------------------------

    def _enter_steps(self) -> Steps:
        """Claim the slot, or find out why it cannot be claimed.

        A claim that loses reads the slot: a claim whose lease expired is swept (at most
        once: ``unknown``; at least once: released while attempts are left, then claimed
        again here), and a slot released between the claim and the read is claimed again.
        """
        key, at_least_once = self.key, self.mode is DeliveryMode.AT_LEAST_ONCE
        claim_options = {"take_expired": at_least_once, "max_attempts": self.max_attempts}
        record: SlotRecord | None = None
        for _ in range(3):
            claim = yield _step("claim_slot", key.action, key.subject, key.cycle, **claim_options)
            if claim is not None:
                return claim, None
            record = yield _step("get", key.action, key.subject, key.cycle)
            if record is None or record.status is SlotStatus.RELEASED:
                continue
            if record.status is not SlotStatus.CLAIMED or record.lease_until > self._ledger.now():
                break
            yield _step("sweep", self.mode, max_attempts=self.max_attempts, actions=[key.action])
            record = yield _step("get", key.action, key.subject, key.cycle)
            if record is None or record.status is not SlotStatus.RELEASED:
                break
        return None, SlotStatus.CLAIMED if record is None else record.status

    def _settle(self, error: BaseException | None) -> _Step:
        """The mark that records how the block ended (``error``: what it raised)."""
        claim = self.claim
        assert claim is not None
        if error is None:
            self.outcome = Outcome.SENT
            return _step("mark_sent", claim)
        name = type(error).__name__
        if isinstance(error, (NotDoneError, *_CERTAIN, *self.not_done)):
            self.outcome = Outcome.RETRY
            return _step("release", claim, name)
        if isinstance(error, _REFUSED):
            self.outcome = Outcome.FAILED
            return _step("mark_failed", claim, name)
        if self.mode is DeliveryMode.AT_LEAST_ONCE and claim.attempt < self.max_attempts:
            self.outcome = Outcome.RETRY
            return _step("release", claim, name, may_have_delivered=True)
        self.outcome = Outcome.UNKNOWN
        return _step("mark_unknown", claim, name)

    def _landed(self, landed: bool) -> None:
        """Note a mark that did not land: the lease was lost and the slot taken over."""
        if not landed:
            logger.error(
                "the lease of %s ran out while its block ran and another worker took the "
                "slot over: its %s was not recorded",
                self.key,
                self.outcome.value if self.outcome else "outcome",
            )
            self.outcome = Outcome.LEASE_LOST

    def _entered(self, entered: tuple[Claim | None, SlotStatus | None]) -> Claim | None:
        """Take what `_enter_steps` returned: the claim when the block runs (its lease is to
        be renewed), else None."""
        self.claim, status = entered
        if self.claim is not None:
            return self.claim
        self.skipped = status
        self.outcome = Outcome.DUPLICATE
        logger.debug("%s not run: the slot is %s", self.key, status.value if status else "?")
        return None

    def _mark_patience(self) -> float:
        """How long the mark after the block waits for a database that went away: half a
        lease. The claim was renewed at most a third of a lease ago, so its fencing token
        still holds the slot meanwhile; after that the mark raises, and the slot is settled
        as a crashed worker's (swept, or taken over at least once)."""
        return self._ledger.lease.total_seconds() / 2

    def _waiting(self, exc: LedgerUnavailableError) -> bool:
        """Say once that the mark waits for its database (True: said)."""
        logger.warning(
            "the database went away before the end of %s was recorded (%s): waiting up to "
            "half a lease for it",
            self.key,
            _cause(exc),
        )
        return True

    def _renewal_period(self) -> float:
        return max(self._ledger.lease.total_seconds() / 3, 0.05)

    def _renewed(self, held: list[bool]) -> bool:
        """Whether to go on renewing after a renewal answered ``held``."""
        if held == [True]:
            return True
        self.lease_lost = True
        logger.warning("the lease of %s was lost while its block ran", self.key)
        return False

    # -- async ----------------------------------------------------------------------

    async def _call(self, step: _Step) -> Any:
        ledger = self._ledger
        assert isinstance(ledger, AsyncLedger)
        return await getattr(ledger, step.method)(*step.args, **step.kwargs)

    async def __aenter__(self) -> Self:
        if not isinstance(self._ledger, AsyncLedger):
            raise ValidationTypeError("ledger", "async with once(...) needs an AsyncLedger")
        steps = self._enter_steps()
        try:
            result = None
            while True:
                step = steps.send(result)
                result = await _explained(self._call(step), self._ledger)
        except StopIteration as done:
            if (claim := self._entered(done.value)) is not None:
                self._renewer = asyncio.ensure_future(self._renew_async(claim))
        return self

    async def _renew_async(self, claim: Claim) -> None:
        ledger = self._ledger
        assert isinstance(ledger, AsyncLedger)
        period = self._renewal_period()
        while True:
            await asyncio.sleep(period)
            try:
                held = await ledger.renew([claim])
            except LedgerError as exc:
                logger.warning("could not renew the lease of %s (%s)", self.key, _cause(exc))
                continue
            if not self._renewed(held):
                return

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.claim is None:
            return
        renewer = self._renewer
        if isinstance(renewer, asyncio.Task):
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
        # Recorded even when the block was cancelled: the mark outlives a second cancel.
        step = self._settle(error)
        landed = await asyncio.shield(self._mark_async(step))
        self._landed(landed)

    async def _mark_async(self, step: _Step) -> Any:
        """Record the block's end, waiting out a database that went away for up to half a
        lease (see `_mark_patience`)."""
        deadline, told = time.monotonic() + self._mark_patience(), False
        while True:
            try:
                return await self._call(step)
            except LedgerUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise
                told = told or self._waiting(exc)
                await asyncio.sleep(_MARK_RETRY_EVERY)

    # -- sync -----------------------------------------------------------------------

    def _call_sync(self, step: _Step) -> Any:
        ledger = self._ledger
        assert isinstance(ledger, Ledger)
        return getattr(ledger, step.method)(*step.args, **step.kwargs)

    def __enter__(self) -> Self:
        if not isinstance(self._ledger, Ledger):
            raise ValidationTypeError("ledger", "with once(...) needs a Ledger (async with: ...)")
        steps = self._enter_steps()
        try:
            result = None
            while True:
                step = steps.send(result)
                result = _explained_sync(functools.partial(self._call_sync, step), self._ledger)
        except StopIteration as done:
            if (claim := self._entered(done.value)) is not None:
                renewer = threading.Thread(
                    target=self._renew_sync, args=(claim,), name="notifyonce-once", daemon=True
                )
                self._renewer = renewer
                renewer.start()
        return self

    def _renew_sync(self, claim: Claim) -> None:
        ledger = self._ledger
        assert isinstance(ledger, Ledger)
        period = self._renewal_period()
        while not self._stop.wait(period):
            try:
                held = ledger.renew([claim])
            except LedgerError as exc:
                logger.warning("could not renew the lease of %s (%s)", self.key, _cause(exc))
                continue
            if not self._renewed(held):
                return

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.claim is None:
            return
        self._stop.set()
        if isinstance(self._renewer, threading.Thread):
            self._renewer.join()
        step = self._settle(error)
        deadline, told = time.monotonic() + self._mark_patience(), False
        while True:
            try:
                landed = self._call_sync(step)
                break
            except LedgerUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise
                told = told or self._waiting(exc)
                time.sleep(_MARK_RETRY_EVERY)
        self._landed(landed)


def _cause(exc: BaseException) -> str:
    return type(exc.__cause__ or exc).__name__


async def _explained(call: Awaitable[Any], ledger: AsyncLedger) -> Any:
    """``call``'s result; a ledger error says what to do (see `explained`)."""
    try:
        return await call
    except LedgerError as exc:
        why = await explained(exc, ledger)
        if why is exc:
            raise
        raise why from exc


def _explained_sync(call: Callable[[], Any], ledger: Ledger) -> Any:
    """``call``'s result; a ledger error says what to do (see `explained`)."""
    try:
        return call()
    except LedgerError as exc:
        why = explained_sync(exc, ledger)
        if why is exc:
            raise
        raise why from exc


def _checked(
    ledger: object, mode: object, max_attempts: object, not_done: object
) -> tuple[DeliveryMode, int, tuple[type[BaseException], ...]]:
    if not isinstance(ledger, (AsyncLedger, Ledger)):
        raise ValidationTypeError(
            "ledger", f"must be an AsyncLedger or a Ledger, got {type(ledger).__name__}"
        )
    return check_options(mode, max_attempts, not_done)


def check_options(
    mode: object, max_attempts: object, not_done: object
) -> tuple[DeliveryMode, int, tuple[type[BaseException], ...]]:
    """The guard's options, checked (a queue adapter checks them when a task is declared)."""
    try:
        delivery = DeliveryMode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in DeliveryMode)
        raise ValidationError("mode", f"must be one of {choices}, got {mode!r}") from None
    attempts = check_positive_int("max_attempts", max_attempts)
    if not isinstance(not_done, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in not_done
    ):
        raise ValidationTypeError("not_done", "must be a tuple of exception classes")
    return delivery, attempts, not_done


def once(
    ledger: AsyncLedger | Ledger,
    action: str,
    subject: Subject,
    cycle: Cycle,
    *,
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
) -> OnceGuard:
    """Run a block once per slot: ``async with`` on an AsyncLedger, ``with`` on a Ledger.

    The slot is claimed when the block is entered. The guard is true when this caller won
    it; test it, since a ``with`` block cannot skip itself. While the block runs its lease
    is renewed; when it ends, the slot is recorded:

    | the block | at most once | at least once |
    |---|---|---|
    | returns | sent | sent |
    | raises `NotDoneError`, a ``not_done`` class, a `TransientSendError` | released | released |
    | raises a `PermanentSendError` | failed | failed |
    | raises anything else, or is cancelled | unknown | released (then unknown) |

    At least once, the release after an uncertain end counts its attempt, and the attempt
    that reaches ``max_attempts`` is recorded unknown. Exceptions go on after the slot is
    recorded. At least once, a claim whose worker died is taken over once its lease
    expired; at most once, it is swept ``unknown``.

    Args:
        ledger: The ledger to claim in.
        action: What the block does, e.g. ``"charge_renewal"``.
        subject: Whom it is for.
        cycle: Which cycle (an aware datetime, a date, an int or a str).
        mode: What an end that may have done the work records.
        max_attempts: At least once: how many attempts that may have done the work one
            slot gets in all.
        not_done: More exception classes that say the block certainly did nothing.

    Raises:
        ValidationError: a bad argument (its ``field`` names it), before any SQL runs.
        LedgerError: the database failed; on a missing ledger table, it says to run the
            migration.

    Examples:
        >>> import sqlalchemy as sa
        >>> ledger = Ledger(sa.create_engine("sqlite://"))
        >>> ledger.create_schema()
        >>> for worker in ("first", "second"):
        ...     with once(ledger, "charge", 42, "2026-12") as guard:
        ...         if guard:
        ...             print(worker, "charges, token", guard.claim.token > 0)
        ...     print(worker, guard.outcome.value, guard.skipped)
        first charges, token True
        first sent None
        second duplicate SlotStatus.SENT
    """
    delivery, attempts, certain = _checked(ledger, mode, max_attempts, not_done)
    return OnceGuard(ledger, make_key(action, subject, cycle), delivery, attempts, certain)


@dataclass(frozen=True)
class OnceResult(Generic[R]):
    """What a function wrapped by `once_call` did.

    Attributes:
        value: What the function returned, or None when it did not run.
        outcome: ``SENT`` when it ran; ``DUPLICATE`` when it was skipped; ``LEASE_LOST``
            when it ran but another worker had taken the slot over.
        skipped: Why it did not run (see `OnceGuard.skipped`), else None.
        claim: The claim it ran with, else None.
    """

    value: R | None
    outcome: Outcome
    skipped: SlotStatus | None
    claim: Claim | None

    @property
    def ran(self) -> bool:
        """Whether the function ran."""
        return self.claim is not None


def _result(guard: OnceGuard, value: R | None) -> OnceResult[R]:
    assert guard.outcome is not None
    return OnceResult(value, guard.outcome, guard.skipped, guard.claim)


@overload
def once_call(
    ledger: AsyncLedger,
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = ...,
    max_attempts: int = ...,
    not_done: tuple[type[BaseException], ...] = ...,
) -> Callable[
    [Callable[Concatenate[Claim, P], Awaitable[R]]], Callable[P, Awaitable[OnceResult[R]]]
]: ...


@overload
def once_call(
    ledger: Ledger,
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = ...,
    max_attempts: int = ...,
    not_done: tuple[type[BaseException], ...] = ...,
) -> Callable[[Callable[Concatenate[Claim, P], R]], Callable[P, OnceResult[R]]]: ...


def once_call(
    ledger: AsyncLedger | Ledger,
    action: str,
    *,
    key: Callable[P, tuple[Subject, Cycle]],
    mode: DeliveryMode | str = DeliveryMode.AT_MOST_ONCE,
    max_attempts: int = 3,
    not_done: tuple[type[BaseException], ...] = (),
) -> Callable[[Callable[Concatenate[Claim, P], Any]], Callable[P, Any]]:
    """Decorate a function so each slot runs it once: `once` around every call.

    ``key`` takes the call's arguments and returns its ``(subject, cycle)``; the function
    gets the won [`Claim`][notifyonce.Claim] first, then the call's arguments, and the
    call returns a `OnceResult`. An async function needs an AsyncLedger, a plain one a
    Ledger. Arguments that make no key (an empty subject, a naive datetime) raise
    `ValidationError` naming the part before anything is claimed.

    Examples:
        >>> import sqlalchemy as sa
        >>> ledger = Ledger(sa.create_engine("sqlite://"))
        >>> ledger.create_schema()
        >>> @once_call(ledger, "charge", key=lambda user, period: (user, period))
        ... def charge(claim: Claim, user: int, period: str) -> str:
        ...     return f"charged {user}"
        >>> charge(42, "2026-12").value, charge(42, "2026-12").skipped
        ('charged 42', <SlotStatus.SENT: 'sent'>)
    """
    delivery, attempts, certain = _checked(ledger, mode, max_attempts, not_done)
    if not isinstance(action, str):
        raise ValidationTypeError("action", f"must be a str, got {type(action).__name__}")

    def guard_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> OnceGuard:
        subject, cycle = key(*args, **kwargs)
        slot = make_key(action, subject, cycle)
        return OnceGuard(ledger, slot, delivery, attempts, certain)

    def decorate(function: Callable[Concatenate[Claim, P], Any]) -> Callable[P, Any]:
        if inspect.iscoroutinefunction(function):
            if not isinstance(ledger, AsyncLedger):
                raise ValidationTypeError("ledger", "an async function needs an AsyncLedger")

            @functools.wraps(function)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> OnceResult[Any]:
                async with guard_of(args, kwargs) as guard:
                    if guard.claim is None:
                        return _result(guard, None)
                    value = await function(guard.claim, *args, **kwargs)
                return _result(guard, value)

            return run_async
        if not isinstance(ledger, Ledger):
            raise ValidationTypeError("ledger", "a plain function needs a Ledger")

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> OnceResult[Any]:
            with guard_of(args, kwargs) as guard:
                if guard.claim is None:
                    return _result(guard, None)
                value = function(guard.claim, *args, **kwargs)
            return _result(guard, value)

        return run

    return decorate
