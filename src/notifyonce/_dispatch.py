"""One ``send_many`` run as a pipeline whose crash costs only what was in flight.

::

    source ─► intake ─────────► ready ─► workers (``concurrency``) ──────► writer ─► ledger
              check, dedupe,    queue    rate-limit turn, then claim,      the claims of the
              audience, quiet            then send at once                 workers ready
              hours, spacing,                                              together and the
              one look-up per                                              outcomes known so
              batch                                                        far: one round trip

Why this shape:

- A slot is claimed only by a worker that is about to send it (after its rate-limit turn
  when the sender offers one), so at most ``concurrency`` claims are ever held whose
  request was not written yet. A SIGKILL loses (at most once) or repeats (at least once)
  those, never a whole batch of claims that were never tried.
- Each outcome is written as soon as it is known, with the next claims (one round trip
  and one commit for both). A write the database refuses is written apart, the outcomes
  row by row, so one unstorable value costs only its own row.
- Structured concurrency: no send outlives the call. A cancellation or a foreign
  ``BaseException`` stops every worker; a send that had started is recorded as
  uncertain, a claim that had not is released, and the write of what is known is
  shielded from the cancellation (bounded in time). A ``SenderConfigError``, a ledger
  failure or bad input in a stream stops the run gently instead: no new sends, the ones
  under way finish and are recorded, then the error is raised. A bot-wide flood wait or a
  ``MessageRefusedError`` (the message itself refused) stops it the same way but returns
  the report, ``stopped`` saying why and the untried notifications back as ``RETRY``.
- Claims whose sends take long (retries, flood waits) have their leases renewed, so an
  at-least-once worker elsewhere never takes over a send still under way.
- A recipient the audience knows to be gone, or opted out of the run's category, is
  skipped by the intake before any claim or request (one look-up per batch); a refusal
  that says its recipient is gone (``PermanentSendError.gone``) is remembered there once
  its ``failed`` mark has landed, so the next run skips it.
- An observer (``Notifier(observer=...)``, see ``_observe``) hears of the run, each claim
  statement, each send and each result. Without one, every hook site is a single
  ``is None`` check: no clock is read and nothing is built for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from notifyonce._caps import CAPPED
from notifyonce._drivers.outage import Outage
from notifyonce._errors import (
    FloodWaitError,
    LedgerError,
    LedgerUnavailableError,
    MessageRefusedError,
    PermanentSendError,
    SenderConfigError,
    SendError,
    TransientSendError,
    ValidationError,
)
from notifyonce._keys import KeyMaker, SlotKey
from notifyonce._ledger.table import SlotStatus
from notifyonce._message import Message, Receipt, SupportsTurn
from notifyonce._observe import SENDING, Hooks, SendProbe
from notifyonce._outcome import DeliveryMode, Outcome
from notifyonce._results import ATTENTION, DRY_RUN_SEND, Notification, Report, Result

if TYPE_CHECKING:
    from notifyonce._audience import AudienceCheck
    from notifyonce._caps import CapCheck, Seat
    from notifyonce._ledger.claim import Claim
    from notifyonce._ledger.core import Keeper, Mark
    from notifyonce._ledger.ledger import AsyncLedger
    from notifyonce._message import Sender
    from notifyonce._observe import Observer
    from notifyonce._quiet import QuietHours

__all__ = ["Decision", "Parts", "Policy", "Run", "decide_error", "decide_uncertain", "settle"]

logger = logging.getLogger("notifyonce.notifier")

_ERROR_TEXT_LIMIT = 300
# Outcomes per mark statement group; the ledger chunks further below driver limits.
_RECORD_CHUNK = 500
# Workers take no new notification while this many outcomes wait for their write: a
# sender faster than the ledger's marks must not pile up claims that a crash would find
# sent but unrecorded.
_RECORD_BACKLOG = _RECORD_CHUNK
# An outcome waits at most this long (seconds) for others to share its write, unless
# this many are already waiting.
_RECORD_LINGER = 0.01
_RECORD_EARLY = 64
# How long the shielded settling after a cancellation may take before it gives up (the
# sweep then settles what is left, as the delivery mode says).
_SETTLE_TIMEOUT = 15.0
# A claim needs at least this share of its lease left for its send to start.
_LEASE_MARGIN = 0.1
# A run stops once this many of its sends were refused for their message (bad entities, a
# media file gone) while none of its sends was delivered yet: every recipient would be
# refused alike.
MESSAGE_REFUSALS_TO_STOP = 3
# What claim and send durations are measured with, only when there is an observer.
_clock = time.perf_counter

Keep = Literal["all", "attention", "none"]


# -- decisions: what to record for a claim, as pure functions --------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """What to record for a claim after its send, and the outcome if the record lands."""

    status: SlotStatus
    outcome: Outcome
    receipt: Receipt | None = None
    error: str | None = None
    may_have_delivered: bool = False
    #: Why the recipient cannot be reached, when the refusal said so (a GoneReason value).
    gone: str | None = None
    #: Why a ``SKIPPED`` outcome was skipped (``Result.reason``, ``Report.skips``).
    reason: str | None = None


# A claim whose send never started (the run stopped first): certainly not sent.
INTERRUPTED = Decision(SlotStatus.RELEASED, Outcome.RETRY, error="not sent: interrupted")
# A claim whose recipient a frequency cap held back: certainly not sent, and the slot keeps
# it (released, its error "capped"), so the ledger's stats and the console count the
# capped recipients of an action or a campaign as the run's report does, once each.
CAPPED_RELEASE = Decision(SlotStatus.RELEASED, Outcome.SKIPPED, error=CAPPED, reason=CAPPED)


def describe(exc: BaseException) -> str:
    """An exception as stored and logged: never a message text or a secret."""
    if isinstance(exc, SendError):
        # SendError messages carry the provider's code and description only.
        return str(exc)[:_ERROR_TEXT_LIMIT]
    # A foreign exception's message may quote the request (and so the text or a token).
    return type(exc).__name__


def decide_uncertain(error: str, mode: DeliveryMode, attempt: int, max_attempts: int) -> Decision:
    """A send that may have been delivered: unknown, or another try at least once."""
    if mode is DeliveryMode.AT_LEAST_ONCE and attempt < max_attempts:
        return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=error, may_have_delivered=True)
    return Decision(SlotStatus.UNKNOWN, Outcome.UNKNOWN, error=error, may_have_delivered=True)


def decide_error(exc: Exception, mode: DeliveryMode, attempt: int, max_attempts: int) -> Decision:
    """The decision for an exception raised by ``Sender.send`` (a run decides a refusal
    about the message before any of its sends was delivered itself: see
    ``Run._message_refused``).

    ====================================  ==============================================
    raised                                decision
    ====================================  ==============================================
    MessageRefusedError                   released: the message's fault, not the slot's
    PermanentSendError                    FAILED, never retried
    TransientSendError, SenderConfigError released: certainly not delivered
    ValidationError                       FAILED: refused before sending, for good
    UncertainSendError, anything else     uncertain (see `decide_uncertain`)
    ====================================  ==============================================
    """
    if isinstance(exc, MessageRefusedError):
        return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=describe(exc))
    if isinstance(exc, PermanentSendError):
        return Decision(SlotStatus.FAILED, Outcome.FAILED, error=describe(exc), gone=exc.gone)
    if isinstance(exc, (TransientSendError, SenderConfigError)):
        return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=describe(exc))
    if isinstance(exc, ValidationError):
        return Decision(SlotStatus.FAILED, Outcome.FAILED, error=f"{exc.field}: {exc.problem}")
    return decide_uncertain(describe(exc), mode, attempt, max_attempts)


def settle(decision: Decision, landed: bool | None) -> tuple[Outcome, str | None]:
    """The outcome reported once the record of ``decision`` landed (True), found the
    lease lost (False) or failed in the ledger (None)."""
    if landed is False and decision.may_have_delivered:
        # Sent (or maybe sent) while someone else already held the slot.
        return Outcome.LEASE_LOST, decision.error
    if landed is False:
        # Not delivered and the slot is someone else's now: nothing to record.
        return Outcome.DUPLICATE, decision.error
    if landed is None:
        return Outcome.UNKNOWN, "the ledger failed while recording the outcome"
    return decision.outcome, decision.error


def counts(decision: Decision) -> bool:
    """Whether the claim's attempt counts against ``max_attempts``: unless it is released
    with its send certainly not delivered (a 429, a refused connection, never started)."""
    return decision.may_have_delivered or decision.status is not SlotStatus.RELEASED


def detail(decision: Decision) -> str | None:
    """What a mark stores: the provider's message id for SENT, else the error."""
    if decision.status is SlotStatus.SENT:
        receipt = decision.receipt
        return None if receipt is None or receipt.message_id is None else str(receipt.message_id)
    return decision.error


