"""notifyonce.testing: FakeSender, the BotAPIServer and the pytest plugin fixtures."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    Sender,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce.testing import OK, BotAPIServer, FakeSender, Reply, Request


async def test_fake_sender_records_deliveries(fake_sender: FakeSender) -> None:
    """By default every send is delivered, recorded in order, with increasing message ids."""
    first = await fake_sender.send("1", Message("a"))
    second = await fake_sender.send("2", Message("b"))
    assert [Receipt("1", 1), Receipt("2", 2)] == [first, second]
    assert ["a", "b"] == fake_sender.texts
    assert [Message("b")] == fake_sender.sent_to("2")
    assert isinstance(fake_sender, Sender)


async def test_fail_next_for_one_recipient() -> None:
    """A failure scripted for a recipient hits only that recipient's next send."""
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="7")
    await sender.send("8", Message("x"))
    with pytest.raises(PermanentSendError):
        await sender.send("7", Message("x"))
    await sender.send("7", Message("x"))
    assert [True, False, True] == [r.delivered for r in sender.records]
    assert isinstance(sender.records[1].error, PermanentSendError)


async def test_script_plays_in_order_then_succeeds() -> None:
    """A script is played one outcome per send, recipient's own before the shared one."""
    sender = FakeSender()
    sender.script(None, [TransientSendError("flood", code=429, retry_after=3)])
    sender.script("7", [OK, UncertainSendError("read timeout")])
    outcomes = []
    for recipient in ("7", "7", "9", "9"):
        try:
            await sender.send(recipient, Message("x"))
            outcomes.append("ok")
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    assert ["ok", "UncertainSendError", "TransientSendError", "ok"] == outcomes


async def test_uncertain_delivered_counts_as_sent() -> None:
    """An uncertain failure scripted with delivered=True raises but counts as delivered."""
    sender = FakeSender()
    sender.fail_next(UncertainSendError("answer lost"), recipient="7", delivered=True)
    with pytest.raises(UncertainSendError):
        await sender.send("7", Message("x"))
    assert ["x"] == sender.texts


def test_only_uncertain_can_hide_a_delivery() -> None:
    """delivered=True with a permanent refusal is rejected, naming the option."""
    with pytest.raises(ValidationError) as info:
        FakeSender().fail_next(PermanentSendError("no"), delivered=True)
    assert "delivered" == info.value.field


def test_script_rejects_non_outcomes() -> None:
    """Anything but OK or a SendError instance in a script raises naming its position."""
    with pytest.raises(ValidationTypeError) as info:
        FakeSender().script("7", [OK, ValueError("x")])  # type: ignore[list-item]
    assert "outcomes[1]" == info.value.field


async def test_migration_is_simulated() -> None:
    """Sends to a migrated chat land at the new id, and the receipt says so."""
    sender = FakeSender()
    sender.migrate("-4001", "-1004001")
    receipt = await sender.send("-4001", Message("x"))
    assert Receipt("-1004001", 1, "-1004001") == receipt
    assert [Message("x")] == sender.sent_to("-1004001")


