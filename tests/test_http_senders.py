"""What every HTTP sender does the same way, tested once for TelegramSender and WebhookSender.

Both build on one base (``notifyonce._senders.http``): the same options (``HTTPOptions``),
the same client lifecycle, the same split timeouts, the same transport error table and the
same log filter. What an answer means, and how each sender reacts to a transport failure,
stays in each sender's own test module; the fault cases over both transports (the sender's
own client and a caller's httpx client) are in the end-to-end and deadline tests.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Any, get_type_hints

import httpx
import pytest

from notifyonce import Message, ValidationError
from notifyonce._senders.aiohttp_transport import AiohttpTransport
from notifyonce._senders.transport import EXCEPTION_CLASSES
from notifyonce.telegram import HTTPOptions, SenderClosedError, TelegramSender
from notifyonce.webhook import WebhookSender

from ._fakes import Script

TOKEN = "123456:SECRET-token_value"
# An answer both accept: a Bot API success envelope is also a 2xx for the webhook.
OK = {"ok": True, "result": {"message_id": 7, "chat": {"id": 42}}}
Factory = Callable[..., TelegramSender | WebhookSender]


def telegram(**options: Any) -> TelegramSender:
    return TelegramSender(TOKEN, base_url="http://127.0.0.1:9", rate_limit=None, **options)


def webhook(**options: Any) -> WebhookSender:
    return WebhookSender("http://127.0.0.1:9/hook-secret", **options)


SENDERS = pytest.mark.parametrize("make", [telegram, webhook], ids=["telegram", "webhook"])

# Bad values, at least one per option of HTTPOptions but ``limits`` (handed to the client).
BAD_OPTIONS = [
    ("budget", 0),
    ("connect_timeout", float("inf")),
    ("connect_timeout", "5"),
    ("write_timeout", -1),
    ("pool_timeout", "5"),
    ("backoff_base", float("nan")),
    ("backoff_max", True),
    ("max_retries", -1),
    ("max_retries", 1.5),
]
# A value other than the default for every option, and where the sender keeps it.
GOOD_OPTIONS: HTTPOptions = {
    "budget": 12.0,
    "connect_timeout": 4.0,
    "write_timeout": 3.0,
    "pool_timeout": 2.0,
    "limits": httpx.Limits(max_connections=4),
    "max_retries": 1,
    "backoff_base": 0.25,
    "backoff_max": 2.0,
}


def test_every_http_option_has_a_bad_value_row_and_a_good_value() -> None:
    fields = set(get_type_hints(HTTPOptions))
    assert fields - {"limits"} == {option for option, _ in BAD_OPTIONS}
    assert fields == set(GOOD_OPTIONS)


@SENDERS
def test_every_http_option_is_taken_as_a_keyword(make: Factory) -> None:
    sender = make(**GOOD_OPTIONS)
    assert dict(GOOD_OPTIONS) == {name: getattr(sender, name) for name in GOOD_OPTIONS}


@SENDERS
@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS, ids=[o for o, _ in BAD_OPTIONS])
def test_a_bad_option_is_named(make: Factory, option: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        make(**{option: value})
    assert option == info.value.field


@SENDERS
def test_a_misspelt_option_is_refused(make: Factory) -> None:
    """The options arrive as **keywords: a typo must not be taken silently."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'budgte'"):
        make(budgte=5)


@pytest.mark.parametrize(
    "make",
    [lambda: TelegramSender("not a token", budgte=5), lambda: WebhookSender("ftp://x", budgte=5)],
    ids=["telegram", "webhook"],
)
def test_a_misspelt_option_is_refused_before_any_other_check(make: Callable[[], Any]) -> None:
    """As when the keywords were spelt out: Python refuses the call before the body runs."""
    with pytest.raises(TypeError, match="budgte"):
        make()


@SENDERS
async def test_timeouts_are_split_per_request(make: Factory) -> None:
    """Each request carries its phase limits and read = what is left of the budget."""
    script = Script([httpx.Response(200, json=OK)])
    client = httpx.AsyncClient(transport=httpx.MockTransport(script))
    async with make(client=client, clock=lambda: 0.0, budget=12.0, connect_timeout=4.0) as sender:
        await sender.send("42", Message("x"))
    await client.aclose()
    timeout = script.requests[0].extensions["timeout"]
    assert {"connect": 4.0, "read": 12.0, "write": 10.0, "pool": 5.0} == timeout


@SENDERS
async def test_own_client_is_created_once_reused_and_closed(make: Factory) -> None:
    """Created on first use, reused, over aiohttp's pool sized by the sender's limits (32
    connections kept a minute), closed by ``async with`` and again (idempotent) by aclose."""
    sender = make()
    assert sender._client is None
    first = sender._get_client()
    assert first is sender._get_client()
    transport = first._transport
    assert isinstance(transport, AiohttpTransport)
    assert (32, 60.0) == (transport._limits.max_connections, transport._limits.keepalive_expiry)
    async with sender:
        pass
    await sender.aclose()
    assert first.is_closed
    with pytest.raises(SenderClosedError):  # also a RuntimeError: a usage error
        await sender.send("42", Message("x"))


@SENDERS
async def test_a_callers_client_is_used_and_left_open(make: Factory) -> None:
    script = Script([httpx.Response(200, json=OK), httpx.Response(200, json=OK)])
    client = httpx.AsyncClient(transport=httpx.MockTransport(script))
    async with make(client=client) as sender:
        await sender.send("42", Message("a"))
        await sender.send("43", Message("b"))
    assert not client.is_closed
    assert 2 == len(script.requests)
    await client.aclose()


def _all_subclasses(klass: type[BaseException]) -> set[type[BaseException]]:
    found = {klass}
    for sub in klass.__subclasses__():
        found |= _all_subclasses(sub)
    return found


def test_every_httpx_exception_class_is_mapped_explicitly() -> None:
    """Each httpx exception class, exported or walked from its roots, has its own row in
    the table that says whether a failed request may have been written."""
    roots = (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict, httpx.StreamError)
    walked = {k for root in roots for k in _all_subclasses(root)}
    exported = {
        obj for obj in vars(httpx).values() if isinstance(obj, type) and issubclass(obj, Exception)
    }
    public = {k for k in walked | exported if k.__module__.startswith("httpx")}
    assert set() == public - set(EXCEPTION_CLASSES)


@pytest.mark.parametrize("logger", ["httpx", "aiohttp.client"])
def test_the_http_clients_loggers_never_show_a_secret(
    logger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Once a sender exists, the loggers of both transports hide its secrets, and any
    /bot<token>/ segment, whichever sender (or bot library) made the request."""
    caplog.set_level(logging.DEBUG, logger=logger)
    gc.collect()  # no Telegram sender of an earlier test is alive to hide a token
    hook = WebhookSender("http://127.0.0.1:9/hook-secret?key=query-secret")
    logging.getLogger(logger).info("POST http://127.0.0.1:9/bot%s/getMe", TOKEN)
    assert "POST http://127.0.0.1:9/bot<redacted>/getMe" == caplog.records[-1].getMessage()
    bot = telegram()
    logging.getLogger(logger).info(
        "POST http://127.0.0.1:9/bot%s/sendMessage, http://127.0.0.1:9/hook-secret?key=%s",
        TOKEN,
        "query-secret",
    )
    logged = caplog.records[-1].getMessage()
    assert "POST http://127.0.0.1:9/bot<redacted>/sendMessage" in logged
    for secret in (TOKEN, "hook-secret", "query-secret"):
        assert secret not in logged
    del hook, bot