def slot(key: SlotKey) -> tuple[str, str]:
    """The part of a key that identifies a slot within one action."""
    return (key.cycle, key.subject)


# -- the run -------------------------------------------------------------------------


@dataclass(slots=True)
class _Item:
    index: int
    key: SlotKey
    notification: Notification


@dataclass(slots=True)
class _Entry:
    item: _Item
    claim: Claim
    decision: Decision


@dataclass(frozen=True, slots=True)
class Policy:
    """How a run sends: the Notifier's options, fixed for the run's length."""

    mode: DeliveryMode
    max_attempts: int
    concurrency: int
    batch_size: int
    min_spacing: dt.timedelta | None = None
    quiet_hours: QuietHours | None = None
    dry_run: bool = False
    #: Seconds the run waits for its database to come back (0: it ends at the failure).
    outage_patience: float = 0.0

    @property
    def take_expired(self) -> bool:
        """Whether claims take over expired ones: at least once only (its worker may
        have sent; at most once leaves that to the sweep, which makes it UNKNOWN)."""
        return self.mode is DeliveryMode.AT_LEAST_ONCE

    @property
    def claim_limit(self) -> int | None:
        """The take-over bound of claims (and of the look-up that skips finished slots)."""
        return self.max_attempts if self.mode is DeliveryMode.AT_LEAST_ONCE else None


@dataclass(frozen=True, slots=True)
class Parts:
    """What a run works with besides its policy: the ledger, the sender, and the callables
    of the Notifier it needs (a run never holds the Notifier itself).

    Attributes:
        check: Checks one notification (and asks the sender's ``check``); its slot key.
        now: The ledger's clock.
        emit: Reports one result (the Notifier's log line and its ``on_result``); the
            flag asks for the log line at DEBUG (a result a line of the run's own counts).
    """

    ledger: AsyncLedger
    sender: Sender
    check: Callable[[KeyMaker, object], SlotKey]
    now: Callable[[], dt.datetime]
    emit: Callable[[Result, bool], None]
    observer: Observer | None = None
    #: Whom to skip and where to remember the recipients found gone (None: nobody, nowhere).
    audience: AudienceCheck | None = None
    #: The frequency cap of the run's category (None: uncapped, and no statement for it).
    cap: CapCheck | None = None
    #: Called after the claim and before the send, to make the message sent (a digest
    #: renders its events here); a ValidationError it raises fails the slot for good,
    #: anything else gives it back.
    prepare: Callable[[Notification, Claim], Awaitable[Message]] | None = None


