"""OpenTelemetry metrics and spans for notifyonce (``pip install 'notifyonce[otel]'``).

`Telemetry` is an [`Observer`][notifyonce.Observer]: pass it as
``Notifier(ledger, sender, observer=telemetry)`` and it measures claim and send latency,
flood waits and every notification's outcome per action, and traces each run with one
child span per send. [`record_tick`][notifyonce.otel.Telemetry.record_tick] counts the
windows a tick found missed. Attributes carry the action, the outcome, the sender's class
and counts only: never a subject id (unbounded cardinality, and personal data), a message
text or a token; an error is named by its class only.

Instruments (meter ``notifyonce``):

==================================  =========  ==========================================
name (unit)                         kind       attributes
==================================  =========  ==========================================
``notifyonce.notifications``        counter    ``notifyonce.action``, ``notifyonce.outcome``,
                                               ``notifyonce.reason`` (skipped ones)
``notifyonce.missed_windows``       counter    ``notifyonce.action``
``notifyonce.claim.duration`` (s)   histogram  ``notifyonce.action``
``notifyonce.send.duration`` (s)    histogram  ``notifyonce.action``, ``notifyonce.outcome``
``notifyonce.flood_waits``          counter    ``notifyonce.action``, ``notifyonce.sender``
``notifyonce.flood_wait.duration``  histogram  ``notifyonce.action``, ``notifyonce.sender``
(s)
==================================  =========  ==========================================

- ``notifications``: one per result; unknown outcomes and suppressed duplicates are
  ``notifyonce.outcome="unknown"`` and ``"duplicate"``. A skipped one carries why in
  ``notifyonce.reason`` (``"gone: blocked"``, ``"opted out of promo"``, ``"quiet hours"``):
  the recipients a campaign no longer pays a request for, per reason.
- ``claim.duration``: one record per claim statement (the workers whose rate-limit turn
  comes together share one).
- ``send.duration``: one record per call of ``sender.send``, rate-limit waits, retries and
  flood waits inside it included; the outcome is what the answer means for the slot
  (``sent``, ``failed``, ``retry``, ``unknown``).
- ``flood_waits`` and ``flood_wait.duration``: each 429 with a retry-after, and the seconds
  it asked for.

Spans (tracer ``notifyonce``): ``notifyonce.send_many`` per run (``send_many``, and so
each ``send_once``), with a child ``notifyonce.send`` per notification sent (not per
claim skipped or lost), carrying the action, the slot's attempt, the outcome, the sender
and the flood waits; a flood wait is also an event on it. Histograms advise bucket
boundaries in seconds (OpenTelemetry API 1.30 and later; on older ones set them with a
``View``). Export with any OpenTelemetry exporter, e.g. to Prometheus through
``opentelemetry-exporter-prometheus``.

Examples:
    >>> from notifyonce.otel import Telemetry
    >>> telemetry = Telemetry()  # the global meter and tracer providers
    >>> notifier = Notifier(ledger, sender, observer=telemetry)  # doctest: +SKIP
    >>> report = await notifier.send_many("trial_6h", items)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterable, Iterable, Iterator, Sequence
from contextvars import Token
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context, metrics, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "notifyonce.otel needs OpenTelemetry: pip install 'notifyonce[otel]'"
    ) from exc

from notifyonce._observe import Observer, SendEvent
from notifyonce._version import __version__

if TYPE_CHECKING:
    from notifyonce._broadcast import Broadcast, BroadcastReport
    from notifyonce._notifier import Notification, Notifier, Report, Result, TickReport

__all__ = ["Telemetry"]

ACTION = "notifyonce.action"
OUTCOME = "notifyonce.outcome"
REASON = "notifyonce.reason"
SENDER = "notifyonce.sender"
ERROR_TYPE = "error.type"

# A claim is a database round trip (milliseconds); a send a provider round trip, up to
# the sender's budget (30 s by default) with its retries and flood waits.
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
# Telegram asks for whole seconds, from 1 up to hours in a real flood.
FLOOD_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class Telemetry(Observer):
    """OpenTelemetry metrics and spans for a Notifier; see the module docs for the instruments.

    Plug it in as ``Notifier(ledger, sender, observer=telemetry)``. Passing only
    ``on_result=telemetry.on_result`` (as before it was an observer) still counts the
    outcomes, and nothing else.

    Args:
        meter_provider: Where the metrics go (default: the global provider).
        tracer_provider: Where the spans go (default: the global provider).
    """

    def __init__(
        self,
        *,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        meter = metrics.get_meter("notifyonce", __version__, meter_provider=meter_provider)
        self._tracer = trace.get_tracer("notifyonce", __version__, tracer_provider=tracer_provider)
        self._outcomes = meter.create_counter(
            "notifyonce.notifications",
            unit="{notification}",
            description="Notifications handled, per action and outcome",
        )
        self._missed = meter.create_counter(
            "notifyonce.missed_windows",
            unit="{window}",
            description="Send windows that opened and closed while no job ran",
        )
        self._claim_seconds = _histogram(
            meter,
            "notifyonce.claim.duration",
            "Seconds one claim statement took, per action",
            DURATION_BUCKETS,
        )
        self._send_seconds = _histogram(
            meter,
            "notifyonce.send.duration",
            "Seconds one send took (waits and retries inside it included), per action and outcome",
            DURATION_BUCKETS,
        )
        self._floods = meter.create_counter(
            "notifyonce.flood_waits",
            unit="{wait}",
            description="Flood waits (429 with a retry-after) the provider asked for",
        )
        self._flood_seconds = _histogram(
            meter,
            "notifyonce.flood_wait.duration",
            "Seconds each flood wait asked for",
            FLOOD_BUCKETS,
        )

    # -- the observer -------------------------------------------------------------------

    def on_result(self, result: Result) -> None:
        """Count one result (the Notifier calls it; or pass ``on_result=telemetry.on_result``)."""
        attributes = {ACTION: result.action, OUTCOME: result.outcome.value}
        if result.reason is not None:
            attributes[REASON] = result.reason
        self._outcomes.add(1, attributes)

    def run_started(self, action: str) -> object:
        """Start the run's ``notifyonce.send_many`` span and make it current."""
        return self._enter("notifyonce.send_many", {ACTION: action})

    def run_finished(self, handle: object, action: str, report: Report, error: str | None) -> None:
        """End the run's span with the count of each outcome."""
        if isinstance(handle, _Entered):
            handle.span.set_attributes(_counts(report))
            handle.exit(error)

    def claimed(self, action: str, seconds: float, asked: int, won: int) -> None:
        """Record one claim statement's duration."""
        self._claim_seconds.record(seconds, {ACTION: action})

    def send_started(self, action: str, attempt: int) -> object:
        """Start a ``notifyonce.send`` span, a child of the current (the run's) span."""
        return self._enter("notifyonce.send", {ACTION: action, "notifyonce.attempt": attempt})

    def send_finished(self, handle: object, send: SendEvent) -> None:
        """Record the send's duration and end its span with the outcome."""
        self._send_seconds.record(send.seconds, {ACTION: send.action, OUTCOME: send.outcome.value})
        if isinstance(handle, _Entered):
            handle.span.set_attributes(
                {
                    OUTCOME: send.outcome.value,
                    SENDER: send.sender,
                    "notifyonce.flood_waits": send.flood_waits,
                    "notifyonce.flood_wait_seconds": send.flood_wait_seconds,
                }
            )
            handle.exit(send.error)

    def flood_wait(self, action: str, sender: str, seconds: float) -> None:
        """Count a flood wait; also an event on the current (the send's) span."""
        attributes = {ACTION: action, SENDER: sender}
        self._floods.add(1, attributes)
        self._flood_seconds.record(seconds, attributes)
        trace.get_current_span().add_event(
            "notifyonce.flood_wait", {"notifyonce.retry_after": seconds}
        )

    # -- without the observer -----------------------------------------------------------

    def record_tick(self, report: TickReport) -> None:
        """Count the windows a [`Notifier.tick`][notifyonce.Notifier.tick] found missed."""
        for window, _ in report.missed:
            self._missed.add(1, {ACTION: window.action})

    async def send_many(
        self,
        notifier: Notifier,
        action: str,
        notifications: Iterable[Notification] | AsyncIterable[Notification],
    ) -> Report:
        """[`Notifier.send_many`][notifyonce.Notifier.send_many] inside a ``notifyonce.send_many``
        span.

        The span carries the action and, at the end, the count of each outcome
        (``notifyonce.count.sent``, ...); an exception is recorded by its class only. With
        ``observer=telemetry`` on the Notifier the run makes that span itself, so this is
        the same as ``notifier.send_many``.
        """
        if notifier.observer is self:
            return await notifier.send_many(action, notifications)
        with self._span("notifyonce.send_many", {ACTION: action}) as span:
            report = await notifier.send_many(action, notifications)
            span.set_attributes(_counts(report))
            return report

    async def run_broadcast(self, broadcast: Broadcast) -> BroadcastReport:
        """[`Broadcast.run`][notifyonce.Broadcast.run] inside a ``notifyonce.broadcast`` span.

        The span carries the action, the campaign id, the count of each outcome and
        whether the run was cancelled; an exception is recorded by its class only. With
        ``observer=telemetry`` on the broadcast's Notifier, the run's span and its sends'
        spans are its children.
        """
        attributes = {ACTION: broadcast.action, "notifyonce.campaign": broadcast.campaign}
        with self._span("notifyonce.broadcast", attributes) as span:
            done = await broadcast.run()
            span.set_attributes(_counts(done.report))
            span.set_attribute("notifyonce.cancelled", done.cancelled)
            span.set_attribute("notifyonce.unknown_in_campaign", len(done.unknown))
            return done

    # -- plumbing -------------------------------------------------------------------------

    def _enter(self, name: str, attributes: dict[str, Any]) -> _Entered:
        span = self._tracer.start_span(name, attributes=attributes)
        return _Entered(span, context.attach(trace.set_span_in_context(span)))

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[trace.Span]:
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except BaseException as exc:
                _error(span, type(exc).__name__)
                raise


class _Entered:
    """A span started by a hook and made current until the matching hook ends it."""

    __slots__ = ("span", "token")

    def __init__(self, span: trace.Span, token: Token[Context]) -> None:
        self.span = span
        self.token = token

    def exit(self, error: str | None) -> None:
        if error is not None:
            _error(self.span, error)
        self.span.end()
        context.detach(self.token)


def _error(span: trace.Span, name: str) -> None:
    # The exception's text may quote a recipient: its class name only.
    span.set_status(Status(StatusCode.ERROR, name))
    span.set_attribute(ERROR_TYPE, name)


def _histogram(
    meter: metrics.Meter, name: str, description: str, buckets: Sequence[float]
) -> metrics.Histogram:
    options: dict[str, Any] = {}
    if (
        "explicit_bucket_boundaries_advisory"
        in inspect.signature(meter.create_histogram).parameters
    ):
        options["explicit_bucket_boundaries_advisory"] = buckets  # OpenTelemetry API >= 1.30
    return meter.create_histogram(name, unit="s", description=description, **options)


def _counts(report: Report) -> dict[str, Any]:
    return {f"notifyonce.count.{o.value}": n for o, n in report.counts.items()}
