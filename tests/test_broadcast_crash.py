"""A broadcast to 10,000 chats SIGKILLed halfway, then run again: each chat gets it once.

The broadcasting process is ``notifyonce broadcast`` itself, sending through TelegramSender
to the local Bot-API-shaped server on 127.0.0.1. At most once: the sends in flight at the
kill are recorded ``unknown`` once their lease expires, listed by the second run, and never
sent again; every other chat gets the message exactly once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce._cli import main
from notifyonce.testing import BotAPIServer

from ._databases import Backend, drop_table, make_backend

CHATS = 10_000
TOKEN = "12345:crash-broadcast"

pytestmark = pytest.mark.slow


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


def test_sigkill_halfway_then_rerun_sends_each_chat_once(
    backend: Backend, table: str, tmp_path: Path
) -> None:
    """Killed at half of 10,000 chats and re-run: exactly once each, in-flight ones unknown."""
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
        delivered = Counter(d.chat_id for d in server.deliveries)

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
        f"{len(sent)} sent; second run: {second.stdout.splitlines()[0]}"
    )
