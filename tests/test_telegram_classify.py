"""The pure classification of Bot API answers: total, and never a decode crash."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import PermanentSendError, SendError, TransientSendError
from notifyonce._senders.telegram.classify import Delivered, Migrated, classify_response, redact

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
envelopes = st.fixed_dictionaries(
    {"ok": st.booleans()},
    optional={
        "error_code": json_values,
        "description": json_values,
        "parameters": st.fixed_dictionaries(
            {}, optional={"retry_after": json_values, "migrate_to_chat_id": json_values}
        )
        | json_values,
        "result": json_values,
    },
)
results = (Delivered, Migrated, SendError)


@settings(deadline=None)  # a shared 2-core machine: timing is not what is tested
@given(st.integers(min_value=100, max_value=599), st.binary(max_size=200))
def test_any_bytes_classify_without_raising(status: int, body: bytes) -> None:
    """Arbitrary bodies (HTML, truncated, binary) give a result, never an exception."""
    assert isinstance(classify_response(status, httpx.Headers(), body), results)


@settings(deadline=None)
@given(st.integers(min_value=100, max_value=599), envelopes)
def test_any_envelope_classifies_without_raising(status: int, envelope: dict[str, object]) -> None:
    """Bot-API-shaped bodies with odd field types give a result, never an exception."""
    outcome = classify_response(status, httpx.Headers(), json.dumps(envelope).encode())
    assert isinstance(outcome, results)
    if isinstance(outcome, TransientSendError) and outcome.retry_after is not None:
        assert outcome.retry_after >= 0


def test_description_is_redacted_and_bounded() -> None:
    """A description echoing a URL with the token is redacted and cut to 200 characters."""
    body = json.dumps(
        {"ok": False, "error_code": 400, "description": "see /bot1:SECRET/sendMessage " + "x" * 500}
    ).encode()
    outcome = classify_response(400, httpx.Headers(), body)
    assert isinstance(outcome, SendError)
    assert "SECRET" not in outcome.description
    assert 200 == len(outcome.description)


def test_redact_hides_token_path_segments() -> None:
    """redact() hides /bot<token> whatever the token looks like, and a given token anywhere."""
    assert "POST http://h/bot<redacted>/sendMessage" == redact(
        "POST http://h/bot12:a-b_c/sendMessage"
    )
    assert "token <redacted> leaked" == redact("token 12:abc leaked", "12:abc")


def test_a_proxys_retry_after_is_read_as_the_webhook_reads_it() -> None:
    """One Retry-After parser for every HTTP sender: seconds, or an HTTP date (which a
    proxy in front of the Bot API may send), capped like the Bot API's own wait."""
    import email.utils
    import time

    from notifyonce._senders.status import MAX_RETRY_AFTER

    def wait(value: str) -> float | None:
        error = classify_response(503, httpx.Headers({"retry-after": value}), b"<html>")
        assert isinstance(error, TransientSendError)
        return error.retry_after

    assert wait("7") == 7.0
    assert wait("1e9") == MAX_RETRY_AFTER
    assert wait("-1") is None
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    seconds = wait(later)
    assert seconds is not None
    assert 100 < seconds <= 121


def test_refusals_of_the_message_are_marked_about_it() -> None:
    """The 400s that every chat would get for the same message (its markup, length,
    keyboard or media) and a 413 are about the message; a chat's own refusals are not."""

    def refusal(code: int, description: str) -> SendError:
        body = json.dumps({"ok": False, "error_code": code, "description": description})
        outcome = classify_response(code, httpx.Headers(), body.encode())
        assert isinstance(outcome, SendError)
        return outcome

    about_the_message = [
        'Bad Request: can\'t parse entities: Unsupported start tag "p" at byte offset 0',
        "Bad Request: message is too long",
        "Bad Request: message text is empty",
        "Bad Request: message caption is too long",
        "Bad Request: unsupported parse_mode",
        "Bad Request: can't parse reply keyboard markup JSON object",
        "Bad Request: BUTTON_URL_INVALID",
        "Bad Request: wrong file identifier/HTTP URL specified",
        "Bad Request: failed to get HTTP URL content",
    ]
    about_the_chat = [
        "Bad Request: chat not found",
        "Bad Request: not enough rights to send photos to the chat",
        "Bad Request: message thread not found",
        "Bad Request: PEER_ID_INVALID",
    ]
    for description in about_the_message:
        assert refusal(400, description).about_message, description
    for description in about_the_chat:
        assert not refusal(400, description).about_message, description
    assert not refusal(403, "Forbidden: bot was blocked by the user").about_message
    assert refusal(413, "Request Entity Too Large").about_message
    assert not refusal(429, "Too Many Requests: retry after 3").about_message


@pytest.mark.parametrize(
    ("code", "description", "gone"),
    [
        (403, "Forbidden: bot was blocked by the user", "blocked"),
        (403, "Forbidden: user is deactivated", "deactivated"),
        (403, "Forbidden: bot was kicked from the group chat", "kicked"),
        (403, "Forbidden: bot was kicked from the supergroup chat", "kicked"),
        (403, "Forbidden: bot is not a member of the channel chat", "kicked"),
        (403, "Forbidden: bot can't initiate conversation with a user", "not_started"),
        (403, "Forbidden: bot can't send messages to bots", "bot"),
        (403, "Forbidden: the group chat was deleted", "deleted"),
        (400, "Bad Request: chat not found", "chat_not_found"),
        (400, "Bad Request: user not found", "chat_not_found"),
        (400, "Bad Request: PEER_ID_INVALID", "chat_not_found"),
        (400, "Bad Request: group chat was upgraded to a supergroup chat", "migrated"),
        (400, "Bad Request: not enough rights to send photos to the chat", None),
        (400, "Bad Request: message thread not found", None),
        (400, "Bad Request: can't parse entities: Unsupported start tag", None),
        (403, "Forbidden: not enough rights to send text messages to the chat", None),
    ],
)
def test_a_refusal_says_when_its_recipient_is_gone(
    code: int, description: str, gone: str | None
) -> None:
    """Telegram's words for a chat that cannot be reached give the refusal its ``gone``
    reason; a refusal about permissions or the message gives none."""
    body = json.dumps({"ok": False, "error_code": code, "description": description})
    outcome = classify_response(code, httpx.Headers(), body.encode())
    assert isinstance(outcome, PermanentSendError)
    assert gone == outcome.gone


def test_a_migration_with_a_target_is_followed_not_gone() -> None:
    """A 400 that names the new chat id is a migration to follow, not a gone chat."""
    body = json.dumps(
        {
            "ok": False,
            "error_code": 400,
            "description": "Bad Request: group chat was upgraded to a supergroup chat",
            "parameters": {"migrate_to_chat_id": -1001234567890},
        }
    )
    outcome = classify_response(400, httpx.Headers(), body.encode())
    assert not isinstance(outcome, SendError)
