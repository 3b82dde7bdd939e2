"""``notifyonce serve-test-api``: the local Bot API server on a fixed port, with its log."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import IO

import pytest

from notifyonce import Message, PermanentSendError
from notifyonce.telegram import TelegramSender


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Lines:
    """The lines a process prints, read on a thread (select() cannot see what a text
    stream has buffered already)."""

    def __init__(self, stream: IO[str] | None) -> None:
        assert stream is not None
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def until(self, wanted: str, seconds: float = 15.0) -> list[str]:
        """The lines printed until one contains ``wanted``."""
        lines: list[str] = []
        deadline = time.monotonic() + seconds
        while not any(wanted in line for line in lines):
            try:
                line = self.queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line with {wanted!r} in {lines}") from None
            assert line is not None, f"the server ended before printing {wanted!r}: {lines}"
            lines.append(line)
        return lines


def serve(port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "notifyonce", "serve-test-api", "--port", str(port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def served() -> Iterator[tuple[subprocess.Popen[str], Lines, str]]:
    """The command running on a free port, its output and its URL; stopped with SIGINT
    afterwards."""
    port = free_port()
    with serve(port) as process:
        try:
            lines = Lines(process.stdout)
            lines.until("Ctrl-C stops it")
            yield process, lines, f"http://127.0.0.1:{port}"
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(10)


def post(url: str, fields: dict[str, object]) -> dict[str, object]:
    data = json.dumps(fields).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())  # type: ignore[no-any-return]


async def test_it_prints_each_delivery_and_refusal_and_stops_on_ctrl_c(
    served: tuple[subprocess.Popen[str], Lines, str],
) -> None:
    """A send through TelegramSender is printed with its chat and text, a request to a
    wrong path as refused, an update queued over HTTP is handed out; Ctrl-C exits 0."""
    process, output, url = served
    async with TelegramSender("123456:any-token", base_url=url, rate_limit=None) as sender:
        receipt = await sender.send(42, Message("6 hours left"))
    assert "42" == receipt.recipient
    printed = output.until("delivered sendMessage")
    assert printed[-1].endswith("delivered sendMessage to chat 42: '6 hours left'")
    post(f"{url}/not-a-bot/sendMessage", {"chat_id": 42, "text": "x"})
    assert "refused sendMessage: 404 (wrong path or method)" in output.until("refused")[-1]
    assert {"update_id": 1} == post(f"{url}/user_says", {"chat_id": 42, "text": "/start"})["result"]
    updates = post(f"{url}/bot123456:any-token/getUpdates", {"timeout": 0})["result"]
    assert isinstance(updates, list)
    assert "/start" == updates[0]["message"]["text"]
    process.send_signal(signal.SIGINT)
    assert 0 == process.wait(10)
    output.thread.join(5)
    rest = []
    while not output.queue.empty():
        rest.append(output.queue.get() or "")
    assert "any-token" not in " ".join([*printed, *rest])


async def test_json_lines_for_scripts() -> None:
    """--json prints one JSON object a line: first where it listens, then each event."""
    port = free_port()
    with serve(port, "--json") as process:
        try:
            output = Lines(process.stdout)
            listening = json.loads(output.until('"listening"')[-1])
            assert {"event": "listening", "url": f"http://127.0.0.1:{port}"} == listening
            async with TelegramSender("1:a", base_url=listening["url"], rate_limit=None) as sender:
                await sender.send("7", Message("hi"))
            record = json.loads(output.until('"delivered"')[-1])
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(10)
    assert {"event": "delivered", "chat_id": "7", "text": "hi", "method": "sendMessage"} == {
        k: record[k] for k in ("event", "chat_id", "text", "method")
    }


def test_a_taken_port_is_a_usage_error(served: tuple[subprocess.Popen[str], Lines, str]) -> None:
    """A second server on the same port exits 2 and says to pass --port."""
    _, _, url = served
    port = int(url.rsplit(":", 1)[1])
    with serve(port) as second:
        _, err = second.communicate(timeout=20)
    assert 2 == second.returncode
    assert f"cannot listen on 127.0.0.1:{port}" in err
    assert "Pass --port" in err


async def test_it_prints_each_edit_and_delete_and_their_refusals(
    served: tuple[subprocess.Popen[str], Lines, str],
) -> None:
    """An edit and a delete are printed with the message and chat they changed; an edit of
    a message that is gone is printed as refused."""
    _, output, url = served
    async with TelegramSender("123456:any-token", base_url=url, rate_limit=None) as sender:
        receipt = await sender.send(42, Message("6 hours left"))
        assert isinstance(receipt.message_id, int)
        await sender.edit_message(42, receipt.message_id, text="5 hours left")
        await sender.delete_messages(42, [receipt.message_id])
        with pytest.raises(PermanentSendError):
            await sender.edit_message(42, receipt.message_id, text="4 hours left")
    mid = receipt.message_id
    edited = output.until("edited message")[-1]
    deleted = output.until("deleted message")[-1]
    refused = output.until("refused editMessageText")[-1]
    assert edited.endswith(f"edited message {mid} in chat 42 (editMessageText)")
    assert deleted.endswith(f"deleted message {mid} in chat 42 (deleteMessage)")
    assert refused.endswith(
        "refused editMessageText to chat 42: 400 Bad Request: message to edit not found"
    )


async def test_a_refusal_says_telegrams_description_and_a_user_back_from_a_block_is_answered(
    served: tuple[subprocess.Popen[str], Lines, str],
) -> None:
    """A send to a chat whose user blocked the bot is printed refused with Telegram's 403
    description (not the message's text); once the user writes /start again the bot is
    unblocked (a my_chat_member update before the message) and the next send delivered."""
    _, output, url = served
    post(f"{url}/user_blocks", {"chat_id": 43})
    async with TelegramSender("123456:any-token", base_url=url, rate_limit=None) as sender:
        with pytest.raises(PermanentSendError):
            await sender.send(43, Message("a secret offer"))
        refused = output.until("refused sendMessage")[-1]
        post(f"{url}/user_says", {"chat_id": 43, "text": "/start"})
        receipt = await sender.send(43, Message("welcome back"))
    assert refused.endswith(
        "refused sendMessage to chat 43: 403 Forbidden: bot was blocked by the user"
    )
    assert "a secret offer" not in refused
    assert "43" == receipt.recipient
    updates = post(f"{url}/bot123456:any-token/getUpdates", {"timeout": 0})["result"]
    assert isinstance(updates, list)
    kinds = [next(k for k in u if k != "update_id") for u in updates]
    assert ["my_chat_member", "my_chat_member", "message"] == kinds
    assert "member" == updates[1]["my_chat_member"]["new_chat_member"]["status"]


async def test_the_clock_moves_over_http(served: tuple[subprocess.Popen[str], Lines, str]) -> None:
    """POST /advance_clock ages every message (a delete past 48 hours is refused as
    Telegram refuses it); a negative or missing number of seconds is a 400."""
    _, _, url = served
    async with TelegramSender("123456:any-token", base_url=url, rate_limit=None) as sender:
        receipt = await sender.send(42, Message("6 hours left"))
        assert isinstance(receipt.message_id, int)
        before = time.time()
        moved = post(f"{url}/advance_clock", {"seconds": 49 * 3600})["result"]
        with pytest.raises(PermanentSendError, match="can't be deleted"):
            await sender.delete_messages(42, [receipt.message_id])
    assert isinstance(moved, dict)
    assert 49 * 3600 <= float(moved["now"]) - before
    assert False is post(f"{url}/advance_clock", {"seconds": -5})["ok"]
    assert False is post(f"{url}/advance_clock", {})["ok"]
