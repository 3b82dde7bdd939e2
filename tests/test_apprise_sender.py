"""AppriseSender against the local WebhookReceiver (json://) and its honest result mapping."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    TransientSendError,
    UncertainSendError,
    ValidationError,
)
from notifyonce.testing import WebhookReceiver, WebhookReply

from ._optional import require

apprise = require("apprise", "apprise")

from notifyonce.apprise import AppriseSender, classify_apprise_result  # noqa: E402


def json_url(receiver: WebhookReceiver, path: str = "hooks") -> str:
    return f"json://127.0.0.1:{receiver.port}/{path}"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_delivers_to_a_json_endpoint() -> None:
    """A message reaches the endpoint as Apprise's JSON with title and body."""
    with WebhookReceiver() as receiver:
        sender = AppriseSender(json_url(receiver), title="Trial")
        receipt = await sender.send("42", Message("6 hours left"))
        (delivery,) = receiver.processed
    assert Receipt("42") == receipt
    assert ("Trial", "6 hours left") == (delivery.json["title"], delivery.json["message"])
    assert "/hooks" == delivery.path


async def test_title_from_options() -> None:
    """Message.options['title'] overrides the sender's title."""
    with WebhookReceiver() as receiver:
        await AppriseSender(json_url(receiver)).send("1", Message("x", options={"title": "T"}))
        assert "T" == receiver.processed[0].json["title"]


@pytest.mark.parametrize(
    "reply",
    [WebhookReply.refuse(503), WebhookReply.drop_after_processing(), WebhookReply.refuse(400)],
    ids=["503", "dropped-after-processing", "400"],
)
async def test_failures_are_uncertain_by_default(reply: WebhookReply) -> None:
    """Apprise's failure hides whether the provider got it: uncertain unless told otherwise."""
    with WebhookReceiver() as receiver:
        receiver.script([reply])
        with pytest.raises(UncertainSendError):
            await AppriseSender(json_url(receiver)).send("1", Message("x"))


async def test_failure_class_can_be_transient() -> None:
    """failure=TransientSendError makes an unexplained failure retryable."""
    sender = AppriseSender(f"json://127.0.0.1:{closed_port()}/x", failure=TransientSendError)
    with pytest.raises(TransientSendError):
        await sender.send("1", Message("x"))


async def test_partial_delivery_is_uncertain() -> None:
    """One service delivered and one failed: uncertain, whatever the failure option says."""
    with WebhookReceiver() as receiver:
        sender = AppriseSender(
            [json_url(receiver), f"json://127.0.0.1:{closed_port()}/x"],
            failure=TransientSendError,
        )
        with pytest.raises(UncertainSendError):
            await sender.send("1", Message("x"))
        assert 1 == len(receiver.processed)


async def test_recipient_tag_selects_services() -> None:
    """With tag_by_recipient, only services tagged with the recipient are notified."""
    with WebhookReceiver() as receiver:
        configured = apprise.Apprise()
        configured.add(json_url(receiver, "alice"), tag="alice")
        configured.add(json_url(receiver, "bob"), tag="bob")
        sender = AppriseSender(configured, tag_by_recipient=True)
        await sender.send("bob", Message("x"))
        assert ["/bob"] == [d.path for d in receiver.processed]
        with pytest.raises(PermanentSendError):
            await sender.send("carol", Message("x"))


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (True, None),
        (False, UncertainSendError),
        (None, PermanentSendError),
    ],
)
def test_apprise_1_booleans(result: Any, expected: type | None) -> None:
    """Apprise 1.x's True/False/None map to delivered/uncertain/no service matched."""
    error = classify_apprise_result(result)
    assert expected is (None if error is None else type(error))


def test_invalid_urls_name_the_field_without_echoing_them() -> None:
    """An unknown scheme or an empty list is a ValidationError on 'urls' without the URL."""
    for urls in ("nosuchscheme://user:pw-secret@host", []):
        with pytest.raises(ValidationError) as info:
            AppriseSender(urls)
        assert "urls" == info.value.field
        assert "pw-secret" not in str(info.value)
    with pytest.raises(ValidationError) as bad_failure:
        AppriseSender("json://localhost/x", failure=PermanentSendError)
    assert "failure" == bad_failure.value.field
