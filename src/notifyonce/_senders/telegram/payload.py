"""A message checked the way Telegram will check it, before any claim or request.

Everything here runs before the request is written, so a failure is certain: nothing was
sent, and [`TelegramSender.check`][notifyonce.telegram.TelegramSender.check] lets the
Notifier refuse the notification before it claims a slot. Standard library only; models of
aiogram and python-telegram-bot are recognised by their methods (``model_dump``,
``to_dict``), never imported.
"""

from __future__ import annotations

import html
import json
import mimetypes
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._media import Album, Copy, file_size
from notifyonce._message import Message
from notifyonce._senders.telegram.markup import check_markup

__all__ = [
    "MAX_CAPTION_LENGTH",
    "MAX_TEXT_LENGTH",
    "check_caption",
    "check_message",
    "check_text",
    "encode",
    "jsonable",
    "multipart",
    "visible_length",
]

# A file in a multipart body: its field, its file name, its bytes.
Upload: TypeAlias = "tuple[str, str, bytes]"

#: Telegram's limit for a message text, in UTF-16 code units after entity parsing.
MAX_TEXT_LENGTH = 4096
#: Telegram's limit for a photo's, document's or video's caption, counted the same way.
MAX_CAPTION_LENGTH = 1024
# A Bot API parameter name: it goes into a multipart header as is.
_PARAMETER = re.compile(r"[a-z_]+")

_HTML_TAG = re.compile(r"<[^<>]*>")
# MarkdownV2 and Markdown: a link or mention's URL part, then single markup characters.
# What is left is never longer than what Telegram shows, so the check never refuses a
# text Telegram would accept.
_MD_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_MD_CODE_LANGUAGE = re.compile(r"```[^\s`]*")
_MD_ESCAPED = re.compile(r"\\.", re.DOTALL)
_MD_MARKUP = re.compile(r"!(?=\[)|[*_~|`\[\]]")


def _utf16_units(text: str) -> int:
    # A character outside the Basic Multilingual Plane counts twice (a surrogate pair).
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def visible_length(text: str, parse_mode: str | None) -> int:
    """The length Telegram counts: UTF-16 code units of the text after entity parsing.

    Exact for plain text and HTML; for Markdown a lower bound (markup characters and link
    targets removed), so a text refused here is too long for Telegram too.

    Examples:
        >>> visible_length("<b>6 hours</b> &amp; left", "HTML")
        14
    """
    mode = (parse_mode or "").lower()
    if mode == "html":
        text = html.unescape(_HTML_TAG.sub("", text))
    elif mode in ("markdown", "markdownv2"):
        text = _MD_CODE_LANGUAGE.sub("", _MD_LINK_TARGET.sub("", text))
        # An escaped character is shown as one character: keep one that is not markup.
        text = _MD_MARKUP.sub("", _MD_ESCAPED.sub("x", text))
    return _utf16_units(text)


def _check_length(message: Message, limit: int, what: str) -> int:
    """The visible length of the message's text; a ValidationError over ``limit``
    (``what`` ends the problem: which limit, and what to do)."""
    length = visible_length(message.text, message.parse_mode)
    if length > limit:
        raise ValidationError(
            "text",
            f"is {length} characters long as Telegram counts them (UTF-16 code units after "
            f"parsing {message.parse_mode or 'plain text'}); {what}",
        )
    return length


def check_text(message: Message, limit: int = MAX_TEXT_LENGTH) -> None:
    """Refuse a text Telegram would refuse for its length (the error shows only numbers)."""
    if _check_length(message, limit, f"the limit is {limit}: split it") == 0:
        raise ValidationError("text", "is empty once its markup is parsed")


def check_caption(message: Message, limit: int = MAX_CAPTION_LENGTH) -> None:
    """Refuse a caption Telegram would refuse for its length, or text-only formatting."""
    kind = type(message.media).__name__.lower()
    _check_length(message, limit, f"the limit of a {kind}'s caption is {limit}")
    if message.link_preview is not None:
        raise ValidationError("link_preview", "applies to a text message, not to media")
    if "entities" in message.options:
        raise ValidationError(
            "options", "'entities' formats a text; a caption takes 'caption_entities'"
        )
    for name in message.options:
        if not isinstance(name, str) or not _PARAMETER.fullmatch(name):
            raise ValidationError("options", f"{name!r} is not a Bot API parameter name")


