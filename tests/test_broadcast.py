"""Broadcasts: resuming a campaign, progress snapshots, cancellation, recipient sources."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncAudience,
    AsyncLedger,
    Broadcast,
    BroadcastProgress,
    Message,
    Notifier,
    Outcome,
    PermanentSendError,
    Result,
    UncertainSendError,
    ValidationError,
    recipients_from_file,
    recipients_from_query,
)
from notifyonce.testing import BotAPIServer, FakeSender

NEWS = Message("A new tariff is out")


@pytest.fixture
async def ledger(async_engine: AsyncEngine, async_table: str) -> AsyncLedger:
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    return ledger


def per_chat(sender: FakeSender) -> Counter[str]:
    return Counter(r.recipient for r in sender.sent)


async def test_rerun_sends_only_to_chats_not_handled(ledger: AsyncLedger) -> None:
    """A second run of the same campaign sends only to the chats the first did not reach."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    first = await Broadcast(notifier, "news", "c1", NEWS, range(1, 51)).run()
    second = await Broadcast(notifier, "news", "c1", NEWS, range(1, 81)).run()
    assert 50 == first.progress.sent
    assert (30, 50) == (second.progress.sent, second.progress.duplicate)
    assert Counter({str(c): 1 for c in range(1, 81)}) == per_chat(sender)
    assert (80, 0) == (second.progress.total, second.progress.remaining)


