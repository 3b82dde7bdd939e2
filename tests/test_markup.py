"""A text's HTML and Markdown checked as Telegram parses them, before anything is claimed.

The verdicts of the table are Telegram's: what its Bot API answers (``400 can't parse
entities``, or a delivery) to each text, as its parser (TDLib's ``parse_html``,
``parse_markdown_v2``, ``parse_markdown``) decides. The hypothesis tests hold the escape
helpers to "whatever the text, escaped it parses", and every problem to a position and
words that never quote the text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import AsyncLedger, Message, Notification, Notifier, Photo, ValidationError
from notifyonce._senders.telegram.markup import markup_problem
from notifyonce.telegram import TelegramSender, escape_html, escape_markdown_v2
from notifyonce.testing import BotAPIServer

TOKEN = "424242:MARKUP-secret"

# (text, accepted by Telegram?) in HTML mode.
HTML_CASES = [
    ("<b>6 hours</b> left", True),
    ("<strong>a</strong><i>b</i><em>c</em><u>d</u><ins>e</ins>", True),
    ("<s>a</s><strike>b</strike><del>c</del><tg-spoiler>d</tg-spoiler>", True),
    ('<span class="tg-spoiler">hidden</span>', True),
    ("<a href='https://example.com/?a=1&amp;b=2'>tariff</a>", True),
    ('<a href="not a url">kept as text</a>', True),  # a bad URL drops the link, no error
    ("<pre><code class=\"language-python\">print('x')</code></pre>", True),
    ("<blockquote expandable>long quote</blockquote>", True),
    ("<BLOCKQUOTE>upper case tags</BLOCKQUOTE>", True),
    ('<tg-emoji emoji-id="5368324170671202286">x</tg-emoji>', True),
    ('<tg-emoji emoji-id="0"></tg-emoji>', True),  # empty: no entity, so not checked
    ("<b>closed by an empty end tag</>", True),
    ("<b data-x=1 lang=en-GB>unknown attributes are ignored</b>", True),
    ("Tom & Jerry", True),  # a bare '&' is text to Telegram
    ("&nbsp; &copy; &unknown; stay as they are", True),
    ("&lt;&gt;&amp;&quot; &#60; &#x3C; &lt &amp", True),
    ("&#1114111; is past the last code point: text", True),
    ("3 > 2", True),
    ("<b>a<i>b</i></b>", True),
    ("", True),
    ("2 < 3", False),  # a '<' that is text must be &lt;
    ("<p>paragraph</p>", False),
    ("<br>", False),
    ("<div>block</div>", False),
    ("<b>never closed", False),
    ("<b>crossed <i>tags</b></i>", False),
    ("closed </b> too early", False),
    ("<span>a span needs its class</span>", False),
    ('<span class="other">x</span>', False),
    ('<tg-emoji emoji-id="abc">x</tg-emoji>', False),
    ("<b", False),
    ("<b class=", False),
    ("<i =x>", False),
    ("<i a=b,c>", False),
    ('<a href="unterminated>x</a>', False),
    ("<b>x</b   ", False),
    ("&#xD83D;&#xDE00; halves of a pair", False),
]

# (text, accepted by Telegram?) in MarkdownV2 mode.
MARKDOWN_V2_CASES = [
    ("*6 hours* left", True),
    ("_italic_ __underline__ ~strike~ ||spoiler|| `code`", True),
    ("*bold _italic bold ~italic bold strike~ __underline italic bold___ bold*", True),
    ("```python\nprint(1)\n```", True),
    ("[tariff](https://example.com/a\\)b)", True),
    ("[tariff](not a url)", True),  # a bad URL drops the link, no error
    ("![👍](tg://emoji?id=5368324170671202286)", True),
    ("Ends 01\\.12\\. \\(in 6 h\\)\\!", True),
    ("\\a\\b\\c letters may be escaped too", True),
    ("a backslash before a letter outside ASCII stays: \\é", True),
    ("`reserved . ! ( ) inside code need no escape`", True),
    (">a quote\n>of two lines\nthen text", True),
    (">an expandable quote\n>ends with||\nafter", True),
    ("**", True),  # an empty entity is dropped
    ("line one\nline two", True),
    ("", True),
    ("Ends soon.", False),
    ("6 hours left!", False),
    ("(in 6 h)", False),
    ("1 + 1 = 2", False),
    ("a-b", False),
    ("#hashtag", False),
    ("{braces}", False),
    ("*never closed", False),
    ("_never closed", False),
    ("`never closed", False),
    ("```never closed", False),
    ("[link](https://example.com", False),
    ("a | b", False),
    ("not at a line start > here", False),
    (">*bold across\n>quote lines* ends outside\nx*", False),
    ("![👍]", False),
    ("![👍](https://example.com)", False),
    ("![👍](tg://emoji?id=012)", False),
]

# (text, accepted by Telegram?) in the legacy Markdown mode.
MARKDOWN_CASES = [
    ("*bold* _italic_ `code` [link](https://example.com)", True),
    ("```\npre\n```", True),
    ("Ends 01.12. (in 6 h)!", True),
    ("\\_not italic\\_", True),
    ("*never closed", False),
    ("snake_case_name", True),
    ("a_b", False),
    ("[never closed", False),
]


CASES = [
    *(("HTML", text, accepted) for text, accepted in HTML_CASES),
    *(("MarkdownV2", text, accepted) for text, accepted in MARKDOWN_V2_CASES),
    *(("Markdown", text, accepted) for text, accepted in MARKDOWN_CASES),
]


@pytest.mark.parametrize(("mode", "text", "accepted"), CASES)
def test_markup_is_refused_where_telegram_refuses_it(mode: str, text: str, accepted: bool) -> None:
    """Each text gets Telegram's verdict in its parse mode: accepted, or refused at one of
    its characters."""
    found = markup_problem(text, mode)
    assert accepted == (found is None), found
    if found is not None:
        assert 0 <= found.at <= len(text)


def test_every_reserved_character_alone_is_refused_and_escaped_accepted() -> None:
    """MarkdownV2: each reserved character that opens no entity is an error on its own and
    fine escaped; every other printable ASCII character is fine as it is."""
    for code in range(1, 127):
        char = chr(code)
        if char in "_*[~`>":  # these open an entity (or a quote)
            continue
        refused = markup_problem(char, "MarkdownV2") is not None
        assert (char in "]()#+-=|{}.!") == refused, repr(char)
        assert markup_problem("\\" + char, "MarkdownV2") is None


def test_the_parse_mode_is_read_as_telegram_reads_it() -> None:
    """Any case; None, empty and "none" are plain text; any other mode is refused."""
    assert markup_problem("2 < 3", "html") is not None
    assert markup_problem("Ends soon.", "markdownv2") is not None
    for plain in (None, "", "None"):
        assert markup_problem("2 < 3. Ends soon!", plain) is None
    with pytest.raises(ValidationError) as caught:
        markup_problem("text", "Markdown3")
    assert "parse_mode" == caught.value.field


@settings(max_examples=300)
@given(st.text())
def test_escaped_text_always_parses(text: str) -> None:
    """Whatever the text, escape_html and escape_markdown_v2 make it parse, alone and
    inside an entity."""
    html = escape_html(text)
    assert markup_problem(html, "HTML") is None
    assert markup_problem(f"<b>{html}</b> <a href='https://example.com'>{html}</a>", "HTML") is None
    markdown = escape_markdown_v2(text)
    assert markup_problem(markdown, "MarkdownV2") is None
    assert (
        markup_problem(f"*{markdown}* ~{markdown}~ [{markdown}](https://example.com)", "MarkdownV2")
        is None
    )


SECRET = "Qx7Zv"


@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(
            [
                "<",
                ">",
                "&",
                "</",
                "b>",
                "*",
                "_",
                "`",
                "[",
                "](",
                ")",
                "\\",
                "\n",
                ">",
                "||",
                "!",
                ".",
                SECRET,
                "tg-emoji ",
                "span ",
                " ",
                "=",
                '"',
            ]
        ),
        max_size=30,
    ).map("".join),
    st.sampled_from(["HTML", "MarkdownV2", "Markdown"]),
)
def test_a_problem_names_a_position_and_never_quotes_the_text(text: str, mode: str) -> None:
    """For any text, the check ends with a verdict (no other exception); a problem is at a
    character of the text, and its words hold no part of the text."""
    found = markup_problem(text, mode)
    if found is None:
        return
    assert 0 <= found.at <= len(text)
    assert SECRET not in found.problem
    assert SECRET.lower() not in found.problem
    message = Message(text + " " + SECRET, parse_mode=mode)
    with pytest.raises(ValidationError) as caught:
        TelegramSender(TOKEN).check("42", message)
    assert SECRET not in str(caught.value)
    assert SECRET.lower() not in str(caught.value)


def test_the_error_names_the_field_the_mode_and_the_line_and_column() -> None:
    """A text's problem names ``text``, a caption's ``caption``; both say where."""
    sender = TelegramSender(TOKEN)
    text = Message("Hello Qx7Zv,\nthe tariff ends 01.12.", parse_mode="MarkdownV2")
    with pytest.raises(ValidationError) as caught:
        sender.check("42", text)
    assert "text" == caught.value.field
    assert "is not valid MarkdownV2 for Telegram at line 2, column 19 (character 32)" in (
        caught.value.problem
    )
    assert "'.' is reserved" in caught.value.problem
    assert "Qx7Zv" not in str(caught.value)
    caption = Message("Qx7Zv <3", parse_mode="HTML", media=Photo(b"\xff\xd8image"))
    with pytest.raises(ValidationError) as caught:
        sender.check("42", caption)
    assert "caption" == caught.value.field
    assert "at line 1, column 7 (character 7)" in caught.value.problem
    assert "Qx7Zv" not in str(caught.value)


async def test_a_bad_text_is_refused_before_anything_is_claimed(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A run of 40 with HTML Telegram cannot parse raises ValidationError: no row is
    written and no request reaches the Bot API (Telegram answered each 400 before)."""
    batch = [
        Notification(chat, "2026-12", Message("Your <tariff> ends", parse_mode="HTML"))
        for chat in range(1000, 1040)
    ]
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        with pytest.raises(ValidationError) as caught:
            await Notifier(ledger, sender).send_many("news", batch)
    assert "text" == caught.value.field
    assert "tariff" not in str(caught.value)
    assert [] == bot_api_server.requests
    async with ledger.engine.connect() as conn:
        assert (
            0 == (await conn.execute(sa.select(sa.func.count()).select_from(ledger.table))).scalar()
        )


def test_broadcast_command_reports_a_bad_text_even_in_a_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``notifyonce broadcast`` (with --dry-run too) names the text file, the position and
    the problem, exits 2 and opens no database; the text is not printed."""
    from notifyonce._cli import main

    (tmp_path / "chats.txt").write_text("1\n2\n")
    (tmp_path / "text.txt").write_text("*Qx7Zv*, the tariff ends 01.12.\n")
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", "12345:markup-secret-token")
    for extra in ([], ["--dry-run"]):
        args = [
            "broadcast",
            "--recipients-file",
            str(tmp_path / "chats.txt"),
            "--text-file",
            str(tmp_path / "text.txt"),
            "--parse-mode",
            "MarkdownV2",
            "--action",
            "news",
            "--campaign",
            "c1",
            "--database-url",
            f"sqlite:///{tmp_path / 'never-opened.sqlite3'}",
            *extra,
        ]
        with pytest.raises(SystemExit) as exited:
            main(args)
        assert 2 == exited.value.code
        err = capsys.readouterr().err
        assert "--text-file: text is not valid MarkdownV2 for Telegram at line 1, column 28" in err
        assert "Qx7Zv" not in err
    assert not (tmp_path / "never-opened.sqlite3").exists()
