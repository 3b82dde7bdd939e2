"""OpenTelemetry: outcome counters and run spans, read back with the SDK's in-memory readers."""

from __future__ import annotations

import datetime as dt

import pytest

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Outcome,
    PermanentSendError,
    SenderConfigError,
    UncertainSendError,
    Window,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender, Reply

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from notifyonce.otel import DURATION_BUCKETS, FLOOD_BUCKETS, Telemetry

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
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """Sent, failed, unknown and duplicate are counted per action; the span has the counts."""
    tel, reader, exporter = telemetry
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    sender.fail_next(UncertainSendError("connection lost"), recipient="3")
    notifier = Notifier(sqlite_ledger, sender, on_result=tel.on_result)
    items = [Notification(i, "c1", Message(SECRET_TEXT)) for i in (1, 2, 3, 4, 1)]
    await tel.send_many(notifier, "news", items)
    await notifier.send_once("other", 9, "c1", Message(SECRET_TEXT))

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
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """A run that raises ends its span in error with the exception's class, not its text."""
    tel, _, exporter = telemetry
    sender = FakeSender()
    sender.fail_next(SenderConfigError(f"Unauthorized {SECRET_TEXT}", code=401))
    notifier = Notifier(sqlite_ledger, sender)
    with pytest.raises(SenderConfigError):
        await tel.send_many(notifier, "news", [Notification(1, "c1", Message("x"))])
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
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """run_broadcast wraps a broadcast in a span; the Notifier's counters see every result."""
    from notifyonce import Broadcast

    tel, reader, exporter = telemetry
    notifier = Notifier(sqlite_ledger, FakeSender(), on_result=tel.on_result)
    await tel.run_broadcast(Broadcast(notifier, "news", "c7", Message(SECRET_TEXT), [1, 2, 3]))
    await tel.run_broadcast(Broadcast(notifier, "news", "c7", Message(SECRET_TEXT), [1, 2, 3, 4]))
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


# -- through the observer seam: latency, flood waits, a span per send --------------------

TOKEN = "555111:OTEL-secret_token"
SUBJECT = 7_300_000_001  # a subject id no attribute may carry


def histograms(
    reader: InMemoryMetricReader, name: str
) -> dict[tuple[tuple[str, str], ...], tuple[int, float, tuple[float, ...]]]:
    """Count, sum and bucket boundaries of each data point of histogram ``name``."""
    data = reader.get_metrics_data()
    found: dict[tuple[tuple[str, str], ...], tuple[int, float, tuple[float, ...]]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        key = tuple(sorted(point.attributes.items()))
                        found[key] = (point.count, point.sum, tuple(point.explicit_bounds))
    return found


async def no_sleep(seconds: float) -> None:
    return None


def telegram(server: BotAPIServer) -> TelegramSender:
    """A sender to the local Bot API whose waits take no time."""
    return TelegramSender(TOKEN, base_url=server.url, rate_limit=None, sleep=no_sleep)


def every_attribute(reader: InMemoryMetricReader, exporter: InMemorySpanExporter) -> list[str]:
    """Every span name, status, event and attribute, and every metric attribute, as text."""
    seen: list[str] = []
    for span in exporter.get_finished_spans():
        seen += [span.name, str(span.status.description)]
        seen += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            seen += [event.name, *(f"{k}={v}" for k, v in (event.attributes or {}).items())]
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    seen += [f"{k}={v}" for k, v in point.attributes.items()]
    return seen


async def test_claim_and_send_latency_are_histograms_per_action(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """One claim record per claim statement and one send record per send, per action (and
    outcome), in seconds; outcomes are counted through the observer alone."""
    tel, reader, _ = telemetry
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    notifier = Notifier(sqlite_ledger, sender, concurrency=1, observer=tel)
    await notifier.send_many("news", [Notification(i, "c1", Message("x")) for i in (1, 2, 3, 1)])
    await notifier.send_once("other", 9, "c1", Message("x"))

    claims = histograms(reader, "notifyonce.claim.duration")
    assert {(("notifyonce.action", "news"),): 3, (("notifyonce.action", "other"),): 1} == {
        k: count for k, (count, _, _) in claims.items()
    }
    sends = histograms(reader, "notifyonce.send.duration")
    assert {
        (("notifyonce.action", "news"), ("notifyonce.outcome", "sent")): 2,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "failed")): 1,
        (("notifyonce.action", "other"), ("notifyonce.outcome", "sent")): 1,
    } == {k: count for k, (count, _, _) in sends.items()}
    assert {DURATION_BUCKETS} == {bounds for _, _, bounds in [*claims.values(), *sends.values()]}
    assert {
        (("notifyonce.action", "news"), ("notifyonce.outcome", "sent")): 2,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "failed")): 1,
        (("notifyonce.action", "news"), ("notifyonce.outcome", "duplicate")): 1,
        (("notifyonce.action", "other"), ("notifyonce.outcome", "sent")): 1,
    } == points(reader, "notifyonce.notifications")


