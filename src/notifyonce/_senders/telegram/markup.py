"""A text's formatting read as Telegram reads it, so a text Telegram would refuse for its
markup is refused before anything is claimed.

Telegram answers ``400 Bad Request: can't parse entities`` to a text whose HTML or
Markdown it cannot read, and it answers so for every chat: sent to a campaign, such a text
used to burn every slot it reached. These functions follow the Bot API's own parsers
(TDLib's ``parse_html``, ``parse_markdown_v2`` and ``parse_markdown``) step by step, so
they refuse exactly the texts Telegram refuses, at the same place, and accept the rest
(Telegram also reads a bare ``&`` or an unknown ``&name;`` as text, and so do they).

A problem names a position (line, column and character index) and what is wrong, never
any part of the text: a tag name or a word can be a user's name. Standard library only.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from notifyonce._errors import ValidationError
from notifyonce._message import Message

__all__ = [
    "MarkupProblem",
    "check_markup",
    "escape_html",
    "escape_markdown_v2",
    "markup_problem",
    "parse_mode_of",
]

# The tags Telegram's HTML knows; any other start tag is refused.
_HTML_TAGS = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "s",
        "strike",
        "del",
        "u",
        "ins",
        "tg-spoiler",
        "tg-emoji",
        "span",
        "pre",
        "code",
        "blockquote",
    }
)
_HTML_TAG_LIST = (
    'b, strong, i, em, u, ins, s, strike, del, span class="tg-spoiler", tg-spoiler, a href, '
    "tg-emoji emoji-id, code, pre, blockquote (expandable)"
)
# What TDLib's is_space counts as a space: the end of the text too.
_SPACES = frozenset(" \t\r\n\0\v\f")
_END = "\0"
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NAME_TOKEN = _ASCII_LETTERS | _DIGITS | frozenset(".-")
_ATTRIBUTE_NAME_STOPS = _SPACES | frozenset("=>/\"'")

# MarkdownV2: the characters that must be escaped outside code, and inside code and pre.
_MDV2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!\n")
_MDV2_IN_CODE = frozenset("`")
# What escape_markdown_v2 escapes: the reserved characters and the escape character itself.
_MDV2_ESCAPE = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
_MDV1_MARKUP = frozenset("_*`[")
_INT64_MAX = 2**63 - 1
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

_ENTITY_NAMES = {
    "bold": "bold (*...*)",
    "italic": "italic (_..._)",
    "underline": "underline (__...__)",
    "strikethrough": "strikethrough (~...~)",
    "spoiler": "spoiler (||...||)",
    "code": "code (`...`)",
    "pre": "pre (```...```)",
    "text_url": "link ([...](...))",
    "custom_emoji": "custom emoji (![...](tg://emoji?id=...))",
    "blockquote": "block quote (>...)",
}


@dataclass(frozen=True, slots=True)
class MarkupProblem:
    """Where Telegram would stop reading a text's markup, and why.

    Attributes:
        at: The index in the text (a character, from 0) where the problem is; the
            length of the text when the text ends too soon.
        problem: What is wrong, in words that never quote the text.
    """

    at: int
    problem: str

    def where(self, text: str) -> str:
        """``line L, column C (character N)`` of the problem in ``text``, all from 1."""
        line = text.count("\n", 0, self.at) + 1
        column = self.at - (text.rfind("\n", 0, self.at) + 1) + 1
        return f"line {line}, column {column} (character {self.at + 1})"


def parse_mode_of(parse_mode: str | None) -> str | None:
    """``"html"``, ``"markdownv2"``, ``"markdown"``, or None for plain text, as the Bot API
    reads ``parse_mode`` (any case; empty or ``"none"`` is plain text).

    Raises:
        ValidationError: Any other parse mode: Telegram refuses it for every chat.
    """
    if parse_mode is None:
        return None
    if not isinstance(parse_mode, str):
        raise ValidationError("parse_mode", "must be a str or None")
    mode = parse_mode.lower()
    if mode in ("", "none"):
        return None
    if mode not in ("html", "markdownv2", "markdown"):
        raise ValidationError(
            "parse_mode",
            "must be 'HTML', 'MarkdownV2', 'Markdown' or None: Telegram answers any other "
            "with 'Unsupported parse_mode'",
        )
    return mode


@functools.lru_cache(maxsize=256)
def markup_problem(text: str, parse_mode: str | None) -> MarkupProblem | None:
    """The first problem Telegram would find in ``text`` read as ``parse_mode``, or None.

    Cached: a campaign checks one text for every recipient, and reads it once.

    Examples:
        >>> markup_problem("<b>6 hours</b> left", "HTML") is None
        True
        >>> markup_problem("2 < 3", "HTML").problem
        "a '<' that starts no tag Telegram knows: write a '<' that is text as &lt;"
        >>> markup_problem("Ends soon.", "MarkdownV2").at
        9
    """
    mode = parse_mode_of(parse_mode)
    if mode == "html":
        return _html(text)
    if mode == "markdownv2":
        return _markdown_v2(text)
    if mode == "markdown":
        return _markdown(text)
    return None


def check_markup(message: Message) -> None:
    """Refuse a message whose text (or caption) Telegram could not parse in its parse mode.

    Raises:
        ValidationError: Naming the field (``text``, or ``caption`` for media), the
            parse mode, the position and the problem; never the text.
    """
    found = markup_problem(message.text, message.parse_mode)
    if found is None:
        return
    field = "text" if message.media is None else "caption"
    raise ValidationError(
        field,
        f"is not valid {message.parse_mode} for Telegram at {found.where(message.text)}: "
        f"{found.problem}; nothing was sent",
    )


def escape_html(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` written as entities: shown as is in HTML mode.

    Examples:
        >>> escape_html("Tom & Jerry <3")
        'Tom &amp; Jerry &lt;3'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_markdown_v2(text: str) -> str:
    """``text`` with every MarkdownV2 reserved character (and ``\\``) escaped: shown as is.

    For text outside entities, such as a user's name put into a template.

    Examples:
        >>> escape_markdown_v2("Ends 01.12. (in 6 h)!")
        'Ends 01\\\\.12\\\\. \\\\(in 6 h\\\\)\\\\!'
    """
    return _MDV2_ESCAPE.sub(r"\\\1", text)


# -- HTML ---------------------------------------------------------------------------------


class _MarkupError(Exception):
    """Raised inside a parser: the problem found."""

    def __init__(self, at: int, problem: str) -> None:
        super().__init__(problem)
        self.found = MarkupProblem(at, problem)


def _char_reference(text: str, at: int) -> tuple[int, int]:
    """The code point of the character reference starting at ``at`` (``&``) and the index
    after it; code point 0 when Telegram reads it as text (an unknown name, a bad number)."""
    n = len(text)
    end = at + 1
    if end < n and text[end] == "#":
        end += 1
        digits, base = _DIGITS, 10
        if end < n and text[end] == "x":
            digits, base = _HEX, 16
            end += 1
        start = end
        while end < n and text[end] in digits:
            end += 1
        code = int(text[start:end], base) if start < end else 0
        if code == 0 or code >= 0x10FFFF or end - at >= 10:
            return 0, at
    else:
        while end < n and text[end] in _ASCII_LETTERS:
            end += 1
        named = _NAMED.get(text[at + 1 : end])
        if named is None:
            return 0, at
        code = ord(named)
    return code, end + 1 if end < n and text[end] == ";" else end


def _ascii_lower(text: str) -> str:
    """``text`` with A-Z lowered and nothing else changed, as Telegram lowers tag names."""
    return text.translate(_LOWER)


def _html(text: str) -> MarkupProblem | None:
    try:
        _parse_html(text)
    except _MarkupError as refused:
        return refused.found
    return None


def _parse_html(text: str) -> None:
    n = len(text)

    def at(j: int) -> str:
        return text[j] if j < n else _END

    # Open tags: (name, where it starts, visible characters before it, its argument).
    open_tags: list[tuple[str, int, int, str]] = []
    shown = 0  # visible characters so far: an element with none makes no entity
    surrogate: int | None = None  # where a reference to half a surrogate pair is
    i = 0
    while i < n:
        c = text[i]
        if c == "&":
            code, after = _char_reference(text, i)
            if code:
                if 0xD800 <= code <= 0xDFFF and surrogate is None:
                    surrogate = i  # refused once the whole text is read, as Telegram does
                shown += 1
                i = after
                continue
        if c != "<":
            shown += 1
            i += 1
            continue
        begin = i
        i += 1
        if at(i) != "/":
            i = _html_start_tag(text, begin, i, open_tags, shown)
        else:
            if not open_tags:
                raise _MarkupError(
                    begin, "an end tag with no tag open: write a '<' that is text as &lt;"
                )
            while at(i) not in _SPACES and at(i) != ">":
                i += 1
            name = _ascii_lower(text[begin + 2 : i])
            while i < n and at(i) in _SPACES:
                i += 1
            if at(i) != ">":
                raise _MarkupError(begin, "an end tag without its closing '>'")
            tag, _, opened_at, argument = open_tags[-1]
            if name and name != tag:
                raise _MarkupError(
                    begin, f"an end tag that does not match the open tag: </{tag}> expected"
                )
            if tag == "tg-emoji" and shown > opened_at and not _emoji_id(argument):
                raise _MarkupError(
                    open_tags[-1][1],
                    "a tg-emoji tag without a valid emoji-id (a number other than 0)",
                )
            open_tags.pop()
        i += 1  # past the '>'
    if open_tags:
        tag, where, _, _ = open_tags[-1]
        raise _MarkupError(where, f"a <{tag}> tag that is never closed: </{tag}> expected")
    if surrogate is not None:
        raise _MarkupError(
            surrogate,
            "a character reference to half of a UTF-16 surrogate pair (&#xD800; to "
            "&#xDFFF;), which Telegram refuses: refer to the whole character instead",
        )


def _html_start_tag(
    text: str, begin: int, i: int, open_tags: list[tuple[str, int, int, str]], shown: int
) -> int:
    """Read the start tag at ``begin`` (``i`` after its ``<``); the index of its ``>``."""
    n = len(text)

    def at(j: int) -> str:
        return text[j] if j < n else _END

    while at(i) not in _SPACES and at(i) != ">":
        i += 1
    if at(i) == _END:
        raise _MarkupError(
            begin, "a '<' that is never closed with '>': write a '<' that is text as &lt;"
        )
    tag = _ascii_lower(text[begin + 1 : i])
    if tag not in _HTML_TAGS:
        raise _MarkupError(
            begin,
            "a '<' that starts no tag Telegram knows: write a '<' that is text as &lt;"
            if not tag
            else f"a tag Telegram does not support (it knows {_HTML_TAG_LIST}); write a '<' "
            "that is text as &lt;",
        )
    argument = ""
    unclosed = f"a <{tag}> start tag that is never closed with '>'"
    while at(i) != ">":
        while at(i) != _END and at(i) in _SPACES:
            i += 1
        if at(i) == ">":
            break
        name_at = i
        while at(i) not in _ATTRIBUTE_NAME_STOPS:
            i += 1
        attribute = text[name_at:i]
        if not attribute:
            raise _MarkupError(begin, f"an attribute without a name in a <{tag}> tag")
        while at(i) != _END and at(i) in _SPACES:
            i += 1
        if at(i) != "=":
            if at(i) == _END:
                raise _MarkupError(begin, unclosed)
            if tag == "blockquote" and attribute == "expandable":
                argument = "1"
            continue
        i += 1
        while at(i) != _END and at(i) in _SPACES:
            i += 1
        if at(i) == _END:
            raise _MarkupError(begin, unclosed)
        if at(i) not in "'\"":
            token_at = i
            while at(i) in _NAME_TOKEN:
                i += 1
            value = _ascii_lower(text[token_at:i])
            if at(i) not in _SPACES and at(i) != ">":
                raise _MarkupError(
                    token_at,
                    "an attribute value that is neither quoted nor a plain word (letters, "
                    "digits, '.' and '-'): put it in quotes",
                )
        else:
            quote = at(i)
            i += 1
            parts: list[str] = []
            while at(i) != quote and at(i) != _END:
                if text[i] == "&":
                    code, after = _char_reference(text, i)
                    if code:
                        parts.append(chr(code))
                        i = after
                        continue
                parts.append(text[i])
                i += 1
            if at(i) == quote:
                i += 1
            value = "".join(parts)
        if at(i) == _END:
            raise _MarkupError(begin, unclosed)
        if tag == "a" and attribute == "href":
            argument = value
        elif tag == "code" and attribute == "class" and value.startswith("language-"):
            argument = value[9:]
        elif tag == "span" and attribute == "class" and value.startswith("tg-"):
            argument = value[3:]
        elif tag == "tg-emoji" and attribute == "emoji-id":
            argument = value
        elif tag == "blockquote" and attribute == "expandable":
            argument = "1"
    if tag == "span" and argument != "spoiler":
        raise _MarkupError(
            begin, 'a <span> tag without class="tg-spoiler" (the only span Telegram knows)'
        )
    open_tags.append((tag, begin, shown, argument))
    return i


def _emoji_id(value: str) -> bool:
    """Whether ``value`` reads as a custom emoji id: a 64-bit integer other than 0."""
    number = _int64(value)
    return number is not None and number != 0


# -- MarkdownV2 ---------------------------------------------------------------------------


def _markdown_v2(text: str) -> MarkupProblem | None:
    try:
        _parse_markdown_v2(text)
    except _MarkupError as refused:
        return refused.found
    return None


def _reserved(at: int, char: str) -> _MarkupError:
    return _MarkupError(
        at, f"the character '{char}' is reserved and must be escaped with a preceding '\\'"
    )


def _unclosed(entity: str, at: int) -> _MarkupError:
    return _MarkupError(at, f"the {_ENTITY_NAMES[entity]} entity opened here is never closed")


def _parse_markdown_v2(text: str) -> None:
    n = len(text)

    def at(j: int) -> str:
        return text[j] if j < n else _END

    # Open entities: (type, index of its first markup character).
    stack: list[tuple[str, int]] = []
    have_blockquote = False
    can_start_blockquote = True
    last_shown = ""  # the last character the text shows (Telegram's output so far)
    i = 0
    while i < n:
        c = text[i]
        if c == "\\" and 0 < ord(at(i + 1)) <= 126:
            i += 1
            last_shown = text[i]
            if text[i] != "\r":
                can_start_blockquote = text[i] == "\n"
            i += 1
            continue
        in_code = bool(stack) and stack[-1][0] in ("code", "pre")
        if c not in (_MDV2_IN_CODE if in_code else _MDV2_RESERVED):
            last_shown = c
            if c != "\r":
                can_start_blockquote = False
            i += 1
            continue

        top = stack[-1][0] if stack else None
        if top is None:
            ends = False
        elif have_blockquote and c == "\n" and (i + 1 == n or text[i + 1] != ">"):
            ends = True
        else:
            ends = {
                "bold": c == "*",
                "italic": c == "_" and at(i + 1) != "_",
                "code": c == "`",
                "pre": c == "`" and at(i + 1) == "`" and at(i + 2) == "`",
                "text_url": c == "]",
                "underline": c == "_" and at(i + 1) == "_",
                "strikethrough": c == "~",
                "spoiler": c == "|" and at(i + 1) == "|",
                "custom_emoji": c == "]",
                "blockquote": False,
            }[top]

        if not ends:
            begin = i
            kind: str | None
            if c == "_":
                if at(i + 1) == "_":
                    kind = "underline"
                    i += 1
                else:
                    kind = "italic"
            elif c == "*":
                kind = "bold"
            elif c == "~":
                kind = "strikethrough"
            elif c in "|!":  # "||" opens a spoiler, "![" a custom emoji; alone, an error
                second, opened = ("|", "spoiler") if c == "|" else ("[", "custom_emoji")
                if at(i + 1) != second:
                    raise _reserved(i, c)
                i += 1
                kind = opened
            elif c == "[":
                kind = "text_url"
            elif c == "`":
                if at(i + 1) == "`" and at(i + 2) == "`":
                    i += 3
                    kind = "pre"
                    language_end = i
                    while at(language_end) not in _SPACES and at(language_end) != "`":
                        language_end += 1
                    if i != language_end and language_end < n and at(language_end) != "`":
                        i = language_end
                    if at(i) in "\n\r":  # one line break after the language is skipped
                        if at(i + 1) in "\n\r" and at(i) != at(i + 1):
                            i += 2
                        else:
                            i += 1
                    i -= 1
                else:
                    kind = "code"
            elif c == "\n":
                last_shown = "\n"
                can_start_blockquote = True
                kind = None
            elif c == ">":
                if not can_start_blockquote:
                    raise _reserved(i, c)
                if have_blockquote:
                    kind = None
                else:
                    kind = "blockquote"
                    have_blockquote = True
            else:
                raise _reserved(i, c)
            if kind is not None:
                stack.append((kind, begin))
            i += 1
            continue

        # The end of the innermost open entity.
        kind, begin = stack[-1]
        if c == "\n" and kind != "blockquote":
            # Only a spoiler that ends the quote's last line ("||" then the line break)
            # may stand there: it makes the quote expandable.
            if kind != "spoiler" or not (begin == i - 2 or (begin == i - 3 and last_shown == "\r")):
                raise _unclosed(kind, begin)
            stack.pop()
            kind, begin = stack[-1]
            if kind != "blockquote":
                raise _unclosed(kind, begin)
        if kind in ("underline", "spoiler"):
            i += 1
        elif kind == "pre":
            i += 2
        elif kind == "text_url":
            if at(i + 1) == "(":
                i, _ = _markdown_v2_url(text, i + 2, "a link's URL that is never closed with ')'")
        elif kind == "custom_emoji":
            if at(i + 1) != "(":
                raise _MarkupError(i, "a custom emoji without its tg://emoji?id=... URL")
            url_at = i + 2
            i, url = _markdown_v2_url(
                text, url_at, "a custom emoji's URL that is never closed with ')'"
            )
            problem = _custom_emoji_url(url)
            if problem is not None:
                raise _MarkupError(url_at, problem)
        elif kind == "blockquote":
            have_blockquote = False
            last_shown = c
            can_start_blockquote = True
        stack.pop()
        i += 1

    if have_blockquote:
        if stack[-1][0] == "spoiler" and stack[-1][1] == n - 2:
            stack.pop()  # "||" at the very end: an expandable quote
        if stack[-1][0] == "blockquote":
            stack.pop()
    if stack:
        kind, begin = stack[-1]
        raise _unclosed(kind, begin)


def _markdown_v2_url(text: str, i: int, unclosed: str) -> tuple[int, str]:
    """The index of the ``)`` closing the URL that starts at ``i``, and the URL read with
    its escapes undone."""
    n = len(text)
    start = i
    url: list[str] = []
    while i < n and text[i] != ")":
        if text[i] == "\\" and i + 1 < n and 0 < ord(text[i + 1]) <= 126:
            url.append(text[i + 1])
            i += 2
            continue
        url.append(text[i])
        i += 1
    if i >= n:
        raise _MarkupError(start, unclosed)
    return i, "".join(url)


def _custom_emoji_url(url: str) -> str | None:
    """What is wrong with a custom emoji URL (``tg://emoji?id=<id>``), or None."""
    rest = url.lower()
    if not rest.startswith("tg:"):
        return "a custom emoji URL whose scheme is not tg:"
    rest = rest[3:]
    if rest.startswith("//"):
        rest = rest[2:]
    if not rest.startswith("emoji") or (len(rest) > 5 and rest[5] not in "/?#"):
        return 'a custom emoji URL whose host is not "emoji"'
    rest = rest[5:]
    if rest.startswith("/"):
        rest = rest[1:]
    if not rest.startswith("?"):
        return "a custom emoji URL without an emoji id"
    query = rest[1:].split("#", 1)[0]
    for parameter in query.split("&"):
        key, _, value = parameter.partition("=")
        if key == "id":
            return (
                None if _int64(value) is not None else "a custom emoji URL whose id is not a number"
            )
    return "a custom emoji URL without an emoji id"


def _int64(value: str) -> int | None:
    """``value`` as Telegram reads a 64-bit integer (decimal, an optional '-', written as
    the number prints), or None."""
    digits = value[1:] if value.startswith("-") else value
    if not digits.isascii() or not digits.isdigit():
        return None
    number = int(value)
    if str(number) != value or not -(2**63) <= number <= _INT64_MAX:
        return None
    return number


# -- Markdown (the legacy mode) -----------------------------------------------------------


def _markdown(text: str) -> MarkupProblem | None:
    """Telegram's first Markdown: ``_``, ``*``, a backtick and ``[`` open an entity that
    must be closed; ``\\`` escapes those four."""
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in _MDV1_MARKUP:
            i += 2
            continue
        if c not in _MDV1_MARKUP:
            i += 1
            continue
        begin = i
        end_char = "]" if c == "[" else c
        i += 1
        pre = False
        if c == "`" and text[i : i + 2] == "``":
            i += 2
            pre = True
            language_end = i
            while (
                language_end < n and text[language_end] not in _SPACES and text[language_end] != "`"
            ):
                language_end += 1
            if i != language_end and language_end < n and text[language_end] != "`":
                i = language_end
            if i < n and text[i] in "\n\r":
                if i + 1 < n and text[i + 1] in "\n\r" and text[i] != text[i + 1]:
                    i += 2
                else:
                    i += 1
        while i < n and (text[i] != end_char or (pre and text[i + 1 : i + 3] != "``")):
            i += 1
        if i >= n:
            return MarkupProblem(begin, "an entity that is never closed (_, *, ` or [)")
        if c == "[" and i + 1 < n and text[i + 1] == "(":
            i += 2
            while i < n and text[i] != ")":
                i += 1
        if pre:
            i += 2
        i += 1
    return None
