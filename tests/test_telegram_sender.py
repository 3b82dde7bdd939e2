"""TelegramSender against httpx.MockTransport: classification, retries, waits, secrets.

What it shares with WebhookSender (options, timeouts, client lifecycle, the transport error
table) is tested once in test_http_senders.py.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import httpx
import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    Sender,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce.ratelimit import MemoryRateStore
from notifyonce.telegram import RateLimit, TelegramSender

from ._fakes import FakeClock, Script, scripted, send_scripted

TOKEN = "123456:SECRET-token_value"
OK_BODY = {"ok": True, "result": {"message_id": 77, "chat": {"id": 42}, "text": "hi"}}


def api_error(status: int, description: str, **parameters: Any) -> httpx.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return httpx.Response(status, json=body)


def html(status: int) -> httpx.Response:
    return httpx.Response(status, text="<html><body>Bad Gateway</body></html>")


def make_sender(
    script: Script,
    clock: FakeClock,
    *,
    rate_limit: RateLimit | None = None,
    **options: Any,
) -> TelegramSender:
    return TelegramSender(TOKEN, rate_limit=rate_limit, **scripted(script, clock), **options)


async def send(
    steps: Iterable[Any], **options: Any
) -> tuple[Receipt | SendError, Script, FakeClock]:
    return await send_scripted(make_sender, steps, **options)


async def test_delivers_and_returns_receipt() -> None:
    """A 200 ok answer gives a receipt with Telegram's message id, after one request."""
    result, script, _ = await send([httpx.Response(200, json=OK_BODY)])
    assert Receipt("42", 77, None) == result
    assert 1 == len(script.requests)
    assert "/bot123456:SECRET-token_value/sendMessage" == script.requests[0].url.path


async def test_message_options_are_passed_through() -> None:
    """Parse mode, silence, link preview, reply markup and raw options reach sendMessage."""
    script, clock = Script([httpx.Response(200, json=OK_BODY)]), FakeClock()
    sender = make_sender(script, clock)
    markup = {"inline_keyboard": [[{"text": "Pay", "url": "https://example.com"}]]}
    message = Message(
        "<b>6 hours left</b>",
        parse_mode="HTML",
        silent=True,
        link_preview=False,
        reply_markup=markup,
        options={"message_thread_id": 9, "protect_content": True},
    )
    await sender.send("-100123", message)
    expected = {
        "chat_id": -100123,
        "text": "<b>6 hours left</b>",
        "parse_mode": "HTML",
        "disable_notification": True,
        "link_preview_options": {"is_disabled": True},
        "reply_markup": markup,
        "message_thread_id": 9,
        "protect_content": True,
    }
    assert expected == script.bodies[0]


async def test_channel_username_is_sent_as_string() -> None:
    """An @channelname recipient is passed as a string chat_id."""
    script, clock = Script([httpx.Response(200, json=OK_BODY)]), FakeClock()
    receipt = await make_sender(script, clock).send("@my_channel", Message("x"))
    assert "@my_channel" == script.bodies[0]["chat_id"]
    assert "@my_channel" == receipt.recipient


@pytest.mark.parametrize(
    ("answer", "error_class", "code"),
    [
        (api_error(403, "Forbidden: bot was blocked by the user"), PermanentSendError, 403),
        (api_error(403, "Forbidden: user is deactivated"), PermanentSendError, 403),
        (api_error(403, "Forbidden: bot was kicked from the group chat"), PermanentSendError, 403),
        (api_error(400, "Bad Request: chat not found"), PermanentSendError, 400),
        (api_error(400, "Bad Request: can't parse entities"), PermanentSendError, 400),
        (api_error(401, "Unauthorized"), SenderConfigError, 401),
        (api_error(404, "Not Found"), SenderConfigError, 404),
        (html(404), SenderConfigError, 404),
        (httpx.Response(302, headers={"location": "https://x"}), SenderConfigError, 302),
        (html(502), UncertainSendError, 502),
        (html(504), UncertainSendError, 504),
        (api_error(502, "Bad Gateway"), UncertainSendError, 502),
        (api_error(504, "Gateway Timeout"), UncertainSendError, 504),
        (httpx.Response(200, text="<html>captive portal</html>"), UncertainSendError, 200),
        (httpx.Response(200, content=b'{"ok": tr'), UncertainSendError, 200),
    ],
    ids=lambda v: getattr(v, "__name__", None) or str(getattr(v, "status_code", v)),
)
async def test_final_answers_are_not_retried(
    answer: httpx.Response, error_class: type[SendError], code: int
) -> None:
    """Refusals and answers that may hide a delivery raise at once, after one request."""
    result, script, clock = await send([answer], max_retries=5)
    assert error_class is type(result)
    assert isinstance(result, SendError)
    assert code == result.code
    assert 1 == len(script.requests)
    assert [] == clock.waits


