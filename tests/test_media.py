"""Media messages: validation up front, the payloads, upload once, and the server's forms."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    Document,
    Message,
    PermanentSendError,
    Photo,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
    Video,
)
from notifyonce._cli import main
from notifyonce._senders.telegram.payload import multipart
from notifyonce._senders.telegram.sender import prepare
from notifyonce.telegram import MemoryFileIdStore, SQLFileIdStore, TelegramSender
from notifyonce.testing import BotAPIServer, Reply
from notifyonce.testing._server import parse_form
from notifyonce.webhook import WebhookSender

from ._bot_api import TOKEN, sender_for

IMAGE = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "tariff.jpg"
    path.write_bytes(IMAGE)
    return path


# -- validation -------------------------------------------------------------------------


def test_a_missing_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    """A path that does not exist is a ValidationError naming photo/document/video."""
    for kind, name in ((Photo, "photo"), (Document, "document"), (Video, "video")):
        with pytest.raises(ValidationError) as caught:
            kind(tmp_path / "missing.jpg")
        assert name == caught.value.field
        assert "FileNotFoundError" in caught.value.problem


def test_a_directory_or_an_empty_file_is_refused(tmp_path: Path) -> None:
    """Only a non-empty regular file can be uploaded."""
    with pytest.raises(ValidationError, match="not a regular file"):
        Photo(tmp_path)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(ValidationError, match="0 bytes"):
        Document(empty)
    with pytest.raises(ValidationError, match="0 bytes"):
        Video(b"")


def test_uploads_over_the_bot_api_limits_are_refused(tmp_path: Path) -> None:
    """Photos up to 10 MB, documents and videos up to 50 MB; one byte more is refused."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as file:
        file.truncate(10 * 2**20)
    Photo(big)
    with open(big, "wb") as file:
        file.truncate(10 * 2**20 + 1)
    with pytest.raises(ValidationError, match="up to 10 MB") as caught:
        Photo(big)
    assert "photo" == caught.value.field
    Document(big)
    with open(big, "wb") as file:
        file.truncate(50 * 2**20 + 1)
    for kind in (Document, Video):
        with pytest.raises(ValidationError, match="up to 50 MB"):
            kind(big)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_an_unreadable_file_is_refused(image: Path) -> None:
    """A file the process cannot read is refused when the media is built."""
    image.chmod(0)
    try:
        with pytest.raises(ValidationError, match="not readable"):
            Photo(image)
    finally:
        image.chmod(0o600)


def test_a_str_is_a_file_id_or_a_url_never_a_path() -> None:
    """A str that looks like a file name is refused: pass a Path to upload a file."""
    assert not Photo("AgACAgIAAxkBAAIBQ2Zk").uploads
    assert not Video("https://example.com/clip.mp4").uploads
    with pytest.raises(ValidationError, match=r"pathlib\.Path") as caught:
        Photo("tariff.jpg")
    assert "photo" == caught.value.field
    with pytest.raises(ValidationTypeError, match="got int"):
        Document(42)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as bad_name:
        Document(b"x", filename='a"b.pdf')
    assert "filename" == bad_name.value.field
    with pytest.raises(ValidationError, match="applies to an upload"):
        Photo("AgACAgIAAxkBAAIBQ2Zk", filename="a.jpg")


def test_message_media_field() -> None:
    """A Message with media may have an empty text (no caption); anything else is refused."""
    message = Message("", media=Photo(IMAGE))
    assert "Message(text=<0 chars>, media=Photo(<10244 bytes>))" == repr(message)
    with pytest.raises(ValidationError):
        Message("")
    with pytest.raises(ValidationTypeError) as caught:
        Message("hi", media=IMAGE)  # type: ignore[arg-type]
    assert "media" == caught.value.field


