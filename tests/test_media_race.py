"""A media file rewritten at each step of a send: the file id cache never names other bytes.

A file is hashed (its key in the file id store), looked up in the store, read and
uploaded, answered with a file_id, and that file_id stored under the key. Whatever step the
file is rewritten at, and whether or not the rewrite keeps its size and mtime (so the
sender's hash memo cannot see it), every file_id the store keeps must be the file_id of
bytes whose sha256 is its key's, and each send delivers bytes the file held.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

import notifyonce._senders.telegram.files as files_module
import notifyonce._senders.telegram.sender as sender_module
from notifyonce import Document, Message
from notifyonce._media import file_sha256
from notifyonce._senders.telegram.files import read_upload
from notifyonce.telegram import MemoryFileIdStore
from notifyonce.testing import BotAPIServer

from ._bot_api import sender_for

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
