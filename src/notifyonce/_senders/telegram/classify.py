"""Pure classification: a Bot API answer or an httpx exception -> a result or a SendError.

No I/O here: the sender calls these functions with what it saw, and the tests call them
with every case in a table. The rule behind every line is one question: *may the message
have been delivered?*

- Certainly not delivered and worth retrying ->
  [`TransientSendError`][notifyonce.TransientSendError].
- Certainly not delivered and retrying the same request cannot help ->
  [`PermanentSendError`][notifyonce.PermanentSendError].
- The sender itself is wrong (a rejected token, a wrong ``base_url``) ->
  [`SenderConfigError`][notifyonce.SenderConfigError].
- Possibly delivered -> [`UncertainSendError`][notifyonce.UncertainSendError] (never retried
  here: Telegram has no idempotency key, so a resend may be a duplicate).

A refusal about the message rather than its chat (entities Telegram cannot parse, a text
too long, a file id it does not know) is marked ``about_message``: every chat would be
refused alike, so the Notifier gives the slot back instead of burning it until a send of
the run succeeds (see `about_message`).

What a status means is decided once for every HTTP sender, in ``notifyonce._senders.status``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from notifyonce._errors import (
    MessageRefusedError,
    PermanentSendError,
    SendError,
    TransientSendError,
)
from notifyonce._senders.redaction import redact, short
from notifyonce._senders.retry import parse_retry_after
from notifyonce._senders.status import MAX_RETRY_AFTER, error_for_status, retry_after_in
from notifyonce._senders.telegram.chat import Migrated

__all__ = [
    "Delivered",
    "Migrated",
    "about_message",
    "classify_response",
    "gone_reason",
    "redact",
    "refusal",
]

# Words of the Bot API's refusals that are about the message, whichever chat it goes to:
# its markup, its length, its keyboard, its media. (A chat's own refusals, such as "chat
# not found", "bot was blocked" or "not enough rights to send photos", are not here.)
_ABOUT_MESSAGE = (
    "can't parse entities",
    "unsupported parse_mode",
    "message is too long",
    "message text is empty",
    "text must be non-empty",
    "caption is too long",
    "media_caption_too_long",
    "entities_too_long",
    "can't parse reply keyboard markup",
    "can't parse inline keyboard button",
    "reply markup is too long",
    "button_data_invalid",
    "button_url_invalid",
    "wrong file identifier",
    "wrong remote file identifier",
    "failed to get http url content",
    "wrong type of the web page content",
    "photo_invalid_dimensions",
    "photo_save_file_invalid",
    "image_process_failed",
    "file must be non-empty",
)


@dataclass(frozen=True, slots=True)
class Delivered:
    """Telegram accepted the message (an album's ``message_id``: its messages' ids,
    joined by commas)."""

    message_id: int | str | None
    chat_id: str | None
    file_id: str | None = None


# --------------------------------------------------------------------------------------
# Answers


def _short(text: str, token: str | None) -> str:
    return short(text, lambda t: redact(t, token))


def _parse_json(body: bytes) -> Mapping[str, Any] | None:
    """The Bot API envelope, or None for anything else (HTML, empty, truncated, a list)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    return data


def _retry_after_header(headers: Mapping[str, str]) -> float | None:
    # The webhook's parser: delta-seconds or an HTTP-date, capped like the Bot API's own.
    seconds = parse_retry_after(headers.get("retry-after"))
    return None if seconds is None else min(seconds, MAX_RETRY_AFTER)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not value >= 0:  # negative or NaN
        return None
    return min(float(value), MAX_RETRY_AFTER)


def classify_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    token: str | None = None,
) -> Delivered | Migrated | SendError:
    """Classify one HTTP answer to ``sendMessage``.

    Args:
        status: The HTTP status code.
        headers: The response headers (case-insensitive mapping, e.g. ``httpx.Headers``).
        body: The raw response body; never decoded blindly.
        token: Redacted from descriptions should a server echo it.

    Returns:
        `Delivered`, `Migrated`, or the error the sender should raise.
    """
    data = _parse_json(body)
    if data is None:
        return _classify_non_api(status, headers)
    if data["ok"]:
        return _delivered(data.get("result"))

    code = data.get("error_code")
    if not isinstance(code, int) or isinstance(code, bool):
        code = status
    raw_description = data.get("description")
    description = _short(raw_description if isinstance(raw_description, str) else "", token)
    parameters = data.get("parameters")
    if not isinstance(parameters, dict):
        parameters = {}

    migrate_to = parameters.get("migrate_to_chat_id")
    if isinstance(migrate_to, (int, str)) and not isinstance(migrate_to, bool):
        return Migrated(str(migrate_to), description)
    retry_after = _number(parameters.get("retry_after"))
    if code == 429 or retry_after is not None:
        if retry_after is None:
            # Without `parameters` the wait is only in the text (or a proxy's header).
            retry_after = retry_after_in(description) or _retry_after_header(headers)
        return TransientSendError(description, code=code, retry_after=retry_after)
    if code == 400 and _about_the_message(description):
        return MessageRefusedError(description, code=code, about_message=True)
    # 401/404 (bad token, wrong base_url): the sender is wrong, not the message. 502/504:
    # a gateway may have passed the request on. Other 5xx: the Bot API answered that it
    # did not send. 400 (chat not found), 403 (blocked): refused for good.
    return refusal(error_for_status(code, description))