def test_caption_limit_is_1024_utf16_units() -> None:
    """1024 units pass; an emoji counts two, so 513 emoji (1026 units) are refused."""
    prepare("1", Message("x" * 1024, media=Photo(IMAGE)))
    prepare("1", Message("<b>" + "x" * 1024 + "</b>", parse_mode="HTML", media=Photo(IMAGE)))
    with pytest.raises(ValidationError, match=r"1026 characters.*caption is 1024") as caught:
        prepare("1", Message("\U0001f600" * 513, media=Photo(IMAGE)))
    assert "text" == caught.value.field
    assert "\U0001f600" not in str(caught.value)


def test_text_only_options_are_refused_for_media() -> None:
    """link_preview and 'entities' belong to text messages; a caption takes caption_entities."""
    with pytest.raises(ValidationError) as preview:
        prepare("1", Message("x", link_preview=False, media=Photo(IMAGE)))
    assert "link_preview" == preview.value.field
    with pytest.raises(ValidationError, match="caption_entities"):
        prepare("1", Message("x", options={"entities": []}, media=Photo(IMAGE)))
    with pytest.raises(ValidationError, match="not a Bot API parameter"):
        prepare("1", Message("x", options={'a"b': 1}, media=Photo(IMAGE)))


def test_text_only_senders_refuse_media() -> None:
    """The webhook sender cannot send a photo: it says so before anything is claimed."""
    sender = WebhookSender("https://example.com/hook")
    with pytest.raises(ValidationError) as caught:
        sender.check("42", Message("x", media=Photo(IMAGE)))
    assert "media" == caught.value.field


# -- payloads -------------------------------------------------------------------------


def test_media_payload_has_the_caption_and_its_formatting() -> None:
    """The caption, parse_mode, silence, keyboard and options; the file is added at send."""
    keyboard = {"inline_keyboard": [[{"text": "Open", "url": "https://example.com"}]]}
    message = Message(
        "<b>New</b> tariff",
        parse_mode="HTML",
        silent=True,
        reply_markup=keyboard,
        options={"caption_entities": [], "has_spoiler": True},
        media=Photo(IMAGE),
    )
    target, payload = prepare("-100123", message)
    assert "-100123" == target
    assert {
        "caption": "<b>New</b> tariff",
        "parse_mode": "HTML",
        "disable_notification": True,
        "reply_markup": keyboard,
        "caption_entities": [],
        "has_spoiler": True,
    } == payload
    assert {} == prepare("1", Message(" ", media=Document(b"%PDF")))[1]


def test_multipart_body_round_trips_through_the_servers_parser() -> None:
    """Fields (JSON for non-str) and the file's name and bytes arrive as they were sent."""
    fields = {"chat_id": -100123, "caption": "Привет", "reply_markup": {"a": [1]}, "x": True}
    body, content_type = multipart(fields, [("photo", "tariff.jpg", IMAGE)])
    params, files = parse_form(content_type, body)
    assert {"chat_id": "-100123", "caption": "Привет", "reply_markup": {"a": [1]}} == {
        k: params[k] for k in ("chat_id", "caption", "reply_markup")
    }
    assert "true" == params["x"]
    assert {"photo": ("tariff.jpg", IMAGE)} == files
    assert b"Content-Type: image/jpeg" in body


# -- sending and uploading once -------------------------------------------------------


async def test_concurrent_sends_upload_once_then_reuse_the_file_id(
    bot_api_server: BotAPIServer, image: Path
) -> None:
    """Twenty concurrent sends of one photo: one upload, nineteen sends by its file_id."""
    message = Message("caption", media=Photo(image))
    async with sender_for(bot_api_server) as sender:
        receipts = await asyncio.gather(*(sender.send(str(n), message) for n in range(1, 21)))
    uploads = bot_api_server.uploads
    assert 1 == len(uploads)
    assert hashlib.sha256(IMAGE).hexdigest() == uploads[0].sha256
    assert "tariff.jpg" == uploads[0].filename
    assert {uploads[0].file_id} == {r.file_id for r in receipts}
    by_id = [d for d in bot_api_server.deliveries if d.params.get("photo") == uploads[0].file_id]
    assert 19 == len(by_id)
    assert {"sendPhoto"} == {d.method for d in bot_api_server.deliveries}


