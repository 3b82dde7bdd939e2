"""Telegram recipients: a chat id as a string or an @channelname (no httpx needed)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._message import Message

__all__ = ["Migrated", "chat_id", "message_fields", "validate_recipient"]

_CHAT_ID = re.compile(r"-?[1-9][0-9]{0,19}")
_USERNAME = re.compile(r"@[A-Za-z][A-Za-z0-9_]{2,63}")


@dataclass(frozen=True, slots=True)
class Migrated:
    """The chat moved (a group became a supergroup); resend to ``new_chat_id``.

    What the Bot API's answer says (``migrate_to_chat_id``) and what aiogram's and
    python-telegram-bot's exceptions say, in one shape.
    """

    new_chat_id: str
    description: str


def validate_recipient(recipient: object) -> str:
    """The recipient as the text of a chat id or an @channelname, else a ValidationError.

    An int chat id (what aiogram's ``message.chat.id`` and python-telegram-bot's
    ``update.effective_chat.id`` are) is taken as its decimal text.
    """
    if isinstance(recipient, int) and not isinstance(recipient, bool):
        recipient = str(recipient)
    if not isinstance(recipient, str):
        raise ValidationTypeError(
            "recipient",
            "must be a chat id (an int, or a str such as '12345') or an @channelname, "
            f"got {type(recipient).__name__}",
        )
    if not (_CHAT_ID.fullmatch(recipient) or _USERNAME.fullmatch(recipient)):
        raise ValidationError(
            "recipient", "must be a chat id such as '12345' or '-100123', or an @channelname"
        )
    return recipient


def chat_id(recipient: str) -> int | str:
    """The Bot API's ``chat_id`` for a validated recipient."""
    return recipient if recipient.startswith("@") else int(recipient)


def message_fields(message: Message, link_preview_options: Callable[[bool], Any]) -> dict[str, Any]:
    """The ``sendMessage`` fields set from a Message's formatting flags.

    ``link_preview_options(is_disabled)`` builds the field in the caller's types (a dict
    for the Bot API, ``LinkPreviewOptions`` for aiogram and python-telegram-bot).
    """
    fields: dict[str, Any] = {}
    if message.parse_mode is not None:
        fields["parse_mode"] = message.parse_mode
    if message.silent:
        fields["disable_notification"] = True
    if message.link_preview is not None:
        fields["link_preview_options"] = link_preview_options(not message.link_preview)
    return fields
