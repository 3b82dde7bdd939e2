"""The Notifier's observer seam, without OpenTelemetry: what each hook hears, and when."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Observer,
    Outcome,
    PermanentSendError,
    Receipt,
    Report,
    Result,
    SendEvent,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
    _dispatch,
    _observe,
    report_flood_wait,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender, Reply

TEXT = "secret-text-5c1e: your trial ends"
TOKEN = "424242:OBSERVER-secret_token"
SUBJECTS = (7_000_001, 7_000_002, 7_000_003)


class Recording(Observer):
    """Records every hook call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.results: list[Result] = []
        self.sends = 0

    def run_started(self, action: str) -> object:
        self.calls.append(("run_started", action))
        return "run"

    def run_finished(self, handle: object, action: str, report: Report, error: str | None) -> None:
        self.calls.append(("run_finished", handle, action, report.total, error))

    def claimed(self, action: str, seconds: float, asked: int, won: int) -> None:
        assert seconds >= 0
        self.calls.append(("claimed", action, asked, won))

    def send_started(self, action: str, attempt: int) -> object:
        self.sends += 1
        self.calls.append(("send_started", action, attempt))
        return f"send {self.sends}"

    def send_finished(self, handle: object, send: SendEvent) -> None:
        assert send.seconds >= 0
        self.calls.append(("send_finished", handle, send))

    def flood_wait(self, action: str, sender: str, seconds: float) -> None:
        self.calls.append(("flood_wait", action, sender, seconds))

    def on_result(self, result: Result) -> None:
        self.results.append(result)

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == name]

    def events(self) -> list[SendEvent]:
        return [call[2] for call in self.named("send_finished")]


