"""The Notifier: claim the slot, send, record the outcome, as the delivery mode says.

The outcome table (the heart of the library; docs/concepts/delivery.md draws it too):

=============================  ===================  ==============================
what the sender did            at-most-once         at-least-once
=============================  ===================  ==============================
delivered                      mark_sent -> SENT    mark_sent -> SENT
PermanentSendError             mark_failed -> FAILED (never retried)
TransientSendError             release -> RETRY (certainly not delivered)
UncertainSendError / other     mark_unknown ->      release -> RETRY while
                               UNKNOWN              attempt < max_attempts,
                                                    then mark_unknown -> UNKNOWN
slot held or finished          DUPLICATE            DUPLICATE
lease lost before the mark     LEASE_LOST (logged at ERROR, nothing overwritten)
=============================  ===================  ==============================
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from ._errors import (
    LedgerError,
    PermanentSendError,
    SendError,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
)
from ._keys import Cycle, SlotKey, Subject, make_key, normalize_action
from ._message import Message, Receipt, Sender
from ._outcome import DeliveryMode, Outcome
from ._quiet import QuietHours
from ._table import SlotStatus

if TYPE_CHECKING:
    from ._claim import Claim
    from ._ledger import AsyncLedger
    from ._ledger_records import SweepResult
    from ._schedule import Schedule
    from ._window import DeadlineRange, Window

__all__ = ["Notification", "Notifier", "Report", "Result", "Selector", "TickReport"]

logger = logging.getLogger("notifyonce.notifier")

_ERROR_TEXT_LIMIT = 300


@dataclass(frozen=True, slots=True)
class Notification:
    """One message for one subject in one cycle.

    Args:
        subject: Who it is for (a user or chat id).
        cycle: Which cycle (e.g. the end of the paid period); see :func:`make_key`.
        message: What to send.
        recipient: Where to send it; defaults to ``str(subject)``.
        timezone: The subject's time zone, for the Notifier's ``quiet_hours``.

    Example:
        >>> n = Notification(42, "2026-12", Message("6 hours left"))
        >>> n.target
        '42'
    """

    subject: Subject
    cycle: Cycle
    message: Message
    recipient: str | None = None
    timezone: dt.tzinfo | None = None

    @property
    def target(self) -> str:
        """The recipient the sender is given."""
        return self.recipient if self.recipient is not None else str(self.subject)


@dataclass(frozen=True, slots=True)
class Result:
    """What happened to one notification.

    Attributes:
        action: The action it was sent under.
        notification: The notification itself.
        key: Its normalised slot key.
        outcome: What happened.
        attempt: Which attempt of the slot this was (None when nothing was claimed).
        receipt: The sender's receipt when it was delivered.
        error: The provider's code and description, or the exception's class name; never
            a message text.
        reason: Why it was skipped (``"dry run"``, ``"spacing"``), when it was.
    """

    action: str
    notification: Notification
    key: SlotKey
    outcome: Outcome
    attempt: int | None = None
    receipt: Receipt | None = None
    error: str | None = None
    reason: str | None = None

    def __repr__(self) -> str:
        parts = [f"{self.key}", self.outcome.value]
        if self.attempt is not None:
            parts.append(f"attempt={self.attempt}")
        if self.error:
            parts.append(f"error={self.error!r}")
        if self.reason:
            parts.append(f"reason={self.reason!r}")
        return f"Result({', '.join(parts)})"


@dataclass
class Report:
    """The outcome of a :meth:`Notifier.send_many` run.

    Attributes:
        counts: Number of notifications per outcome (every outcome is present).
        results: Every result in input order, unless the Notifier was created with
            ``keep_results=False`` (for very large runs; ``counts`` is always kept).
        swept: What the automatic sweep of expired leases changed before this run, if it ran.
        dry_run: True when nothing was claimed, sent or recorded.
    """

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    results: list[Result] = field(default_factory=list)
    swept: SweepResult | None = None
    dry_run: bool = False

    def __getitem__(self, outcome: Outcome) -> list[Result]:
        """The kept results with this outcome."""
        return [r for r in self.results if r.outcome is outcome]

    @property
    def total(self) -> int:
        """How many notifications the run handled."""
        return sum(self.counts.values())

    def _add(self, result: Result, keep: bool) -> None:
        self.counts[result.outcome] += 1
        if keep:
            self.results.append(result)

    def __repr__(self) -> str:
        shown = ", ".join(f"{o.value}={n}" for o, n in self.counts.items() if n)
        label = "dry run, " if self.dry_run else ""
        return f"Report({label}{shown or 'empty'})"


_Notifications: TypeAlias = Iterable[Notification] | AsyncIterable[Notification]
Selector: TypeAlias = Callable[
    ["Window", "DeadlineRange"], _Notifications | Awaitable[_Notifications]
]
"""``select(window, deadlines)``: the notifications for the subjects whose deadline is in
``deadlines`` (a list, an iterable or an async iterable; or an awaitable of one)."""


@dataclass
class TickReport:
    """The outcome of one :meth:`Notifier.tick`: one report per open window.

    Attributes:
        now: The time the tick ran for.
        reports: A :class:`Report` per window action, for every window open at ``now``.
        missed: Windows whose whole span fell between the previous tick and this one,
            with the deadlines that missed them (the job was down for longer than the
            window). They are skipped, never sent late; this list is how you see them.
    """

    now: dt.datetime
    reports: dict[str, Report] = field(default_factory=dict)
    missed: list[tuple[Window, DeadlineRange]] = field(default_factory=list)

    @property
    def counts(self) -> dict[Outcome, int]:
        """Number of notifications per outcome over all windows."""
        total = dict.fromkeys(Outcome, 0)
        for report in self.reports.values():
            for outcome, n in report.counts.items():
                total[outcome] += n
        return total

    def __repr__(self) -> str:
        shown = ", ".join(f"{o.value}={n}" for o, n in self.counts.items() if n)
        missed = len(self.missed)
        return f"TickReport({self.now.isoformat()}, {shown or 'nothing sent'}, missed={missed})"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SendError):
        # SendError messages carry the provider's code and description, never text/secrets.
        return str(exc)[:_ERROR_TEXT_LIMIT]
    # A foreign exception's message may quote the request (and so the text or a token).
    return type(exc).__name__


@dataclass(frozen=True, slots=True)
class _Decision:
    """What to record for a claim after the send, and the outcome if the record lands."""

    status: SlotStatus
    outcome: Outcome
    receipt: Receipt | None = None
    error: str | None = None
    may_have_delivered: bool = False


class Notifier:
    """Sends notifications once per slot: claim, send, record.

    Args:
        ledger: Where slots are claimed and outcomes recorded.
        sender: What delivers the messages (``TelegramSender``, ``FakeSender``, ...).
        mode: What to do when a send may or may not have been delivered; see
            :class:`DeliveryMode`.
        max_attempts: In at-least-once mode, how many times one slot may be tried in all
            (the bound on duplicates). Ignored in at-most-once mode.
        concurrency: How many sends :meth:`send_many` keeps in flight. The sender's own
            rate limit still applies.
        batch_size: How many notifications :meth:`send_many` claims and records per
            statement; the memory a run needs is proportional to it.
        min_spacing: If set, a subject that was sent anything (under any action) within
            this interval is skipped with ``Outcome.SKIPPED``. Checked against the ledger
            before claiming, so it holds across restarts and for runs one after another;
            two runs for the same subject at the same moment can both pass the check
            (best effort, unlike the slot itself, which is exact).
        quiet_hours: If set, notifications whose subject is in quiet hours (in the
            notification's ``timezone``) are skipped without claiming, so a later run
            inside the window sends them; see :class:`QuietHours`.
        sweep_every: How often the Notifier sweeps expired leases before a run (None: never;
            then call ``ledger.sweep`` yourself).
        dry_run: Claim nothing, send nothing, record nothing; report what would happen.
        keep_results: Keep every :class:`Result` in reports (turn off for huge runs).
        on_result: Called with every :class:`Result`, e.g. to feed metrics.

    Example:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from notifyonce import AsyncLedger, Message, Notifier
        >>> from notifyonce.testing import FakeSender
        >>> async def main() -> str:
        ...     ledger = AsyncLedger(create_async_engine("sqlite+aiosqlite://"))
        ...     await ledger.create_schema()
        ...     notifier = Notifier(ledger, FakeSender())
        ...     first = await notifier.send_once("trial_6h", 42, "2026-12", Message("hi"))
        ...     again = await notifier.send_once("trial_6h", 42, "2026-12", Message("hi"))
        ...     return f"{first.value} then {again.value}"
        >>> asyncio.run(main())
        'sent then duplicate'
    """

    def __init__(
        self,
        ledger: AsyncLedger,
        sender: Sender,
        *,
        mode: DeliveryMode = DeliveryMode.AT_MOST_ONCE,
        max_attempts: int = 3,
        concurrency: int = 16,
        batch_size: int = 200,
        min_spacing: dt.timedelta | None = None,
        quiet_hours: QuietHours | None = None,
        sweep_every: dt.timedelta | None = dt.timedelta(minutes=1),
        dry_run: bool = False,
        keep_results: bool = True,
        on_result: Callable[[Result], None] | None = None,
    ) -> None:
        if not isinstance(mode, DeliveryMode):
            raise ValidationTypeError("mode", f"must be a DeliveryMode, got {type(mode).__name__}")
        for name, value in (
            ("max_attempts", max_attempts),
            ("concurrency", concurrency),
            ("batch_size", batch_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationTypeError(name, f"must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValidationError(name, f"must be at least 1, got {value}")
        for name, interval in (("min_spacing", min_spacing), ("sweep_every", sweep_every)):
            if interval is not None and (
                not isinstance(interval, dt.timedelta) or interval <= dt.timedelta(0)
            ):
                raise ValidationError(name, "must be a positive timedelta or None")
        if not callable(getattr(sender, "send", None)):
            raise ValidationTypeError("sender", "must have an async send(recipient, message)")
        self.ledger = ledger
        self.sender = sender
        self.mode = mode
        self.max_attempts = max_attempts
        self.concurrency = concurrency
        self.batch_size = batch_size
        if quiet_hours is not None and not isinstance(quiet_hours, QuietHours):
            raise ValidationTypeError("quiet_hours", "must be a QuietHours or None")
        self.min_spacing = min_spacing
        self.quiet_hours = quiet_hours
        self.sweep_every = sweep_every
        self.dry_run = dry_run
        self.keep_results = keep_results
        self.on_result = on_result
        self._last_sweep: dict[str, float] = {}  # per action: sweeps are scoped to actions
        self._last_ticks: dict[Schedule, dt.datetime] = {}
        self._sweep_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return (
            f"Notifier(mode={self.mode.value}, max_attempts={self.max_attempts}, "
            f"concurrency={self.concurrency}, dry_run={self.dry_run})"
        )

    # -- public API -------------------------------------------------------------------

    async def send_once(
        self,
        action: str,
        subject: Subject,
        cycle: Cycle,
        message: Message,
        *,
        recipient: str | None = None,
    ) -> Outcome:
        """Send one notification unless its slot was already claimed.

        Args:
            action: The reminder's name, e.g. ``"trial_6h"``.
            subject: Who it is for.
            cycle: Which cycle; the slot is ``(action, subject, cycle)``.
            message: What to send.
            recipient: Where to send it; defaults to ``str(subject)``.

        Returns:
            What happened; see the outcome table in the module docs.

        Raises:
            ValidationError: Bad input; nothing was written.
            LedgerError: The claim could not be made (nothing was sent).
        """
        notification = Notification(subject, cycle, message, recipient)
        report = await self.send_many(action, [notification])
        return report.results[0].outcome if report.results else _only_outcome(report)

    async def send_many(self, action: str, notifications: _Notifications) -> Report:
        """Send many notifications under one action, each at most once per slot.

        Claims are made in batches (one statement per batch where the database allows),
        sends run with bounded concurrency, and outcomes are recorded in batches. An async
        iterable is streamed, so the memory used is bounded by ``batch_size`` (plus the
        kept results).

        Args:
            action: The reminder's name shared by all of them.
            notifications: A list, any iterable, or an async iterable of
                :class:`Notification`. A list is validated whole before anything is
                written; a stream is validated batch by batch.

        Returns:
            A :class:`Report` with the counts per outcome and, by default, every result.

        Raises:
            ValidationError: Bad input; nothing of that batch was written.
            LedgerError: A claim failed; the report of batches already done is lost, but
                their outcomes are in the ledger.
        """
        normalize_action(action)
        report = Report(dry_run=self.dry_run)
        if isinstance(notifications, Sequence):
            _validate_all(action, notifications)
        report.swept = await self._maybe_sweep(action)
        async for batch in _batches(notifications, self.batch_size):
            keyed = [(_checked(action, n), n) for n in batch]
            for result in await self._run_batch(action, keyed):
                self._emit(result)
                report._add(result, self.keep_results)
        return report

    async def tick(
        self,
        schedule: Schedule,
        select: Selector,
        *,
        now: dt.datetime | None = None,
        last_run: dt.datetime | None = None,
    ) -> TickReport:
        """Do one run of a scheduled job: every open window of ``schedule``, in order.

        For each window open at ``now``, ``select(window, deadlines)`` returns the
        notifications for the subjects whose deadline is in ``deadlines`` (use
        [`deadline_filter`][notifyonce.deadline_filter] to select them in SQL), and they
        are sent under the window's action with [`send_many`][notifyonce.Notifier.send_many].
        Windows that opened and closed entirely since the previous tick are reported in
        [`TickReport.missed`][notifyonce.TickReport] and logged at WARNING.

        Args:
            schedule: The chain of windows.
            select: Returns the notifications for one window and deadline range.
            now: The time of this run (default: the ledger's clock).
            last_run: When the previous run of this job started. Default: the previous
                ``tick`` of this Notifier for the same schedule; on the first tick after a
                start nothing is known, so nothing is reported missed.

        Examples:
            ```python
            import sqlalchemy as sa

            async def due_users(window, deadlines):
                async with Session() as session:
                    rows = await session.scalars(
                        sa.select(User).where(deadline_filter(User.trial_ends, deadlines))
                    )
                    return [
                        Notification(user.id, user.trial_ends, Message(TEXTS[window.action]))
                        for user in rows
                    ]

            report = await notifier.tick(schedule, due_users)
            ```
        """
        at = now if now is not None else self._now()
        previous = last_run if last_run is not None else self._last_ticks.get(schedule)
        report = TickReport(at, missed=list(schedule.missed(previous, at)))
        for window, deadlines in report.missed:
            logger.warning(
                "missed window %s for deadlines in (%s, %s]: the job did not run while it "
                "was open; skipped",
                window.action,
                deadlines.after.isoformat(),
                deadlines.until.isoformat(),
                extra={"notifyonce": {"action": window.action, "outcome": "missed"}},
            )
        for window, deadlines in schedule.open_windows(at):
            items = select(window, deadlines)
            if inspect.isawaitable(items):
                items = await items
            report.reports[window.action] = await self.send_many(window.action, items)
        self._last_ticks[schedule] = at
        return report

    async def sweep(self, actions: Iterable[str]) -> SweepResult:
        """Deal with the expired leases of ``actions`` now, as the delivery mode says.

        At-most-once: each expired claim becomes ``unknown`` (the worker may have sent
        before it died). At-least-once: it is released for another attempt while attempts
        remain. Only the given actions are swept, so jobs with other delivery modes can
        share the ledger table. The Notifier calls this itself, for the action it is about
        to send, every ``sweep_every``.
        """
        names = [normalize_action(a) for a in actions]
        result = await self.ledger.sweep(self.mode, max_attempts=self.max_attempts, actions=names)
        for key in result.unknown:
            logger.warning(
                "lease expired, outcome unknown: %s", key, extra=_log_extra(key, Outcome.UNKNOWN)
            )
        for key in result.released:
            logger.info(
                "lease expired, released for another attempt: %s",
                key,
                extra=_log_extra(key, Outcome.RETRY),
            )
        swept_at = time.monotonic()
        for name in names:
            self._last_sweep[name] = swept_at
        return result

    # -- one batch ------------------------------------------------------------------

    async def _run_batch(
        self, action: str, keyed: list[tuple[SlotKey, Notification]]
    ) -> list[Result]:
        results: dict[int, Result] = {}
        todo = self._first_of_each_key(action, keyed, results)
        todo = self._apply_quiet_hours(action, keyed, todo, results)
        todo = await self._apply_spacing(action, keyed, todo, results)
        if self.dry_run:
            for i in todo:
                results[i] = await self._dry_run_result(action, *keyed[i])
            return [results[i] for i in range(len(keyed))]

        claims = await self._claim(action, [keyed[i][1] for i in todo])
        won = {_slot(claim.key): claim for claim in claims}
        to_send: list[tuple[int, Claim]] = []
        for i in todo:
            key, _ = keyed[i]
            claim = won.get(_slot(key))
            if claim is None:
                results[i] = Result(action, keyed[i][1], key, Outcome.DUPLICATE)
            else:
                to_send.append((i, claim))

        decisions = await self._send_all(keyed, to_send)
        recorded = await self._record(to_send, list(decisions))
        for (i, claim), decision, landed in zip(to_send, decisions, recorded, strict=True):
            results[i] = self._result(action, keyed[i], claim, decision, landed)
        return [results[i] for i in range(len(keyed))]

    async def _claim(self, action: str, notifications: list[Notification]) -> list[Claim]:
        """Claim a batch; if cancelled meanwhile, let the claim finish and free what it won.

        Without this, a shutdown landing while the claim commits would leave the whole
        batch claimed, to expire into UNKNOWN (at most once) without a single send.
        """
        claiming = asyncio.ensure_future(
            self.ledger.claim_many(
                action,
                [(n.subject, n.cycle) for n in notifications],
                take_expired=self.mode is DeliveryMode.AT_LEAST_ONCE,
                max_attempts=self._claim_limit,
            )
        )
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                won = await claiming
                await self._record([(0, c) for c in won], [_INTERRUPTED] * len(won))
            raise

    @property
    def _claim_limit(self) -> int | None:
        return self.max_attempts if self.mode is DeliveryMode.AT_LEAST_ONCE else None

    @staticmethod
    def _first_of_each_key(
        action: str, keyed: list[tuple[SlotKey, Notification]], results: dict[int, Result]
    ) -> list[int]:
        seen: set[SlotKey] = set()
        todo: list[int] = []
        for i, (key, notification) in enumerate(keyed):
            slot = _slot(key)
            if slot in seen:
                # The same slot twice in one run: the second can only be a duplicate.
                results[i] = Result(action, notification, key, Outcome.DUPLICATE)
            else:
                seen.add(slot)
                todo.append(i)
        return todo

    def _apply_quiet_hours(
        self,
        action: str,
        keyed: list[tuple[SlotKey, Notification]],
        todo: list[int],
        results: dict[int, Result],
    ) -> list[int]:
        quiet = self.quiet_hours
        if quiet is None or not todo:
            return todo
        now = self._now()
        kept: list[int] = []
        for i in todo:
            key, notification = keyed[i]
            if quiet.is_quiet(now, notification.timezone):
                results[i] = Result(
                    action, notification, key, Outcome.SKIPPED, reason="quiet hours"
                )
            else:
                kept.append(i)
        return kept

    async def _apply_spacing(
        self,
        action: str,
        keyed: list[tuple[SlotKey, Notification]],
        todo: list[int],
        results: dict[int, Result],
    ) -> list[int]:
        if self.min_spacing is None or not todo:
            return todo
        since = self._now() - self.min_spacing
        recent = await self.ledger.last_sent([keyed[i][0].subject for i in todo], since=since)
        kept: list[int] = []
        taken: set[str] = set(recent)
        for i in todo:
            key, notification = keyed[i]
            if key.subject in taken:
                results[i] = Result(action, notification, key, Outcome.SKIPPED, reason="spacing")
            else:
                # Two notifications for one subject in one batch would also break spacing.
                taken.add(key.subject)
                kept.append(i)
        return kept

    async def _dry_run_result(self, action: str, key: SlotKey, n: Notification) -> Result:
        record = await self.ledger.get(action, n.subject, n.cycle)
        if record is None or self._claimable(record):
            return Result(action, n, key, Outcome.SKIPPED, reason="dry run: would send")
        return Result(action, n, key, Outcome.DUPLICATE, reason="dry run")

    def _claimable(self, record: Any) -> bool:
        if record.status is SlotStatus.RELEASED:
            return True
        return (
            self.mode is DeliveryMode.AT_LEAST_ONCE
            and record.status is SlotStatus.CLAIMED
            and record.lease_until < self._now()
            and record.attempt < self.max_attempts
        )

    async def _send_all(
        self, keyed: list[tuple[SlotKey, Notification]], to_send: list[tuple[int, Claim]]
    ) -> list[_Decision]:
        gate = asyncio.Semaphore(self.concurrency)
        decided: list[_Decision | None] = [None] * len(to_send)
        started = [False] * len(to_send)

        async def one(n: int, i: int, claim: Claim) -> None:
            async with gate:
                started[n] = True
                decided[n] = await self._send_one(keyed[i][1], claim)

        try:
            await asyncio.gather(*(one(n, i, c) for n, (i, c) in enumerate(to_send)))
        except BaseException:
            # Cancelled (a shutdown) or broken mid-batch: settle every claim before the
            # error goes on, so none is left to expire. A send in flight may have gone out;
            # one never started certainly did not.
            settled = [
                d if d is not None
                else self._uncertain(claim, "interrupted while sending") if started[n]
                else _INTERRUPTED
                for n, ((_, claim), d) in enumerate(zip(to_send, decided, strict=True))
            ]  # fmt: skip
            with contextlib.suppress(Exception):
                await asyncio.shield(self._record(to_send, settled))
            raise
        return [d for d in decided if d is not None]

    async def _send_one(self, notification: Notification, claim: Claim) -> _Decision:
        if claim.lease_until <= self._now():
            # Another worker may take this slot over now: sending would risk a duplicate.
            # The release below is fenced by the token, so it is safe either way.
            return _Decision(SlotStatus.RELEASED, Outcome.RETRY, error="lease expired before send")
        message = notification.message
        if message.idempotency_key is None:
            # The same key on every attempt of this slot: a receiver that deduplicates by
            # it turns at-least-once into exactly-once.
            message = replace(message, idempotency_key=claim.key.idempotency_key)
        try:
            receipt = await self.sender.send(notification.target, message)
        except PermanentSendError as exc:
            return _Decision(SlotStatus.FAILED, Outcome.FAILED, error=_describe(exc))
        except TransientSendError as exc:
            return _Decision(SlotStatus.RELEASED, Outcome.RETRY, error=_describe(exc))
        except ValidationError as exc:
            # The sender refused the recipient or message before sending anything, and
            # would refuse it again: a permanent failure, not an uncertain one.
            return _Decision(SlotStatus.FAILED, Outcome.FAILED, error=f"{exc.field}: {exc.problem}")
        except Exception as exc:  # UncertainSendError, or a sender bug: it may have gone out
            return self._uncertain(claim, _describe(exc))
        return _Decision(SlotStatus.SENT, Outcome.SENT, receipt=receipt, may_have_delivered=True)

    def _uncertain(self, claim: Claim, error: str) -> _Decision:
        if self.mode is DeliveryMode.AT_LEAST_ONCE and claim.attempt < self.max_attempts:
            return _Decision(
                SlotStatus.RELEASED, Outcome.RETRY, error=error, may_have_delivered=True
            )
        return _Decision(SlotStatus.UNKNOWN, Outcome.UNKNOWN, error=error, may_have_delivered=True)

    async def _record(
        self, to_send: list[tuple[int, Claim]], decisions: list[_Decision]
    ) -> list[bool | None]:
        """Record every decision; True landed, False lease lost, None the ledger failed."""
        if not to_send:
            return []
        marks = [
            (claim, d.status, _detail(d)) for (_, claim), d in zip(to_send, decisions, strict=True)
        ]
        try:
            return list(await self.ledger.mark_many(marks))
        except LedgerError as exc:
            # The sends happened; the claims stay as they are until their leases expire,
            # and the sweep then settles them as the delivery mode says.
            logger.error(
                "could not record %d outcomes (%s); the sweep will settle them",
                len(marks),
                type(exc.__cause__ or exc).__name__,
            )
            return [None] * len(marks)

    def _result(
        self,
        action: str,
        item: tuple[SlotKey, Notification],
        claim: Claim,
        decision: _Decision,
        landed: bool | None,
    ) -> Result:
        key, notification = item
        outcome, error = decision.outcome, decision.error
        if landed is False and decision.may_have_delivered:
            # Sent (or maybe sent) while someone else already held the slot.
            outcome = Outcome.LEASE_LOST
        elif landed is False:
            # Not delivered and the slot is someone else's now: nothing to record.
            outcome = Outcome.DUPLICATE
        elif landed is None:
            outcome, error = Outcome.UNKNOWN, "the ledger failed while recording the outcome"
        return Result(action, notification, key, outcome, claim.attempt, decision.receipt, error)

    # -- plumbing -------------------------------------------------------------------

    async def _maybe_sweep(self, action: str) -> SweepResult | None:
        if self.sweep_every is None or self.dry_run:
            return None
        async with self._sweep_lock:
            last = self._last_sweep.get(action)
            due = last is None or time.monotonic() - last >= self.sweep_every.total_seconds()
            return await self.sweep([action]) if due else None

    def _now(self) -> dt.datetime:
        return self.ledger.now()

    def _emit(self, result: Result) -> None:
        level = _LOG_LEVELS[result.outcome]
        if logger.isEnabledFor(level):
            prefix = "[dry run] " if self.dry_run else ""
            logger.log(
                level,
                "%s%s %s attempt=%s%s",
                prefix,
                result.outcome.value,
                result.key,
                result.attempt,
                f" error={result.error}" if result.error else "",
                extra=_log_extra(result.key, result.outcome, result.attempt, result.error),
            )
        if self.on_result is not None:
            self.on_result(result)


# A claim whose send never started because the run was cancelled: certainly not sent.
_INTERRUPTED = _Decision(SlotStatus.RELEASED, Outcome.RETRY, error="not sent: interrupted")

_LOG_LEVELS = {
    Outcome.SENT: logging.INFO,
    Outcome.DUPLICATE: logging.DEBUG,
    Outcome.SKIPPED: logging.DEBUG,
    Outcome.RETRY: logging.WARNING,
    Outcome.FAILED: logging.WARNING,
    Outcome.UNKNOWN: logging.WARNING,
    # Someone else took the slot over while this worker was sending: a lease too short
    # for the sender's budget. Loud, because it is how duplicates happen in practice.
    Outcome.LEASE_LOST: logging.ERROR,
}


def _log_extra(
    key: SlotKey, outcome: Outcome, attempt: int | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "notifyonce": {
            "action": key.action,
            "subject": key.subject,
            "cycle": key.cycle,
            "outcome": outcome.value,
            "attempt": attempt,
            "error": error,
        }
    }


def _detail(decision: _Decision) -> str | None:
    """What a mark stores: the provider's message id for SENT, else the error."""
    if decision.status is SlotStatus.SENT:
        receipt = decision.receipt
        return None if receipt is None or receipt.message_id is None else str(receipt.message_id)
    return decision.error


def _slot(key: SlotKey) -> SlotKey:
    """The part of a key that identifies a slot (``cycle_at`` is derived from ``cycle``)."""
    return SlotKey(key.action, key.subject, key.cycle)


def _checked(action: str, item: object) -> SlotKey:
    if not isinstance(item, Notification):
        raise ValidationTypeError(
            "notifications", f"items must be Notification, got {type(item).__name__}"
        )
    if not isinstance(item.message, Message):
        raise ValidationTypeError(
            "message", f"must be a Message, got {type(item.message).__name__}"
        )
    if item.recipient is not None and (not isinstance(item.recipient, str) or not item.recipient):
        raise ValidationError("recipient", "must be a non-empty str or None")
    if item.timezone is not None and not isinstance(item.timezone, dt.tzinfo):
        raise ValidationTypeError("timezone", "must be a tzinfo (e.g. a ZoneInfo) or None")
    return make_key(action, item.subject, item.cycle)


def _validate_all(action: str, notifications: Sequence[Notification]) -> None:
    for item in notifications:
        _checked(action, item)


def _only_outcome(report: Report) -> Outcome:
    # keep_results=False: the single notification's outcome is the one counted.
    return next(o for o, n in report.counts.items() if n)


async def _batches(source: _Notifications, size: int) -> AsyncIterator[list[Notification]]:
    batch: list[Notification] = []
    if isinstance(source, AsyncIterable):
        async for item in source:
            batch.append(item)
            if len(batch) >= size:
                yield batch
                batch = []
    else:
        for item in source:
            batch.append(item)
            if len(batch) >= size:
                yield batch
                batch = []
    if batch:
        yield batch