def refusal(error: SendError) -> SendError:
    """``error`` with what it says of its message and its recipient: marked
    ``about_message`` (see `about_message`), or, a permanent refusal that says the
    recipient cannot be reached, given its ``gone`` reason (see `gone_reason`)."""
    error = about_message(error)
    if (
        isinstance(error, PermanentSendError)
        and not error.about_message
        and error.gone is None
        and error.code is not None
    ):
        error.gone = gone_reason(error.code, error.description)
    return error


# What Telegram says when the recipient itself cannot be reached, and the GoneReason of
# each (first match wins). Permission refusals inside a chat the bot is still in ("not
# enough rights to send photos") are not here: the chat is still there.
_GONE = (
    ("bot was blocked by the user", "blocked"),
    ("user is deactivated", "deactivated"),
    ("bot was kicked from", "kicked"),
    ("bot is not a member of", "kicked"),
    ("bot can't initiate conversation with a user", "not_started"),
    ("bot can't send messages to bots", "bot"),
    ("group chat was upgraded to a supergroup", "migrated"),
    ("chat was deleted", "deleted"),
    ("chat not found", "chat_not_found"),
    ("user not found", "chat_not_found"),
    ("peer_id_invalid", "chat_not_found"),
)


def gone_reason(code: int, description: str) -> str | None:
    """Why the recipient of a 400 or 403 refusal cannot be reached (a ``GoneReason``
    value), or None when the refusal does not say so.

    Examples:
        >>> gone_reason(403, "Forbidden: bot was blocked by the user")
        'blocked'
        >>> gone_reason(400, "Bad Request: chat not found")
        'chat_not_found'
        >>> gone_reason(400, "Bad Request: not enough rights to send photos to the chat") is None
        True
    """
    if code not in (400, 403):
        return None
    lowered = description.lower()
    return next((reason for words, reason in _GONE if words in lowered), None)


def about_message(error: SendError) -> SendError:
    """``error``, marked ``about_message`` when it is a refusal of the message itself.

    A 413 (the request too large) and a 400 whose description says the text, the caption,
    the entities, the keyboard or the media is wrong: every chat would be refused alike.

    Examples:
        >>> from notifyonce import PermanentSendError
        >>> bad_text = PermanentSendError("Bad Request: can't parse entities", code=400)
        >>> about_message(bad_text).about_message
        True
        >>> no_chat = PermanentSendError("Bad Request: chat not found", code=400)
        >>> about_message(no_chat).about_message
        False
    """
    if isinstance(error, PermanentSendError) and not error.about_message:
        text = error.description.lower()
        if error.code == 413 or any(words in text for words in _ABOUT_MESSAGE):
            error.about_message = True
    return error


# Refusals of the message itself, the same for every recipient: the message a copy is
# made from is gone, or its chat forbids copies (protected content).
_MESSAGE_REFUSALS = ("message to copy not found", "message can't be copied")


def _about_the_message(description: str) -> bool:
    lowered = description.lower()
    return any(refusal in lowered for refusal in _MESSAGE_REFUSALS)


def _delivered(result: object) -> Delivered:
    message_id: int | None = None
    chat_id: str | None = None
    if isinstance(result, list) and result and all(isinstance(m, dict) for m in result):
        # An album's messages: every one's id, joined by commas (what the ledger keeps,
        # so that deleting the album later deletes each of them); every item's file_id,
        # joined by commas (file_ids are URL-safe base64: no commas), when each has one.
        first = _delivered(result[0])
        ids = [_file_id(m) for m in result]
        joined = ",".join(i for i in ids if i is not None) if None not in ids else None
        numbers = [_delivered(m).message_id for m in result]
        album_ids = ",".join(str(n) for n in numbers) if None not in numbers else first.message_id
        return Delivered(album_ids, first.chat_id, joined)
    if isinstance(result, dict):
        mid = result.get("message_id")
        if isinstance(mid, int) and not isinstance(mid, bool):
            message_id = mid
        chat = result.get("chat")
        if isinstance(chat, dict) and isinstance(chat.get("id"), (int, str)):
            chat_id = str(chat["id"])
        return Delivered(message_id, chat_id, _file_id(result))
    return Delivered(message_id, chat_id)


def _size(photo: dict[str, Any]) -> tuple[int, int]:
    width, height, size = (photo.get(k) for k in ("width", "height", "file_size"))
    area = width * height if isinstance(width, int) and isinstance(height, int) else 0
    return area, size if isinstance(size, int) else 0


def _file_id(result: dict[str, Any]) -> str | None:
    """The file_id of a sent message's media: a photo's largest size, else the file's."""
    photo = result.get("photo")
    if isinstance(photo, list):
        sizes = [p for p in photo if isinstance(p, dict) and isinstance(p.get("file_id"), str)]
        if sizes:
            return str(max(sizes, key=_size)["file_id"])
    for kind in ("document", "video", "animation", "audio"):
        media = result.get(kind)
        if isinstance(media, dict) and isinstance(media.get("file_id"), str):
            return str(media["file_id"])
    return None


def _classify_non_api(status: int, headers: Mapping[str, str]) -> SendError:
    """An answer without the Bot API envelope: a proxy, a load balancer or a wrong URL."""
    description = f"HTTP {status} without a Bot API answer"
    # 500/503 without an envelope come from the front end itself (overload, maintenance):
    # it did not hand the request on. 3xx: we never follow redirects, a wrong base_url.
    return error_for_status(status, description, retry_after=_retry_after_header(headers))