async def test_latency_and_concurrency_keep_script_order() -> None:
    """Concurrent sends with latency take scripted outcomes in call order."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    sender = FakeSender(latency=0.2, sleep=sleep)
    sender.script("7", [PermanentSendError("no"), OK])
    results = await asyncio.gather(
        sender.send("7", Message("first")),
        sender.send("7", Message("second")),
        return_exceptions=True,
    )
    assert isinstance(results[0], PermanentSendError)
    assert ["second"] == sender.texts
    assert [0.2, 0.2] == waits


async def test_fake_sender_validates_input() -> None:
    """A non-str recipient or a non-Message raises naming the field."""
    sender = FakeSender()
    with pytest.raises(ValidationTypeError) as info:
        await sender.send(7, Message("x"))  # type: ignore[arg-type]
    assert "recipient" == info.value.field
    with pytest.raises(ValidationTypeError) as info:
        await sender.send("7", "x")  # type: ignore[arg-type]
    assert "message" == info.value.field
    sender.reset()
    assert [] == sender.records


async def test_lost_answer_is_recorded_as_delivered() -> None:
    """lose_answer: the message is delivered and recorded, then the send is uncertain."""
    sender = FakeSender()
    sender.lose_answer(recipient="7")
    with pytest.raises(UncertainSendError):
        await sender.send("7", Message("x"))
    await sender.send("7", Message("y"))
    assert ["x", "y"] == sender.texts
    assert [None, Receipt("7", 1)] == [r.receipt for r in sender.records]


async def test_delivery_is_recorded_before_the_answer_returns() -> None:
    """With answer_latency, a send cancelled on the way back was delivered all the same."""
    sender = FakeSender(answer_latency=30)
    task = asyncio.create_task(sender.send("7", Message("x")))
    await sender.wait_in_flight(1)
    assert (["x"], 1) == (sender.texts, sender.in_flight)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (["x"], 0) == (sender.texts, sender.in_flight)


async def test_held_answers_wait_until_released() -> None:
    """hold_answers: deliveries happen, answers (and scripted errors) wait for release."""
    sender = FakeSender()
    sender.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="2")
    sender.hold_answers()
    tasks = [asyncio.create_task(sender.send(r, Message("x"))) for r in ("1", "2")]
    await sender.wait_in_flight(2)
    assert ([True, False], [False, False]) == (
        [r.delivered for r in sender.records],
        [t.done() for t in tasks],
    )
    sender.release_answers()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [Receipt("1", 1), PermanentSendError] == [results[0], type(results[1])]
    assert 0 == sender.in_flight
    await sender.send("3", Message("x"))  # released for good


async def test_wait_in_flight_gives_up_loudly() -> None:
    """wait_in_flight raises TimeoutError, naming the counts, when too few are in flight."""
    with pytest.raises(TimeoutError, match=r"0 sends in flight after 0\.05s, expected 1"):
        await FakeSender().wait_in_flight(1, timeout=0.05)


def test_answer_latency_is_checked() -> None:
    """A negative or non-number answer_latency names the field."""
    with pytest.raises(ValidationError, match="answer_latency"):
        FakeSender(answer_latency=-1)
    with pytest.raises(ValidationTypeError, match="answer_latency"):
        FakeSender(answer_latency="1")  # type: ignore[arg-type]


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_bot_api_server_from_sync_code(bot_api_server: BotAPIServer) -> None:
    """The server answers plain sync HTTP: delivers, refuses as scripted, 404s unknown methods."""
    bot_api_server.script("5", [Reply.blocked()])
    url = f"{bot_api_server.url}/bot1:abc/sendMessage"
    status, body = _post(url, {"chat_id": 4, "text": "hi"})
    assert (200, True) == (status, body["ok"])
    status, body = _post(url, {"chat_id": 5, "text": "hi"})
    assert (403, "Forbidden: bot was blocked by the user") == (status, body["description"])
    status, _ = _post(f"{bot_api_server.url}/bot1:abc/sendSticker", {"chat_id": 4})
    assert 404 == status
    assert ["4"] == [d.chat_id for d in bot_api_server.deliveries]


def test_on_request_runs_while_the_send_is_in_flight() -> None:
    """on_request sees each sendMessage after its delivery and before any answer is written,
    with the bot id (never the secret) of the token that sent it."""
    seen: list[tuple[int | None, str | None, int, bool]] = []
    answered: list[bool] = []

    def hook(request: Request) -> None:
        seen.append((request.bot_id, request.chat_id, len(server.deliveries), bool(answered)))

    with BotAPIServer(on_request=hook) as server:
        server.script("5", [Reply.blocked()])
        for bot, chat in (("77:secret-a", 4), ("x:secret-b", 5)):
            _post(f"{server.url}/bot{bot}/sendMessage", {"chat_id": chat, "text": "hi"})
            answered.append(True)
        _post(f"{server.url}/bot77:secret-a/getMe", {})
    assert [(77, "4", 1, False), (None, "5", 1, True)] == seen
    assert "secret" not in repr(server.requests)


def test_an_answer_held_until_an_event_is_delivered_first_and_answered_once_it_is_set(
    bot_api_server: BotAPIServer,
) -> None:
    """Reply.ok(until=event): the message is delivered at once, its answer written only
    after the event is set, while other chats' sends are answered meanwhile."""
    release = threading.Event()
    bot_api_server.script("1", [Reply.ok(until=release)])
    url = f"{bot_api_server.url}/bot1:abc/sendMessage"
    held: list[tuple[int, dict[str, Any]]] = []
    sender = threading.Thread(target=lambda: held.append(_post(url, {"chat_id": 1, "text": "a"})))
    sender.start()
    deadline = time.monotonic() + 10
    while not bot_api_server.deliveries:
        assert time.monotonic() < deadline, "the held send was not delivered"
        time.sleep(0.01)
    assert (200, True) == (_post(url, {"chat_id": 2, "text": "b"})[0], True)
    sender.join(0.3)
    assert [] == held  # still waiting for its answer
    release.set()
    sender.join(10)
    assert [200] == [status for status, _ in held]
    assert ["1", "2"] == [d.chat_id for d in bot_api_server.deliveries]