async def test_each_send_is_a_child_span_of_its_run(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """A run is one span (also through telemetry.send_many) with a child span per send
    (none for a repeat); a failed send's span names the error class only."""
    tel, _, exporter = telemetry
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    notifier = Notifier(sqlite_ledger, sender, concurrency=1, observer=tel)
    await tel.send_many(notifier, "news", [Notification(i, "c1", Message("x")) for i in (1, 2, 1)])

    spans = exporter.get_finished_spans()
    [run] = [s for s in spans if s.name == "notifyonce.send_many"]
    sends = [s for s in spans if s.name == "notifyonce.send"]
    assert 3 == len(spans)
    assert all(
        s.parent is not None
        and (run.context.trace_id, run.context.span_id) == (s.context.trace_id, s.parent.span_id)
        for s in sends
    )
    assert [("sent", 1, "FakeSender"), ("failed", 1, "FakeSender")] == [
        (
            (s.attributes or {})["notifyonce.outcome"],
            (s.attributes or {})["notifyonce.attempt"],
            (s.attributes or {})["notifyonce.sender"],
        )
        for s in sends
    ]
    failed = sends[1]
    assert ("PermanentSendError", "PermanentSendError", []) == (
        failed.status.description,
        (failed.attributes or {})["error.type"],
        list(failed.events),
    )
    assert (1, 1, 1) == tuple(
        (run.attributes or {})[f"notifyonce.count.{o}"] for o in ("sent", "failed", "duplicate")
    )


async def test_a_429_from_the_bot_api_is_a_flood_wait(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
    bot_api_server: BotAPIServer,
) -> None:
    """A 429 with retry_after 1, waited out by TelegramSender, counts one flood wait of 1 s
    per action and sender, and is an event on the send's span."""
    tel, reader, exporter = telemetry
    bot_api_server.script(str(SUBJECT), [Reply.flood(1)])

    async with telegram(bot_api_server) as sender:
        notifier = Notifier(sqlite_ledger, sender, observer=tel)
        assert Outcome.SENT == await notifier.send_once("news", SUBJECT, "c1", Message(SECRET_TEXT))

    labels = (("notifyonce.action", "news"), ("notifyonce.sender", "TelegramSender"))
    assert {labels: 1} == points(reader, "notifyonce.flood_waits")
    assert {labels: (1, 1.0, FLOOD_BUCKETS)} == histograms(reader, "notifyonce.flood_wait.duration")
    [send] = [s for s in exporter.get_finished_spans() if s.name == "notifyonce.send"]
    assert [("notifyonce.flood_wait", {"notifyonce.retry_after": 1.0})] == [
        (e.name, dict(e.attributes or {})) for e in send.events
    ]
    assert (1, 1.0) == (
        (send.attributes or {})["notifyonce.flood_waits"],
        (send.attributes or {})["notifyonce.flood_wait_seconds"],
    )


async def test_no_attribute_holds_a_text_a_token_or_a_subject(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
    bot_api_server: BotAPIServer,
) -> None:
    """Sends that flood-wait, fail with the text and the token in the error, or go out:
    no span, event or metric attribute holds the text, the token or the subject id."""
    tel, reader, exporter = telemetry
    bot_api_server.script(str(SUBJECT), [Reply.flood(1), Reply.blocked()])

    async with telegram(bot_api_server) as sender:
        notifier = Notifier(sqlite_ledger, sender, observer=tel)
        await notifier.send_once("news", SUBJECT, "c1", Message(SECRET_TEXT))
        await notifier.send_once("news", SUBJECT + 1, "c1", Message(SECRET_TEXT))
    fake = FakeSender()
    fake.fail_next(UncertainSendError(f"{SECRET_TEXT} {TOKEN} {SUBJECT + 2}"))
    await Notifier(sqlite_ledger, fake, observer=tel).send_once(
        "news", SUBJECT + 2, "c1", Message(SECRET_TEXT)
    )

    seen = every_attribute(reader, exporter)
    assert 6 == len(exporter.get_finished_spans())  # three runs of one send each
    forbidden = [SECRET_TEXT, TOKEN.split(":")[1], *(str(SUBJECT + n) for n in range(3))]
    assert [] == [(f, s) for s in seen for f in forbidden if f in s]


async def test_a_broadcast_span_holds_its_run_and_its_sends(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """With the observer on the broadcast's Notifier: broadcast > run > one span per send."""
    from notifyonce import Broadcast

    tel, _, exporter = telemetry
    notifier = Notifier(sqlite_ledger, FakeSender(), observer=tel)
    await tel.run_broadcast(Broadcast(notifier, "news", "c7", Message(SECRET_TEXT), [1, 2]))
    spans = {s.context.span_id: s for s in exporter.get_finished_spans()}
    parents = sorted(
        (s.name, None if s.parent is None else spans[s.parent.span_id].name) for s in spans.values()
    )
    assert [
        ("notifyonce.broadcast", None),
        ("notifyonce.send", "notifyonce.send_many"),
        ("notifyonce.send", "notifyonce.send_many"),
        ("notifyonce.send_many", "notifyonce.broadcast"),
    ] == parents


async def test_skipped_notifications_are_counted_with_their_reason(
    telemetry: tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter],
    sqlite_ledger: AsyncLedger,
) -> None:
    """A chat learned gone, then skipped by the next run, is counted with its reason."""
    tel, reader, _ = telemetry
    sender = FakeSender()
    sender.block("2")
    notifier = Notifier(sqlite_ledger, sender, observer=tel)
    await notifier.audience.opt_out(3, "news")
    for cycle in ("c1", "c2"):
        await notifier.send_many(
            "news", [Notification(i, cycle, Message(SECRET_TEXT)) for i in (1, 2, 3)]
        )
    counted = points(reader, "notifyonce.notifications")
    news = ("notifyonce.action", "news")
    assert {
        (news, ("notifyonce.outcome", "sent")): 2,
        (news, ("notifyonce.outcome", "failed")): 1,
        (news, ("notifyonce.outcome", "skipped"), ("notifyonce.reason", "gone: blocked")): 1,
        (news, ("notifyonce.outcome", "skipped"), ("notifyonce.reason", "opted out of news")): 2,
    } == counted
