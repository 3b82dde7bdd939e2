"""Albums: 2-10 photos and videos as one notification, sent with sendMediaGroup, each file
uploaded once and sent by its file_id after that, across a campaign and across runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    Album,
    AsyncLedger,
    Broadcast,
    Document,
    Message,
    Notifier,
    Photo,
    ValidationError,
    Video,
)
from notifyonce.telegram import RateLimit, SQLFileIdStore, TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "424242:ALBUM-secret"
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
RUN_TIMEOUT = 60.0


def photos(count: int) -> list[Photo]:
    return [Photo(bytes([n]) * 1000, filename=f"p{n}.jpg") for n in range(count)]


@pytest.mark.parametrize("count", [0, 1, 11])
def test_an_album_of_fewer_than_2_or_more_than_10_is_refused(count: int) -> None:
    """An album of 0, 1 or 11 items is refused naming the field ``album``."""
    with pytest.raises(ValidationError) as caught:
        Album(photos(count))
    assert "album" == caught.value.field
    assert f"has {count} item" in caught.value.problem


def test_an_album_takes_photos_and_videos_only_and_no_buttons() -> None:
    """A document in an album, or buttons under one, is refused before any send."""
    with pytest.raises(ValidationError) as caught:
        Album([*photos(1), Document(b"%PDF", filename="a.pdf")])
    assert ("album", "item 2 is a Document, not a Photo or a Video") == (
        caught.value.field,
        caught.value.problem,
    )
    sender = TelegramSender(TOKEN, rate_limit=None)
    keyboard = {"inline_keyboard": [[{"text": "A", "url": "https://e.x"}]]}
    with pytest.raises(ValidationError) as refused:
        sender.check("1", Message("", media=Album(photos(2)), reply_markup=keyboard))
    assert "reply_markup" == refused.value.field


async def test_an_album_goes_out_in_one_request_with_the_caption_on_the_first(
    bot_api_server: BotAPIServer,
) -> None:
    """Two photos and a video: one sendMediaGroup request, three messages, the caption on
    the first; the receipt has the first message's id and the three file ids."""
    album = Album([*photos(2), Video(b"\x00\x00\x00\x18ftypmp42" * 50, filename="v.mp4")])
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        receipt = await sender.send("1", Message("<b>Menu</b>", parse_mode="HTML", media=album))
    assert ["sendMediaGroup"] == [r.method for r in bot_api_server.requests]
    first, second, third = bot_api_server.deliveries
    assert ("<b>Menu</b>", "", "") == (first.text, second.text, third.text)
    assert receipt.message_id == first.message_id
    assert [first.file_id, second.file_id, third.file_id] == str(receipt.file_id).split(",")
    assert 3 == len(bot_api_server.uploads)


async def test_an_album_campaign_uploads_each_file_once_over_two_runs(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, tmp_path: Path
) -> None:
    """An album of 3 photos to 60 chats, run twice with new senders and a SQL file id
    store: each chat gets the album once, and each file is uploaded once in all."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'files.sqlite3'}")
    store = SQLFileIdStore(engine)
    await store.create_schema()
    album = Message("Our menu", media=Album(photos(3)))
    chats = list(range(100, 160))
    try:
        for _ in range(2):
            async with TelegramSender(
                TOKEN, base_url=bot_api_server.url, rate_limit=FAST, file_store=store
            ) as sender:
                run = Broadcast(Notifier(ledger, sender, concurrency=8), "menu", "c", album, chats)
                await asyncio.wait_for(run.run(), RUN_TIMEOUT)
    finally:
        await engine.dispose()
    assert Counter({str(c): 1 for c in chats}) == Counter(
        r.chat_id for r in bot_api_server.requests if r.method == "sendMediaGroup"
    )
    assert 180 == len(bot_api_server.deliveries)
    assert [1, 1, 1] == sorted(Counter(u.sha256 for u in bot_api_server.uploads).values())


async def test_the_server_refuses_a_group_of_one(bot_api_server: BotAPIServer) -> None:
    """The local Bot API server answers a media group of one with a 400, as Telegram
    does (a sender that skipped the check would be refused for every chat)."""
    import httpx

    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{bot_api_server.url}/bot{TOKEN}/sendMediaGroup",
            json={"chat_id": 1, "media": [{"type": "photo", "media": "https://e.x/a.png"}]},
        )
    assert 400 == answer.status_code
    assert "wrong number of media" in answer.json()["description"]