async def test_another_campaign_sends_again(ledger: AsyncLedger) -> None:
    """A new campaign id is a new set of slots: every chat gets the new broadcast."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    await Broadcast(notifier, "news", "c1", NEWS, [1, 2]).run()
    report = await Broadcast(notifier, "news", "c2", NEWS, [1, 2]).run()
    assert 2 == report.progress.sent
    assert 4 == len(sender.sent)


async def test_outcomes_are_counted_and_unknown_listed(ledger: AsyncLedger) -> None:
    """Failed and uncertain sends are counted; the unknown chats are listed from the ledger."""
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    sender.fail_next(UncertainSendError("connection lost"), recipient="3")
    report = await Broadcast(Notifier(ledger, sender), "news", "c1", NEWS, [1, 2, 3, 4]).run()
    progress = report.progress
    assert (2, 1, 1) == (progress.sent, progress.failed, progress.unknown)
    assert ["3"] == report.unknown
    assert [] == report.held
    assert {Outcome.FAILED: 1, Outcome.UNKNOWN: 1} == {
        o: n for o, n in report.report.counts.items() if n and o is not Outcome.SENT
    }


async def test_progress_callback_and_watch_end_with_final_snapshot(ledger: AsyncLedger) -> None:
    """on_progress and watch() both see snapshots while running and a finished one last."""
    seen: list[BroadcastProgress] = []
    notifier = Notifier(ledger, FakeSender(latency=0.01), concurrency=4)
    broadcast = Broadcast(
        notifier, "news", "c1", NEWS, range(200), on_progress=seen.append, every=0.05
    )
    watched: list[BroadcastProgress] = []

    async def watch() -> None:
        async for snapshot in broadcast.watch():
            watched.append(snapshot)

    watcher = asyncio.ensure_future(watch())
    await asyncio.sleep(0)
    report = await broadcast.run()
    await asyncio.wait_for(watcher, 5)
    assert report.progress == seen[-1] == watched[-1]
    assert (True, 200, 0, 0.0) == (
        report.progress.finished,
        report.progress.sent,
        report.progress.remaining,
        report.progress.eta,
    )
    running = [s for s in seen if not s.finished]
    assert running, "no snapshot while running"
    assert all(s.total == 200 and s.remaining == 200 - s.done for s in running)
    assert any(s.rate > 0 and s.eta is not None for s in running)
    assert [s.done for s in seen] == sorted(s.done for s in seen)


async def test_cancel_then_resume_sends_each_chat_once(ledger: AsyncLedger) -> None:
    """cancel() stops the run cleanly; a new run of the campaign finishes it, once per chat."""
    sender = FakeSender(latency=0.005)
    handled: list[Result] = []

    def stop_at_100(result: Result) -> None:
        handled.append(result)
        if len(handled) == 100:
            first.cancel()

    stopping = Notifier(ledger, sender, concurrency=4, on_result=stop_at_100)
    first = Broadcast(stopping, "news", "c1", NEWS, range(400))
    cancelled = await first.run()
    assert cancelled.cancelled
    assert 0 < cancelled.progress.done < 400
    assert [] == cancelled.held  # claims not sent were freed, none left held
    notifier = Notifier(ledger, sender, concurrency=4)
    resumed = await Broadcast(notifier, "news", "c1", NEWS, range(400)).run()
    assert not resumed.cancelled
    counts = per_chat(sender)
    unknown = set(cancelled.unknown)
    # At most once: a send cut short by the cancellation is unknown, never repeated.
    assert len(unknown) <= 4
    assert {str(c) for c in range(400)} - unknown == set(counts)
    assert {1} == set(counts.values())
    assert unknown == set(resumed.unknown)


async def test_cancelling_the_task_settles_claims_and_raises(ledger: AsyncLedger) -> None:
    """Cancelling the task that runs a broadcast raises CancelledError after settling claims."""
    notifier = Notifier(ledger, FakeSender(latency=0.01), concurrency=4)
    broadcast = Broadcast(notifier, "news", "c1", NEWS, range(300))
    task = asyncio.ensure_future(broadcast.run())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stats = await ledger.stats()
    assert 0 == stats.live_claims


async def test_recipients_from_file_skips_comments_and_counts(
    ledger: AsyncLedger, tmp_path: Path
) -> None:
    """A file of chat ids (comments, blank lines, group and channel ids) is sent and counted."""
    path = tmp_path / "chats.txt"
    path.write_text("# users\n1\n\n2\n-100123\n@news_channel\n")
    sender = FakeSender()
    report = await Broadcast(
        Notifier(ledger, sender), "news", "c1", NEWS, recipients_from_file(path)
    ).run()
    assert 4 == report.progress.total
    assert ["1", "2", "-100123", "@news_channel"] == [r.recipient for r in sender.sent]


async def test_recipients_from_file_names_the_bad_line(ledger: AsyncLedger, tmp_path: Path) -> None:
    """A line that cannot be a chat id is refused with its line number; nothing of it sent."""
    path = tmp_path / "chats.txt"
    path.write_text("1\n" + "x" * 200 + "\n")
    sender = FakeSender()
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, sender), "news", "c1", NEWS, recipients_from_file(path)
        ).run()
    assert "recipients" == info.value.field
    assert "line 2" in info.value.problem


async def test_recipients_from_query_streams_the_first_column(
    ledger: AsyncLedger, async_engine: AsyncEngine, async_table: str
) -> None:
    """A select() over a users table is counted and streamed; only matching rows are sent."""
    users = sa.Table(
        f"{async_table}_users",
        sa.MetaData(),
        sa.Column("chat_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("active", sa.Boolean, nullable=False),
    )
    async with async_engine.begin() as conn:
        await conn.run_sync(users.create)
        await conn.execute(
            users.insert(), [{"chat_id": i, "active": i % 3 != 0} for i in range(1, 31)]
        )
    try:
        query = sa.select(users.c.chat_id).where(users.c.active).order_by(users.c.chat_id)
        sender = FakeSender()
        source = recipients_from_query(async_engine, query, chunk=7)
        report = await Broadcast(Notifier(ledger, sender), "news", "c1", NEWS, source).run()
        expected = [str(i) for i in range(1, 31) if i % 3 != 0]
        assert (20, 20) == (report.progress.total, report.progress.sent)
        assert expected == sorted((r.recipient for r in sender.sent), key=int)
    finally:
        async with async_engine.begin() as conn:
            await conn.run_sync(users.drop)


async def test_message_per_chat_and_async_source(ledger: AsyncLedger) -> None:
    """A message function builds each chat's text; an async iterable has no known total."""

    async def chats() -> object:
        for chat in (5, 6):
            yield chat

    sender = FakeSender()
    report = await Broadcast(
        Notifier(ledger, sender), "news", "c1", lambda chat: Message(f"hi {chat}"), chats()
    ).run()
    assert ["hi 5", "hi 6"] == sorted(sender.texts)
    assert (None, None) == (report.progress.total, report.progress.eta)


