"""Inline keyboards: every kind of button Telegram gives bots, checked as Telegram checks
them before anything is claimed, and sent as the JSON Telegram reads.

The hypothesis tests hold the checker to "a button with exactly one valid action comes
back as given, whatever its text and values" and "whatever JSON a buttons file holds,
the answer is a keyboard or a ValidationError naming the field" (never a KeyError or a
TypeError from deep inside).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import Message, ValidationError, inline_keyboard
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "424242:BUTTONS-secret"

# One button of every kind a bot may put under a plain message, as Telegram reads it.
EVERY_KIND: list[dict[str, Any]] = [
    {"text": "Shop", "url": "https://example.com/shop"},
    {"text": "Later", "callback_data": "later"},
    {"text": "Open the app", "web_app": {"url": "https://example.com/app"}},
    {
        "text": "Log in",
        "login_url": {
            "url": "https://example.com/login",
            "forward_text": "Log in to Example",
            "bot_username": "example_bot",
            "request_write_access": True,
        },
    },
    {"text": "Share", "switch_inline_query": "tariff"},
    {"text": "Search here", "switch_inline_query_current_chat": ""},
    {
        "text": "Send to a group",
        "switch_inline_query_chosen_chat": {
            "query": "tariff",
            "allow_user_chats": True,
            "allow_group_chats": True,
        },
    },
    {"text": "Copy the code", "copy_text": {"text": "PROMO-2026"}},
]


def test_every_kind_of_button_is_taken_as_given() -> None:
    """url, callback_data, web_app, login_url, the three switch_inline_query kinds and
    copy_text each make a keyboard that is the rows as given."""
    rows = [[button] for button in EVERY_KIND]
    assert {"inline_keyboard": rows} == inline_keyboard(rows)


@pytest.mark.parametrize(
    ("button", "problem"),
    [
        ({"text": "A"}, "row 1, column 1: has no action: give it one of url, callback_data"),
        (
            {"text": "A", "url": "https://e.x", "copy_text": {"text": "x"}},
            "row 1, column 1: has 2 actions (url, copy_text); a button takes exactly one",
        ),
        ({"text": "A", "web_app": {"url": "http://e.x"}}, "web_app: url must be an https:// URL"),
        ({"text": "A", "web_app": "https://e.x"}, "web_app: must be an object with a url"),
        ({"text": "A", "web_app": {"url": "https://e.x", "x": 1}}, "web_app: unknown keys x"),
        ({"text": "A", "login_url": {"url": "tg://x"}}, "login_url: url must be an https:// URL"),
        ({"text": "A", "login_url": {}}, "login_url: url must be an https:// URL"),
        (
            {"text": "A", "login_url": {"url": "https://e.x", "request_write_access": "yes"}},
            "login_url: request_write_access must be true or false",
        ),
        ({"text": "A", "switch_inline_query": 5}, "switch_inline_query must be a str"),
        (
            {"text": "A", "switch_inline_query_current_chat": "q" * 257},
            "switch_inline_query_current_chat must be at most 256 characters",
        ),
        (
            {"text": "A", "switch_inline_query_chosen_chat": {"allow_bot_chats": 1}},
            "switch_inline_query_chosen_chat: allow_bot_chats must be true or false",
        ),
        (
            {"text": "A", "switch_inline_query_chosen_chat": {"allow_dms": True}},
            "switch_inline_query_chosen_chat: unknown keys allow_dms",
        ),
        ({"text": "A", "copy_text": {"text": ""}}, "copy_text: text must be 1-256 characters"),
        (
            {"text": "A", "copy_text": {"text": "c" * 257}},
            "copy_text: text must be 1-256 characters",
        ),
        ({"text": "A", "copy_text": "PROMO"}, "copy_text: must be an object with a text"),
        ({"text": "A", "callback_data": ""}, "callback_data must be 1-64 bytes"),
        ({"text": "A", "callback_data": "é" * 33}, "callback_data must be 1-64 bytes"),
        ({"text": "A", "pay": True}, "pay: a Pay button goes only first in an invoice"),
        ({"text": "A", "callback_game": {}}, "callback_game: a game's button goes only under"),
    ],
)
def test_a_button_telegram_would_refuse_is_named_with_its_problem(
    button: dict[str, Any], problem: str
) -> None:
    """Each button Telegram refuses (no action, two, a web_app or login_url that is not
    https, an over-long query or copy_text, a wrong type, pay or a game's button under a
    plain message) is refused naming its row, column and problem."""
    with pytest.raises(ValidationError) as caught:
        inline_keyboard([[button]])
    assert "buttons" == caught.value.field
    assert problem in caught.value.problem


def test_pay_is_taken_only_as_the_first_button_of_an_invoice() -> None:
    """With invoice=True a Pay button is taken first in the first row, and refused
    anywhere else; pay must be true."""
    pay = {"text": "Pay 5 XTR", "pay": True}
    link = {"text": "Terms", "url": "https://example.com/terms"}
    assert {"inline_keyboard": [[pay, link]]} == inline_keyboard([[pay, link]], invoice=True)
    for rows in ([[link, pay]], [[link], [pay]], [[{"text": "Pay", "pay": False}]]):
        with pytest.raises(ValidationError) as caught:
            inline_keyboard(rows, invoice=True)
        assert "pay: a Pay button goes only first in an invoice" in caught.value.problem


# -- properties ---------------------------------------------------------------------------

texts = st.text(min_size=1, max_size=40).filter(lambda t: bool(t.strip()))
https_urls = st.from_regex(r"https://[a-z]{1,12}\.[a-z]{2,5}/[a-z0-9]{0,10}", fullmatch=True)
queries = st.text(max_size=256)
flags = st.booleans()
valid_actions = st.one_of(
    st.fixed_dictionaries({"url": https_urls}),
    # 16 characters are at most 64 bytes in UTF-8: no example is filtered away.
    st.fixed_dictionaries({"callback_data": st.text(min_size=1, max_size=16)}),
    st.fixed_dictionaries({"web_app": st.fixed_dictionaries({"url": https_urls})}),
    st.fixed_dictionaries(
        {
            "login_url": st.fixed_dictionaries(
                {"url": https_urls},
                optional={"forward_text": st.text(max_size=20), "request_write_access": flags},
            )
        }
    ),
    st.fixed_dictionaries({"switch_inline_query": queries}),
    st.fixed_dictionaries({"switch_inline_query_current_chat": queries}),
    st.fixed_dictionaries(
        {
            "switch_inline_query_chosen_chat": st.fixed_dictionaries(
                {},
                optional={
                    "query": queries,
                    "allow_user_chats": flags,
                    "allow_bot_chats": flags,
                    "allow_group_chats": flags,
                    "allow_channel_chats": flags,
                },
            )
        }
    ),
    st.fixed_dictionaries(
        {"copy_text": st.fixed_dictionaries({"text": st.text(min_size=1, max_size=256)})}
    ),
)


@settings(deadline=None)  # a shared 2-core machine: no per-example timing
@given(
    st.lists(
        st.lists(st.tuples(texts, valid_actions), min_size=1, max_size=4), min_size=1, max_size=4
    )
)
def test_buttons_with_one_valid_action_come_back_as_given(
    layout: list[list[tuple[str, dict[str, Any]]]],
) -> None:
    """Any rows of buttons, each with a text and exactly one valid action of any kind, are
    taken as given: the keyboard sent is the JSON written."""
    rows = [[{"text": text, **action} for text, action in row] for row in layout]
    assert {"inline_keyboard": rows} == inline_keyboard(rows)


@settings(deadline=None)  # a shared 2-core machine: no per-example timing
@given(texts, valid_actions, valid_actions)
def test_a_button_with_two_actions_is_always_refused(
    text: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Two actions of different kinds on one button are refused, naming both."""
    if set(first) == set(second):
        return
    with pytest.raises(ValidationError) as caught:
        inline_keyboard([[{"text": text, **first, **second}]])
    assert "has 2 actions" in caught.value.problem


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)
button_keys = st.sampled_from(
    [
        "text", "url", "callback_data", "web_app", "login_url", "switch_inline_query",
        "switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text",
        "pay", "callback_game", "query", "allow_user_chats",
    ]
)  # fmt: skip
buttonish = st.dictionaries(button_keys, json_values, max_size=4)


