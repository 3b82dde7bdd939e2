"""WebhookSender against httpx.MockTransport: classification, headers, signature, secrets.

What it shares with TelegramSender (options, timeouts, client lifecycle, the transport error
table) is tested once in test_http_senders.py.
"""

from __future__ import annotations

import email.utils
import gc
import json
import logging
import traceback
from collections.abc import Iterable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from notifyonce._senders.webhook import Accepted, classify_webhook_response
from notifyonce.webhook import WebhookSender, sign, verify_signature

from ._fakes import FakeClock, Script, scripted, send_scripted

URL = "https://user:pa55word@hooks.example.com/T0/B1/path-secret?token=query-secret"
SECRET = "hmac-shared-secret"
AUTH = "Bearer auth-header-secret"
NOW = 1_700_000_000.0


def make_sender(
    script: Script, clock: FakeClock, *, url: str = URL, **options: Any
) -> WebhookSender:
    return WebhookSender(url, wall_clock=lambda: NOW, **scripted(script, clock), **options)


async def send(
    steps: Iterable[Any], message: Message | None = None, **options: Any
) -> tuple[Receipt | SendError, Script, FakeClock]:
    return await send_scripted(make_sender, steps, message, **options)


async def test_posts_json_body_with_idempotency_key() -> None:
    """The default body carries every message field; the key goes in Idempotency-Key."""
    message = Message("hi", parse_mode="HTML", options={"a": 1}, idempotency_key="slot-1")
    result, script, _ = await send([httpx.Response(200, json={"id": 9})], message)
    assert Receipt("42", 9) == result
    request = script.requests[0]
    assert "POST" == request.method
    assert "slot-1" == request.headers["idempotency-key"]
    assert "application/json" == request.headers["content-type"]
    expected = {
        "recipient": "42",
        "text": "hi",
        "parse_mode": "HTML",
        "silent": False,
        "link_preview": None,
        "reply_markup": None,
        "options": {"a": 1},
        "idempotency_key": "slot-1",
    }
    assert expected == json.loads(request.content)


async def test_no_key_means_no_header() -> None:
    """A message without an idempotency key is sent without the header."""
    _, script, _ = await send([httpx.Response(204)])
    assert "idempotency-key" not in script.requests[0].headers


async def test_same_key_and_body_on_every_attempt() -> None:
    """Retries of one send repeat the same key and the same body bytes."""
    message = Message("hi", idempotency_key="slot-7")
    result, script, _ = await send([httpx.Response(503), httpx.Response(200)], message)
    assert Receipt("42", None) == result
    assert ["slot-7", "slot-7"] == [r.headers["idempotency-key"] for r in script.requests]
    assert script.requests[0].content == script.requests[1].content


async def test_custom_headers_and_body_builder() -> None:
    """Caller headers are sent; a body_builder shapes the JSON body."""

    def builder(recipient: str, message: Message) -> dict[str, Any]:
        return {"to": recipient, "msg": message.text}

    _, script, _ = await send(
        [httpx.Response(200)],
        url="https://hooks.example.com/incoming-42",  # credentials in a URL override the header
        headers={"Authorization": AUTH},
        body_builder=builder,
    )
    assert AUTH == script.requests[0].headers["authorization"]
    assert {"to": "42", "msg": "hello"} == json.loads(script.requests[0].content)


async def test_signature_is_hmac_of_timestamp_and_exact_body() -> None:
    """The signature header is sha256=HMAC(secret, b"<ts>." + body) and verifies."""
    _, script, _ = await send([httpx.Response(200)], secret=SECRET)
    request = script.requests[0]
    timestamp = request.headers["x-notifyonce-timestamp"]
    signature = request.headers["x-notifyonce-signature"]
    assert str(int(NOW)) == timestamp
    assert sign(request.content, SECRET, int(NOW)) == signature
    assert verify_signature(request.content, signature, timestamp, SECRET, now=lambda: NOW)


def test_verify_signature_refuses_tampering_and_replays() -> None:
    """A changed body, a wrong secret, a stale timestamp or a missing header do not verify."""
    body = b'{"recipient":"42"}'
    good = sign(body, SECRET, int(NOW))
    ts = str(int(NOW))
    assert verify_signature(body, good, ts, SECRET.encode(), now=lambda: NOW + 299)
    assert not verify_signature(body + b" ", good, ts, SECRET, now=lambda: NOW)
    assert not verify_signature(body, good, ts, "other", now=lambda: NOW)
    assert not verify_signature(body, good, ts, SECRET, now=lambda: NOW + 301)
    assert not verify_signature(body, None, ts, SECRET, now=lambda: NOW)
    assert not verify_signature(body, good, None, SECRET, now=lambda: NOW)
    assert not verify_signature(body, good, "soon", SECRET, now=lambda: NOW)


