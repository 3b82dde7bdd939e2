"""A broadcast's progress in the admin's chat: one message, edited in place at most once
every few seconds, ending with the summary; "message is not modified" is no error."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import pytest

from notifyonce import (
    AsyncLedger,
    Broadcast,
    BroadcastProgress,
    BroadcastReport,
    Message,
    Notifier,
    ProgressMessage,
)
from notifyonce._progress_chat import render_progress
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender, Reply

TOKEN = "424242:PROGRESS-secret"
ADMIN = 777
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
RUN_TIMEOUT = 60.0


class StepClock:
    """A monotonic clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def _campaign_run(
    ledger: AsyncLedger,
    server: BotAPIServer,
    chats: list[int],
    on_progress: Callable[[BroadcastProgress], None] | None = None,
) -> tuple[ProgressMessage, BroadcastReport]:
    """One run of campaign news/c1 to ``chats`` with its progress in the admin chat
    (snapshots every 10 ms; the progress clock moves a second a read)."""
    async with TelegramSender(TOKEN, base_url=server.url, rate_limit=FAST) as sender:
        shown = ProgressMessage(sender, ADMIN, every=3.0, clock=StepClock())
        run = Broadcast(
            Notifier(ledger, sender, concurrency=8),
            "news",
            "c1",
            Message("hi"),
            chats,
            every=0.01,
            progress_chat=shown,
            on_progress=on_progress,
        )
        report = await asyncio.wait_for(run.run(), RUN_TIMEOUT)
    return shown, report


