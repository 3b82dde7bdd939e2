"""BotAPIServer as a polling bot sees it: getUpdates, offsets, and the calls around polling."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from notifyonce.testing import BotAPIServer


@pytest.fixture
def server() -> Iterator[BotAPIServer]:
    """A running server, stopped after the test."""
    with BotAPIServer() as running:
        yield running


def call(server: BotAPIServer, method: str, **params: object) -> object:
    """POST a Bot API method with JSON parameters; the ``result`` of the answer."""
    answer = httpx.post(f"{server.url}/bot1:T/{method}", json=params, timeout=10)
    assert 200 == answer.status_code, answer.text
    return answer.json()["result"]


def test_updates_are_handed_out_until_an_offset_confirms_them(server: BotAPIServer) -> None:
    """getUpdates repeats an update until offset = its id + 1, as Telegram does."""
    first = server.user_says(42, "/start")
    second = server.user_says(43, "hello", user_id=7)
    updates = call(server, "getUpdates")
    assert [first, second] == [u["update_id"] for u in updates]  # type: ignore[attr-defined]
    assert [first, second] == [u["update_id"] for u in call(server, "getUpdates")]  # type: ignore[attr-defined]
    assert [second] == [u["update_id"] for u in call(server, "getUpdates", offset=first + 1)]  # type: ignore[attr-defined]
    assert [] == call(server, "getUpdates", offset=second + 1)
    assert 0 == server.pending_updates


def test_update_carries_a_message_a_bot_library_can_parse(server: BotAPIServer) -> None:
    """A queued command has its chat, sender, text and bot_command entity."""
    server.user_says(42, "/start now", user_id=7)
    (update,) = call(server, "getUpdates", limit=1)  # type: ignore[misc]
    message = update["message"]
    assert {"id": 42, "type": "private"} == message["chat"]
    assert 7 == message["from"]["id"]
    assert "/start now" == message["text"]
    assert [{"type": "bot_command", "offset": 0, "length": 6}] == message["entities"]


def test_long_poll_waits_for_an_update_and_no_longer_than_timeout(server: BotAPIServer) -> None:
    """With nothing queued getUpdates waits about ``timeout`` seconds, then answers []."""
    started = time.monotonic()
    assert [] == call(server, "getUpdates", timeout=1)
    assert 0.9 <= time.monotonic() - started


def test_get_query_parameters_are_read(server: BotAPIServer) -> None:
    """getUpdates parameters in a GET query string work like a POST body."""
    update_id = server.user_says(42, "hi")
    answer = httpx.get(f"{server.url}/bot1:T/getUpdates?offset={update_id + 1}", timeout=10)
    assert {"ok": True, "result": []} == answer.json()


def test_calls_a_bot_makes_at_start_are_answered_and_recorded(server: BotAPIServer) -> None:
    """getMe, deleteWebhook and friends answer ok; calls lists every method in order."""
    me = call(server, "getMe")
    assert call(server, "deleteWebhook", drop_pending_updates=True) is True
    assert "" == call(server, "getWebhookInfo")["url"]  # type: ignore[index]
    call(server, "getUpdates")
    assert "test_bot" == me["username"]  # type: ignore[index]
    assert ["getMe", "deleteWebhook", "getWebhookInfo", "getUpdates"] == server.calls


def test_unknown_method_is_still_404(server: BotAPIServer) -> None:
    """A method the server does not know answers 404, as a wrong base_url would."""
    answer = httpx.post(f"{server.url}/bot1:T/sendSticker", json={}, timeout=10)
    assert 404 == answer.status_code
