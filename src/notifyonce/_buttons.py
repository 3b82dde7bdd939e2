"""Inline keyboards: rows of buttons of every kind a bot may send, checked as Telegram
checks them.

A keyboard Telegram refuses is refused for every chat of a campaign alike, so it is
checked here, when the message is built, before anything is claimed. Standard library
only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
#: Telegram's limit for a copy_text button's text, in characters.
MAX_COPY_TEXT = 256
# An inline query is at most 256 characters, so is the query a switch button inserts.
_MAX_QUERY = 256
_URL_SCHEMES = ("http://", "https://", "tg://")
#: The ``callback_data`` of an unsubscribe button: this, then the category.
UNSUBSCRIBE_PREFIX = "notifyonce:stop:"
# What is left of callback_data for the category, in bytes.
_MAX_UNSUBSCRIBE_CATEGORY = MAX_CALLBACK_DATA - len(UNSUBSCRIBE_PREFIX.encode())


def inline_keyboard(
    rows: object, field: str = "buttons", *, invoice: bool = False
) -> dict[str, Any]:
    """The ``reply_markup`` of an inline keyboard, from rows of buttons.

    Each button is a mapping with a ``text`` and exactly one action, of any kind the Bot
    API gives bots: ``url`` (``http(s)://`` or ``tg://``), ``callback_data`` (1-64
    bytes), ``web_app`` (``{"url": "https://..."}``), ``login_url`` (``{"url":
    "https://...", ...}``), ``switch_inline_query`` or
    ``switch_inline_query_current_chat`` (a query of up to 256 characters, may be
    empty), ``switch_inline_query_chosen_chat`` (``{"query": ..., "allow_user_chats":
    true, ...}``), ``copy_text`` (``{"text": ...}``, 1-256 characters), and ``pay``
    (``true``) as the first button of an invoice only. A game's ``callback_game`` is
    refused: notifyonce sends no games. A list of rows or a mapping with
    ``inline_keyboard`` is taken; the buttons come back as given.

    Args:
        rows: The rows, top to bottom, each a list of buttons, left to right.
        field: The name errors give the keyboard (``"buttons"``, a file's name).
        invoice: Whether the keyboard goes under an invoice, whose first button (only)
            may be ``pay``.

    Raises:
        ValidationError: A button without a text, with no action or more than one, an
            action Telegram would refuse (a web_app or login_url that is not https, a
            callback_data over 64 bytes, a copy_text over 256 characters, an unknown
            key, a value of the wrong type), or ``pay`` anywhere but first in an
            invoice; named by its row and column, counted from 1.

    Examples:
        >>> inline_keyboard([[{"text": "Open", "url": "https://example.com"}]])
        {'inline_keyboard': [[{'text': 'Open', 'url': 'https://example.com'}]]}
        >>> inline_keyboard([[{"text": "Copy", "copy_text": {"text": "PROMO-26"}}]])
        {'inline_keyboard': [[{'text': 'Copy', 'copy_text': {'text': 'PROMO-26'}}]]}
        >>> inline_keyboard([[{"text": "Open"}]])
        Traceback (most recent call last):
        ...
        notifyonce._errors.ValidationError: buttons: row 1, column 1: has no action: give ...
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
            [
                _button(button, f"row {r}, column {c}", field, pay=invoice and r == c == 1)
                for c, button in enumerate(row, 1)
            ]
        )
    return {"inline_keyboard": checked}


def _sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _button(button: object, where: str, field: str, *, pay: bool = False) -> dict[str, Any]:
    """The button as given, checked; ``pay``: whether a Pay button may stand here."""
    if not isinstance(button, Mapping):
        raise ValidationError(field, f"{where}: a button is a mapping with a text and an action")
    text = button.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError(field, f"{where}: has no text")
    actions = [name for name in _ACTIONS if button.get(name) is not None]
    if not actions:
        raise ValidationError(
            field, f"{where}: has no action: give it one of {', '.join(_ACTIONS)}"
        )
    if len(actions) > 1:
        raise ValidationError(
            field,
            f"{where}: has {len(actions)} actions ({', '.join(actions)}); a button takes "
            "exactly one",
        )
    unknown = sorted(str(k) for k in button if k not in ("text", *_ACTIONS))
    if unknown:
        raise ValidationError(field, f"{where}: unknown keys {', '.join(unknown)}")
    action = actions[0]
    problem = _ACTIONS[action](button[action], pay)
    if problem is not None:
        raise ValidationError(field, f"{where}: {problem}")
    return {"text": text, action: button[action]}


