"""A broadcast to 10,000 chats SIGKILLed halfway, then run again: each chat gets it once.

The broadcasting process is ``notifyonce broadcast`` itself, sending through TelegramSender
to the local Bot-API-shaped server on 127.0.0.1. At most once: the sends in flight at the
kill are recorded ``unknown`` once their lease expires, listed by the second run, and never
sent again; every other chat gets the message exactly once. A photo broadcast also uploads
the photo exactly once across both runs: the first run keeps Telegram's file_id in the
ledger's database, and the second sends by it.
"""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce._cli import main
from notifyonce.testing import BotAPIServer, Delivery, Upload

from ._databases import Backend, drop_table, make_backend

CHATS = 10_000
TOKEN = "12345:crash-broadcast"

pytestmark = [pytest.mark.slow, pytest.mark.storm]


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres-asyncpg", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def table(backend: Backend) -> object:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)


@dataclass
class _Runs:
    """What the server saw of a killed run and its re-run, and the ledger's verdict."""

    before: Counter[str]  # deliveries per chat when the first run was killed
    deliveries: list[Delivery]
    uploads: list[Upload]
    second: subprocess.CompletedProcess[str]
    sent: set[str]
    unknown: set[str]


def _kill_halfway_and_rerun(
    backend: Backend,
    table: str,
    tmp_path: Path,
    media: list[str] = (),  # type: ignore[assignment]
) -> _Runs:
    """Run the broadcast command, SIGKILL it at half the chats, wait out the leases, re-run."""
    assert 0 == main(["migrate", "--database-url", backend.sync_url, "--table", table])
    chats = tmp_path / "chats.txt"
    chats.write_text("".join(f"{i}\n" for i in range(1, CHATS + 1)))
    text = tmp_path / "text.txt"
    text.write_text("News for everyone\n")
    with BotAPIServer(latency=0.002) as server:
        args = [
            sys.executable,
            "-m",
            "notifyonce",
            "broadcast",
            "--database-url",
            backend.async_url,
            "--table",
            table,
            "--recipients-file",
            str(chats),
            "--text-file",
            str(text),
            *media,
            "--action",
            "news",
            "--campaign",
            "crash-1",
            "--base-url",
            server.url,
            "--rate",
            "0",
            "--lease",
            "2s",
        ]
        env = {"NOTIFYONCE_BOT_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
        first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(server.deliveries) < CHATS // 2 and time.monotonic() < deadline:
            assert first.poll() is None, "the broadcast ended before it was killed"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        before = Counter(d.chat_id for d in server.deliveries)
        assert CHATS // 2 <= sum(before.values()) < CHATS, "not killed halfway"

        time.sleep(2.5)  # the killed run's leases expire; the next run sweeps them
        second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
        deliveries, uploads = server.deliveries, server.uploads

    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT subject, status FROM {table} WHERE action = 'news'")
            ).all()
    finally:
        engine.dispose()
    status = {str(subject): state for subject, state in rows}
    unknown = {chat for chat, state in status.items() if state == "unknown"}
    sent = {chat for chat, state in status.items() if state == "sent"}
    return _Runs(before, deliveries, uploads, second, sent, unknown)


def _assert_each_chat_once(runs: _Runs) -> None:
    """Exactly once for sent chats, never twice for unknown ones, the unknown ones listed."""
    before, sent, unknown, second = runs.before, runs.sent, runs.unknown, runs.second
    delivered = Counter(d.chat_id for d in runs.deliveries)
    everyone = {str(i) for i in range(1, CHATS + 1)}

    assert everyone == sent | unknown, "every chat is settled, none failed or held"
    assert {1} == {delivered[chat] for chat in sent}, "sent chats got it exactly once"
    assert set() == {chat for chat in unknown if delivered[chat] > 1}, "never twice"
    assert set() == {chat for chat in unknown if delivered[chat] != before[chat]}, (
        "an unknown chat was sent to again by the second run"
    )
    # The second run lists the unknown chats (those in flight at the kill) and exits 1.
    assert (1 if unknown else 0) == second.returncode, second.stderr
    if unknown:
        count = re.search(r"([\d,]+) chats of the campaign have an unknown outcome", second.stdout)
        assert count is not None, second.stdout
        assert len(unknown) == int(count.group(1).replace(",", ""))
        listed = set(re.findall(r"^  (\d+)$", second.stdout, re.MULTILINE))
        assert set() == listed - unknown
        assert min(len(unknown), 100) == len(listed)  # the command lists the first 100
    print(
        f"killed after {sum(before.values())} deliveries; {len(unknown)} unknown, "
        f"{len(sent)} sent; {len(runs.uploads)} uploads; second run: "
        f"{second.stdout.splitlines()[0]}"
    )


def test_sigkill_halfway_then_rerun_sends_each_chat_once(
    backend: Backend, table: str, tmp_path: Path
) -> None:
    """Killed at half of 10,000 chats and re-run: exactly once each, in-flight ones unknown."""
    _assert_each_chat_once(_kill_halfway_and_rerun(backend, table, tmp_path))


@pytest.fixture
def file_table(backend: Backend, table: str) -> object:
    """The file-id table the migration creates beside the test's ledger table."""
    yield f"{table}_file_ids"
    drop_table(backend, f"{table}_file_ids")
    drop_table(backend, f"{table}_rate_limits")
    drop_table(backend, f"{table}_alembic_version")


def test_photo_broadcast_killed_halfway_uploads_the_photo_once(
    backend: Backend, table: str, file_table: str, tmp_path: Path
) -> None:
    """A photo to 10,000 chats, killed halfway and re-run: each chat once, one upload in all.

    The first send of the first run uploads; its concurrent sends wait for Telegram's
    file_id and send by it; the file_id is stored in the ledger's database before any of
    them goes on, so the second run finds it and uploads nothing.
    """
    photo = tmp_path / "tariff.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 400)
    runs = _kill_halfway_and_rerun(backend, table, tmp_path, ["--photo", str(photo)])
    _assert_each_chat_once(runs)

    assert 1 == len(runs.uploads), "the photo was uploaded once across both runs"
    upload = runs.uploads[0]
    assert upload.file_id is not None
    assert hashlib.sha256(photo.read_bytes()).hexdigest() == upload.sha256
    assert {"sendPhoto"} == {d.method for d in runs.deliveries}
    assert {upload.file_id} == {d.file_id for d in runs.deliveries}, "every chat got that photo"
    by_id = [d for d in runs.deliveries if d.params.get("photo") == upload.file_id]
    assert len(runs.deliveries) - 1 == len(by_id), "all but the upload were sent by file_id"
    assert {"News for everyone"} == {d.text for d in runs.deliveries}, "the text is the caption"