async def test_dry_run_sends_nothing(ledger: AsyncLedger) -> None:
    """A dry run counts what would be sent without sending or recording anything."""
    sender = FakeSender()
    report = await Broadcast(
        Notifier(ledger, sender, dry_run=True), "news", "c1", NEWS, [1, 2]
    ).run()
    assert (0, 2) == (len(sender.records), report.progress.skipped)
    assert 0 == sum((await ledger.stats()).counts.values())


def test_bad_arguments_are_refused_before_anything(ledger: AsyncLedger) -> None:
    """Bad campaign, recipients or interval, or the actions where campaigns keep their
    message and their progress message, raise ValidationError naming the field."""
    notifier = Notifier(ledger, FakeSender())
    for kwargs, fieldname in (
        ({"campaign": ""}, "cycle"),
        ({"campaign": 3}, "campaign"),
        ({"recipients": "12345"}, "recipients"),
        ({"every": 0}, "every"),
        ({"action": "notifyonce.campaign"}, "action"),
        ({"action": "notifyonce.progress"}, "action"),
    ):
        args = {"action": "news", "campaign": "c1", "recipients": [1], **kwargs}
        with pytest.raises(ValidationError) as info:
            Broadcast(
                notifier,
                args.pop("action"),
                args.pop("campaign"),
                NEWS,
                args.pop("recipients"),
                **args,
            )
        assert fieldname == info.value.field


def test_progress_arithmetic() -> None:
    """remaining and eta follow from the counts, the total and the rate."""
    progress = BroadcastProgress(sent=30, duplicate=10, total=100, rate=20.0)
    assert (40, 60, 3.0) == (progress.done, progress.remaining, progress.eta)
    assert BroadcastProgress(sent=1, total=10).eta is None
    assert BroadcastProgress(sent=1).remaining is None


async def test_every_snapshot_tells_the_skips_apart_as_the_report_does(
    ledger: AsyncLedger,
) -> None:
    """Chats gone or opted out are counted per reason in every progress snapshot, and the
    last snapshot's counts are the report's: the two never disagree."""
    audience = AsyncAudience.beside(ledger)
    await audience.mark_gone_many(range(1, 31), "blocked")
    await audience.mark_gone_many([31, 32], "chat_not_found")
    await audience.opt_out(33, "news", how="button")
    snapshots: list[BroadcastProgress] = []
    report = await Broadcast(
        Notifier(ledger, FakeSender(), batch_size=10),
        "news",
        "c1",
        NEWS,
        range(1, 101),
        on_progress=snapshots.append,
        every=0.001,
    ).run()
    expected = {"gone: blocked": 30, "gone: chat_not_found": 2, "opted out of news": 1}
    assert expected == report.report.skips
    assert expected == report.progress.skips
    assert (33, 67) == (report.progress.skipped, report.progress.sent)
    assert all(sum(s.skips.values()) == s.skipped for s in snapshots)


async def test_the_first_snapshot_already_has_a_rate(ledger: AsyncLedger) -> None:
    """A run shorter than one progress period still reports a rate and an ETA of 0, not
    0/s and no ETA: the start counts as the first sample."""
    report = await Broadcast(
        Notifier(ledger, FakeSender()), "news", "c1", NEWS, range(1, 21), every=3600
    ).run()
    assert 20 == report.progress.done
    assert report.progress.rate > 0
    assert 0.0 == report.progress.eta


