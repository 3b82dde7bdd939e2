"""OpenTelemetry: outcome counters and run spans, read back with the SDK's in-memory readers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    PermanentSendError,
    SenderConfigError,
    UncertainSendError,
    Window,
)
from notifyonce.testing import FakeSender

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from notifyonce.otel import Telemetry

SECRET_TEXT = "secret-text-9d2f: your trial ends"


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, str], ...], int]:
    data = reader.get_metrics_data()
    found: dict[tuple[tuple[str, str], ...], int] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[tuple(sorted(point.attributes.items()))] = point.value
    return found


@pytest.fixture
def telemetry() -> tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Telemetry(
        meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider
    )
    return made, reader, exporter


async def test_outcomes_are_counted_per_action_and_the_run_is_a_span(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter], tmp_path: Path
) -> None:
    """Sent, failed, unknown and duplicate are counted per action; the span has the counts."""
    tel, reader, exporter = telemetry
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    sender.fail_next(UncertainSendError("connection lost"), recipient="3")
    notifier = Notifier(ledger, sender, on_result=tel.on_result)
    items = [Notification(i, "c1", Message(SECRET_TEXT)) for i in (1, 2, 3, 4, 1)]
    await tel.send_many(notifier, "news", items)
    await notifier.send_once("other", 9, "c1", Message(SECRET_TEXT))
    await engine.dispose()

    counted = points(reader, "notifyonce.notifications")
    assert {
        (("notifyonce.action", "news"), ("notifyonce.outcome", "sent")): 2,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "failed")): 1,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "unknown")): 1,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "duplicate")): 1,
        (("notifyonce.action", "other"), ("notifyonce.outcome", "sent")): 1,
    } == counted
    [span] = exporter.get_finished_spans()
    assert "notifyonce.send_many" == span.name
    attributes = dict(span.attributes or {})
    assert ("news", 2, 1, 1, 1) == (
        attributes["notifyonce.action"],
        attributes["notifyonce.count.sent"],
        attributes["notifyonce.count.failed"],
        attributes["notifyonce.count.unknown"],
        attributes["notifyonce.count.duplicate"],
    )
    assert all(SECRET_TEXT not in str(v) for v in attributes.values())


async def test_a_failed_run_span_names_the_error_class_only(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter], tmp_path: Path
) -> None:
    """A run that raises ends its span in error with the exception's class, not its text."""
    tel, _, exporter = telemetry
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    sender = FakeSender()
    sender.fail_next(SenderConfigError(f"Unauthorized {SECRET_TEXT}", code=401))
    notifier = Notifier(ledger, sender)
    with pytest.raises(SenderConfigError):
        await tel.send_many(notifier, "news", [Notification(1, "c1", Message("x"))])
    await engine.dispose()
    [span] = exporter.get_finished_spans()
    assert ("SenderConfigError", "SenderConfigError") == (
        span.status.description,
        (span.attributes or {})["error.type"],
    )
    assert [] == list(span.events)  # no exception event: its message could hold data


def test_missed_windows_are_counted(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
) -> None:
    """record_tick counts each missed window under its action."""
    from notifyonce import DeadlineRange, TickReport

    tel, reader, _ = telemetry
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    window = Window(
        "trial_6h", opens_before=dt.timedelta(hours=6), closes_before=dt.timedelta(hours=5)
    )
    tel.record_tick(
        TickReport(
            now, missed=[(window, DeadlineRange(now, now)), (window, DeadlineRange(now, now))]
        )
    )
    assert {(("notifyonce.action", "trial_6h"),): 2} == points(reader, "notifyonce.missed_windows")


async def test_a_broadcast_is_a_span_with_its_campaign_and_counts(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter], tmp_path: Path
) -> None:
    """run_broadcast wraps a broadcast in a span; the Notifier's counters see every result."""
    from notifyonce import Broadcast

    tel, reader, exporter = telemetry
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.sqlite3'}")
    ledger = AsyncLedger(engine)
    await ledger.create_schema()
    notifier = Notifier(ledger, FakeSender(), on_result=tel.on_result)
    await tel.run_broadcast(Broadcast(notifier, "news", "c7", Message(SECRET_TEXT), [1, 2, 3]))
    await tel.run_broadcast(Broadcast(notifier, "news", "c7", Message(SECRET_TEXT), [1, 2, 3, 4]))
    await engine.dispose()
    first, second = exporter.get_finished_spans()
    attributes = dict(second.attributes or {})
    assert ("notifyonce.broadcast", "c7", 1, 3, False) == (
        second.name,
        attributes["notifyonce.campaign"],
        attributes["notifyonce.count.sent"],
        attributes["notifyonce.count.duplicate"],
        attributes["notifyonce.cancelled"],
    )
    assert 3 == dict(first.attributes or {})["notifyonce.count.sent"]
    assert {
        (("notifyonce.action", "news"), ("notifyonce.outcome", "sent")): 4,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "duplicate")): 3,
    } == points(reader, "notifyonce.notifications")