@settings(deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=2**40))
def test_signature_round_trips(body: bytes, timestamp: int) -> None:
    """Any body signed at any time verifies at that time with the same secret."""
    header = sign(body, SECRET, timestamp)
    assert verify_signature(body, header, str(timestamp), SECRET, now=lambda: timestamp)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Accepted),
        (201, Accepted),
        (202, Accepted),
        (204, Accepted),
        (301, SenderConfigError),
        (307, SenderConfigError),
        (400, PermanentSendError),
        (401, SenderConfigError),
        (403, PermanentSendError),
        (404, SenderConfigError),
        (410, PermanentSendError),
        (413, PermanentSendError),
        (422, PermanentSendError),
        (408, TransientSendError),
        (409, TransientSendError),
        (425, TransientSendError),
        (429, TransientSendError),
        (500, TransientSendError),
        (501, TransientSendError),
        (503, TransientSendError),
        (599, TransientSendError),
        (502, UncertainSendError),
        (504, UncertainSendError),
    ],
)
def test_every_status_class(status: int, expected: type) -> None:
    """2xx delivers; 408/409/425/429 and 5xx retry; 502/504 may have been processed."""
    outcome = classify_webhook_response(status, httpx.Headers(), b"")
    assert expected is type(outcome)
    if isinstance(outcome, SendError):
        assert status == outcome.code


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        ("0.5", 0.5),
        (email.utils.formatdate(NOW + 120, usegmt=True), 120.0),
        (email.utils.formatdate(NOW - 120, usegmt=True), 0.0),
        ("soon", None),
        ("-3", None),
        ("inf", None),
    ],
)
def test_retry_after_seconds_or_http_date(header: str, expected: float | None) -> None:
    """Retry-After is read as delta-seconds or an HTTP-date; nonsense is ignored."""
    outcome = classify_webhook_response(
        429, httpx.Headers({"retry-after": header}), b"", now=lambda: NOW
    )
    assert isinstance(outcome, TransientSendError)
    assert expected == outcome.retry_after


def test_error_body_never_reaches_the_description() -> None:
    """A receiver echoing the message in its error body does not put it in the exception."""
    outcome = classify_webhook_response(400, httpx.Headers(), b'{"error": "bad text: secret"}')
    assert isinstance(outcome, PermanentSendError)
    assert "HTTP 400 Bad Request" == outcome.description


def test_message_id_taken_from_answer() -> None:
    """An id or message_id in a JSON answer becomes the receipt's message_id."""
    assert Accepted("abc") == classify_webhook_response(
        200, httpx.Headers(), b'{"message_id":"abc"}'
    )
    assert Accepted(None) == classify_webhook_response(200, httpx.Headers(), b"[1]")
    assert Accepted(None) == classify_webhook_response(200, httpx.Headers(), b"\xff")


async def test_429_within_budget_waits_and_redelivers() -> None:
    """A 429 with Retry-After inside the budget waits exactly that long, then delivers."""
    result, script, clock = await send(
        [httpx.Response(429, headers={"retry-after": "3"}), httpx.Response(200)]
    )
    assert Receipt("42", None) == result
    assert [3.0] == clock.waits
    assert 2 == len(script.requests)


async def test_429_beyond_budget_raises_with_retry_after() -> None:
    """A Retry-After past the budget is raised at once, carrying the wait."""
    result, script, clock = await send(
        [httpx.Response(429, headers={"retry-after": "60"})], budget=10
    )
    assert isinstance(result, TransientSendError)
    assert 60.0 == result.retry_after
    assert [] == clock.waits
    assert 1 == len(script.requests)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 502, 504])
async def test_final_answers_are_not_retried(status: int) -> None:
    """Permanent refusals and gateway errors are raised after one request."""
    result, script, _ = await send([httpx.Response(status)])
    assert isinstance(result, (PermanentSendError, UncertainSendError, SenderConfigError))
    assert 1 == len(script.requests)


async def test_server_errors_retry_until_max_retries() -> None:
    """A receiver that keeps answering 503 is tried 1 + max_retries times with backoff."""
    result, script, clock = await send([httpx.Response(503)], max_retries=2)
    assert isinstance(result, TransientSendError)
    assert 3 == len(script.requests)
    assert [0.25, 0.5] == clock.waits


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.PoolTimeout("no free connection"),
        httpx.ProxyError("tunnel refused"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_certain_transport_failures_are_transient(exc: Exception) -> None:
    """Failures before the request left are transient and retried."""
    result, script, _ = await send([exc], max_retries=1)
    assert isinstance(result, TransientSendError)
    assert 2 == len(script.requests)


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("timed out"),
        httpx.WriteTimeout("timed out"),
        httpx.ReadError("connection reset"),
        httpx.WriteError("broken pipe"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_failures_after_sending_are_uncertain(exc: Exception) -> None:
    """Timeouts and resets after the request may have left are uncertain and not resent."""
    result, script, _ = await send([exc])
    assert isinstance(result, UncertainSendError)
    assert 1 == len(script.requests)
    assert type(exc).__name__ == str(result.__cause__)  # a caller's transport: the class
    assert not isinstance(result.__cause__, httpx.HTTPError)  # no request (URL) attached


async def test_response_hook_status_error_is_reclassified() -> None:
    """A caller's raise_for_status hook does not turn a 409 into an uncertain send."""

    async def raise_for_status(response: httpx.Response) -> None:
        response.raise_for_status()

    script, clock = Script([httpx.Response(409), httpx.Response(200)]), FakeClock()
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(script), event_hooks={"response": [raise_for_status]}
    )
    sender = WebhookSender(URL, client=client, clock=clock, sleep=clock.sleep, rng=lambda: 0.5)
    assert Receipt("42", None) == await sender.send("42", Message("x"))
    assert 2 == len(script.requests)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": 5}, "url"),
        ({"secret": ""}, "secret"),
        ({"secret": 5}, "secret"),
        ({"headers": {"X-A": 1}}, "headers"),
        ({"headers": {"X-A": "é"}}, "headers"),
        ({"body_builder": "json"}, "body_builder"),
        ({"signature_header": ""}, "signature_header"),
    ],
)
def test_invalid_options_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    """Bad constructor arguments raise a ValidationError naming the argument."""
    options = {"url": "https://example.com/hook", **kwargs}
    with pytest.raises(ValidationError) as info:
        WebhookSender(**options)
    assert field == info.value.field
    assert "query-secret" not in str(info.value)