@pytest.mark.parametrize(
    "answer",
    [api_error(500, "Internal Server Error"), html(500), html(503), api_error(503, "Unavailable")],
    ids=["500-json", "500-html", "503-html", "503-json"],
)
async def test_server_errors_are_retried_with_backoff(answer: httpx.Response) -> None:
    """A 5xx the server answered is transient: retried max_retries times with full jitter."""
    result, script, clock = await send([answer], max_retries=3, backoff_base=0.5)
    assert TransientSendError is type(result)
    assert 4 == len(script.requests)
    # rng() == 0.5: half of min(8, 0.5 * 2**n) for n = 0, 1, 2.
    assert [0.25, 0.5, 1.0] == clock.waits


async def test_server_error_then_success() -> None:
    """A transient 500 followed by ok delivers once and returns the receipt."""
    result, script, clock = await send([html(500), httpx.Response(200, json=OK_BODY)])
    assert Receipt("42", 77, None) == result
    assert 2 == len(script.requests)
    assert [0.25] == clock.waits


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.PoolTimeout("no free connection"),
        httpx.ProxyError("proxy said no"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_certain_transport_failures_are_retried(exc: Exception) -> None:
    """Failures before the request left are transient; the first retry is immediate."""
    result, script, clock = await send([exc], max_retries=3)
    assert TransientSendError is type(result)
    assert 4 == len(script.requests)
    assert [0.5, 1.0] == clock.waits  # the immediate retry is not slept; then n=1, n=2
    # A redacted stand-in that names the original class, never the original itself; of
    # a caller's transport (this mock), only the class: its text may quote the body.
    assert type(exc).__name__ == str(result.__cause__)
    assert not isinstance(result.__cause__, httpx.HTTPError)


@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (httpx.ReadTimeout("timed out"), UncertainSendError),
        (httpx.ReadError("[Errno 104] Connection reset by peer"), UncertainSendError),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            UncertainSendError,
        ),
        (httpx.WriteError("broken pipe"), UncertainSendError),
        (httpx.WriteTimeout("timed out"), UncertainSendError),
        (OSError("something odd in a custom transport"), UncertainSendError),
        (httpx.LocalProtocolError("illegal header"), PermanentSendError),
        (httpx.UnsupportedProtocol("ftp"), PermanentSendError),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_failures_after_sending_are_not_retried(
    exc: Exception, error_class: type[SendError]
) -> None:
    """Failures that may hide a delivery (or cannot be fixed by retrying) raise at once."""
    result, script, clock = await send([exc], max_retries=3)
    assert error_class is type(result)
    assert 1 == len(script.requests)
    assert [] == clock.waits


async def test_connect_error_then_success_retries_once_immediately() -> None:
    """A refused connection followed by ok delivers with no backoff wait."""
    result, script, clock = await send(
        [httpx.ConnectError("refused"), httpx.Response(200, json=OK_BODY)]
    )
    assert Receipt("42", 77, None) == result
    assert 2 == len(script.requests)
    assert [] == clock.waits


async def test_retries_stop_at_the_budget() -> None:
    """Backoff never sleeps past the overall deadline of one send."""
    result, script, clock = await send(
        [httpx.ConnectError("refused")], max_retries=50, budget=5.0, backoff_base=1.0
    )
    assert TransientSendError is type(result)
    assert sum(clock.waits) <= 5.0
    # waits: 0 (immediate), then 0.5*min(8, 2**n): 1, 2 -> the next (4) would pass 5 s.
    assert [1.0, 2.0] == clock.waits
    assert 4 == len(script.requests)


async def test_per_call_budget_narrows_one_send() -> None:
    """send(..., budget=) bounds that send only: a 429 of 10 s raises at once under budget=3."""
    script, clock = Script([api_error(429, "Too Many Requests", retry_after=10)]), FakeClock()
    sender = make_sender(script, clock)
    with pytest.raises(TransientSendError) as info:
        await sender.send("42", Message("x"), budget=3)
    assert 10.0 == info.value.retry_after
    assert [] == clock.waits
    with pytest.raises(ValidationError) as bad:
        await sender.send("42", Message("x"), budget=-1)
    assert "budget" == bad.value.field