async def test_the_largest_photo_size_is_reused(bot_api_server: BotAPIServer) -> None:
    """Telegram answers a photo with several sizes; the largest one's file_id is kept."""
    async with sender_for(bot_api_server) as sender:
        first = await sender.send("1", Message("", media=Photo(IMAGE)))
        await sender.send("2", Message("", media=Photo(IMAGE)))
    assert bot_api_server.uploads[0].file_id == first.file_id
    assert first.file_id == bot_api_server.deliveries[1].params["photo"]
    assert not first.file_id.endswith("s")  # type: ignore[union-attr]


async def test_a_failed_first_upload_lets_the_next_send_upload(
    bot_api_server: BotAPIServer,
) -> None:
    """The first upload refused (bot blocked) and the second dropped after delivery
    (uncertain): the waiting sends do not wedge; the third upload's file_id serves the rest."""
    bot_api_server.script(None, [Reply.blocked(), Reply.drop_after_delivery()])
    message = Message("caption", media=Document(b"%PDF-1.7 invoice", filename="invoice.pdf"))
    async with sender_for(bot_api_server) as sender:
        results = await asyncio.gather(
            *(sender.send(str(n), message) for n in range(1, 11)), return_exceptions=True
        )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert [PermanentSendError, UncertainSendError] == sorted(
        (type(e) for e in errors), key=lambda t: t.__name__
    )
    uploads = bot_api_server.uploads
    assert 3 == len(uploads)
    assert None is uploads[0].file_id  # refused
    assert None is not uploads[1].file_id  # delivered, but its answer never came back
    deliveries = bot_api_server.deliveries
    assert 9 == len(deliveries)
    assert 7 == sum(d.params.get("document") == uploads[2].file_id for d in deliveries)


async def test_a_waiting_send_gives_up_within_its_budget(bot_api_server: BotAPIServer) -> None:
    """A send waiting for a slow first upload ends when its budget does: certainly not sent."""
    from notifyonce import TransientSendError

    bot_api_server.script("1", [Reply.ok(delay=1.0)])
    message = Message("", media=Video(b"\x00\x00\x00\x18ftypmp42"))
    async with sender_for(bot_api_server) as sender:
        first = asyncio.ensure_future(sender.send("1", message))
        await asyncio.sleep(0.1)
        with pytest.raises(TransientSendError, match="waiting for the file's first upload"):
            await sender.send("2", message, budget=0.2)
        await first
    assert 1 == len(bot_api_server.uploads)


async def test_a_changed_file_is_uploaded_again(bot_api_server: BotAPIServer, image: Path) -> None:
    """The cache is keyed by the file's bytes: new content, new upload; same bytes, none."""
    async with sender_for(bot_api_server) as sender:
        await sender.send("1", Message("", media=Photo(image)))
        await asyncio.to_thread(image.write_bytes, IMAGE + b"v2")
        await sender.send("2", Message("", media=Photo(image)))
        await sender.send("3", Message("", media=Photo(IMAGE + b"v2")))  # the same bytes
    uploads = bot_api_server.uploads
    assert ["1", "2"] == [u.chat_id for u in uploads], "the changed file was uploaded again"
    assert hashlib.sha256(IMAGE + b"v2").hexdigest() == uploads[1].sha256
    assert uploads[1].file_id == bot_api_server.deliveries[2].params["photo"]