def test_refused_requests_are_recorded_with_their_reply() -> None:
    """A wrong token (401), a wrong path and an unknown method (404) are in ``requests``,
    each with the reply it got and the bot id, never the token's secret."""
    with BotAPIServer(token="77:right") as server:
        _post(f"{server.url}/bot77:wrong-secret/sendMessage", {"chat_id": 4, "text": "hi"})
        _post(f"{server.url}/api/sendMessage", {"chat_id": 4, "text": "hi"})
        _post(f"{server.url}/bot77:right/sendSticker", {"chat_id": 4})
        _post(f"{server.url}/bot77:right/sendMessage", {"chat_id": 4, "text": "hi"})
        requests = server.requests
    assert [("sendMessage", 401, 77), ("sendMessage", 404, None), ("sendSticker", 404, 77)] == [
        (r.method, r.reply.status, r.bot_id) for r in requests[:3]
    ]
    assert (200, True) == (requests[3].reply.status, requests[3].reply.delivers)
    assert "wrong-secret" not in repr(requests)


def test_a_fixed_port_and_updates_queued_over_http() -> None:
    """port= binds that port (a taken one raises at start); POST /user_says queues an update
    that getUpdates hands out."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with BotAPIServer(port=port) as server:
        assert f"http://127.0.0.1:{port}" == server.url
        with pytest.raises(OSError):
            BotAPIServer(port=port).start()
        status, body = _post(f"{server.url}/user_says", {"chat_id": 42, "text": "/start"})
        assert (200, 1) == (status, body["result"]["update_id"])
        status, body = _post(f"{server.url}/bot1:a/getUpdates", {"timeout": 0})
        assert "/start" == body["result"][0]["message"]["text"]
        assert 400 == _post(f"{server.url}/user_says", {"text": "no chat"})[0]


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_post_made_over_http_is_copied_and_deleted_over_http(
    bot_api_server: BotAPIServer,
) -> None:
    """POST /post puts a message in a channel and answers its message_id (or the one
    asked for), which copyMessage copies; POST /delete_message removes it, and copying it
    is then refused as Telegram refuses it."""
    url = bot_api_server.url
    status, body = _post(f"{url}/post", {"chat_id": -1001234567890, "text": "secret-post"})
    assert 200 == status
    first = body["result"]
    assert isinstance(first, dict)
    chosen = _post(f"{url}/post", {"chat_id": "-1001234567890", "message_id": 42, "text": "b"})
    assert (200, {"message_id": 42}) == (chosen[0], chosen[1]["result"])
    copy = f"{url}/bot1:a/copyMessage"
    for message_id in (first["message_id"], 42):
        status, _ = _post(
            copy, {"chat_id": 7, "from_chat_id": -1001234567890, "message_id": message_id}
        )
        assert 200 == status
    assert ["secret-post", "b"] == [d.text for d in bot_api_server.deliveries]
    deleted = _post(f"{url}/delete_message", {"chat_id": -1001234567890, "message_id": 42})
    status, body = _post(copy, {"chat_id": 7, "from_chat_id": -1001234567890, "message_id": 42})
    assert ((200, True), 400, "Bad Request: message to copy not found") == (
        (deleted[0], deleted[1]["result"]),
        status,
        body["description"],
    )
    assert 400 == _post(f"{url}/post", {"text": "no chat"})[0]
    assert "chat_id" in _post(f"{url}/delete_message", {"chat_id": 5})[1]["description"]


@pytest.mark.parametrize(
    ("script", "status", "description", "parameters"),
    [
        ({"reply": "blocked"}, 403, "Forbidden: bot was blocked by the user", None),
        ({"reply": "chat_not_found"}, 400, "Bad Request: chat not found", None),
        (
            {"reply": "flood", "retry_after": 7},
            429,
            "Too Many Requests: retry after 7",
            {"retry_after": 7},
        ),
        (
            {"reply": "migrate", "new_chat_id": -1009},
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            {"migrate_to_chat_id": -1009},
        ),
        (
            {"reply": "error", "status": 400, "description": "Bad Request: PEER_ID_INVALID"},
            400,
            "Bad Request: PEER_ID_INVALID",
            None,
        ),
    ],
)
def test_an_error_scripted_over_http_answers_the_next_sends_to_that_chat(
    bot_api_server: BotAPIServer,
    script: dict[str, object],
    status: int,
    description: str,
    parameters: dict[str, object] | None,
) -> None:
    """POST /script with a chat_id, a reply (blocked, chat_not_found, flood, migrate,
    error) and times answers that many sends to the chat so; then they are delivered."""
    url = bot_api_server.url
    assert 200 == _post(f"{url}/script", {"chat_id": 5, "times": 2, **script})[0]
    send = f"{url}/bot1:a/sendMessage"
    answers = [_post(send, {"chat_id": 5, "text": "hi"}) for _ in range(3)]
    expected = {"ok": False, "error_code": status, "description": description}
    if parameters is not None:
        expected["parameters"] = parameters
    assert [(status, expected), (status, expected)] == answers[:2]
    assert (200, True) == (answers[2][0], answers[2][1]["ok"])
    assert ["5"] == [d.chat_id for d in bot_api_server.deliveries]


@pytest.mark.parametrize(
    "script",
    [{"reply": "teapot"}, {"reply": "flood"}, {"reply": "blocked", "times": 0}, {"chat_id": 5}],
)
def test_a_script_the_server_cannot_read_is_a_400_naming_what_it_takes(
    bot_api_server: BotAPIServer, script: dict[str, object]
) -> None:
    """An unknown reply, a flood without retry_after, times below 1 or no reply is
    answered 400 with what /script takes, and scripts nothing."""
    status, body = _post(f"{bot_api_server.url}/script", script)
    assert 400 == status
    assert "/script takes" in str(body["description"])
    status, _ = _post(f"{bot_api_server.url}/bot1:a/sendMessage", {"chat_id": 5, "text": "x"})
    assert 200 == status


def test_what_the_server_received_is_read_as_json(bot_api_server: BotAPIServer) -> None:
    """GET /received lists every delivery (chat, message id, method, text, parameters such
    as reply_markup) and every send refused, with its status, as JSON."""
    url = bot_api_server.url
    keyboard = {"inline_keyboard": [[{"text": "Copy", "copy_text": {"text": "PROMO"}}]]}
    _post(f"{url}/bot1:a/sendMessage", {"chat_id": 4, "text": "hi", "reply_markup": keyboard})
    _post(f"{url}/script", {"chat_id": 5, "reply": "blocked"})
    _post(f"{url}/bot1:a/sendMessage", {"chat_id": 5, "text": "hi"})
    status, body = _get(f"{url}/received")
    assert 200 == status
    result = body["result"]
    (delivery,) = result["deliveries"]
    assert {
        "chat_id": "4",
        "message_id": bot_api_server.deliveries[0].message_id,
        "method": "sendMessage",
        "text": "hi",
        "file_id": None,
    } == {k: delivery[k] for k in ("chat_id", "message_id", "method", "text", "file_id")}
    assert keyboard == delivery["params"]["reply_markup"]
    assert [
        {"method": "sendMessage", "chat_id": "4", "status": 200, "delivered": True},
        {"method": "sendMessage", "chat_id": "5", "status": 403, "delivered": False},
    ] == result["requests"]


def test_public_names() -> None:
    """notifyonce.telegram and notifyonce.testing export exactly their documented names."""
    import notifyonce.telegram
    import notifyonce.testing

    assert [
        "CONNECT_TIMEOUT",
        "DEFAULT_BUDGET",
        "DEFAULT_LIMITS",
        "POOL_TIMEOUT",
        "WRITE_TIMEOUT",
        "FileIdStore",
        "HTTPOptions",
        "MemoryFileIdStore",
        "RateLimit",
        "RedactedTransportError",
        "SQLFileIdStore",
        "SenderClosedError",
        "TelegramSender",
        "escape_html",
        "escape_markdown_v2",
    ] == notifyonce.telegram.__all__
    assert [
        "OK",
        "BotAPIServer",
        "Change",
        "Delivery",
        "FakeSender",
        "Reply",
        "Request",
        "SendRecord",
        "Upload",
        "WebhookDelivery",
        "WebhookReceiver",
        "WebhookReply",
        "WebhookRequest",
    ] == notifyonce.testing.__all__