async def test_closed_callers_client_is_reported_plainly() -> None:
    """A caller's client closed before the send raises RuntimeError, not a send error."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(Script([httpx.Response(200)])))
    await client.aclose()
    with pytest.raises(RuntimeError):
        await TelegramSender(TOKEN, client=client).send("42", Message("x"))


async def test_flood_wait_within_budget_is_honoured() -> None:
    """A 429 with retry_after inside the budget waits exactly that long, then delivers."""
    result, script, clock = await send(
        [
            api_error(429, "Too Many Requests: retry after 3", retry_after=3),
            httpx.Response(200, json=OK_BODY),
        ]
    )
    assert Receipt("42", 77, None) == result
    assert [3.0] == clock.waits
    assert 2 == len(script.requests)


async def test_flood_wait_with_limiter_waits_through_the_limiter() -> None:
    """With the rate limiter on, the 429 deadline is kept by the limiter and honoured."""
    result, _, clock = await send(
        [
            api_error(429, "Too Many Requests: retry after 3", retry_after=3),
            httpx.Response(200, json=OK_BODY),
        ],
        rate_limit=RateLimit(),
    )
    assert Receipt("42", 77, None) == result
    assert [3.0] == clock.waits


async def test_flood_wait_beyond_budget_raises_with_retry_after() -> None:
    """A 429 whose retry_after exceeds the budget raises at once, carrying retry_after."""
    result, script, clock = await send(
        [api_error(429, "Too Many Requests: retry after 120", retry_after=120)], budget=30.0
    )
    assert isinstance(result, TransientSendError)
    assert 120.0 == result.retry_after
    assert 429 == result.code
    assert 1 == len(script.requests)
    assert [] == clock.waits


async def test_retry_after_header_used_without_api_body() -> None:
    """A bare 429 from a proxy is transient and its Retry-After header is kept."""
    result, _, _ = await send(
        [httpx.Response(429, headers={"retry-after": "90"}, text="slow down")]
    )
    assert isinstance(result, TransientSendError)
    assert 90.0 == result.retry_after


async def test_migration_is_followed_once() -> None:
    """A 400 with migrate_to_chat_id resends to the new chat and the receipt says so."""
    result, script, _ = await send(
        [
            api_error(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                migrate_to_chat_id=-1001234,
            ),
            httpx.Response(200, json=OK_BODY),
        ]
    )
    assert Receipt("-1001234", 77, "-1001234") == result
    assert [42, -1001234] == [b["chat_id"] for b in script.bodies]


async def test_second_migration_is_permanent() -> None:
    """A chat that moves twice in one send is refused rather than chased."""
    moved = api_error(400, "Bad Request: group chat was upgraded", migrate_to_chat_id=-100555)
    result, script, _ = await send([moved])
    assert PermanentSendError is type(result)
    assert 2 == len(script.requests)


async def test_response_hook_status_error_is_reclassified() -> None:
    """A caller's client that raises HTTPStatusError in a hook still gets the right class."""

    async def raise_for_status(response: httpx.Response) -> None:
        response.raise_for_status()

    script, clock = Script([api_error(403, "Forbidden: bot was blocked by the user")]), FakeClock()
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(script), event_hooks={"response": [raise_for_status]}
    )
    sender = TelegramSender(TOKEN, client=client, rate_limit=None, clock=clock, sleep=clock.sleep)
    with pytest.raises(PermanentSendError) as info:
        await sender.send("42", Message("hello"))
    assert 403 == info.value.code


class TracingTransport(httpx.AsyncBaseTransport):
    """Calls the trace extension like httpcore does, then fails with ``exc``."""

    def __init__(self, events: list[str], exc: Exception) -> None:
        self.events = events
        self.exc = exc
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        trace = request.extensions["trace"]
        for name in self.events:
            await trace(name, {})
        if self.calls > 1:
            return httpx.Response(200, json=OK_BODY)
        raise self.exc


