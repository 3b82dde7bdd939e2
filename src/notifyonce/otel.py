"""OpenTelemetry metrics and spans for notifyonce (``pip install 'notifyonce[otel]'``).

`Telemetry` counts every notification's outcome per action through the
Notifier's ``on_result`` hook, counts missed windows from a [`TickReport`][notifyonce.TickReport],
and wraps a ``send_many`` run (or a broadcast) in a span. Attributes carry the action, the
outcome and counts only: never a subject id (unbounded cardinality, and personal data), a
message text or a token.

Instruments (meter ``notifyonce``):

=====================================  =========  =========================================
name                                   kind       attributes
=====================================  =========  =========================================
``notifyonce.notifications``           counter    ``notifyonce.action``, ``notifyonce.outcome``
``notifyonce.missed_windows``          counter    ``notifyonce.action``
=====================================  =========  =========================================

Unknown outcomes and suppressed duplicates are ``notifyonce.outcome="unknown"`` and
``"duplicate"`` of the first counter. Export them with any OpenTelemetry exporter, e.g.
to Prometheus through ``opentelemetry-exporter-prometheus``.

Examples:
    >>> from notifyonce.otel import Telemetry
    >>> telemetry = Telemetry()  # the global meter and tracer providers
    >>> notifier = Notifier(ledger, sender, on_result=telemetry.on_result)  # doctest: +SKIP
    >>> report = await telemetry.send_many(notifier, "trial_6h", items)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "notifyonce.otel needs OpenTelemetry: pip install 'notifyonce[otel]'"
    ) from exc

from ._version import __version__

if TYPE_CHECKING:
    from ._broadcast import Broadcast, BroadcastReport
    from ._notifier import Notification, Notifier, Report, Result, TickReport

__all__ = ["Telemetry"]

ACTION = "notifyonce.action"
OUTCOME = "notifyonce.outcome"


class Telemetry:
    """Outcome counters and run spans for a Notifier.

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

    def on_result(self, result: Result) -> None:
        """Count one result; pass as ``Notifier(on_result=telemetry.on_result)``."""
        self._outcomes.add(1, {ACTION: result.action, OUTCOME: result.outcome.value})

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
        (``notifyonce.count.sent``, ...); an exception is recorded by its class only.
        """
        with self._span("notifyonce.send_many", {ACTION: action}) as span:
            report = await notifier.send_many(action, notifications)
            span.set_attributes(_counts(report))
            return report

    async def run_broadcast(self, broadcast: Broadcast) -> BroadcastReport:
        """[`Broadcast.run`][notifyonce.Broadcast.run] inside a ``notifyonce.broadcast`` span.

        The span carries the action, the campaign id, the count of each outcome and
        whether the run was cancelled; an exception is recorded by its class only.
        """
        attributes = {ACTION: broadcast.action, "notifyonce.campaign": broadcast.campaign}
        with self._span("notifyonce.broadcast", attributes) as span:
            done = await broadcast.run()
            span.set_attributes(_counts(done.report))
            span.set_attribute("notifyonce.cancelled", done.cancelled)
            span.set_attribute("notifyonce.unknown_in_campaign", len(done.unknown))
            return done

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[trace.Span]:
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except BaseException as exc:
                # The exception's text may quote a recipient: its class name only.
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.set_attribute("error.type", type(exc).__name__)
                raise


def _counts(report: Report) -> dict[str, Any]:
    return {f"notifyonce.count.{o.value}": n for o, n in report.counts.items()}