def leaves(value: object) -> Iterator[object]:
    """Every plain value inside ``value`` (tuples, lists, dicts and dataclasses opened).

    A privacy check compares these values, never a repr: a subject id such as 7000002 can
    appear by chance among the digits of a duration or a timestamp.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from leaves(getattr(value, field.name))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(key)
            yield from leaves(item)
    elif isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            yield from leaves(item)
    else:
        yield value


def notifications(*subjects: int) -> list[Notification]:
    return [Notification(s, "c1", Message(TEXT)) for s in subjects]


async def test_each_hook_hears_its_part_of_a_run_in_order(sqlite_ledger: AsyncLedger) -> None:
    """A run: started, one claim statement per send, a start and an end per send (not for
    a repeat), a result per notification, finished; no subject or text in any hook."""
    sender = FakeSender()
    sender.fail_next(
        PermanentSendError("Forbidden: bot was blocked", code=403), recipient="7000002"
    )
    observer = Recording()
    notifier = Notifier(sqlite_ledger, sender, concurrency=1, observer=observer)
    report = await notifier.send_many("news", notifications(*SUBJECTS, SUBJECTS[0]))

    assert ("run_started", "news") == observer.calls[0]
    assert ("run_finished", "run", "news", 4, None) == observer.calls[-1]
    assert [("claimed", "news", 1, 1)] * 3 == observer.named("claimed")
    assert [("send_started", "news", 1)] * 3 == observer.named("send_started")
    assert ["send 1", "send 2", "send 3"] == [c[1] for c in observer.named("send_finished")]
    assert [
        ("news", "FakeSender", 1, Outcome.SENT, None),
        ("news", "FakeSender", 1, Outcome.FAILED, "PermanentSendError"),
        ("news", "FakeSender", 1, Outcome.SENT, None),
    ] == [(e.action, e.sender, e.attempt, e.outcome, e.error) for e in observer.events()]
    assert sorted(map(repr, report.results)) == sorted(map(repr, observer.results))
    assert [] == observer.named("flood_wait")
    heard = list(leaves(observer.calls))
    assert [] == [v for v in heard if isinstance(v, int) and v in SUBJECTS]
    # In a string, a subject counts as a whole run of digits ("7000002", "chat 7000002"),
    # never as a part of a longer number.
    said = [v for v in heard if isinstance(v, str)]
    subjects = set(map(str, SUBJECTS))
    assert [] == [v for v in said if subjects & set(re.findall(r"\d+", v))]
    assert [] == [v for v in said if TEXT in v]


async def test_finished_slots_are_neither_claimed_nor_sent(sqlite_ledger: AsyncLedger) -> None:
    """A second run over sent slots tells only of the run and its duplicate results."""
    await Notifier(sqlite_ledger, FakeSender()).send_many("news", notifications(*SUBJECTS))
    observer = Recording()
    await Notifier(sqlite_ledger, FakeSender(), observer=observer).send_many(
        "news", notifications(*SUBJECTS)
    )
    assert ["run_started", "run_finished"] == [call[0] for call in observer.calls]
    assert [Outcome.DUPLICATE] * 3 == [r.outcome for r in observer.results]


async def test_a_raised_429_is_a_flood_wait(sqlite_ledger: AsyncLedger) -> None:
    """A sender that raises a 429 with retry_after (and reports nothing itself) counts one
    flood wait; a retry_after without 429 (a rate-limit turn too far) counts none."""
    sender = FakeSender()
    sender.fail_next(
        TransientSendError("Too Many Requests: retry after 7", code=429, retry_after=7),
        recipient="7000001",
    )
    sender.fail_next(
        TransientSendError("rate limit: the next turn is 9 s away", retry_after=9),
        recipient="7000002",
    )
    observer = Recording()
    await Notifier(sqlite_ledger, sender, concurrency=1, observer=observer).send_many(
        "news", notifications(*SUBJECTS[:2])
    )
    assert [("flood_wait", "news", "FakeSender", 7.0)] == observer.named("flood_wait")
    assert [(Outcome.RETRY, 1, 7.0), (Outcome.RETRY, 0, 0.0)] == [
        (e.outcome, e.flood_waits, e.flood_wait_seconds) for e in observer.events()
    ]


@pytest.mark.parametrize("max_retries", [3, 0])
async def test_telegram_reports_each_429_once(
    sqlite_ledger: AsyncLedger, bot_api_server: BotAPIServer, max_retries: int
) -> None:
    """A 429 from the Bot API is one flood wait, whether the sender waits it out and
    delivers, or gives up and raises it (then not counted a second time)."""
    bot_api_server.script("7000001", [Reply.flood(1)])

    async def no_sleep(seconds: float) -> None:
        return None

    observer = Recording()
    async with TelegramSender(
        TOKEN,
        base_url=bot_api_server.url,
        rate_limit=None,
        max_retries=max_retries,
        sleep=no_sleep,
    ) as sender:
        notifier = Notifier(sqlite_ledger, sender, observer=observer)
        outcome = await notifier.send_once("news", SUBJECTS[0], "c1", Message(TEXT))
    expected = Outcome.SENT if max_retries else Outcome.RETRY
    assert expected == outcome
    assert [("flood_wait", "news", "TelegramSender", 1.0)] == observer.named("flood_wait")
    [event] = observer.events()
    assert (expected, 1, 1.0) == (event.outcome, event.flood_waits, event.flood_wait_seconds)


class Broken(Observer):
    """Every hook raises, with a message that must not reach the logs."""

    def _fail(self, *args: object) -> Any:
        raise RuntimeError(TEXT)

    run_started = run_finished = claimed = send_started = _fail  # type: ignore[assignment]
    send_finished = flood_wait = on_result = _fail  # type: ignore[assignment]


async def test_a_raising_observer_is_logged_and_ignored(
    sqlite_ledger: AsyncLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """Hooks that raise change nothing: every send goes out and is recorded, the caller's
    on_result sees every result, and each failing hook is logged once at WARNING by its
    class name (later failures at DEBUG), never with its message."""
    sender = FakeSender()
    sender.fail_next(TransientSendError("Too Many Requests", code=429, retry_after=1))
    seen: list[Outcome] = []
    notifier = Notifier(
        sqlite_ledger, sender, on_result=lambda r: seen.append(r.outcome), observer=Broken()
    )
    with caplog.at_level(logging.DEBUG, logger="notifyonce.notifier"):
        report = await notifier.send_many("news", notifications(*SUBJECTS))
        again = await notifier.send_many("news", notifications(*SUBJECTS))

    assert {Outcome.SENT: 2, Outcome.RETRY: 1} == {o: n for o, n in report.counts.items() if n}
    assert 3 == again.counts[Outcome.SENT] + again.counts[Outcome.DUPLICATE]
    assert 6 == len(seen)
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "observer hook" in r.getMessage()
    ]
    hooks = ["run_started", "claimed", "send_started", "flood_wait", "send_finished"]
    hooks += ["on_result", "run_finished"]
    # Once per hook and run; the second run had no flood wait.
    failed = hooks + [h for h in hooks if h != "flood_wait"]
    expected = [f"observer hook Broken.{h} raised RuntimeError; ignored" for h in failed]
    assert sorted(expected) == sorted(warned)
    assert all(TEXT not in r.getMessage() for r in caplog.records)


async def test_without_an_observer_nothing_is_measured(
    sqlite_ledger: AsyncLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No observer: no clock read, no probe built, no context set for the sender; the
    same run with an observer does all three (so this test can tell them apart)."""
    reads: list[int] = []
    probes: list[int] = []
    contexts: list[object] = []
    real_probe = _observe.SendProbe

    def clock() -> float:
        reads.append(1)
        return 0.0

    def probe(*args: Any) -> _observe.SendProbe:
        probes.append(1)
        return real_probe(*args)

    class Peeking:
        async def send(self, recipient: str, message: Message) -> Receipt:
            contexts.append(_observe.SENDING.get())
            return Receipt(recipient, 1)

    monkeypatch.setattr(_dispatch, "_clock", clock)
    monkeypatch.setattr(_dispatch, "SendProbe", probe)
    report = await Notifier(sqlite_ledger, Peeking()).send_many("news", notifications(*SUBJECTS))
    assert (3, [], [], [None] * 3) == (report.counts[Outcome.SENT], reads, probes, contexts)

    await Notifier(sqlite_ledger, Peeking(), observer=Observer()).send_many(
        "again", notifications(1)
    )
    assert (True, [1], True) == (bool(reads), probes, contexts[-1] is not None)


