"""Refusals about the message, not its recipient, burn no slot.

Telegram refuses a text whose entities it cannot parse for every chat alike; a media file
gone from the disk fails every send that needs it. Neither is the recipient's fault: the
run gives such a slot back (``RETRY``, its attempt too) while none of its sends was
delivered, and stops after three, with ``Report.stopped`` saying why. Against the local Bot
API server, on each database.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

import pytest

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    Observer,
    Outcome,
    Photo,
    ValidationError,
)
from notifyonce._dispatch import MESSAGE_REFUSALS_TO_STOP
from notifyonce._observe import SendEvent
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, Reply

TOKEN = "424242:REFUSE-secret"
CYCLE = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=100.0)
RUN_TIMEOUT = 60.0
# A text our check passes and the scripted server refuses as Telegram refuses bad entities
# (as it does, say, for a custom emoji the bot may not use).
TEXT = "Your tariff Qx7Zv ends <b>tomorrow</b>"
FIXED = "Your tariff Qx7Zv ends <b>tomorrow</b>!"
CANT_PARSE = "Bad Request: can't parse entities: Invalid custom emoji identifier specified"
IMAGE = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8


def cant_parse() -> Reply:
    return Reply.error(400, CANT_PARSE)


def batch(chats: range | list[int], message: Message) -> list[Notification]:
    return [Notification(chat, CYCLE, message) for chat in chats]


async def statuses(ledger: AsyncLedger) -> dict[str, int]:
    """Rows per status, as the ledger's own stats count them."""
    counts = (await ledger.stats()).counts
    return {status.value: count for (_, status), count in counts.items() if count}


def sender_for(server: BotAPIServer) -> TelegramSender:
    return TelegramSender(TOKEN, base_url=server.url, rate_limit=FAST)


# -- a text Telegram refuses for every chat ---------------------------------------------


async def test_a_text_refused_for_every_chat_stops_the_run_and_burns_no_slot(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """40 chats, each answered 400 can't parse entities: the run stops after the third
    refusal with no delivery. No slot is FAILED: the ones tried are released with their
    attempt given back, the rest come back untried, and Report.stopped says why without
    the text. The fixed text then goes to all 40, once each."""
    chats = range(1000, 1040)
    for chat in chats:
        bot_api_server.script(str(chat), [cant_parse()])
    message = Message(TEXT, parse_mode="HTML")
    async with sender_for(bot_api_server) as sender:
        report = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=4).send_many("news", batch(chats, message)),
            RUN_TIMEOUT,
        )
    assert 0 == report.counts[Outcome.FAILED]
    assert 40 == report.counts[Outcome.RETRY] == report.total
    assert report.stopped is not None
    assert "refused for their message" in report.stopped
    assert "can't parse entities" in report.stopped
    assert "Qx7Zv" not in report.stopped
    tried = len(bot_api_server.requests)
    assert MESSAGE_REFUSALS_TO_STOP <= tried < MESSAGE_REFUSALS_TO_STOP + 4
    assert {"released": tried} == await statuses(ledger)
    assert [] == bot_api_server.deliveries

    bot_api_server.reset()  # the scripted refusals of the chats never tried go too
    async with sender_for(bot_api_server) as sender:
        again = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=4).send_many(
                "news", batch(chats, Message(FIXED, parse_mode="HTML"))
            ),
            RUN_TIMEOUT,
        )
    assert 40 == again.counts[Outcome.SENT]
    assert again.stopped is None
    assert {1} == {r.attempt for r in again.results}, "the refused attempts were given back"
    delivered = sorted(int(d.chat_id) for d in bot_api_server.deliveries)
    assert list(chats) == delivered
    assert {"sent": 40} == await statuses(ledger)


