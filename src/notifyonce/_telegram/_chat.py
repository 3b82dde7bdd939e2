"""Telegram recipients: a chat id as a string or an @channelname (no httpx needed)."""

from __future__ import annotations

import re

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = ["chat_id", "validate_recipient"]

_CHAT_ID = re.compile(r"-?[1-9][0-9]{0,19}")
_USERNAME = re.compile(r"@[A-Za-z][A-Za-z0-9_]{2,63}")


def validate_recipient(recipient: object) -> str:
    """``recipient`` if it is a chat id string or an @channelname, else a ValidationError."""
    if not isinstance(recipient, str):
        raise ValidationTypeError(
            "recipient",
            f"must be a str (a chat id or @channelname), got {type(recipient).__name__}",
        )
    if not (_CHAT_ID.fullmatch(recipient) or _USERNAME.fullmatch(recipient)):
        raise ValidationError(
            "recipient", "must be a chat id such as '12345' or '-100123', or an @channelname"
        )
    return recipient


def chat_id(recipient: str) -> int | str:
    """The Bot API's ``chat_id`` for a validated recipient."""
    return recipient if recipient.startswith("@") else int(recipient)