@pytest.mark.parametrize(
    ("events", "error_class"),
    [
        (["connection.connect_tcp.started", "connection.connect_tcp.complete"], None),
        (["http11.send_request_headers.started"], UncertainSendError),
    ],
    ids=["before-writing", "after-writing"],
)
async def test_trace_evidence_decides_closed_connection(
    events: list[str], error_class: type[SendError] | None
) -> None:
    """A peer-closed connection is retried only when httpcore never started writing."""
    transport = TracingTransport(
        events, httpx.RemoteProtocolError("Server disconnected without sending a response.")
    )
    clock = FakeClock()
    sender = TelegramSender(
        TOKEN,
        client=httpx.AsyncClient(transport=transport),
        rate_limit=None,
        clock=clock,
        sleep=clock.sleep,
    )
    if error_class is None:
        assert Receipt("42", 77, None) == await sender.send("42", Message("x"))
        assert 2 == transport.calls
    else:
        with pytest.raises(error_class):
            await sender.send("42", Message("x"))
        assert 1 == transport.calls


@pytest.mark.parametrize("recipient", ["", "abc", "12 3", "0", "--5", "@", "@x", "42\n", "+42"])
async def test_invalid_recipient_is_rejected_before_sending(recipient: str) -> None:
    """A recipient that is neither a chat id nor @channelname raises naming it; no request."""
    script, clock = Script([httpx.Response(200, json=OK_BODY)]), FakeClock()
    with pytest.raises(ValidationError) as info:
        await make_sender(script, clock).send(recipient, Message("x"))
    assert "recipient" == info.value.field
    assert [] == script.requests


@pytest.mark.parametrize("recipient", [42.0, True, None, b"42"])
async def test_a_recipient_neither_str_nor_int_is_a_type_error(recipient: object) -> None:
    """A float, bool, None or bytes recipient raises ValidationTypeError naming recipient
    (an int is a chat id: see the end-to-end tests)."""
    script, clock = Script([httpx.Response(200, json=OK_BODY)]), FakeClock()
    with pytest.raises(ValidationTypeError) as info:
        await make_sender(script, clock).send(recipient, Message("x"))  # type: ignore[arg-type]
    assert "recipient" == info.value.field
    assert [] == script.requests


@pytest.mark.parametrize("token", ["", "has space", "a/b"])
def test_invalid_token_is_rejected_without_echoing_it(token: str) -> None:
    """A malformed token raises naming the field, and the message does not contain it."""
    with pytest.raises(ValidationError) as info:
        TelegramSender(token)
    assert "token" == info.value.field
    assert not token or token not in str(info.value)


def test_sender_satisfies_protocol_and_hides_token() -> None:
    """TelegramSender is a Sender, and its repr does not contain the token."""
    sender = TelegramSender(TOKEN)
    assert isinstance(sender, Sender)
    assert TOKEN not in repr(sender)
    assert TOKEN not in repr(vars(sender))


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + repr(exc)


async def test_token_never_in_logs_or_exception_text(caplog: pytest.LogCaptureFixture) -> None:
    """With every logger at DEBUG, neither logs nor formatted errors show the token or text."""

    def echo_url(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}")

    async def raise_for_status(response: httpx.Response) -> None:
        response.raise_for_status()  # HTTPStatusError's str() contains the URL

    secret_text = "the secret message body"
    for name in ("httpx", "httpcore", "notifyonce"):
        caplog.set_level(logging.DEBUG, logger=name)
    texts: list[str] = []
    for steps, hooks in (
        ([echo_url], []),
        ([httpx.Response(200, json=OK_BODY)], []),
        ([html(500)], [raise_for_status]),
        ([api_error(400, f"Bad Request: token {TOKEN} rejected")], []),
    ):
        clock = FakeClock()
        client = httpx.AsyncClient(
            transport=httpx.MockTransport(Script(steps)), event_hooks={"response": hooks}
        )
        sender = TelegramSender(
            TOKEN, client=client, rate_limit=None, clock=clock, sleep=clock.sleep
        )
        try:
            await sender.send("42", Message(secret_text))
        except SendError as exc:
            texts.append(_all_text(exc))
    assert 3 == len(texts)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST" in logged  # the httpx line is there, redacted
    for text in [*texts, logged]:
        assert TOKEN not in text
        assert secret_text not in text


