"""BotAPIServer as a polling bot sees it: getUpdates, offsets, and the calls around polling."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from notifyonce.testing import BotAPIServer, Reply


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


# -- blocks, removals and what the bot's updates say of them ---------------------------


def send(server: BotAPIServer, chat_id: int | str) -> httpx.Response:
    """One sendMessage to ``chat_id``, as any client sends it."""
    return httpx.post(
        f"{server.url}/bot1:T/sendMessage", json={"chat_id": chat_id, "text": "hi"}, timeout=10
    )


def test_a_blocked_chat_is_refused_until_unblocked(server: BotAPIServer) -> None:
    """block() refuses every later send to that chat with Telegram's 403, not just one;
    other chats are delivered; unblock() delivers again."""
    server.block(42)
    refused = [send(server, 42) for _ in range(3)]
    assert [403] * 3 == [r.status_code for r in refused]
    assert "Forbidden: bot was blocked by the user" == refused[0].json()["description"]
    assert 200 == send(server, 43).status_code
    server.unblock(42)
    assert 200 == send(server, 42).status_code
    assert ["43", "42"] == [d.chat_id for d in server.deliveries]
    assert [403, 403, 403, 200, 200] == [r.reply.status for r in server.requests]


def test_a_block_wins_over_a_scripted_reply(server: BotAPIServer) -> None:
    """A chat that blocked the bot is refused even where a script would deliver; the
    script waits for the chat to be unblocked."""
    server.script("42", [Reply.flood(3)])
    server.block(42)
    assert 403 == send(server, 42).status_code
    server.unblock(42)
    assert 429 == send(server, 42).status_code


BOT = {"id": 1, "is_bot": True, "first_name": "test", "username": "test_bot"}


def test_user_blocks_and_unblocks_queue_my_chat_member_updates(server: BotAPIServer) -> None:
    """user_blocks() refuses sends and queues member -> kicked from the user, in the
    private chat; user_unblocks() delivers again and queues kicked -> member."""
    blocked = server.user_blocks(42)
    assert 403 == send(server, 42).status_code
    unblocked = server.user_unblocks(42)
    assert 200 == send(server, 42).status_code
    first, second = call(server, "getUpdates")  # type: ignore[misc]
    assert [blocked, unblocked] == [first["update_id"], second["update_id"]]
    change = first["my_chat_member"]
    assert {"id": 42, "type": "private"} == change["chat"]
    assert (42, False) == (change["from"]["id"], change["from"]["is_bot"])
    assert isinstance(change["date"], int)
    assert {"user": BOT, "status": "member"} == change["old_chat_member"]
    assert {"user": BOT, "status": "kicked", "until_date": 0} == change["new_chat_member"]
    back = second["my_chat_member"]
    assert ("kicked", "member") == (
        back["old_chat_member"]["status"],
        back["new_chat_member"]["status"],
    )


@pytest.mark.parametrize(
    ("chat_id", "status", "description"),
    [
        (-42, "kicked", "Forbidden: bot was kicked from the group chat"),
        (-42, "left", "Forbidden: bot was kicked from the group chat"),
        (-1001234567890, "kicked", "Forbidden: bot was kicked from the supergroup chat"),
        (-1001234567890, "left", "Forbidden: bot is not a member of the supergroup chat"),
        ("@news", "left", "Forbidden: bot is not a member of the channel chat"),
    ],
)
def test_bot_removed_from_a_group_is_refused_as_telegram_refuses_it(
    server: BotAPIServer, chat_id: int | str, status: str, description: str
) -> None:
    """bot_removed() refuses sends to the group or channel with Telegram's words for it
    and queues its my_chat_member update (from the admin); bot_added() delivers again."""
    server.bot_removed(chat_id, status=status, by=7)
    refused = send(server, chat_id)
    assert (403, description) == (refused.status_code, refused.json()["description"])
    server.bot_added(chat_id, status="administrator")
    assert 200 == send(server, chat_id).status_code
    removed, added = (u["my_chat_member"] for u in call(server, "getUpdates"))  # type: ignore[attr-defined]
    assert 7 == removed["from"]["id"]
    assert ("member", status) == (
        removed["old_chat_member"]["status"],
        removed["new_chat_member"]["status"],
    )
    assert (status, "administrator") == (
        added["old_chat_member"]["status"],
        added["new_chat_member"]["status"],
    )
    assert added["new_chat_member"]["can_manage_chat"] is True


def test_membership_updates_name_a_chat_of_the_right_kind(server: BotAPIServer) -> None:
    """A private chat cannot remove the bot, a group cannot block it, and a status the
    Bot API does not have is refused: each error names the argument."""
    with pytest.raises(ValueError, match="chat_id"):
        server.user_blocks(-1001234567890)
    with pytest.raises(ValueError, match="chat_id"):
        server.bot_removed(42)
    with pytest.raises(ValueError, match="status"):
        server.bot_removed(-42, status="member")
    with pytest.raises(ValueError, match="status"):
        server.bot_added(-42, status="kicked")
    assert 0 == server.pending_updates


def test_user_presses_queues_a_callback_query_on_the_message(server: BotAPIServer) -> None:
    """A press of an inline button: a callback_query with its data, from the user, on the
    message the server delivered; answerCallbackQuery is answered."""
    assert 200 == send(server, 42).status_code
    (delivered,) = server.deliveries
    server.user_presses(42, "notifyonce:stop:promo", message_id=delivered.message_id)
    (update,) = call(server, "getUpdates")  # type: ignore[misc]
    query = update["callback_query"]
    assert ("notifyonce:stop:promo", 42) == (query["data"], query["from"]["id"])
    assert (delivered.message_id, "hi") == (
        query["message"]["message_id"],
        query["message"]["text"],
    )
    assert {"id": 42, "type": "private"} == query["message"]["chat"]
    assert "" not in (query["id"], query["chat_instance"])
    assert call(server, "answerCallbackQuery", callback_query_id=query["id"]) is True


def test_blocks_and_presses_over_http(server: BotAPIServer) -> None:
    """POST /user_blocks, /user_unblocks, /bot_removed, /bot_added, /user_presses, /block
    and /unblock do what the methods do, for a bot polling from another process; a bad
    body is a 400."""

    def control(route: str, **params: object) -> httpx.Response:
        return httpx.post(f"{server.url}/{route}", data=params, timeout=10)

    assert {"ok": True, "result": True} == control("block", chat_id=43).json()
    assert 403 == send(server, 43).status_code
    assert 200 == control("unblock", chat_id=43).status_code
    assert 200 == send(server, 43).status_code
    assert 0 == server.pending_updates  # no update for a block alone
    assert 200 == control("user_blocks", chat_id=42).status_code
    assert 403 == send(server, 42).status_code
    assert 200 == control("user_unblocks", chat_id=42).status_code
    assert 200 == control("bot_removed", chat_id=-42, status="left").status_code
    assert 403 == send(server, -42).status_code
    assert 200 == control("bot_added", chat_id=-42).status_code
    answer = control("user_presses", chat_id=42, data="notifyonce:stop:promo")
    assert 200 == answer.status_code
    kinds = [next(k for k in u if k != "update_id") for u in call(server, "getUpdates")]  # type: ignore[attr-defined]
    assert ["my_chat_member"] * 4 + ["callback_query"] == kinds
    assert isinstance(answer.json()["result"]["update_id"], int)
    bad = control("user_blocks", chat_id="not a chat")
    assert (400, False) == (bad.status_code, bad.json()["ok"])
    assert 400 == control("bot_removed", chat_id=42).status_code


def test_reset_forgets_blocks(server: BotAPIServer) -> None:
    """reset() unblocks every chat, as it forgets scripts."""
    server.block(42)
    server.bot_removed(-42)
    server.reset()
    assert [200, 200] == [send(server, 42).status_code, send(server, -42).status_code]


def every_kind_of_update(server: BotAPIServer) -> list[dict[str, object]]:
    """One update of each kind the server queues, as getUpdates hands them out."""
    server.user_says(42, "/start")
    server.user_blocks(42)
    server.user_unblocks(42)
    server.bot_removed(-1001234567890, status="kicked")
    server.bot_added(-1001234567890, status="administrator")
    server.bot_removed("@news", status="left")
    server.user_presses(42, "notifyonce:stop:promo")
    updates = call(server, "getUpdates")
    assert isinstance(updates, list)
    return updates


def test_aiogram_parses_every_update(server: BotAPIServer) -> None:
    """aiogram 3 reads each queued update as the event it stands for."""
    pytest.importorskip("aiogram")
    from aiogram.types import Update

    parsed = [Update.model_validate(u) for u in every_kind_of_update(server)]
    assert ["message"] + ["my_chat_member"] * 5 + ["callback_query"] == [
        u.event_type for u in parsed
    ]
    members = [u.my_chat_member for u in parsed if u.my_chat_member is not None]
    assert ["kicked", "member", "kicked", "administrator", "left"] == [
        m.new_chat_member.status for m in members
    ]
    assert {1} == {m.new_chat_member.user.id for m in members}
    assert ["private", "private", "supergroup", "supergroup", "channel"] == [
        m.chat.type for m in members
    ]


def test_python_telegram_bot_parses_every_update(server: BotAPIServer) -> None:
    """python-telegram-bot reads each queued update as the event it stands for."""
    pytest.importorskip("telegram")
    from telegram import Bot, Update

    bot = Bot("1:T")
    parsed = [Update.de_json(u, bot) for u in every_kind_of_update(server)]
    members = [u.my_chat_member for u in parsed if u.my_chat_member is not None]
    assert ["kicked", "member", "kicked", "administrator", "left"] == [
        m.new_chat_member.status for m in members
    ]
    assert {1} == {m.new_chat_member.user.id for m in members}
    (pressed,) = [u.callback_query for u in parsed if u.callback_query is not None]
    assert ("notifyonce:stop:promo", 42) == (pressed.data, pressed.message.chat.id)
    assert "/start" == parsed[0].message.text
