"""The Notifier: claim the slot, send, record the outcome, as the delivery mode says.

The outcome table (the heart of the library; docs/concepts/delivery.md draws it too):

=============================  ===================  ==============================
what the sender did            at-most-once         at-least-once
=============================  ===================  ==============================
delivered                      mark_sent -> SENT    mark_sent -> SENT
PermanentSendError             mark_failed -> FAILED (never retried)
MessageRefusedError            release -> RETRY, the run stops (Report.stopped says why)
TransientSendError             release -> RETRY (certainly not delivered)
SenderConfigError              release -> RETRY, and the run stops with the error
about_message, none delivered  release -> RETRY (attempt given back); the 3rd stops
                               the run (Report.stopped)
UncertainSendError / other     mark_unknown ->      release -> RETRY while
                               UNKNOWN              attempt < max_attempts,
                                                    then mark_unknown -> UNKNOWN
slot held or finished          DUPLICATE            DUPLICATE
lease lost before the mark     LEASE_LOST (logged at ERROR, nothing overwritten)
=============================  ===================  ==============================

How a run is carried out (claims just in time, outcomes written at once, what a crash or
a cancellation costs) is in ``_dispatch``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from notifyonce._audience import AsyncAudience, AudienceCheck, normalize_category
from notifyonce._caps import CapCheck, CapSeats, FrequencyCap
from notifyonce._dispatch import Keep, Parts, Policy, Run
from notifyonce._errors import (
    LedgerError,
    SenderConfigError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._keys import KeyMaker, SlotKey, normalize_action
from notifyonce._ledger.explain import explained
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._message import Message, Sender, SupportsCheck
from notifyonce._observe import Observer
from notifyonce._outcome import DeliveryMode, Outcome
from notifyonce._quiet import QuietHours
from notifyonce._results import Notification, Report, Result

if TYPE_CHECKING:
    from notifyonce._keys import Cycle, Subject
    from notifyonce._ledger.claim import Claim
    from notifyonce._ledger.records import SweepResult
    from notifyonce._schedule.schedule import Schedule
    from notifyonce._schedule.window import DeadlineRange, Window

__all__ = ["Notification", "Notifier", "Report", "Result", "Selector", "TickReport"]

logger = logging.getLogger("notifyonce.notifier")


_Notifications: TypeAlias = Iterable[Notification] | AsyncIterable[Notification]
Selector: TypeAlias = Callable[
    ["Window", "DeadlineRange"], _Notifications | Awaitable[_Notifications]
]
"""``select(window, deadlines)``: the notifications for the subjects whose deadline is in
``deadlines`` (a list, an iterable or an async iterable; or an awaitable of one)."""


@dataclass
class TickReport:
    """The outcome of one [`Notifier.tick`][notifyonce.Notifier.tick]: one report per open window.

    Attributes:
        now: The time the tick ran for.
        reports: A [`Report`][notifyonce.Report] per action of each window open at ``now``.
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


