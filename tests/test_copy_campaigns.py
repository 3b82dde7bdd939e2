"""Copy campaigns: a post already in Telegram copied to every chat once, with copyMessage.

The local Bot API server holds the messages it delivered or was told of, copies them as
Telegram does and refuses a message it does not hold ("message to copy not found"); a
refusal of the message itself stops the run and burns no chat's slot.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from notifyonce import (
    AsyncLedger,
    Broadcast,
    Copy,
    Message,
    MessageRefusedError,
    Notification,
    Notifier,
    Outcome,
    PermanentSendError,
    ValidationError,
)
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender

TOKEN = "424242:COPY-secret"
ADMIN = 777
CYCLE = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
RUN_TIMEOUT = 60.0


async def statuses(ledger: AsyncLedger) -> dict[str, int]:
    table = ledger.table
    async with ledger.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(table.c.status, sa.func.count())
            .where(table.c.action != "notifyonce.campaign")
            .group_by(table.c.status)
        )
        return {status: count for status, count in rows.all()}  # noqa: C416 (Rows, not pairs)


@pytest.mark.parametrize(
    ("from_chat_id", "message_id", "field"),
    [
        (0, 5, "from_chat_id"),
        ("0", 5, "from_chat_id"),
        ("not a chat", 5, "from_chat_id"),
        (True, 5, "from_chat_id"),
        (ADMIN, 0, "message_id"),
        (ADMIN, -3, "message_id"),
        (ADMIN, "5", "message_id"),
    ],
)
def test_a_malformed_copy_is_refused_naming_its_field(
    from_chat_id: object, message_id: object, field: str
) -> None:
    """A copy from chat 0, a message id below 1 or of the wrong type is refused when the
    message is built, naming the field."""
    with pytest.raises(ValidationError) as caught:
        Message.copy(from_chat_id, message_id)  # type: ignore[arg-type]
    assert field == caught.value.field


def test_a_copy_keeps_its_own_caption_unless_given_one() -> None:
    """Message.copy without a caption has empty text (the post's own caption is kept) and
    carries its buttons as an inline keyboard."""
    buttons = [[{"text": "Open", "url": "https://example.com"}]]
    message = Message.copy(ADMIN, 5, buttons=buttons)
    assert ("", Copy(ADMIN, 5)) == (message.text, message.media)
    assert {"inline_keyboard": buttons} == message.reply_markup
    assert "New price" == Message.copy("@news", 5, caption="New price").text


async def test_a_copy_goes_out_with_copy_message_and_the_receipt_keeps_the_new_id(
    bot_api_server: BotAPIServer,
) -> None:
    """copyMessage carries from_chat_id, message_id, the caption override and the
    keyboard; the receipt's message_id is the copy's, not the post's."""
    post = bot_api_server.post(ADMIN, "The new tariff")
    buttons = [[{"text": "Pay", "callback_data": "pay"}, {"text": "Site", "url": "https://e.x"}]]
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        kept = await sender.send("100", Message.copy(ADMIN, post))
        captioned = await sender.send(
            "101",
            Message.copy(ADMIN, post, caption="<b>-20%</b>", parse_mode="HTML", buttons=buttons),
        )
    first, second = bot_api_server.deliveries
    assert ("copyMessage", "The new tariff") == (first.method, first.text)
    assert {"chat_id": 100, "from_chat_id": ADMIN, "message_id": post} == first.params
    assert kept.message_id == first.message_id != post
    assert "<b>-20%</b>" == second.text
    assert "HTML" == second.params["parse_mode"]
    assert {"inline_keyboard": buttons} == second.params["reply_markup"]
    assert captioned.message_id == second.message_id


async def test_a_deleted_post_is_a_refusal_of_the_message(bot_api_server: BotAPIServer) -> None:
    """Copying a message the chat no longer holds is a MessageRefusedError (also a
    PermanentSendError, as before for any 400) that names the message, CHAT:MESSAGE_ID."""
    post = bot_api_server.post(ADMIN, "gone soon")
    bot_api_server.delete_message(ADMIN, post)
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        with pytest.raises(MessageRefusedError) as caught:
            await sender.send("100", Message.copy(ADMIN, post))
    assert isinstance(caught.value, PermanentSendError)
    assert "message to copy not found" in str(caught.value)
    assert f"{ADMIN}:{post}" in caught.value.description
    assert [] == bot_api_server.deliveries


async def test_a_copy_campaign_sends_each_chat_the_post_once_across_runs(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A copy campaign to 300 chats, run twice: every chat gets one copy."""
    post = bot_api_server.post(ADMIN, "Sale starts now")
    chats = list(range(1000, 1300))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender, concurrency=16)
        for _ in range(2):
            broadcast = Broadcast(notifier, "news", "sale", Message.copy(ADMIN, post), chats)
            await asyncio.wait_for(broadcast.run(), RUN_TIMEOUT)
    copies = [d.chat_id for d in bot_api_server.deliveries if d.method == "copyMessage"]
    assert sorted(str(c) for c in chats) == sorted(copies)
    assert {"sent": 300} == await statuses(ledger)


async def test_a_deleted_post_stops_the_campaign_and_fails_no_chat(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """The post is deleted before a campaign to 500 chats: the first refusal stops the
    run, no chat is FAILED, every slot is free (released or never claimed), and the
    report says why; once a post exists again, the next run sends to all 500."""
    post = bot_api_server.post(ADMIN, "Oops")
    bot_api_server.delete_message(ADMIN, post)
    chats = list(range(2000, 2500))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST) as sender:
        notifier = Notifier(ledger, sender, concurrency=8)
        report = await asyncio.wait_for(
            notifier.send_many(
                "news", [Notification(c, "oops", Message.copy(ADMIN, post)) for c in chats]
            ),
            RUN_TIMEOUT,
        )
        assert report.stopped is not None
        assert "message to copy not found" in report.stopped
        assert 0 == report.counts[Outcome.FAILED]
        assert 500 == report.counts[Outcome.RETRY]
        # At most the sends under way when the first refusal came back were tried.
        assert len(bot_api_server.requests) <= 8
        assert set(await statuses(ledger)) <= {"released"}

        again = bot_api_server.post(ADMIN, "Fixed")
        fixed = await asyncio.wait_for(
            notifier.send_many(
                "news", [Notification(c, "oops", Message.copy(ADMIN, again)) for c in chats]
            ),
            RUN_TIMEOUT,
        )
    assert 500 == fixed.counts[Outcome.SENT]
    assert {"sent": 500} == await statuses(ledger)


async def test_a_campaign_refuses_another_post_on_resume(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A campaign started with one post refuses to resume with another (its fingerprint
    names the source chat and message), before anything is sent."""
    notifier = Notifier(ledger, FakeSender())
    await Broadcast(notifier, "news", "c1", Message.copy(ADMIN, 5), [1, 2]).run()
    with pytest.raises(ValidationError) as caught:
        await Broadcast(notifier, "news", "c1", Message.copy(ADMIN, 6), [3]).run()
    assert "message" == caught.value.field


def test_text_only_and_wrapped_senders_refuse_a_copy() -> None:
    """A sender that cannot copy refuses a Message.copy in its check (nothing claimed)."""
    from notifyonce.webhook import WebhookSender

    webhook = WebhookSender("https://example.com/hook")
    with pytest.raises(ValidationError) as caught:
        webhook.check("1", Message.copy(ADMIN, 5))
    assert "media" == caught.value.field
