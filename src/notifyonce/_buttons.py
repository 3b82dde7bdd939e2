"""Inline keyboards: rows of URL and callback buttons, checked as Telegram checks them.

A keyboard Telegram refuses is refused for every chat of a campaign alike, so it is
checked here, when the message is built, before anything is claimed. Standard library
only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import check_text

__all__ = [
    "MAX_CALLBACK_DATA",
    "UNSUBSCRIBE_PREFIX",
    "inline_keyboard",
    "unsubscribe_button",
    "unsubscribe_category",
]

#: Telegram's limit for a callback button's ``callback_data``, in bytes.
MAX_CALLBACK_DATA = 64
# The kinds of button notifyonce checks; a button has exactly one of them.
_ACTIONS = ("url", "callback_data")
_URL_SCHEMES = ("http://", "https://", "tg://")
#: The ``callback_data`` of an unsubscribe button: this, then the category.
UNSUBSCRIBE_PREFIX = "notifyonce:stop:"
# What is left of callback_data for the category, in bytes.
_MAX_UNSUBSCRIBE_CATEGORY = MAX_CALLBACK_DATA - len(UNSUBSCRIBE_PREFIX.encode())


def inline_keyboard(rows: object, field: str = "buttons") -> dict[str, Any]:
    """The ``reply_markup`` of an inline keyboard, from rows of buttons.

    Each button is a mapping with a ``text`` and exactly one of ``url`` (``http(s)://``
    or ``tg://``) or ``callback_data`` (1-64 bytes). A list of rows or a mapping with
    ``inline_keyboard`` is taken.

    Args:
        rows: The rows, top to bottom, each a list of buttons, left to right.
        field: The name errors give the keyboard (``"buttons"``, a file's name).

    Raises:
        ValidationError: A button without a text, without a url or a callback_data, or
            with both; named by its row and column, counted from 1.

    Examples:
        >>> inline_keyboard([[{"text": "Open", "url": "https://example.com"}]])
        {'inline_keyboard': [[{'text': 'Open', 'url': 'https://example.com'}]]}
        >>> inline_keyboard([[{"text": "Open"}]])
        Traceback (most recent call last):
        ...
        notifyonce._errors.ValidationError: buttons: row 1, column 1: has neither a url ...
    """
    if isinstance(rows, Mapping):
        if set(rows) != {"inline_keyboard"}:
            raise ValidationError(field, "a mapping must hold only 'inline_keyboard'")
        rows = rows["inline_keyboard"]
    if not _sequence(rows):
        raise ValidationTypeError(field, f"must be a list of rows, got {type(rows).__name__}")
    assert isinstance(rows, Sequence)
    if not rows:
        raise ValidationError(field, "has no rows")
    checked: list[list[dict[str, Any]]] = []
    for r, row in enumerate(rows, 1):
        if not _sequence(row) or not row:
            raise ValidationError(field, f"row {r}: must be a non-empty list of buttons")
        assert isinstance(row, Sequence)
        checked.append(
            [_button(button, f"row {r}, column {c}", field) for c, button in enumerate(row, 1)]
        )
    return {"inline_keyboard": checked}


def _sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _button(button: object, where: str, field: str) -> dict[str, Any]:
    if not isinstance(button, Mapping):
        raise ValidationError(
            field, f"{where}: a button is a mapping with text and url or callback_data"
        )
    text = button.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError(field, f"{where}: has no text")
    actions = [name for name in _ACTIONS if button.get(name) is not None]
    if not actions:
        raise ValidationError(field, f"{where}: has neither a url nor a callback_data")
    if len(actions) > 1:
        raise ValidationError(field, f"{where}: has both a url and a callback_data; keep one")
    unknown = sorted(str(k) for k in button if k not in ("text", *_ACTIONS))
    if unknown:
        raise ValidationError(field, f"{where}: unknown keys {', '.join(unknown)}")
    value = button[actions[0]]
    if not isinstance(value, str):
        raise ValidationError(field, f"{where}: {actions[0]} must be a str")
    if actions[0] == "url" and not value.startswith(_URL_SCHEMES):
        raise ValidationError(field, f"{where}: the url must start with http://, https:// or tg://")
    if actions[0] == "callback_data" and not 1 <= len(value.encode()) <= MAX_CALLBACK_DATA:
        raise ValidationError(field, f"{where}: callback_data must be 1-{MAX_CALLBACK_DATA} bytes")
    return {"text": text, actions[0]: value}


def unsubscribe_button(category: str, text: str = "Unsubscribe") -> dict[str, str]:
    """An inline button that opts the chat out of ``category`` when pressed.

    Put it in a message's keyboard (``Message(..., reply_markup=inline_keyboard(...))``
    or ``buttons=`` of ``Message.copy``); the bot helpers
    ([`audience_router`][notifyonce.aiogram.audience_router] for aiogram,
    [`audience_handlers`][notifyonce.ptb.audience_handlers] for python-telegram-bot)
    record the press (``audience.opt_out(chat, category, how="button")``) and answer it. Its
    ``callback_data`` is ``notifyonce:stop:<category>``.

    Args:
        category: What the chat stops getting, e.g. ``"promo"`` (a campaign's or a
            reminder's category): at most 48 bytes, for Telegram's 64 of callback_data.
        text: The button's label.

    Raises:
        ValidationError: A category that is not a str, empty, padded with spaces, with
            control characters or longer than 48 bytes; a blank text.

    Examples:
        >>> unsubscribe_button("promo")
        {'text': 'Unsubscribe', 'callback_data': 'notifyonce:stop:promo'}
        >>> inline_keyboard([[unsubscribe_button("promo", text="Stop offers")]])
        {'inline_keyboard': [[{'text': 'Stop offers', 'callback_data': 'notifyonce:stop:promo'}]]}
    """
    if not isinstance(category, str):
        raise ValidationTypeError("category", f"must be a str, got {type(category).__name__}")
    size = len(category.encode("utf-8", "surrogatepass"))
    if size > _MAX_UNSUBSCRIBE_CATEGORY:
        raise ValidationError(
            "category",
            f"is {size} bytes in UTF-8, more than {_MAX_UNSUBSCRIBE_CATEGORY} bytes: the "
            f"button's callback_data ({UNSUBSCRIBE_PREFIX}<category>) is at most "
            f"{MAX_CALLBACK_DATA} bytes",
        )
    check_text("category", category, _MAX_UNSUBSCRIBE_CATEGORY)
    if category != category.strip():
        raise ValidationError("category", "must not start or end with spaces")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("text", "has no text: the button needs a label")
    button = {"text": text, "callback_data": UNSUBSCRIBE_PREFIX + category}
    _button(button, "the unsubscribe button", "text")
    return button


def unsubscribe_category(data: str) -> str | None:
    """The category of an unsubscribe button's ``callback_data``, or None for any other
    button's (the bot helpers leave those to your handlers).

    Examples:
        >>> unsubscribe_category("notifyonce:stop:promo"), unsubscribe_category("pay:42")
        ('promo', None)
    """
    if not data.startswith(UNSUBSCRIBE_PREFIX):
        return None
    return data[len(UNSUBSCRIBE_PREFIX) :] or None