async def test_a_resumed_campaign_refuses_another_text(ledger: AsyncLedger) -> None:
    """The campaign remembers its message: a resumed run with another text sends nothing
    and says why; allowed, the chats not handled yet get the new text."""
    sender = FakeSender()
    notifier = Notifier(ledger, sender)
    await Broadcast(notifier, "news", "c1", NEWS, [1, 2]).run()
    changed = Message("A new tariff is out, and cheaper")
    with pytest.raises(ValidationError) as info:
        await Broadcast(notifier, "news", "c1", changed, [1, 2, 3]).run()
    assert "message" == info.value.field
    assert "differs from the message campaign news/c1 started with" in info.value.problem
    assert changed.text not in str(info.value)
    assert ["A new tariff is out"] * 2 == sender.texts
    allowed = await Broadcast(
        notifier, "news", "c1", changed, [1, 2, 3, 4], allow_changed_message=True
    ).run()
    assert (2, 2) == (allowed.progress.sent, allowed.progress.duplicate)
    again = await Broadcast(notifier, "news", "c1", changed, [1, 2, 3, 4, 5]).run()
    assert 1 == again.progress.sent  # the new message is the one remembered now
    assert 1 == sum(r.recipient == "5" for r in sender.sent)


async def test_a_resumed_campaign_refuses_other_media_or_formatting(ledger: AsyncLedger) -> None:
    """Other file bytes or another parse mode is another message; the same ones resume."""
    from notifyonce import Photo

    notifier = Notifier(ledger, FakeSender())
    photo = Message("", media=Photo(b"first image", filename="a.png"))
    await Broadcast(notifier, "news", "c1", photo, [1]).run()
    same = Message("", media=Photo(b"first image", filename="b.png"))
    assert 1 == (await Broadcast(notifier, "news", "c1", same, [1, 2]).run()).progress.sent
    for other in (
        Message("", media=Photo(b"other image", filename="a.png")),
        Message("", parse_mode="HTML", media=Photo(b"first image", filename="a.png")),
    ):
        with pytest.raises(ValidationError, match="differs from the message"):
            await Broadcast(notifier, "news", "c1", other, [1, 2, 3]).run()


async def test_a_dry_run_compares_the_message_but_records_nothing(ledger: AsyncLedger) -> None:
    """A dry run of a new campaign records no message; of a started one, it compares."""
    dry = Notifier(ledger, FakeSender(), dry_run=True)
    await Broadcast(dry, "news", "c1", NEWS, [1]).run()
    assert 0 == sum((await ledger.stats()).counts.values())
    await Broadcast(Notifier(ledger, FakeSender()), "news", "c1", NEWS, [1]).run()
    with pytest.raises(ValidationError, match="differs from the message"):
        await Broadcast(dry, "news", "c1", Message("other"), [1, 2]).run()


async def test_a_broadcast_keeps_its_number_of_recipients_for_the_console(
    ledger: AsyncLedger,
) -> None:
    """The campaign's row holds the total the run knew (a list's length), for the ETA of
    the operator console; a dry run records none."""
    from notifyonce._campaign import CAMPAIGN_ACTION

    notifier = Notifier(ledger, FakeSender())
    await Broadcast(notifier, "news", "c1", NEWS, list(range(1, 8))).run()
    await Broadcast(Notifier(ledger, FakeSender(), dry_run=True), "news", "c2", NEWS, [1]).run()
    t = ledger.table
    async with ledger.engine.connect() as conn:
        rows = (
            await conn.execute(sa.select(t.c.cycle, t.c.token).where(t.c.action == CAMPAIGN_ACTION))
        ).all()
    assert [("c1", 7)] == [(r.cycle, r.token) for r in rows]


async def test_a_message_telegram_cannot_parse_is_refused_once_not_on_every_line(
    ledger: AsyncLedger, tmp_path: Path, bot_api_server: BotAPIServer
) -> None:
    """Checking a recipients file with a TelegramSender, a text whose HTML Telegram cannot
    parse is the message's problem: raised once, naming the text, not 50 bad lines."""
    from notifyonce.telegram import TelegramSender

    path = tmp_path / "chats.txt"
    path.write_text("".join(f"{i}\n" for i in range(1, 51)))
    message = Message("1 < 2", parse_mode="HTML")
    async with TelegramSender("123:abc", base_url=bot_api_server.url, rate_limit=None) as sender:
        with pytest.raises(ValidationError) as info:
            await Broadcast(
                Notifier(ledger, sender), "news", "c1", message, recipients_from_file(path)
            ).run()
    assert "text" == info.value.field
    assert "line 1, column 3" in info.value.problem
    assert [] == bot_api_server.requests