class Notifier:
    """Sends notifications once per slot: claim, send, record.

    Args:
        ledger: Where slots are claimed and outcomes recorded.
        sender: What delivers the messages (``TelegramSender``, ``FakeSender``, ...).
        mode: What to do when a send may or may not have been delivered; see
            [`DeliveryMode`][notifyonce.DeliveryMode].
        max_attempts: In at-least-once mode, how many times one slot may be tried in all
            (the bound on duplicates). Ignored in at-most-once mode.
        concurrency: How many sends `send_many` keeps in flight, and so the most
            claims a run ever holds whose request was not written yet (what a crash can
            cost). A slot is claimed only when its send can start: after the sender's
            rate-limit turn when the sender offers ``turn(recipient)``.
        batch_size: How many notifications `send_many` reads ahead and checks per
            statement (quiet hours, spacing, which slots are already finished). It bounds
            the memory of a streamed run; it does not bound what a crash costs.
        min_spacing: If set, a subject that was sent anything (under any action) within
            this interval is skipped with ``Outcome.SKIPPED``. Checked against the ledger
            before claiming, so it holds across restarts and for runs one after another;
            two runs for the same subject at the same moment can both pass the check
            (best effort, unlike the slot itself, which is exact).
        quiet_hours: If set, notifications whose subject is in quiet hours (in the
            notification's ``timezone``) are skipped without claiming, so a later run
            inside the window sends them; see [`QuietHours`][notifyonce.QuietHours].
        sweep_every: How often the Notifier sweeps expired leases before a run (None: never;
            then call ``ledger.sweep`` yourself).
        dry_run: Claim nothing, send nothing, record nothing; report what would happen.
        keep_results: Which results a [`Report`][notifyonce.Report] keeps: True every one,
            False none (``counts`` is always complete), None (the default) every one for a
            list and only those that need attention (``FAILED``, ``UNKNOWN``, ``RETRY``,
            ``LEASE_LOST``) for a stream, so that a streamed run's memory stays flat.
        on_result: Called with every [`Result`][notifyonce.Result], e.g. to feed metrics.
            If it raises, the run stops (no new sends) and raises it.
        observer: Told of each run, claim statement, send (duration, outcome, flood
            waits) and result; see [`Observer`][notifyonce.Observer] and, for
            OpenTelemetry, [`Telemetry`][notifyonce.otel.Telemetry]. A hook that raises
            is logged and ignored. None (the default) costs nothing.
        audience: Who cannot be reached and who opted out of what (see
            [`AsyncAudience`][notifyonce.AsyncAudience]). Default: the one beside the
            ledger's table, on its engine. Each run skips the recipients it knows to be
            gone, or opted out of the run's category, before any claim or request
            (``Outcome.SKIPPED``, ``Result.reason`` says why), and remembers there the
            recipients a refusal shows gone (blocked, deactivated, chat not found...).
            Without its table (a database not migrated since 0.2) nobody is skipped or
            remembered, and a warning says to run ``notifyonce migrate``.
        skip_gone: Skip the recipients known to be gone (the default). False sends to
            them anyway (a refusal is learned again); ``send_many(skip_gone=...)`` says
            it for one run. Opt-outs are kept either way, except for transactional runs.
        outage_patience: How long a run waits for its database when it goes away
            mid-run (a restart, a failover): sends pause, their outcomes wait in memory,
            and the run goes on when the database answers again; one log line says it
            went away, one that it is back. Past this long the run stops, raising
            [`LedgerUnavailableError`][notifyonce.LedgerUnavailableError]. ``timedelta(0)``
            stops at the first failure. A database that never answered in the run is
            not waited for (a wrong URL is not an outage).
        caps: [`FrequencyCap`][notifyonce.FrequencyCap]s, at most one per category: a
            notification of a capped category whose recipient already got ``n`` of it
            within the cap's window is ``Outcome.SKIPPED`` with the reason ``"capped"``,
            decided at claim time (runs side by side cannot exceed it). Transactional
            runs are exempt. The seats live in a table beside the ledger's (made by
            ``create_schema()`` and ``notifyonce migrate``). Runs of uncapped categories
            pay nothing for it.

    Examples:
        >>> import asyncio
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from notifyonce import AsyncLedger, Message, Notifier
        >>> from notifyonce.testing import FakeSender
        >>> async def main() -> str:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     ledger = AsyncLedger(engine)
        ...     await ledger.create_schema()
        ...     notifier = Notifier(ledger, FakeSender())
        ...     first = await notifier.send_once("trial_6h", 42, "2026-12", Message("hi"))
        ...     again = await notifier.send_once("trial_6h", 42, "2026-12", Message("hi"))
        ...     await engine.dispose()
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
        keep_results: bool | None = None,
        on_result: Callable[[Result], None] | None = None,
        observer: Observer | None = None,
        audience: AsyncAudience | None = None,
        skip_gone: bool = True,
        outage_patience: dt.timedelta = dt.timedelta(minutes=1),
        caps: Sequence[FrequencyCap] = (),
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
        if not isinstance(outage_patience, dt.timedelta) or outage_patience < dt.timedelta(0):
            raise ValidationError("outage_patience", "must be a timedelta of 0 or more")
        for name, interval in (("min_spacing", min_spacing), ("sweep_every", sweep_every)):
            if interval is not None and (
                not isinstance(interval, dt.timedelta) or interval <= dt.timedelta(0)
            ):
                raise ValidationError(name, "must be a positive timedelta or None")
        if not callable(getattr(sender, "send", None)):
            raise ValidationTypeError("sender", "must have an async send(recipient, message)")
        if keep_results is not None and not isinstance(keep_results, bool):
            raise ValidationTypeError("keep_results", "must be True, False or None")
        _check_observer(observer, on_result)
        if not isinstance(cast(object, ledger), AsyncLedger):
            hint = (
                "; the Notifier is async: build an AsyncLedger on an AsyncEngine "
                "(create_async_engine) over the same database"
                if type(ledger).__name__ == "Ledger"
                else ""
            )
            raise ValidationTypeError(
                "ledger", f"must be an AsyncLedger, got {type(ledger).__name__}{hint}"
            )
        if audience is not None and not isinstance(audience, AsyncAudience):
            raise ValidationTypeError(
                "audience", f"must be an AsyncAudience or None, got {type(audience).__name__}"
            )
        if not isinstance(skip_gone, bool):
            raise ValidationTypeError("skip_gone", "must be a bool")
        self.caps = _checked_caps(caps)
        self._seats = CapSeats.beside(ledger) if self.caps else None
        self.ledger = ledger
        self.audience = audience if audience is not None else AsyncAudience.beside(ledger)
        self.skip_gone = skip_gone
        self._audience_missing_told = False
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
        self.outage_patience = outage_patience
        self.dry_run = dry_run
        self.keep_results = keep_results
        self.on_result = on_result
        self.observer = observer
        check = sender.check if isinstance(sender, SupportsCheck) else None
        self._sender_check: Callable[[str, Message], None] | None = (
            check if callable(check) else None
        )
        # When each action (or a campaign's action and cycle) was last swept: sweeps are
        # scoped to actions, and a campaign's run to its own cycle.
        self._last_sweep: dict[str | tuple[str, str], float] = {}
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
        category: str | None = None,
        transactional: bool = False,
        skip_gone: bool | None = None,
    ) -> Outcome:
        """Send one notification unless its slot was already claimed.

        Args:
            action: The reminder's name, e.g. ``"trial_6h"``.
            subject: Who it is for.
            cycle: Which cycle; the slot is ``(action, subject, cycle)``.
            message: What to send.
            recipient: Where to send it (not blank); defaults to ``str(subject)``.
            category: What a recipient opts out of; see `send_many`.
            transactional: Opt-outs do not apply; see `send_many`.
            skip_gone: See `send_many`.

        Returns:
            What happened; see the outcome table in the module docs.

        Raises:
            ValidationError: Bad input; nothing was written.
            LedgerError: The claim could not be made (nothing was sent).
        """
        notification = Notification(subject, cycle, message, recipient)
        report = await self.send_many(
            action,
            [notification],
            category=category,
            transactional=transactional,
            skip_gone=skip_gone,
        )
        return report.results[0].outcome if report.results else _only_outcome(report)

    async def send_many(
        self,
        action: str,
        notifications: _Notifications,
        *,
        category: str | None = None,
        transactional: bool = False,
        skip_gone: bool | None = None,
    ) -> Report:
        """Send many notifications under one action, each at most once per slot.

        Each slot is claimed just before its send (claims of sends that start together
        share one statement), at most ``concurrency`` sends run at once, and each outcome
        is written as soon as it is known. So a crash or a cancellation costs only the
        sends under way, and one value the database cannot store costs only its row. An
        async iterable is streamed: the memory used is bounded by ``batch_size`` plus the
        kept results (see ``keep_results``).

        Args:
            action: The reminder's name shared by all of them.
            notifications: A list, any iterable, or an async iterable of
                [`Notification`][notifyonce.Notification]. A list is validated whole before
                anything is written; a stream is validated batch by batch.
            category: What a recipient opts out of (``audience.opt_out(chat, "promo")``);
                default: the action's name. A recipient opted out of it is skipped, and
                so is one the category's cap (``Notifier(caps=...)``) holds back
                (``SKIPPED``, reason ``"capped"``).
            transactional: Opt-outs and caps do not apply (a password reset, a payment
                receipt): only recipients that are gone are skipped.
            skip_gone: Whether recipients known to be gone are skipped; default: the
                Notifier's ``skip_gone``.

        Returns:
            A [`Report`][notifyonce.Report] with the counts per outcome and, by default,
            every result.

        Raises:
            ValidationError: Bad input (including a recipient or message the sender's
                ``check`` refuses); nothing of that batch was written. For a list,
                nothing at all was written.
            SenderConfigError: The sender is set up wrong (a rejected token, a wrong
                URL). The run stopped; its claims were freed, so the same notifications
                go out once the configuration is fixed.
            LedgerError: The ledger failed; the sends under way were finished and their
                outcomes recorded where the database allowed.
            asyncio.CancelledError: The run was cancelled. Sends under way were recorded
                as uncertain, claims not yet sent were freed, before this is raised.
        """
        try:
            return await self._send_many(
                action,
                notifications,
                category=category,
                transactional=transactional,
                skip_gone=skip_gone,
            )
        except LedgerError as exc:
            # A missing table says to migrate, an unreachable database names its URL.
            why = await explained(exc, self.ledger)
            if why is exc:
                raise
            raise why from exc

    async def _send_many(
        self,
        action: str,
        notifications: _Notifications,
        *,
        category: str | None = None,
        transactional: bool = False,
        skip_gone: bool | None = None,
        on_result: Callable[[Result], None] | None = None,
        on_run: Callable[[Run], None] | None = None,
        prepare: Callable[[Notification, Claim], Awaitable[Message]] | None = None,
        sweep_cycle: str | None = None,
    ) -> Report:
        """`send_many`, with a hook of the run's own for its results (called before the
        Notifier's ``on_result``) and one told of the run as it starts (a Broadcast keeps
        it, to stop it gently), and one that makes each message between its claim and its
        send (a digest's). ``sweep_cycle``: sweep only that cycle of the action (a
        campaign's run, which must not settle other campaigns' claims in its own mode)."""
        normalize_action(action)
        screen = self._screen_args(action, category, transactional, skip_gone)
        report = Report(dry_run=self.dry_run)
        streamed = not isinstance(notifications, Sequence)
        keys: list[SlotKey] | None = None
        if isinstance(notifications, Sequence):
            # Every item checked before anything is written; the run uses these keys.
            maker = KeyMaker(action)
            keys = [self._checked(maker, item) for item in notifications]
        keep: Keep = (
            ("attention" if streamed else "all")
            if self.keep_results is None
            else "all"
            if self.keep_results
            else "none"
        )
        report.swept = await self._maybe_sweep(action, sweep_cycle)
        parts = self._parts(await self._audience_check(*screen), self._cap_check(*screen[:2]))
        if prepare is not None:
            parts = replace(parts, prepare=prepare)
        try:
            run = Run(self._policy(), parts, action, report, keep, keys, on_result=on_result)
            if on_run is not None:
                on_run(run)
            await run.execute(notifications)
        except SenderConfigError as exc:
            # Once, and plainly: the per-slot lines only say the slots were released.
            logger.error(
                "%s is set up wrong (%s): a rejected token or a wrong server URL; the "
                "run of action %r stopped and gave its claims back, so those "
                "notifications go out once the configuration is fixed",
                type(self.sender).__name__,
                exc,
                action,
                extra={"notifyonce": {"action": action, "outcome": "config_error"}},
            )
            raise
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

        A window whose notifications are invalid (a naive datetime from the selector,
        say) sends nothing of them, the error is logged naming the window and the
        subject, and the other windows still run; then the tick raises that error.

        Args:
            schedule: The chain of windows.
            select: Returns the notifications for one window and deadline range.
            now: The time of this run (default: the ledger's clock).
            last_run: When the previous run of this job started. Default: the previous
                ``tick`` of this Notifier for the same schedule; on the first tick after a
                start nothing is known, so nothing is reported missed.

        Raises:
            ValidationError: The notifications of a window were invalid (the first such
                error, once every other window ran). Nothing of that window's list, or
                of that batch of its stream, was written.

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
        refused: list[ValidationError] = []
        for window, deadlines in schedule.open_windows(at):
            items = select(window, deadlines)
            if inspect.isawaitable(items):
                items = await items
            try:
                report.reports[window.action] = await self.send_many(window.action, items)
            except ValidationError as exc:
                # One window's bad input does not keep the other windows from running.
                logger.error(
                    "window %s: its notifications were refused (%s); the other windows run",
                    window.action,
                    exc,
                    extra={"notifyonce": {"action": window.action, "outcome": "refused"}},
                )
                refused.append(exc)
        self._last_ticks[schedule] = at
        if refused:
            raise refused[0]
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
        result = await self._settle(names, None)
        swept_at = time.monotonic()
        for name in names:
            self._last_sweep[name] = swept_at
        return result

    async def _settle(self, actions: list[str], cycle: str | None) -> SweepResult:
        """Sweep ``actions`` (only ``cycle`` of them, if given) and log what was settled."""
        result = await self.ledger.sweep(
            self.mode, max_attempts=self.max_attempts, actions=actions, cycle=cycle
        )
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
        return result

    # -- plumbing -------------------------------------------------------------------

    async def _maybe_sweep(self, action: str, cycle: str | None = None) -> SweepResult | None:
        """Sweep ``action`` (only its ``cycle``, if given) when ``sweep_every`` has passed
        since it was last swept."""
        if self.sweep_every is None or self.dry_run:
            return None
        async with self._sweep_lock:
            scope = action if cycle is None else (action, cycle)
            last = self._last_sweep.get(scope)
            if last is not None and time.monotonic() - last < self.sweep_every.total_seconds():
                return None
            if cycle is None:
                return await self.sweep([action])
            result = await self._settle([action], cycle)
            self._last_sweep[scope] = time.monotonic()
            return result

    def _policy(self) -> Policy:
        """This Notifier's options as a run keeps them: read once, when it starts."""
        return Policy(
            mode=self.mode,
            max_attempts=self.max_attempts,
            concurrency=self.concurrency,
            batch_size=self.batch_size,
            min_spacing=self.min_spacing,
            quiet_hours=self.quiet_hours,
            dry_run=self.dry_run,
            outage_patience=self.outage_patience.total_seconds(),
        )

    def _parts(self, audience: AudienceCheck | None = None, cap: CapCheck | None = None) -> Parts:
        return Parts(
            ledger=self.ledger,
            sender=self.sender,
            check=self._checked,
            now=self._now,
            emit=self._emit,
            observer=self.observer,
            audience=audience,
            cap=cap,
        )

    def _cap_check(self, category: str, transactional: bool) -> CapCheck | None:
        """The cap a run of ``category`` takes seats of; None for a transactional run."""
        cap = None if transactional else self.caps.get(category)
        if cap is None or self._seats is None:
            return None
        return CapCheck(self._seats, cap)

    def _screen_args(
        self, action: str, category: str | None, transactional: object, skip_gone: object
    ) -> tuple[str, bool, bool]:
        """A run's category, whether it is transactional and whether it skips the gone,
        checked before anything is written."""
        if not isinstance(transactional, bool):
            raise ValidationTypeError("transactional", "must be a bool")
        if skip_gone is not None and not isinstance(skip_gone, bool):
            raise ValidationTypeError("skip_gone", "must be a bool or None")
        name = action if category is None else normalize_category(category)
        return name, transactional, self.skip_gone if skip_gone is None else skip_gone

    async def _audience_check(
        self, category: str, transactional: bool, skip_gone: bool
    ) -> AudienceCheck | None:
        """How a run asks the audience, or None when its table is missing (said once)."""
        if not await self.audience.exists():
            if not self._audience_missing_told:
                self._audience_missing_told = True
                logger.warning(
                    "the recipients table %s is missing: recipients that blocked the bot "
                    "are neither skipped nor remembered; run `notifyonce migrate` (or "
                    "create_schema()) to create it",
                    self.audience.table.name,
                )
            return None
        return AudienceCheck(self.audience, category, transactional, skip_gone)

    def _checked(self, keys: KeyMaker, item: object) -> SlotKey:
        """Check one notification (and ask the sender's ``check``); its slot key."""
        if not isinstance(item, Notification):
            raise ValidationTypeError(
                "notifications", f"items must be Notification, got {type(item).__name__}"
            )
        if not isinstance(item.message, Message):
            raise ValidationTypeError(
                "message", f"must be a Message, got {type(item.message).__name__}"
            )
        if item.recipient is not None and (
            not isinstance(item.recipient, str) or not item.recipient.strip()
        ):
            # Blank is refused too: no sender can deliver to "  ", yet one without a
            # check of its own would be asked to and its slot recorded sent.
            raise ValidationError("recipient", "must be a non-blank str or None")
        if item.timezone is not None and not isinstance(item.timezone, dt.tzinfo):
            raise ValidationTypeError("timezone", "must be a tzinfo (e.g. a ZoneInfo) or None")
        try:
            key = keys(item.subject, item.cycle)
        except ValidationError as exc:
            if exc.field != "cycle":
                raise
            # Say whose: a selector's one bad row must be findable among thousands.
            raise type(exc)(
                exc.field,
                f"in the notification for subject {item.subject!r} (action {keys.action!r}): "
                f"{exc.problem}",
            ) from None
        if self._sender_check is not None:
            self._sender_check(item.target, item.message)
        return key

    def _now(self) -> dt.datetime:
        return self.ledger.now()

    def _emit(self, result: Result, quiet: bool = False) -> None:
        # quiet: a result of a stop, which the run tells in one line of its own (a
        # stopped campaign of a million chats must not log a million lines).
        level = logging.DEBUG if quiet else _LOG_LEVELS[result.outcome]
        if logger.isEnabledFor(level):
            prefix = "[dry run] " if self.dry_run else ""
            logger.log(
                level,
                "%s%s %s attempt=%s%s",
                prefix,
                _LOG_WORDS.get(result.outcome, result.outcome.value),
                result.key,
                result.attempt,
                f" error={result.error}" if result.error else "",
                extra=_log_extra(result.key, result.outcome, result.attempt, result.error),
            )
        if self.on_result is not None:
            self.on_result(result)