# -- each action: its value's problem, or None --------------------------------------------


def _url(value: object, pay: bool) -> str | None:
    if not isinstance(value, str):
        return "url must be a str"
    if not value.startswith(_URL_SCHEMES):
        return "the url must start with http://, https:// or tg://"
    return None


def _callback_data(value: object, pay: bool) -> str | None:
    if not isinstance(value, str):
        return "callback_data must be a str"
    if not 1 <= len(value.encode("utf-8", "surrogatepass")) <= MAX_CALLBACK_DATA:
        return f"callback_data must be 1-{MAX_CALLBACK_DATA} bytes"
    return None


def _query(name: str) -> Callable[[object, bool], str | None]:
    """switch_inline_query and switch_inline_query_current_chat: a query, maybe empty."""

    def check(value: object, pay: bool) -> str | None:
        if not isinstance(value, str):
            return f"{name} must be a str"
        if len(value) > _MAX_QUERY:
            return f"{name} must be at most {_MAX_QUERY} characters"
        return None

    return check


def _object(
    name: str,
    required: dict[str, Callable[[object], str | None]],
    optional: dict[str, Callable[[object], str | None]],
    what: str,
) -> Callable[[object, bool], str | None]:
    """An action whose value is an object: its keys known, each value checked."""

    def check(value: object, pay: bool) -> str | None:
        if not isinstance(value, Mapping):
            return f"{name}: must be an object with {what}"
        unknown = sorted(str(k) for k in value if k not in required and k not in optional)
        if unknown:
            return f"{name}: unknown keys {', '.join(unknown)}"
        for key, rule in (*required.items(), *optional.items()):
            if key in value or key in required:
                problem = rule(value.get(key))
                if problem is not None:
                    return f"{name}: {key} {problem}"
        return None

    return check


def _https(value: object) -> str | None:
    if isinstance(value, str) and value.startswith("https://") and len(value) > len("https://"):
        return None
    return "must be an https:// URL"


def _flag(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _str(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a str"


def _chosen_query(value: object) -> str | None:
    if not isinstance(value, str):
        return "must be a str"
    return None if len(value) <= _MAX_QUERY else f"must be at most {_MAX_QUERY} characters"


def _copied(value: object) -> str | None:
    if isinstance(value, str) and 1 <= len(value) <= MAX_COPY_TEXT:
        return None
    return f"must be 1-{MAX_COPY_TEXT} characters"


def _pay(value: object, pay: bool) -> str | None:
    if value is True and pay:
        return None
    return (
        "pay: a Pay button goes only first in an invoice (the first button of its first "
        "row, sent with sendInvoice), and must be true; a message cannot carry one"
    )


def _game(value: object, pay: bool) -> str | None:
    return (
        "callback_game: a game's button goes only under a game (sendGame), which "
        "notifyonce does not send"
    )


# The actions a button takes exactly one of (the Bot API's InlineKeyboardButton), each
# with the check of its value.
_ACTIONS: dict[str, Callable[[object, bool], str | None]] = {
    "url": _url,
    "callback_data": _callback_data,
    "web_app": _object("web_app", {"url": _https}, {}, "a url"),
    "login_url": _object(
        "login_url",
        {"url": _https},
        {"forward_text": _str, "bot_username": _str, "request_write_access": _flag},
        "a url",
    ),
    "switch_inline_query": _query("switch_inline_query"),
    "switch_inline_query_current_chat": _query("switch_inline_query_current_chat"),
    "switch_inline_query_chosen_chat": _object(
        "switch_inline_query_chosen_chat",
        {},
        {
            "query": _chosen_query,
            "allow_user_chats": _flag,
            "allow_bot_chats": _flag,
            "allow_group_chats": _flag,
            "allow_channel_chats": _flag,
        },
        "a query and the kinds of chat allowed",
    ),
    "copy_text": _object("copy_text", {"text": _copied}, {}, "a text"),
    "callback_game": _game,
    "pay": _pay,
}


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