def check_message(message: Message, *, file: bool = True) -> None:
    """Refuse what Telegram would refuse of a message alone: markup Telegram cannot parse,
    a text or caption too long, text-only formatting on media, and (unless ``file`` is
    False: the sender already has the file's id) a media file gone missing or grown past
    the limit."""
    check_markup(message)
    media = message.media
    if media is None:
        check_text(message)
        return
    check_caption(message)
    if isinstance(media, Copy):
        return
    if isinstance(media, Album) and message.reply_markup is not None:
        raise ValidationError("reply_markup", "Telegram sends no buttons under an album")
    if not file:
        return
    for item in media.items if isinstance(media, Album) else (media,):
        if isinstance(item.source, os.PathLike):
            size = file_size(item.kind, item.source)
            if size > item.upload_limit:
                raise ValidationError(
                    item.kind, f"grew over the Bot API's {item.upload_limit // 2**20} MB limit"
                )


def multipart(fields: Mapping[str, Any], files: Sequence[Upload]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body uploading ``files`` (each: its field, its file name,
    its bytes); its content type.

    Values that are not str are sent as JSON (numbers, booleans, keyboards, entities, an
    album's media), as the Bot API reads them from a form.
    """
    boundary = secrets.token_hex(16)
    while any(boundary.encode() in data for _, _, data in files):  # pragma: no cover
        boundary = secrets.token_hex(16)
    dash = f"--{boundary}\r\n".encode()
    parts: list[bytes] = []
    for name, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        head = f'Content-Disposition: form-data; name="{name}"\r\n\r\n'
        parts += [dash, head.encode(), text.encode(), b"\r\n"]
    for file_field, filename, data in files:
        kind = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        head = (
            f'Content-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\n'
            f"Content-Type: {kind}\r\n\r\n"
        )
        parts += [dash, head.encode(), data, b"\r\n"]
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def jsonable(value: Any, field: str) -> Any:
    """``value`` with every aiogram or python-telegram-bot model turned into plain data.

    aiogram objects (pydantic models) go through ``model_dump(mode="json",
    exclude_none=True, by_alias=True)``: the Bot API refuses ``null`` for an optional
    field. python-telegram-bot objects go through ``to_dict()``.
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return dump(mode="json", exclude_none=True, by_alias=True)
        except Exception as exc:
            raise ValidationTypeError(
                field, f"could not be serialised ({type(value).__name__}: {type(exc).__name__})"
            ) from None
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, (type, Mapping)):
        return jsonable(to_dict(), field)
    if isinstance(value, Mapping):
        return {key: jsonable(item, f"{field}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item, f"{field}[{i}]") for i, item in enumerate(value)]
    return value


def encode(payload: Mapping[str, Any]) -> bytes:
    """The JSON body, or a ValidationError naming the field that cannot be encoded.

    The error names the field and the type, never a value (it may be the message text).
    """
    try:
        return json.dumps(
            payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except (TypeError, ValueError, RecursionError):
        pass
    for name, value in payload.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValidationTypeError(
                name, f"is not JSON-serialisable ({_culprit(value)}; {type(exc).__name__})"
            ) from None
    raise ValidationTypeError("message", "is not JSON-serialisable")


def _culprit(value: Any) -> str:
    """The type name of the first value json cannot encode (``Decimal``, ``set``, ...)."""
    if isinstance(value, Mapping):
        for item in value.values():
            found = _culprit(item)
            if found:
                return found
        return ""
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _culprit(item)
            if found:
                return found
        return ""
    if value is None or isinstance(value, (str, int, bool)):
        return ""
    if isinstance(value, float):
        return "" if value == value and abs(value) != float("inf") else "a NaN or infinite float"
    return f"a {type(value).__name__}"