def test_importing_notifyonce_does_not_need_httpx() -> None:
    """notifyonce, its testing helpers and the pytest plugin import without httpx (and do
    not import it); notifyonce.telegram then names the extra."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['httpx'] = None\n"
        "import notifyonce, notifyonce.testing, notifyonce.testing._plugin\n"
        "print(sorted(m for m in sys.modules if m.startswith('httpx')))\n"
        "try:\n    import notifyonce.telegram\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, error = out.stdout.splitlines()
    assert "['httpx']" == imported  # only the None placeholder that blocks the import
    assert 'pip install "notifyonce[telegram]"' in error


def timed_sender(clock: FakeClock, sent_at: list[float], sleep: Any = None) -> TelegramSender:
    """A sender on the default limits and ``clock``, noting when each request leaves."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent_at.append(clock.now)
        return httpx.Response(200, json=OK_BODY)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    store = MemoryRateStore(clock=clock)
    return TelegramSender(
        TOKEN, client=client, rate_store=store, clock=clock, sleep=sleep or clock.sleep
    )


async def test_a_turn_is_handed_over_as_early_as_claims_take_and_sent_at_its_start() -> None:
    """After a claim (what the caller does between a turn and its send) took 50 ms, the
    next turn is handed over 50 ms before its start and its send leaves at that start. The
    first, sent 50 ms late, gave its turn back and left at once on a new one, its chat not
    held for a second by the turn it gave back."""
    clock, sent_at, handed = FakeClock(), [], []
    async with timed_sender(clock, sent_at) as sender:
        for chat, claim in (("1", 0.05), ("2", 0.01)):
            async with sender.turn(chat):
                handed.append(clock.now)
                clock.now += claim
                await sender.send(chat, Message("x"))
    assert [0.0, 0.05] == pytest.approx(handed)
    assert [0.05, 0.10] == pytest.approx(sent_at)


async def test_a_send_woken_late_for_its_turn_takes_a_new_one() -> None:
    """A turn is handed over as early as the last claim took (10 ms) and its send waits
    for its start; woken 50 ms after it (a busy event loop), the send gives that turn back
    and leaves at once on a new one. The next send is paced from the start actually used,
    not from the one missed (it would leave 10 ms after the late send)."""
    clock, sent_at = FakeClock(), []
    sleeps = []

    async def oversleep(seconds: float) -> None:
        await clock.sleep(seconds)
        sleeps.append(seconds)
        if len(sleeps) == 2:  # chat 2's send, waiting for its turn's start
            clock.now += 0.05

    interval = 1.03 / 30
    async with timed_sender(clock, sent_at, oversleep) as sender:
        async with sender.turn("1"):
            clock.now += 0.01  # the claim
            await sender.send("1", Message("x"))
        for chat in ("2", "3"):
            async with sender.turn(chat):
                await sender.send(chat, Message("x"))
    woke = interval + 0.05
    assert [0.01, woke, woke + interval] == pytest.approx(sent_at)


async def test_a_turn_no_send_used_is_given_back() -> None:
    """A turn left without a send (the claim found the slot taken) is given back: the next
    turn to the same chat is not held for the chat's second."""
    clock, sent_at = FakeClock(), []
    async with timed_sender(clock, sent_at) as sender:
        async with sender.turn("7"):
            pass
        async with sender.turn("7"):
            await sender.send("7", Message("x"))
    assert [0.0] == pytest.approx(sent_at)


def test_a_text_checked_before_is_checked_by_its_fields_and_each_payload_is_fresh() -> None:
    """The sender remembers the last text message it checked (a broadcast checks and sends
    one message to every chat): another message with other fields is checked in full, and
    each send gets a payload of its own to add its chat id to."""
    from notifyonce._senders.telegram.sender import prepare

    short = Message("x" * 4096, parse_mode="HTML", silent=True, options={"protect_content": True})
    for _ in range(2):  # checked, then remembered
        _, payload = prepare("1", short)
        payload["allow_paid_broadcast"] = True  # what a paid sender adds to its own payload
    paid = {"text": "x" * 4096, "parse_mode": "HTML", "disable_notification": True}
    paid["protect_content"] = True
    assert ("2", paid) == prepare("2", replace(short))
    del paid["protect_content"]
    assert ("2", paid) == prepare("2", replace(short, options={}))
    with pytest.raises(ValidationError, match="4097 characters"):
        prepare("1", Message("x" * 4097, parse_mode="HTML", silent=True))
    with pytest.raises(ValidationError, match="never closed"):
        prepare("1", Message("<b>" + "x" * 10, parse_mode="HTML", silent=True))
    loud = prepare("1", replace(short, silent=False))[1]
    assert {"text": "x" * 4096, "parse_mode": "HTML", "protect_content": True} == loud