async def test_a_cancelled_send_still_ends(sqlite_ledger: AsyncLedger) -> None:
    """A run cancelled mid-send ends that send's hook pair (CancelledError, unknown in
    at-most-once mode) and the run's, in the task that started them."""
    sender = FakeSender()
    sender.hold_answers()
    observer = Recording()
    notifier = Notifier(sqlite_ledger, sender, observer=observer)
    run = asyncio.ensure_future(notifier.send_many("news", notifications(SUBJECTS[0])))
    await sender.wait_in_flight(1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    [event] = observer.events()
    assert (Outcome.UNKNOWN, "CancelledError") == (event.outcome, event.error)
    assert ("run_finished", "run", "news", 1, "CancelledError") == observer.calls[-1]


def test_an_observer_is_checked(sqlite_ledger: AsyncLedger) -> None:
    """Not an Observer, or its own on_result passed again: an error naming the field."""
    observer = Observer()
    with pytest.raises(ValidationTypeError) as wrong:
        Notifier(sqlite_ledger, FakeSender(), observer=object())  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as twice:
        Notifier(sqlite_ledger, FakeSender(), observer=observer, on_result=observer.on_result)
    assert ("observer", "on_result") == (wrong.value.field, twice.value.field)


def test_report_flood_wait_outside_a_send_does_nothing_and_checks_its_value() -> None:
    """Outside an observed send the report goes nowhere; a bad value is refused."""
    report_flood_wait(3)
    for bad in (-1.0, float("nan"), "3", True):
        with pytest.raises(ValidationError) as refused:
            report_flood_wait(bad)  # type: ignore[arg-type]
        assert "seconds" == refused.value.field