# A RETRY is a slot given back for a later run: after a flood wait, a connect error,
# and also when the sender is set up wrong (a rejected token). "retry" read as if the
# library would try a 401 again.
_LOG_WORDS = {Outcome.RETRY: "released for a later run:"}

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


def _check_observer(observer: object, on_result: object) -> None:
    if observer is None:
        return
    if not isinstance(observer, Observer):
        raise ValidationTypeError(
            "observer",
            f"must be a notifyonce.Observer (subclass it) or None, got {type(observer).__name__}",
        )
    if on_result is not None and on_result == observer.on_result:
        raise ValidationError(
            "on_result",
            "is the observer's own on_result, which the observer already gets: every result "
            "would be counted twice; pass observer= alone",
        )


def _checked_caps(caps: object) -> dict[str, FrequencyCap]:
    if isinstance(caps, (str, bytes)) or not isinstance(caps, Iterable):
        raise ValidationTypeError("caps", "must be a list of FrequencyCap")
    by_category: dict[str, FrequencyCap] = {}
    for cap in caps:
        if not isinstance(cap, FrequencyCap):
            raise ValidationTypeError(
                "caps", f"items must be FrequencyCap, got {type(cap).__name__}"
            )
        if cap.category in by_category:
            raise ValidationError("caps", f"two caps for the category {cap.category!r}")
        by_category[cap.category] = cap
    return by_category


def _only_outcome(report: Report) -> Outcome:
    # keep_results=False: the single notification's outcome is the one counted.
    return next(o for o, n in report.counts.items() if n)