async def test_the_admin_chat_gets_one_message_edited_in_place_ending_with_the_summary(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A 300-chat campaign with progress snapshots every 10 ms: the admin chat gets one
    sendMessage, its edits are at most one per 3 s of the progress clock (a clock that
    moves a second a read), and the message ends as the summary."""
    snapshots: list[BroadcastProgress] = []
    shown, report = await _campaign_run(
        ledger, bot_api_server, list(range(1000, 1300)), snapshots.append
    )
    to_admin = [r for r in bot_api_server.requests if r.chat_id == str(ADMIN)]
    assert "sendMessage" == to_admin[0].method
    assert {"editMessageText"} == {r.method for r in to_admin[1:]}
    assert shown.message_id is not None
    text = bot_api_server.message_text(ADMIN, shown.message_id)
    assert text is not None
    assert text.startswith("Broadcast news/c1: finished, 300 of 300 handled")
    assert "sent 300 · failed 0 · unknown 0" in text
    assert 300 == report.progress.sent
    # Every edit waited for 3 reads of the progress clock after the one before it (one
    # read per snapshot looked at): far fewer edits than snapshots, and never more.
    assert 1 <= shown.edits <= len(snapshots) // 3 + 1
    # An edit to the text the message already had ("not modified") is not counted.
    assert shown.edits == sum(1 for r in to_admin[1:] if r.reply.delivers)


async def test_an_unchanged_text_is_not_an_error(bot_api_server: BotAPIServer) -> None:
    """Editing a message to the text it has is answered "message is not modified": the
    sender returns False instead of raising; a missing message is an error."""
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        receipt = await sender.send(str(ADMIN), Message("50%"))
        assert isinstance(receipt.message_id, int)
        assert await sender.edit_text(ADMIN, receipt.message_id, "60%")
        assert not await sender.edit_text(ADMIN, receipt.message_id, "60%")
        with pytest.raises(Exception, match="message to edit not found"):
            await sender.edit_text(ADMIN, 999_999, "70%")
    assert "60%" == bot_api_server.message_text(ADMIN, receipt.message_id)


def test_a_sender_that_cannot_edit_is_refused() -> None:
    """ProgressMessage needs a sender with edit_text."""
    with pytest.raises(ValueError, match="sender"):
        ProgressMessage(FakeSender(), ADMIN)  # type: ignore[arg-type]


async def test_a_resumed_campaign_edits_the_message_of_its_first_run(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A campaign run twice (the second run resumes it, with more chats) shows one message
    in the admin chat: the second run finds it in the ledger and edits it, ending with its
    own summary. Deleted in the chat, it is posted anew and the next run edits that one."""
    first, _ = await _campaign_run(ledger, bot_api_server, list(range(1000, 1100)))
    second, _ = await _campaign_run(ledger, bot_api_server, list(range(1000, 1200)))

    to_admin = [r for r in bot_api_server.requests if r.chat_id == str(ADMIN)]
    assert ["sendMessage"] == [r.method for r in to_admin if r.method != "editMessageText"]
    assert (1, 0) == (first.posts, second.posts)
    assert first.message_id is not None
    assert first.message_id == second.message_id
    assert second.edits >= 1
    text = bot_api_server.message_text(ADMIN, first.message_id)
    assert text is not None
    assert text.startswith("Broadcast news/c1: finished, 200 of 200 handled")
    assert "sent 100 · failed 0 · unknown 0 · already done 100" in text

    bot_api_server.delete_message(ADMIN, first.message_id)
    third, _ = await _campaign_run(ledger, bot_api_server, list(range(1000, 1250)))
    fourth, _ = await _campaign_run(ledger, bot_api_server, list(range(1000, 1300)))
    assert (1, 0) == (third.posts, fourth.posts)
    assert third.message_id not in (None, first.message_id)
    assert third.message_id == fourth.message_id
    assert third.message_id is not None
    text = bot_api_server.message_text(ADMIN, third.message_id)
    assert text is not None
    assert text.startswith("Broadcast news/c1: finished, 300 of 300 handled")
    posts = [r for r in bot_api_server.requests if r.chat_id == str(ADMIN)]
    assert 2 == sum(1 for r in posts if r.method == "sendMessage")


async def test_a_resumed_campaign_shown_in_another_chat_posts_there(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Message ids count per chat: a run showing its progress in another chat than the
    first run's posts a message there, and never edits that chat's message of the same id."""
    first, _ = await _campaign_run(ledger, bot_api_server, [1000, 1001])
    assert first.message_id is not None
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        other = ProgressMessage(sender, ADMIN + 1, every=3.0, clock=StepClock())
        run = Broadcast(
            Notifier(ledger, sender), "news", "c1", Message("hi"), [1002], progress_chat=other
        )
        await asyncio.wait_for(run.run(), RUN_TIMEOUT)
    assert 1 == other.posts
    there = [r.method for r in bot_api_server.requests if r.chat_id == str(ADMIN + 1)]
    assert "sendMessage" == there[0], "no edit of another chat's message tried first"


@pytest.mark.parametrize("lost", [3, 12])
async def test_the_summary_lists_the_unknown_chats_or_sends_them_as_a_file(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, lost: int
) -> None:
    """Chats whose answer was lost end unknown: the admin's summary names them when they
    are few (at most 10), and a file of them follows it when they are more."""
    chats = list(range(1, 41))
    for chat in chats[:lost]:
        bot_api_server.script(str(chat), [Reply.drop_after_delivery()])
    shown, report = await _campaign_run(ledger, bot_api_server, chats)
    assert lost == len(report.unknown)
    final = bot_api_server.message_text(ADMIN, shown.message_id or 0)
    assert final is not None
    files = [u for u in bot_api_server.uploads if u.chat_id == str(ADMIN)]
    if lost <= 10:
        assert final.endswith(
            f"{lost} chats of the campaign with an unknown outcome, all from this run: "
            + ", ".join(report.unknown)
        )
        assert [] == files
    else:
        assert final.endswith(
            f"{lost} chats of the campaign with an unknown outcome, all from this run: in the "
            "file below"
        )
        listing = ("\n".join(report.unknown) + "\n").encode()
        (upload,) = files
        assert ("sendDocument", hashlib.sha256(listing).hexdigest()) == (
            upload.method,
            upload.sha256,
        )


def test_the_admin_chat_says_which_chats_were_skipped_and_why() -> None:
    """The progress message counts the skipped chats with their reasons, as the command
    line's summary does."""
    skips = {"gone: blocked": 5, "opted out of news": 1}
    progress = BroadcastProgress(sent=44, skipped=6, skips=skips, total=50, finished=True)
    text = render_progress("news/c1", progress)
    assert "skipped 6 (gone: blocked 5, opted out of news 1)" in text.splitlines()
    assert "skipped" not in render_progress("news/c1", BroadcastProgress(sent=3))