class Run:
    """The state of one ``send_many`` call; ``execute`` runs it to the end.

    ``on_result`` hears this run's results only, each before ``parts.emit`` does.
    """

    def __init__(
        self,
        policy: Policy,
        parts: Parts,
        action: str,
        report: Report,
        keep: Keep,
        keys: list[SlotKey] | None = None,
        *,
        on_result: Callable[[Result], None] | None = None,
    ) -> None:
        self.policy = policy
        self.parts = parts
        self.ledger = ledger = parts.ledger
        self.action = action
        # The slot keys of a list, checked before the run (None: a stream, checked as read).
        self.keys = keys
        self.options = ledger._options(
            take_expired=policy.take_expired, max_attempts=policy.claim_limit
        )
        self.report = report
        self.keep = keep
        self.on_result = on_result
        self.kept: list[tuple[int, Result]] = []
        # Items read and not yet given their result, and how many the intake has read: what
        # a run stopped by a bot-wide flood wait gives back untried.
        self.waiting: dict[int, _Item] = {}
        self.read = 0
        # Notifications read from the source into a batch not handed to the intake yet.
        self.unread: list[Notification] = []
        # Keys between intake and their final result, and keys this run released: a later
        # copy of either in the same run is a duplicate (it must not win the slot again).
        self.held: set[tuple[str, str]] = set()
        self.released: set[tuple[str, str]] = set()
        # Claims whose outcome is not written yet: claim id -> (claim, last renewal).
        self.active: dict[int, tuple[Claim, float]] = {}
        # Won claims by item index, set by the writer before the worker resumes: a worker
        # cancelled in that instant still finds (and settles) its claim here.
        self.owned: dict[int, Claim] = {}
        # Room for two batches: while the workers take one, the intake screens the next
        # (its look-ups are round trips), instead of waiting for the queue to drain first.
        # A batch whose gone recipients were skipped brings fewer sends for the same
        # look-ups, so without it the workers waited on the intake. Nothing in the queue is
        # claimed yet: what a crash costs stays the sends under way.
        self.ready: asyncio.Queue[_Item | None] = asyncio.Queue(
            maxsize=max(2 * policy.batch_size, policy.concurrency)
        )
        self.stopping = False
        # Whether a send of this run was delivered, and how many were refused for their
        # message before one was: until one is, such a refusal is not its recipient's.
        self.delivered = False
        self.message_refusals = 0
        # Recipients whose refusal said they are gone, once their FAILED mark landed:
        # (recipient, reason, the provider's words), written to the audience by the writer.
        self.learned: list[tuple[str, str, str | None]] = []
        self.learn_failed = False
        # Why the run stopped before its end, as a kind ("flood wait", "message refused",
        # "halt"), and when a bot-wide flood wait ends (by the ledger's clock).
        self.stop_kind: str | None = None
        self.resume_at: dt.datetime | None = None
        # Results of a stop told in one line instead of one each: the notifications given
        # back once the run was stopping, and the outcomes the ledger failed to record.
        self.given_back = 0
        self.untried = 0  # of given_back, those no request went to
        # A caller that tells the stop in its own words (a broadcast's summary).
        self.stop_told_above = False
        self.unrecorded = 0
        self.error: BaseException | None = None
        self.idle: set[asyncio.Task[None]] = set()
        self.tasks: list[asyncio.Task[None]] = []
        # Connections the run keeps for its statements, one per lane, where the ledger
        # allows (given back when the run is settled).
        self.keepers = ledger._keepers(ledger._claim_lanes) or []
        # The database going away pauses the run (see notifyonce._drivers.outage).
        self.outage = Outage(ledger.engine, policy.outage_patience, self._let_keepers_go)
        turn = parts.sender.turn if isinstance(parts.sender, SupportsTurn) else None
        self.turn: Callable[[str], contextlib.AbstractAsyncContextManager[Any]] | None = (
            turn if callable(turn) else None
        )
        self.writer = _Writer(self)
        self.lease_margin = ledger.lease * _LEASE_MARGIN
        observer = parts.observer
        self.hooks = None if observer is None else Hooks(observer, type(parts.sender).__name__)

    # -- the whole run --------------------------------------------------------------

    async def execute(self, source: Iterable[Notification] | AsyncIterable[Notification]) -> None:
        """Run the pipeline; raise what stopped it, after every claim is settled."""
        hooks = self.hooks
        if hooks is None:
            await self._execute(source)
            return
        # Before the pipeline's tasks exist: they inherit what run_started set in the context.
        handle = hooks.call("run_started", self.action)
        error: str | None = None
        try:
            await self._execute(source)
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            hooks.call("run_finished", handle, self.action, self.report, error)

    async def _execute(self, source: Iterable[Notification] | AsyncIterable[Notification]) -> None:
        self.tasks = [asyncio.ensure_future(self._guard(self._intake(source)))]
        self.tasks += [
            asyncio.ensure_future(self._guard(self._worker()))
            for _ in range(self.policy.concurrency)
        ]
        renewer = asyncio.ensure_future(self._renew_leases())
        if self.stopping:  # halted before it started
            self.stop(None, hard=False)
        cancelled = False
        try:
            await asyncio.wait(self.tasks)
        except asyncio.CancelledError:
            cancelled = True
            self.stop(None, hard=True)
        finally:
            # Settle everything, even when the caller cancels us again meanwhile.
            settling = asyncio.ensure_future(self._settle(renewer))
            while not settling.done():
                try:
                    await asyncio.shield(settling)
                except asyncio.CancelledError:
                    cancelled = True
        if cancelled:
            raise asyncio.CancelledError
        if self.error is not None:
            raise self.error
        if self.report.stopped is not None:
            self._give_back_untried(source)
            # One line for the stop, never one per chat given back (those are at DEBUG),
            # in the words of a broadcast's summary: tried and given back apart from not
            # tried. A broadcast says it in its own report and summary (with the rest of
            # its stream, never read): here it is told at INFO, so the stop is said once.
            tried = self.given_back - self.untried
            logger.log(
                logging.INFO if self.stop_told_above else logging.WARNING,
                "run of %s stopped (%s): %d sent, %d tried and given back, %d not tried",
                self.action,
                self.report.stopped,
                self.report.counts[Outcome.SENT],
                tried,
                self.untried,
            )
        self.report.results = [r for _, r in sorted(self.kept, key=lambda pair: pair[0])]

    async def _settle(self, renewer: asyncio.Task[None]) -> None:
        try:
            await asyncio.wait_for(self._drain(), _SETTLE_TIMEOUT)
        except asyncio.TimeoutError:
            logger.error(
                "gave up settling %d claims after %.0f s; the sweep will settle them",
                len(self.active),
                _SETTLE_TIMEOUT,
            )
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self.outage.close()
            told = self.outage.told()
            if told is not None:
                logger.warning(told)
            if self.keepers:
                await self.ledger._release(self.keepers)

    async def _let_keepers_go(self) -> None:
        """The database is back: the connections the claim lanes kept were cut."""
        if self.keepers:
            await self.ledger._drop(self.keepers)

    async def _drain(self) -> None:
        await asyncio.wait(self.tasks)
        await self.writer.drain()

    def stop(self, error: BaseException | None, *, hard: bool) -> None:
        """Start no new sends; ``hard``: also cancel the sends under way."""
        if error is not None and self.error is None:
            self.error = error
        self.stopping = True
        intake = self.tasks[0]
        intake.cancel()
        for task in self.tasks[1:]:
            if hard or task in self.idle:
                task.cancel()

    def halt(self, reason: str) -> None:
        """Stop gently on a request from outside the run (a broadcast cancelled from the
        console): as a bot-wide flood wait does, no new sends, the ones under way finish
        and are recorded, what was not tried comes back ``RETRY``; ``Report.stopped``
        says ``reason``."""
        if self.report.stopped is None:
            self.report.stopped = reason
            self.stop_kind = "halt"
        if self.tasks:
            self.stop(None, hard=False)
        else:  # not started: ``_execute`` stops at once
            self.stopping = True

    async def _guard(self, body: Any) -> None:
        """Run one pipeline task; a failure stops the run instead of escaping the task."""
        try:
            await body
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Bad input in a stream, a ledger failure, a misconfigured sender: finish
            # what is under way, then raise.
            self.stop(exc, hard=False)
        except BaseException as exc:
            # Not ours to absorb (KeyboardInterrupt, SystemExit, a framework's signal):
            # stop every send now and raise it once everything is settled.
            self.stop(exc, hard=True)

    # -- intake ---------------------------------------------------------------------

    async def _intake(self, source: Iterable[Notification] | AsyncIterable[Notification]) -> None:
        index = 0
        keys, checked, maker = self.keys, self.parts.check, KeyMaker(self.action)
        waiting = self.waiting
        async for batch in _batches(source, self.policy.batch_size, self.unread):
            items = []
            for notification in batch:
                key = checked(maker, notification) if keys is None else keys[index]
                item = waiting[index] = _Item(index, key, notification)
                items.append(item)
                index += 1
            self.read = index
            for item in await self._screen(items):
                await self.ready.put(item)
        for _ in range(self.policy.concurrency):
            await self.ready.put(None)

    async def _screen(self, items: list[_Item]) -> list[_Item]:
        """Settle what needs no claim (repeats, quiet hours, spacing, finished slots)."""
        todo: list[_Item] = []
        for item in items:
            key = slot(item.key)
            if key in self.held or key in self.released:
                self.finish(item, Outcome.DUPLICATE)
            else:
                self.held.add(key)
                todo.append(item)
        todo = await self._audience(todo)
        todo = self._quiet(todo)
        todo = await self._spacing(todo)
        if not todo:
            return []
        taken = await self.ledger._not_claimable_keys(
            [i.key for i in todo], self.options, self.outage
        )
        self.outage.armed = True  # the database answered: from now on it may go away
        finished = {slot(k) for k in taken}
        ready: list[_Item] = []
        for item in todo:
            gone = slot(item.key) in finished
            if self.policy.dry_run:
                reason = "dry run" if gone else DRY_RUN_SEND
                self.finish(item, Outcome.DUPLICATE if gone else Outcome.SKIPPED, reason=reason)
            elif gone:
                self.finish(item, Outcome.DUPLICATE)
            else:
                ready.append(item)
        return ready

    async def _audience(self, todo: list[_Item]) -> list[_Item]:
        """Skip the recipients that are gone or opted out of the run's category."""
        check = self.parts.audience
        if check is None or not todo:
            return todo
        targets = [item.notification.target for item in todo]
        since = time.monotonic()
        while True:
            try:
                skips = await check.skips(targets)
                break
            except LedgerUnavailableError as exc:
                persisting = self.outage.persisting(exc, since)
                if persisting is not None:
                    raise persisting from exc
                await self.outage.wait(exc)
        if not skips:
            return todo
        kept: list[_Item] = []
        for item in todo:
            reason = skips.get(item.notification.target)
            if reason is None:
                kept.append(item)
            else:
                self.finish(item, Outcome.SKIPPED, reason=reason)
        return kept

    async def learn(self) -> None:
        """Write what the run's refusals taught to the audience. A failure costs only the
        lesson (the next send to that recipient is refused and learned again): it is
        logged once and the run goes on."""
        check = self.parts.audience
        learned, self.learned = self.learned, []
        if check is None or not learned or self.policy.dry_run:
            return
        try:
            await check.learn(learned)
        except Exception as exc:
            if not self.learn_failed:
                self.learn_failed = True
                logger.warning(
                    "could not remember %d recipients found gone (%s); later runs will "
                    "ask them once more",
                    len(learned),
                    type(exc.__cause__ or exc).__name__,
                )

    def _quiet(self, todo: list[_Item]) -> list[_Item]:
        quiet = self.policy.quiet_hours
        if quiet is None or not todo:
            return todo
        now = self.parts.now()
        kept: list[_Item] = []
        for item in todo:
            if quiet.is_quiet(now, item.notification.timezone):
                self.finish(item, Outcome.SKIPPED, reason="quiet hours")
            else:
                kept.append(item)
        return kept

    async def _spacing(self, todo: list[_Item]) -> list[_Item]:
        if self.policy.min_spacing is None or not todo:
            return todo
        since = self.parts.now() - self.policy.min_spacing
        recent = await self.ledger.last_sent([i.key.subject for i in todo], since=since)
        taken: set[str] = set(recent)
        kept: list[_Item] = []
        for item in todo:
            if item.key.subject in taken:
                self.finish(item, Outcome.SKIPPED, reason="spacing")
            else:
                # Two notifications for one subject in one batch would also break spacing.
                taken.add(item.key.subject)
                kept.append(item)
        return kept

    # -- workers --------------------------------------------------------------------

    async def _worker(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        room, ready = self.writer.room, self.ready
        while not self.stopping:
            if not room.is_set() or ready.empty():
                self.idle.add(me)
                try:
                    await room.wait()
                    item = await ready.get()
                finally:
                    self.idle.discard(me)
            else:
                item = ready.get_nowait()
            if item is None or self.stopping:
                return
            await self._deliver(item)

    async def _deliver(self, item: _Item) -> None:
        """Turn, claim, send, hand the outcome to the recorder; settle if interrupted."""
        claim: Claim | None = None
        started = False
        seat: Seat | None = None
        cap = self.parts.cap
        try:
            async with self.turn(item.notification.target) if self.turn else _NO_TURN:
                if self.stopping:
                    return  # nothing claimed: nothing to settle
                if cap is not None:
                    # Taken before the claim, so two runs side by side cannot both pass.
                    seat = await cap.take(item.notification.target, self.parts.now())
                await self.writer.claim(item)
                claim = self.owned.pop(item.index, None)
                if claim is None:
                    if seat is not None and cap is not None:
                        await cap.give_back(seat)
                    self.finish(item, Outcome.DUPLICATE)
                    return
                decision = self._too_late(claim)
                if cap is not None and seat is None:
                    # Capped: its slot is released with the reason, which the ledger keeps
                    # (a chat this campaign already had is a duplicate, not capped).
                    decision = CAPPED_RELEASE
                elif decision is None:
                    started = True
                    decision = await self._send(item, claim)
                    if decision.status is SlotStatus.SENT:
                        self.delivered = True
                if (
                    seat is not None
                    and cap is not None
                    and decision.status is SlotStatus.RELEASED
                    and not decision.may_have_delivered
                ):
                    await cap.give_back(seat)  # certainly not sent: the seat is free again
        except BaseException as exc:
            claim = claim or self.owned.pop(item.index, None)
            if claim is None and isinstance(exc, FloodWaitError):
                self._flooded(item, exc)  # the turn's: nothing was claimed
                return
            if claim is not None:
                interrupted = (
                    decide_uncertain(
                        "interrupted while sending",
                        self.policy.mode,
                        claim.attempt,
                        self.policy.max_attempts,
                    )
                    if started
                    else INTERRUPTED
                )
                self.writer.put(_Entry(item, claim, interrupted))
            raise
        self.writer.put(_Entry(item, claim, decision))

    def _flooded(self, item: _Item, exc: FloodWaitError) -> None:
        """A flood wait too long to wait out: this item goes back; a bot-wide one ends the run."""
        if exc.bot_wide and self.report.stopped is None:
            logger.info("stopping the run: %s", exc.description)
            self.report.stopped = exc.description
            self.stop_kind = "flood wait"
            if exc.retry_after is not None:
                self.resume_at = self.parts.now() + dt.timedelta(seconds=exc.retry_after)
            self.stop(None, hard=False)
        self.finish(item, Outcome.RETRY, error=describe(exc))

    def _give_back_untried(
        self, source: Iterable[Notification] | AsyncIterable[Notification]
    ) -> None:
        """After a stop that returns a report: what was never tried comes back ``RETRY``.

        Nothing of it was claimed. The unread rest of a list is reported too; of a stream,
        what was read into a batch not handed on yet, and the rest is left unread.
        """
        error = f"not tried: {self.report.stopped}"
        for item in sorted(self.waiting.values(), key=lambda item: item.index):
            self.finish(item, Outcome.RETRY, error=error)
        if self.keys is not None and isinstance(source, Sequence):
            for index in range(self.read, len(self.keys)):
                item = _Item(index, self.keys[index], source[index])
                self.finish(item, Outcome.RETRY, error=error)
            return
        maker = KeyMaker(self.action)
        for index, notification in enumerate(self.unread, start=self.read):
            try:
                key = self.parts.check(maker, notification)
            except ValidationError:
                continue  # never checked: the run that reads it reports it
            self.finish(_Item(index, key, notification), Outcome.RETRY, error=error)
        self.unread.clear()

    def _too_late(self, claim: Claim) -> Decision | None:
        """Release a claim with too little lease left: another worker may take it soon."""
        left = claim.lease_until - self.parts.now()
        if left > self.lease_margin:
            return None
        error = "lease expired before send" if left.total_seconds() <= 0 else "lease nearly over"
        return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=error)

    async def _send(self, item: _Item, claim: Claim) -> Decision:
        message = item.notification.message
        if self.parts.prepare is not None:
            try:
                message = await self.parts.prepare(item.notification, claim)
            except ValidationError as exc:
                # A message no sender can take (too long, not a Message): so it stays.
                return decide_error(exc, self.policy.mode, claim.attempt, 1)
            except Exception as exc:
                # Nothing was sent: the slot goes back for a later run.
                logger.warning("could not prepare %s (%s)", claim.key, describe(exc))
                return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=describe(exc))
        if message.idempotency_key is None:
            # The same key on every attempt of this slot: a receiver that deduplicates by
            # it turns at-least-once into exactly-once.
            message = message._keyed(claim.key.idempotency_key)
        if self.hooks is not None:
            return await self._observed_send(self.hooks, item.notification.target, message, claim)
        try:
            receipt = await self.parts.sender.send(item.notification.target, message)
        except Exception as exc:
            return self._refused(exc, claim)
        return _delivered(receipt)

    async def _observed_send(
        self, hooks: Hooks, target: str, message: Message, claim: Claim
    ) -> Decision:
        """`_send` with the observer told of its start, its end and its flood waits."""
        handle = hooks.call("send_started", self.action, claim.attempt)
        probe = SendProbe(hooks, self.action)
        sending = SENDING.set(probe)
        started = _clock()
        try:
            receipt = await self.parts.sender.send(target, message)
        except Exception as exc:
            decision = self._refused(exc, claim)
            probe.refused(exc)
            error: str | None = type(exc).__name__
        except BaseException as exc:
            # Cancelled (or a foreign BaseException) mid-send: recorded as uncertain.
            interrupted = decide_uncertain(
                "", self.policy.mode, claim.attempt, self.policy.max_attempts
            )
            event = probe.event(claim.attempt, interrupted.outcome, _clock() - started, None)
            hooks.call("send_finished", handle, replace(event, error=type(exc).__name__))
            raise
        else:
            decision, error = _delivered(receipt), None
        finally:
            SENDING.reset(sending)
        event = probe.event(claim.attempt, decision.outcome, _clock() - started, error)
        hooks.call("send_finished", handle, event)
        return decision

    def _refused(self, exc: Exception, claim: Claim) -> Decision:
        """The decision for what ``send`` raised."""
        if isinstance(exc, SenderConfigError):
            # The sender is wrong, not this message: free it, stop the run, raise.
            self.stop(exc, hard=False)
        elif isinstance(exc, MessageRefusedError):
            # The post to copy is gone: every recipient would be refused alike, whatever
            # was delivered before. Give the slot back and stop, rather than fail the
            # campaign's every other chat.
            if self.report.stopped is None:
                logger.info("stopping the run: the message was refused (%s)", describe(exc))
                self.report.stopped = f"the message was refused: {exc.description}"
                self.stop_kind = "message refused"
                self.stop(None, hard=False)
        elif isinstance(exc, SendError) and exc.about_message and not self.delivered:
            return self._message_refused(exc)
        return decide_error(exc, self.policy.mode, claim.attempt, self.policy.max_attempts)

    def _message_refused(self, exc: SendError) -> Decision:
        """A refusal of the message while no send of the run was delivered: the message is
        wrong, not its recipient. The slot is given back with its attempt, and the run
        stops at the `MESSAGE_REFUSALS_TO_STOP`-th, before the rest meet the same refusal.

        Once a send of the run was delivered, the message is known to be good, and such a
        refusal is about what this recipient's copy holds: it is decided as any other.
        """
        self.message_refusals += 1
        error = describe(exc)
        if self.message_refusals >= MESSAGE_REFUSALS_TO_STOP and self.report.stopped is None:
            reason = (
                f"{self.message_refusals} sends were refused for their message and none was "
                f"delivered ({error}); their slots were given back"
            )
            logger.info("stopping the run: %s", reason)
            self.report.stopped = reason
            self.stop_kind = "message refused"
            self.stop(None, hard=False)
        return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=error)

    # -- leases ---------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        """Extend the leases of claims whose outcome is not written after a third of it."""
        period = max(self.ledger.lease.total_seconds() / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - period
            due = [claim for claim, since in self.active.values() if since <= cutoff]
            if not due:
                continue
            now = time.monotonic()
            try:
                await self.ledger.renew(due)
            except LedgerError as exc:
                if not self.outage.away:  # an outage says so once, for every statement
                    logger.warning(
                        "could not renew %d leases (%s)",
                        len(due),
                        type(exc.__cause__ or exc).__name__,
                    )
                continue
            for claim in due:
                if claim.id in self.active:
                    self.active[claim.id] = (claim, now)

    # -- results --------------------------------------------------------------------

    def finish(
        self,
        item: _Item,
        outcome: Outcome,
        *,
        claim: Claim | None = None,
        receipt: Receipt | None = None,
        error: str | None = None,
        reason: str | None = None,
        quiet: bool = False,
    ) -> None:
        """Report one notification's final result; ``quiet``: counted in a line of the
        run's own rather than logged one by one (see ``given_back``)."""
        key = slot(item.key)
        self.held.discard(key)
        self.waiting.pop(item.index, None)
        if outcome is Outcome.RETRY:
            self.released.add(key)
        attempt = None if claim is None else claim.attempt
        if outcome is Outcome.RETRY and self.stopping:
            # Given back because the run stops: the stop's line counts them.
            self.given_back += 1
            if attempt is None or error == INTERRUPTED.error:
                self.untried += 1  # no request went out: never claimed, or claimed unsent
            quiet = True
        result = Result(
            self.action, item.notification, item.key, outcome, attempt, receipt, error, reason
        )
        self.report.counts[outcome] += 1
        if reason is not None and outcome is Outcome.SKIPPED:
            skips = self.report.skips
            skips[reason] = skips.get(reason, 0) + 1
        if self.keep == "all" or (self.keep == "attention" and outcome in ATTENTION):
            self.kept.append((item.index, result))
        if self.hooks is not None:
            self.hooks.call("on_result", result)
        if self.on_result is not None:
            self.on_result(result)
        self.parts.emit(result, quiet)

    def recorded(self, entry: _Entry, landed: bool | None) -> None:
        self.active.pop(entry.claim.id, None)
        gone = entry.decision.gone
        if gone is not None and landed:
            self.learned.append((entry.item.notification.target, gone, entry.decision.error))
        outcome, error = settle(entry.decision, landed)
        self.finish(
            entry.item,
            outcome,
            claim=entry.claim,
            receipt=entry.decision.receipt,
            # A skip's reason is its reason, not an error (the ledger keeps it as one).
            error=None if outcome is Outcome.SKIPPED else error,
            reason=entry.decision.reason if outcome is Outcome.SKIPPED else None,
            quiet=landed is None,  # the writer's line about the failed write counts them
        )


class _Writer:
    """The run's writes: claims for the workers, and outcomes as soon as they are known.

    One statement carries both: the claims of the workers ready together and the outcomes
    waiting for their write, so a run pays one round trip and one commit for what would
    be two. Outcomes no claim comes for (the run's end, every worker sending) are written
    on their own once the first of them waited `_RECORD_LINGER`, or at once when
    `_RECORD_EARLY` wait. Up to the ledger's ``claim_lanes`` statements are out at once:
    while one waits for the database, the workers that come back form the next.

    A claim statement, once started, is never abandoned: if the worker that asked was
    cancelled meanwhile, its won claim is released by a later write.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.asking: list[tuple[_Item, asyncio.Future[Claim | None]]] = []
        self.pending: list[_Entry] = []
        self.lanes: set[asyncio.Task[None]] = set()
        self.most = run.ledger._claim_lanes
        # A statement claims for at most a lane's share of the workers: with several lanes,
        # workers that all come back together (a fast sender) are split between them, and
        # while one statement waits for the database the workers of the other send. (Each
        # statement costs the client and the server about as much as its rows do, so on
        # PostgreSQL, with its statements no longer reading a young table whole, one lane
        # for all the workers did the same work for a quarter less CPU: see its dialect.)
        self.share = -(-run.policy.concurrency // self.most)
        self.gathering = False
        self.linger: asyncio.TimerHandle | None = None
        # The connections the lanes keep (none where the ledger keeps none).
        self.free: list[Keeper] = list(run.keepers)
        # Set while the backlog has room: the workers wait on it before taking more work.
        self.room = asyncio.Event()
        self.room.set()

    async def claim(self, item: _Item) -> Claim | None:
        future: asyncio.Future[Claim | None] = asyncio.get_running_loop().create_future()
        self.asking.append((item, future))
        self._open()
        return await future

    def put(self, entry: _Entry) -> None:
        self.pending.append(entry)
        if len(self.pending) >= _RECORD_BACKLOG:
            self.room.clear()
        self._open()

    def _open(self) -> None:
        """Start a statement if one is due and a lane is free."""
        if self.gathering or len(self.lanes) >= self.most:
            return  # a lane that ends (or stops gathering) opens the next
        if self.asking:
            self._start(gather=True)
        elif len(self.pending) >= _RECORD_EARLY:
            self._start(gather=False)
        elif self.pending and self.linger is None:
            self.linger = asyncio.get_running_loop().call_later(_RECORD_LINGER, self._lingered)

    def _lingered(self) -> None:
        self.linger = None
        if self.pending and not self.gathering and len(self.lanes) < self.most:
            self._start(gather=False)

    def _start(self, *, gather: bool) -> None:
        if self.linger is not None:
            self.linger.cancel()
            self.linger = None
        self.gathering = gather
        lane = asyncio.ensure_future(self._lane(gather))
        self.lanes.add(lane)
        lane.add_done_callback(self._closed)

    def _closed(self, lane: asyncio.Task[None]) -> None:
        self.lanes.discard(lane)
        self._open()

    async def _lane(self, gather: bool) -> None:
        try:
            if gather:
                # Workers whose turn came in this same moment join in: wait while each pass
                # of the event loop brings more of them (a worker that just handed over
                # its outcome is a few passes away from asking again).
                asked = 0
                while asked < len(self.asking) < self.share:
                    asked = len(self.asking)
                    await asyncio.sleep(0)
        finally:
            self.gathering = False
        batch = self.asking[: self.share]
        del self.asking[: self.share]
        entries = self.pending[:_RECORD_CHUNK]
        del self.pending[:_RECORD_CHUNK]
        if len(self.pending) < _RECORD_BACKLOG:
            self.room.set()
        self._open()  # the others gather in the other lane meanwhile
        live = [(item, future) for item, future in batch if not future.done()]
        if not (live or entries):
            return
        keeper = self.free.pop() if self.free else None
        try:
            landed, outcome = await self._statement(live, entries, keeper)
        finally:
            if keeper is not None:
                self.free.append(keeper)
        self._claimed(live, outcome)
        for entry, ok in zip(entries, landed, strict=True):
            try:
                self.run.recorded(entry, ok)
            except Exception as exc:  # an on_result callback of the caller's failed
                self.run.stop(exc, hard=False)
        if self.run.learned:
            await self.run.learn()

    async def _statement(
        self,
        live: list[tuple[_Item, asyncio.Future[Claim | None]]],
        entries: list[_Entry],
        keeper: Keeper | None,
    ) -> tuple[list[bool | None], list[Claim] | Exception]:
        """Write ``entries`` and claim for ``live`` (either may be empty): whether each
        entry landed, and the won claims (or why the claim failed)."""
        run = self.run
        hooks = run.hooks
        keys = _distinct(item.key for item, _ in live)
        started = 0.0 if hooks is None else _clock()
        outcome: list[Claim] | Exception
        landed: list[bool | None]
        if not keys:
            return await self._record(entries, keeper), []
        epoch = run.outage.epoch
        try:
            if entries:
                both = await run.ledger._write(
                    _marks(entries), keys, run.options, keeper, run.outage
                )
                landed, outcome = list(both[0]), both[1]
            else:
                landed, outcome = (
                    [],
                    await run.ledger._claim_keys(keys, run.options, keeper, run.outage),
                )
        except LedgerUnavailableError as exc:
            # The database went away: the claims fail as a claim alone would (their rows
            # released by token, if they were won); the outcomes get the recorder's retry.
            landed, outcome = await self._record(entries, keeper), exc
        except Exception as exc:
            if not entries:
                return [], exc
            # Refused: by an outcome's value, most likely (a sender's text), or by the
            # claims. Each part alone, so that one bad row costs only its own.
            landed = await self._record(entries, keeper)
            try:
                outcome = await run.ledger._claim_keys(keys, run.options, keeper)
            except Exception as again:
                outcome = again
        if run.outage.epoch != epoch:
            run.outage.kept += len(entries)
        if hooks is not None and not isinstance(outcome, Exception):
            seconds = _clock() - started
            hooks.call("claimed", run.action, seconds, len(live), len(outcome))
        return landed, outcome

    def _claimed(
        self,
        live: list[tuple[_Item, asyncio.Future[Claim | None]]],
        outcome: list[Claim] | Exception,
    ) -> None:
        """Each worker's future gets its claim (or None), or the claim's failure."""
        run = self.run
        if isinstance(outcome, Exception):
            for _, future in live:
                if not future.done():
                    future.set_exception(outcome)
            return
        won = {slot(c.key): c for c in outcome}
        now = time.monotonic()
        for item, future in live:
            claim = won.get(slot(item.key))
            if claim is not None:
                run.active[claim.id] = (claim, now)
            if not future.done():
                if claim is not None:
                    run.owned[item.index] = claim
                future.set_result(claim)
            elif claim is not None:  # its worker was cancelled while this ran
                self.put(_Entry(item, claim, INTERRUPTED))

    async def drain(self) -> None:
        while self.lanes or self.pending or self.asking:
            if not self.lanes:
                self._start(gather=False)
            await asyncio.wait(set(self.lanes))

    async def _record(
        self, batch: list[_Entry], keeper: Keeper | None, *, retried: bool = False
    ) -> list[bool | None]:
        """Mark ``batch``; True landed, False lease lost, None the ledger failed.

        A batch the database refuses is written row by row, so one row it cannot store
        costs only that row's detail (then, as a last resort, only that row).
        """
        if not batch:
            return []
        marks = _marks(batch)
        outage = self.run.outage
        epoch = outage.epoch
        try:
            written: list[bool | None] = list(
                await self.run.ledger._mark_checked(marks, keeper, outage)
            )
            if outage.epoch != epoch:
                outage.kept += len(batch)
            return written
        except LedgerUnavailableError as exc:
            if not retried:
                await asyncio.sleep(0.25)  # a blip (failover, a dropped connection)
                return await self._record(batch, keeper, retried=True)
            return self._lost(batch, exc)
        except Exception as exc:
            # Refused (a value the database or its driver cannot take), or a failure of
            # the ledger's own: whatever it was, one row must not take the others down.
            if len(batch) > 1:
                landed: list[bool | None] = []
                for entry in batch:
                    landed += await self._record([entry], keeper, retried=retried)
                return landed
            if marks[0][2] is not None:
                entry = batch[0]
                bare = replace(entry.decision, error=None, receipt=None)
                return await self._record(
                    [_Entry(entry.item, entry.claim, bare)], keeper, retried=True
                )
            return self._lost(batch, exc)

    def _lost(self, batch: list[_Entry], exc: Exception) -> list[bool | None]:
        # The sends happened; the claims stay as they are until their leases expire, and
        # the sweep then settles them as the delivery mode says. Said once a run: a
        # database gone fails every write after the first alike (the rest at DEBUG).
        run = self.run
        level = logging.DEBUG if run.unrecorded else logging.ERROR
        run.unrecorded += len(batch)
        logger.log(
            level,
            "could not record %d outcomes (%s); the sweep will settle them",
            len(batch),
            type(exc.__cause__ or exc).__name__,
        )
        return [None] * len(batch)


def _marks(batch: list[_Entry]) -> list[Mark]:
    """What the ledger writes for ``batch``: (claim, status, detail, counted) each."""
    return [(e.claim, e.decision.status, detail(e.decision), counts(e.decision)) for e in batch]


def _delivered(receipt: Receipt) -> Decision:
    return Decision(SlotStatus.SENT, Outcome.SENT, receipt=receipt, may_have_delivered=True)


class _NoTurn:
    """The turn of a sender without a rate limit: there at once."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_TURN = _NoTurn()


def _distinct(keys: Iterable[SlotKey]) -> list[SlotKey]:
    """The keys, each once (one claim statement takes every slot once)."""
    return list(dict.fromkeys(keys))


async def _batches(
    source: Iterable[Notification] | AsyncIterable[Notification],
    size: int,
    pending: list[Notification],
) -> AsyncIterator[list[Notification]]:
    """``source`` in lists of ``size``; what is read and not handed out yet waits in
    ``pending``, so a run stopped meanwhile can report it."""
    if isinstance(source, AsyncIterable):
        async for item in source:
            pending.append(item)
            if len(pending) >= size:
                yield _taken(pending)
    else:
        for item in source:
            pending.append(item)
            if len(pending) >= size:
                yield _taken(pending)
    if pending:
        yield _taken(pending)


def _taken(pending: list[Notification]) -> list[Notification]:
    batch = pending[:]
    pending.clear()
    return batch