async def test_invalid_send_arguments_are_rejected_before_sending() -> None:
    """A blank recipient, a non-Message, an unserialisable option or a bad key sends nothing."""
    script, clock = Script([httpx.Response(200)]), FakeClock()
    sender = make_sender(script, clock)
    with pytest.raises(ValidationError) as blank:
        await sender.send(" ", Message("x"))
    with pytest.raises(ValidationTypeError) as not_message:
        await sender.send("42", "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationTypeError) as unserialisable:
        await sender.send("42", Message("x", options={"when": object()}))
    with pytest.raises(ValidationError) as bad_key:
        await sender.send("42", Message("x", idempotency_key="a\nb"))
    with pytest.raises(ValidationError) as non_ascii_key:
        await sender.send("42", Message("x", idempotency_key="ключ"))
    assert ["recipient", "message", "message", "idempotency_key", "idempotency_key"] == [
        e.value.field for e in (blank, not_message, unserialisable, bad_key, non_ascii_key)
    ]
    assert [] == script.requests


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + repr(exc)


def test_repr_and_vars_hide_secrets() -> None:
    """repr() shows scheme, host and port only; no attribute's repr shows a secret."""
    sender = WebhookSender(URL, secret=SECRET, headers={"Authorization": AUTH})
    assert isinstance(sender, Sender)
    assert "WebhookSender(url='https://hooks.example.com/...')" == repr(sender)
    shown = repr(vars(sender))
    for secret in ("pa55word", "path-secret", "query-secret", SECRET, AUTH):
        assert secret not in shown


async def test_secrets_never_in_logs_or_exception_text(caplog: pytest.LogCaptureFixture) -> None:
    """With every logger at DEBUG, no secret or message text shows in logs or errors."""

    def echo_url(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url} with {request.headers}")

    def echo_read(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(f"reset by {request.url.path}?{request.url.query.decode()}")

    async def raise_for_status(response: httpx.Response) -> None:
        response.raise_for_status()  # HTTPStatusError's str() contains the URL

    # Senders of earlier tests still waiting for the garbage collector would keep their
    # secrets (a path such as "/hook" also matches "//hooks.") in the shared log filter.
    gc.collect()
    text = "the secret message body"
    for name in ("httpx", "httpcore", "notifyonce"):
        caplog.set_level(logging.DEBUG, logger=name)
    texts: list[str] = []
    for steps, hooks in (
        ([echo_url], []),
        ([echo_read], []),
        ([httpx.Response(200)], []),
        ([httpx.Response(400, text=text)], [raise_for_status]),
        ([httpx.Response(500, text=text)], []),
    ):
        clock = FakeClock()
        client = httpx.AsyncClient(
            transport=httpx.MockTransport(Script(steps)), event_hooks={"response": hooks}
        )
        sender = WebhookSender(
            URL,
            secret=SECRET,
            headers={"Authorization": AUTH},
            client=client,
            clock=clock,
            sleep=clock.sleep,
            max_retries=1,
        )
        try:
            await sender.send("42", Message(text, idempotency_key="k"))
        except SendError as exc:
            texts.append(_all_text(exc))
    assert 4 == len(texts)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request: POST https://hooks.example.com/..." in logged
    for shown in [*texts, logged]:
        for secret in ("pa55word", "path-secret", "query-secret", SECRET, AUTH, text):
            assert secret not in shown


def test_verify_signature_needs_no_httpx() -> None:
    """A receiver imports verify_signature without httpx; WebhookSender then names the extra."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['httpx'] = None\n"
        "from notifyonce.webhook import verify_signature, sign\n"
        "print(verify_signature(b'x', sign(b'x', 's', 5), '5', 's', now=lambda: 5))\n"
        "try:\n    from notifyonce.webhook import WebhookSender\nexcept ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    verified, error = out.stdout.splitlines()
    assert "True" == verified
    assert 'pip install "notifyonce[webhook]"' in error
