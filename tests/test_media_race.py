"""A media file rewritten at each step of a send: the file id cache never names other bytes.

A file is hashed (its key in the file id store), looked up in the store, read and
uploaded, answered with a file_id, and that file_id stored under the key. Whatever step the
file is rewritten at, and whether or not the rewrite keeps its size and mtime (so the
sender's hash memo cannot see it), every file_id the store keeps must be the file_id of
bytes whose sha256 is its key's, and each send delivers bytes the file held.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import notifyonce._senders.telegram.files as files_module
import notifyonce._senders.telegram.sender as sender_module
from notifyonce import (
    Album,
    AsyncLedger,
    Broadcast,
    Document,
    Message,
    Notifier,
    Photo,
    TransientSendError,
    ValidationError,
)
from notifyonce._campaign import pin
from notifyonce._media import file_sha256
from notifyonce._senders.telegram.files import read_upload
from notifyonce.telegram import MemoryFileIdStore
from notifyonce.testing import BotAPIServer

from ._bot_api import sender_for
from ._fakes import Wrapper

OLD = b"%PDF-1.7 tariff, version one " + bytes(range(256)) * 8
NEW = b"%PDF-1.7 tariff, version two " + bytes(range(256)) * 8  # the same size
STEPS = ("hashed", "looked-up", "read", "answered")


class Rewriter:
    """Rewrites ``path`` with NEW once, at ``step``; with ``keep_stamp`` its mtime is put
    back, so a file of the same size looks unchanged to a memo keyed by size and mtime."""

    def __init__(self, path: Path, step: str, keep_stamp: bool) -> None:
        self.path, self.step, self.keep_stamp = path, step, keep_stamp
        self.done = False

    def at(self, step: str) -> None:
        if step != self.step or self.done:
            return
        self.done = True
        info = os.stat(self.path)
        self.path.write_bytes(NEW)
        if self.keep_stamp:
            os.utime(self.path, ns=(info.st_atime_ns, info.st_mtime_ns))


class SpyStore(MemoryFileIdStore):
    """A memory store that tells the rewriter when it is asked and written."""

    def __init__(self, rewriter: Rewriter) -> None:
        super().__init__()
        self.rewriter = rewriter

    async def get(self, key: str) -> str | None:
        self.rewriter.at("looked-up")
        return await super().get(key)

    async def put(self, key: str, file_id: str) -> None:
        self.rewriter.at("answered")
        await super().put(key, file_id)


@pytest.mark.parametrize("keep_stamp", [False, True], ids=["new-stamp", "same-stamp"])
@pytest.mark.parametrize("step", STEPS)
async def test_a_file_rewritten_during_a_send_never_gets_another_files_id(
    bot_api_server: BotAPIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    keep_stamp: bool,
) -> None:
    """The file rewritten at one step of the first of three sends: each stored file_id is
    the one Telegram gave for bytes with its key's sha256, and every send delivers the old
    or the new bytes, never a file_id of other bytes than its key names."""
    path = tmp_path / "tariff.pdf"
    path.write_bytes(OLD)
    rewriter = Rewriter(path, step, keep_stamp)

    def hashed(where: str) -> str:
        digest = file_sha256(where)
        rewriter.at("hashed")
        return digest

    async def read(media: Any) -> bytes:
        data = await read_upload(media)
        rewriter.at("read")
        return data

    monkeypatch.setattr(files_module, "file_sha256", hashed)
    monkeypatch.setattr(sender_module, "read_upload", read)
    store = SpyStore(rewriter)
    async with sender_for(bot_api_server, file_store=store) as sender:
        for chat in ("1", "2", "3"):
            await sender.send(chat, Message("", media=Document(path)))

    assert rewriter.done
    uploaded = {u.file_id: u.sha256 for u in bot_api_server.uploads}
    stored = {key.rsplit(":", 1)[1]: uploaded[file_id] for key, file_id in store._ids.items()}
    assert {digest: digest for digest in stored} == stored
    contents = {hashlib.sha256(OLD).hexdigest(), hashlib.sha256(NEW).hexdigest()}
    delivered = [
        uploaded.get(str(d.params.get("document")), "upload") for d in bot_api_server.deliveries
    ]
    assert 3 == len(delivered)
    by_id = [sha for sha in delivered if sha != "upload"]
    assert set(by_id) <= contents


class RewritingSender(Wrapper):
    """Sends through ``inner``; after ``after`` sends, ``rewriter`` rewrites the file."""

    def __init__(self, inner: Any, rewriter: Rewriter, after: int) -> None:
        super().__init__(inner)
        self.rewriter, self.after = rewriter, after

    async def send(self, recipient: str, message: Any) -> Any:
        try:
            return await super().send(recipient, message)
        finally:
            self.after -= 1
            if self.after == 0:
                await asyncio.to_thread(self.rewriter.at, "sent")


@pytest.mark.parametrize(
    ("keep_stamp", "sent_and_given_back"),
    # The same size and mtime: the sender does not read the file again and sends the
    # file_id of the bytes fingerprinted.
    [(False, (2, 4)), (True, (6, 0))],
    ids=["new-stamp", "same-stamp"],
)
async def test_a_file_rewritten_during_a_campaign_never_reaches_the_chats_left(
    ledger: AsyncLedger,
    bot_api_server: BotAPIServer,
    tmp_path: Path,
    keep_stamp: bool,
    sent_and_given_back: tuple[int, int],
) -> None:
    """A campaign's file rewritten after its second send: no chat gets other bytes than the
    ones the campaign fingerprinted, the chats the sender would have sent the new bytes are
    given back, and a run with the new file is refused as a changed message."""
    path = tmp_path / "tariff.pdf"
    path.write_bytes(OLD)
    message = Message("", media=Document(path))
    async with sender_for(bot_api_server) as inner:
        sender = RewritingSender(inner, Rewriter(path, "sent", keep_stamp), after=2)
        notifier = Notifier(ledger, sender, concurrency=1, batch_size=1)
        report = await Broadcast(notifier, "news", "tariff", message, range(1, 7)).run()
        with pytest.raises(ValidationError) as caught:
            await Broadcast(notifier, "news", "tariff", message, range(1, 7)).run()
    assert "message" == caught.value.field
    old = hashlib.sha256(OLD).hexdigest()
    uploaded = {u.file_id: u.sha256 for u in bot_api_server.uploads}
    sent = [uploaded.get(str(d.params.get("document")), old) for d in bot_api_server.deliveries]
    assert [old] == [u.sha256 for u in bot_api_server.uploads]
    assert [old] * report.progress.sent == sent
    assert sent_and_given_back == (report.progress.sent, report.progress.retry)


@pytest.mark.parametrize("keep_stamp", [False, True], ids=["new-stamp", "same-stamp"])
@pytest.mark.parametrize("step", ["before", "hashed"])
@pytest.mark.parametrize("album", [False, True], ids=["document", "album"])
async def test_a_pinned_file_rewritten_before_its_first_upload_is_not_sent(
    bot_api_server: BotAPIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keep_stamp: bool,
    step: str,
    album: bool,
) -> None:
    """A file pinned to a campaign's fingerprint and rewritten before its first upload
    (before the send hashes it, or between its hash and its read; its stamp kept or not;
    alone or in an album): the send is refused about the message, nothing reaches the chat."""
    path = tmp_path / "tariff.jpg"
    path.write_bytes(OLD)
    media = Album([Photo(path), Photo(b"\xff\xd8 a second photo")]) if album else Document(path)
    message = await pin(Message("", media=media))
    rewriter = Rewriter(path, step, keep_stamp)
    rewriter.at("before")

    def hashed(where: str) -> str:
        digest = file_sha256(where)
        rewriter.at("hashed")
        return digest

    monkeypatch.setattr(files_module, "file_sha256", hashed)
    async with sender_for(bot_api_server) as sender:
        with pytest.raises(TransientSendError) as caught:
            await sender.send("1", message)
    assert rewriter.done
    assert caught.value.about_message
    assert "changed since the campaign recorded it" in str(caught.value)
    assert ([], []) == (bot_api_server.deliveries, bot_api_server.uploads)