@settings(deadline=None)  # a shared 2-core machine: no per-example timing
@given(st.one_of(json_values, st.lists(st.lists(buttonish, max_size=3), max_size=3)))
def test_any_json_is_a_keyboard_or_a_validation_error(rows: object) -> None:
    """Whatever JSON a buttons file holds, the checker answers a keyboard or a
    ValidationError naming the field, never another exception."""
    answer: object
    try:
        answer = inline_keyboard(rows, "--buttons-file")
    except ValidationError as exc:
        answer = exc
    if isinstance(answer, ValidationError):
        assert "--buttons-file" == answer.field
    else:
        assert isinstance(answer, dict)
        assert {"inline_keyboard"} == set(answer)


# -- what the Bot API receives ------------------------------------------------------------


async def test_the_bot_api_receives_every_kind_as_telegram_expects(
    bot_api_server: BotAPIServer,
) -> None:
    """A message with a button of every kind reaches the Bot API with reply_markup as the
    JSON object Telegram reads (one button a row, the keys and values as written)."""
    rows = [[button] for button in EVERY_KIND]
    message = Message("Our offers", reply_markup=inline_keyboard(rows))
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        await sender.send("42", message)
    (delivery,) = bot_api_server.deliveries
    assert {"inline_keyboard": rows} == delivery.params["reply_markup"]
    assert json.loads(json.dumps(rows)) == delivery.params["reply_markup"]["inline_keyboard"]