async def test_file_ids_survive_the_sender_in_a_sql_store(
    bot_api_server: BotAPIServer, image: Path, tmp_path: Path
) -> None:
    """A new sender on the same SQLFileIdStore sends by file_id; another bot uploads anew."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'files.sqlite3'}")
    try:
        store = SQLFileIdStore(engine)
        await store.create_schema()
        for _ in range(2):
            async with sender_for(bot_api_server, file_store=store) as sender:
                await sender.send("1", Message("", media=Photo(image)))
        assert 1 == len(bot_api_server.uploads)
        other = TelegramSender("111:other-bot", base_url=bot_api_server.url, file_store=store)
        async with other:
            await other.send("1", Message("", media=Photo(image)))
        assert 2 == len(bot_api_server.uploads)
    finally:
        await engine.dispose()


async def test_a_file_id_telegram_no_longer_knows_is_forgotten_and_uploaded(
    bot_api_server: BotAPIServer, image: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored file_id refused as a wrong file identifier: dropped, the file uploaded."""
    store = MemoryFileIdStore()
    digest = hashlib.sha256(IMAGE).hexdigest()
    await store.put(f"987654:photo:{digest}", "PHO999xunknown")
    with caplog.at_level(logging.WARNING, logger="notifyonce"):
        async with sender_for(bot_api_server, file_store=store) as sender:
            receipt = await sender.send("1", Message("", media=Photo(image)))
    assert 1 == len(bot_api_server.uploads)
    assert receipt.file_id == await store.get(f"987654:photo:{digest}")
    assert "refused a stored file_id" in caplog.text


async def test_a_file_id_or_url_is_sent_as_is(bot_api_server: BotAPIServer) -> None:
    """A str source goes to Telegram as is: nothing uploaded; an unknown file_id is a 400."""
    async with sender_for(bot_api_server) as sender:
        await sender.send("1", Message("x", media=Video("https://example.com/clip.mp4")))
        with pytest.raises(PermanentSendError, match="wrong file identifier"):
            await sender.send("1", Message("x", media=Video("BAACAgIAAxkBAAIBQ2Zk")))
    assert [] == bot_api_server.uploads
    assert "https://example.com/clip.mp4" == bot_api_server.deliveries[0].params["video"]


# -- the command ----------------------------------------------------------------------


def test_broadcast_command_sends_a_photo_and_dry_run_uploads_nothing(
    tmp_path: Path, image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--photo with --caption-file: one upload for 30 chats; a dry run makes no request."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    assert 0 == main(["migrate", "--database-url", url])
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 31)))
    (tmp_path / "caption.txt").write_text("<b>New</b> tariff\n")
    env = {"NOTIFYONCE_BOT_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
    with BotAPIServer() as server:
        args = [
            sys.executable,
            "-m",
            "notifyonce",
            "broadcast",
            "--database-url",
            url,
            "--recipients-file",
            str(tmp_path / "chats.txt"),
            "--photo",
            str(image),
            "--caption-file",
            str(tmp_path / "caption.txt"),
            "--parse-mode",
            "HTML",
            "--action",
            "news",
            "--campaign",
            "c1",
            "--base-url",
            server.url,
            "--rate",
            "0",
        ]
        dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, env=env)
        assert 0 == dry.returncode, dry.stderr
        assert [] == server.calls
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
        assert 0 == done.returncode, done.stderr
        assert 1 == len(server.uploads)
        assert 30 == len(server.deliveries)
        assert {"<b>New</b> tariff"} == {d.text for d in server.deliveries}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--photo", "missing.jpg"], "--photo: cannot use 'missing.jpg': FileNotFoundError"),
        (["--text-file", "text.txt", "--caption-file", "text.txt"], "needs --photo"),
        ([], "--text-file: required"),
        (
            ["--photo", "text.txt", "--text-file", "text.txt", "--caption-file", "text.txt"],
            "give the caption once",
        ),
    ],
)
def test_broadcast_media_usage_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    expected: str,
) -> None:
    """A missing media file or a caption without media is a usage error (exit 2)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("hello\n")
    (tmp_path / "chats.txt").write_text("1\n")
    base = ["broadcast", "--database-url", "sqlite:///x.sqlite3", "--recipients-file"]
    args = [*base, "chats.txt", "--action", "a", "--campaign", "c", "--dry-run", *extra]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert 2 == exited.value.code
    assert expected in capsys.readouterr().err