async def test_a_refusal_of_the_message_after_a_delivery_stays_failed(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Once a send of the run was delivered the message is known to be good: a later
    can't-parse-entities is about that recipient's copy, FAILED as any refusal."""
    bot_api_server.script("2", [cant_parse()])
    message = Message(TEXT, parse_mode="HTML")
    async with sender_for(bot_api_server) as sender:
        report = await Notifier(ledger, sender, concurrency=1).send_many(
            "news", batch([1, 2, 3], message)
        )
    assert (2, 1) == (report.counts[Outcome.SENT], report.counts[Outcome.FAILED])
    assert report.stopped is None
    assert {"sent": 2, "failed": 1} == await statuses(ledger)


async def test_fewer_refusals_than_the_stop_with_no_delivery_are_given_back(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A run of two chats, both refused for the message: both released, nothing FAILED;
    nothing was left to stop."""
    for chat in ("1", "2"):
        bot_api_server.script(chat, [cant_parse()])
    async with sender_for(bot_api_server) as sender:
        report = await Notifier(ledger, sender).send_many(
            "news", batch([1, 2], Message(TEXT, parse_mode="HTML"))
        )
    assert 2 == report.counts[Outcome.RETRY]
    assert report.stopped is None
    assert {"released": 2} == await statuses(ledger)


async def test_a_refusal_about_the_recipient_is_still_failed(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Chat not found and bot blocked are the chat's: FAILED at once, the run goes on."""
    bot_api_server.script("1", [Reply.chat_not_found()])
    bot_api_server.script("2", [Reply.blocked()])
    bot_api_server.script("3", [Reply.chat_not_found()])
    async with sender_for(bot_api_server) as sender:
        report = await Notifier(ledger, sender, concurrency=1).send_many(
            "news", batch([1, 2, 3, 4], Message(TEXT, parse_mode="HTML"))
        )
    assert (3, 1) == (report.counts[Outcome.FAILED], report.counts[Outcome.SENT])
    assert report.stopped is None


# -- a media file gone at send time ------------------------------------------------------


class _AfterFirstSend(Observer):
    """Deletes a file when the first send of the run has returned (before the next starts,
    with one worker)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send_finished(self, handle: object, send: SendEvent) -> None:
        self.path.unlink(missing_ok=True)


class _AtRunStart(Observer):
    """Deletes a file once the run's notifications were checked, before any send."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def run_started(self, action: str) -> object:
        self.path.unlink()
        return None


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "tariff-Qx7Zv.jpg"
    path.write_bytes(IMAGE)
    return path


async def test_a_photo_deleted_after_its_upload_is_sent_by_its_file_id(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, photo: Path
) -> None:
    """Three chats; the photo file is deleted once the first send uploaded it: the other
    two go by its file_id, without the file. (It used to fail them for good.)"""
    message = Message("The new tariff", media=Photo(photo))
    async with sender_for(bot_api_server) as sender:
        report = await Notifier(
            ledger, sender, concurrency=1, observer=_AfterFirstSend(photo)
        ).send_many("news", batch([1, 2, 3], message))
    assert not await asyncio.to_thread(photo.exists)
    assert 3 == report.counts[Outcome.SENT], report.results
    uploads = bot_api_server.uploads
    assert 1 == len(uploads)
    by_id = [d for d in bot_api_server.deliveries if d.params.get("photo") == uploads[0].file_id]
    assert ["2", "3"] == [d.chat_id for d in by_id]
    assert {"sent": 3} == await statuses(ledger)


async def test_a_photo_gone_before_its_first_upload_stops_the_run_naming_the_file(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, photo: Path
) -> None:
    """The photo is deleted after the run checked it and before any send: no file_id is
    known, so no send can go. No slot is FAILED: the sends tried give their slots back, the
    run stops with the file's path (not the caption) in Report.stopped, and nothing
    reached the Bot API. With the file back, the same run sends all ten once."""
    message = Message("Qx7Zv: the new tariff", media=Photo(photo))
    chats = range(1, 11)
    async with sender_for(bot_api_server) as sender:
        report = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=2, observer=_AtRunStart(photo)).send_many(
                "news", batch(chats, message)
            ),
            RUN_TIMEOUT,
        )
    assert 0 == report.counts[Outcome.FAILED]
    assert 10 == report.counts[Outcome.RETRY]
    assert report.stopped is not None
    assert str(photo) in report.stopped
    assert "FileNotFoundError" in report.stopped
    assert "the new tariff" not in report.stopped
    assert [] == bot_api_server.requests
    assert "failed" not in await statuses(ledger)

    await asyncio.to_thread(photo.write_bytes, IMAGE)
    async with sender_for(bot_api_server) as sender:
        again = await asyncio.wait_for(
            Notifier(ledger, sender, concurrency=2).send_many("news", batch(chats, message)),
            RUN_TIMEOUT,
        )
    assert 10 == again.counts[Outcome.SENT]
    assert 1 == len(bot_api_server.uploads)
    assert sorted(str(c) for c in chats) == sorted(d.chat_id for d in bot_api_server.deliveries)


async def test_the_check_of_a_photo_whose_file_id_is_known_needs_no_file(
    bot_api_server: BotAPIServer, photo: Path
) -> None:
    """A sender that sent the photo already checks (and sends) it without the file, as a
    streamed run checks each batch before its sends; a sender that never did refuses it
    before anything is claimed."""
    message = Message("The new tariff", media=Photo(photo))
    async with sender_for(bot_api_server) as sender:
        await sender.send("1", message)
        await asyncio.to_thread(photo.unlink)
        sender.check("2", message)
        receipt = await sender.send("2", message)
    assert bot_api_server.uploads[0].file_id == receipt.file_id
    with pytest.raises(ValidationError) as caught:
        sender_for(bot_api_server).check("3", message)
    assert "photo" == caught.value.field
