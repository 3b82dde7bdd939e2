"""Campaigns that speak to each recipient: rows, templates, languages, the local hour.

A recipient of a campaign may be a row rather than a bare chat id: a
[`Recipient`][notifyonce.Recipient] with the chat, its ``language``, its time zone and the
other columns as fields. Three readers turn a file into such rows, one line (or CSV
record) at a time so that a million rows take the memory of one: one chat id a line, a
CSV file with a header, JSON lines. Each bad line is reported with its number by the
source's check, before anything is claimed; nothing here holds more than one row.

`Personal` turns the campaign's message into each recipient's: the variant of its
language (exact, then the language without its region, then the default), with
``string.Template`` placeholders filled from its fields when the campaign is a template.
Every value is escaped for the message's parse mode, so a name written ``<b>Bob</b>`` or
``Bob_the_*`` arrives as those characters, never as markup; button texts take the value
as is (they are plain text) and button URLs take it percent-encoded.

`LocalHour` places each recipient's send at a local time of day in its own time zone:
the first such moment at or after the campaign's start, so a campaign spans at most a
day (26 hours between the first and the last time zone on Earth).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import string
import urllib.parse
import zoneinfo
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._keys import Subject, normalize_subject
from notifyonce._message import Message
from notifyonce._senders.telegram.markup import escape_html, escape_markdown_v2

__all__ = [
    "CHAT_COLUMN",
    "FORMATS",
    "LANGUAGE_COLUMN",
    "TZ_COLUMN",
    "LocalHour",
    "Personal",
    "Recipient",
    "as_recipient",
    "chat_id",
    "check_local_at",
    "file_format",
    "placeholders",
    "read_rows",
    "recipient_from_row",
    "time_zone",
]

#: The columns the library reads itself; every column is also a field of the template.
CHAT_COLUMN = "chat_id"
LANGUAGE_COLUMN = "language"
TZ_COLUMN = "tz"
# A language tag longer than this is no language (BCP 47's longest in use are ~11).
_LANGUAGE_MAX = 35


@dataclass(frozen=True, slots=True)
class Recipient:
    """One recipient of a campaign, as a row: the chat and what the campaign knows of it.

    Attributes:
        chat: The chat id (an int, or an ``@channel`` name).
        fields: Every column of the row as text (the chat id, ``language`` and ``tz``
            too), for the template's placeholders. A column left empty is not here, so
            its default applies.
        language: The row's ``language`` (lower case, e.g. ``"ru"`` or ``"pt-br"``): it
            picks the variant of the campaign's message; None for the default.
        timezone: The row's ``tz``: where its local hour and quiet hours are read; None
            for the campaign's default.

    Examples:
        >>> Recipient(42, {"name": "Ann"}, language="de").chat
        42
    """

    chat: Subject
    fields: Mapping[str, str] = field(default_factory=dict)
    language: str | None = None
    timezone: dt.tzinfo | None = None

    def __repr__(self) -> str:
        # The fields may be personal data: their names only, never their values.
        return f"Recipient({self.chat!r}, fields={sorted(self.fields)}, language={self.language!r})"


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit() and not (len(text) > 1 and text.lstrip("-")[0] == "0")


def chat_id(value: object) -> Subject:
    """A chat id read from a file or a row: digits become an int, ``@name`` stays str."""
    if isinstance(value, bool) or value is None:
        raise ValidationError("recipient", "has no chat id")
    if isinstance(value, int):
        normalize_subject(value)
        return value
    if not isinstance(value, str):
        raise ValidationError(
            "recipient", f"chat id must be a number or a str, not {type(value).__name__}"
        )
    text = value.strip()
    if not text:
        raise ValidationError("recipient", "has no chat id")
    normalize_subject(text)
    return int(text) if _is_int(text) else text


def time_zone(name: str) -> dt.tzinfo:
    """The IANA time zone ``name`` (``Europe/Berlin``); a ValidationError naming it."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            "recipient", f"tz {name[:40]!r} is not a time zone name (e.g. Europe/Berlin)"
        ) from None


def recipient_from_row(row: Mapping[str, object], chat_column: str = CHAT_COLUMN) -> Recipient:
    """A row of a file or a query as a Recipient: ``chat_column`` the chat id,
    ``language`` and ``tz`` read, every column a field (as text; empty ones left out).

    Raises:
        ValidationError: (field ``recipient``) no chat id, a bad tz, a value that is no
            text or number.
    """
    fields: dict[str, str] = {}
    for name, value in row.items():
        if value is None:
            continue
        if isinstance(value, (dict, list, tuple)):
            raise ValidationError("recipient", f"column {name!r} is not text or a number")
        text = value if isinstance(value, str) else str(value)
        if text.strip():
            fields[str(name)] = text
    chat = chat_id(row.get(chat_column))
    language = fields.get(LANGUAGE_COLUMN, "").strip().lower() or None
    if language is not None and (
        len(language) > _LANGUAGE_MAX or not language.replace("-", "").replace("_", "").isalnum()
    ):
        raise ValidationError(
            "recipient", f"language {language[:40]!r} is not a language tag (e.g. ru, pt-br)"
        )
    tz_name = fields.get(TZ_COLUMN, "").strip()
    zone = time_zone(tz_name) if tz_name else None
    return Recipient(chat, fields, language.replace("_", "-") if language else None, zone)


# -- files -----------------------------------------------------------------------------

#: One line of a recipients file: its number, its first characters (for an error), and
#: the recipient or what is wrong with the line.
Line = tuple[int, str, "Recipient | ValidationError"]

FORMATS = ("auto", "lines", "csv", "jsonl")


def file_format(path: str, wanted: str) -> str:
    """The format of the recipients file: ``wanted``, or for ``auto`` its extension
    (``.csv``; ``.jsonl``, ``.ndjson``), else its first line (``{``: JSON lines; a comma:
    CSV; else one chat id a line)."""
    if wanted not in FORMATS:
        raise ValidationError("format", f"must be one of {', '.join(FORMATS)}, got {wanted!r}")
    if wanted != "auto":
        return wanted
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    with open(path, encoding="utf-8-sig") as lines:
        for line in lines:
            text = line.strip()
            if text and not text.startswith("#"):
                return "jsonl" if text.startswith("{") else "csv" if "," in text else "lines"
    return "lines"


def read_rows(path: str, fmt: str) -> Iterator[Line]:
    """Every recipient of the file, streamed: one line (or CSV record) held at a time."""
    if fmt == "csv":
        yield from _csv_rows(path)
    elif fmt == "jsonl":
        yield from _json_rows(path)
    else:
        yield from _id_lines(path)


def _id_lines(path: str) -> Iterator[Line]:
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                yield number, text, Recipient(chat_id(text))
            except ValidationError as exc:
                yield number, text, exc


def _csv_records(reader: Iterator[list[str]]) -> Iterator[list[str]]:
    """The reader's records; a CSV error (strict: a quote never closed, text after a
    closing quote) raised as ``_BadCsvError`` with what is wrong, in words."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if "end of data" in str(exc):
                raise _BadCsvError(
                    'has a quote (") that is never closed: the rest of the file was read '
                    "into its cell; close it, or double a quote meant as text"
                ) from None
            problem = f"is not valid CSV ({exc}): a quoted cell ends at its quote"
            raise _BadCsvError(problem) from None
        yield cells


class _BadCsvError(Exception):
    """A CSV record the reader cannot read (see `_csv_records`)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _line_at(path: str, number: int) -> str:
    """The file's line ``number`` (1-based) as text, for an error's preview."""
    with open(path, encoding="utf-8-sig", errors="replace") as lines:
        for at, line in enumerate(lines, 1):
            if at == number:
                return line.rstrip("\r\n")
    return ""


def _csv_rows(path: str) -> Iterator[Line]:
    with open(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, strict=True)
        header: list[str] | None = None
        at = 0
        records = _csv_records(reader)
        while True:
            try:
                cells = next(records)
            except StopIteration:
                return
            except _BadCsvError as exc:
                # Named at the line where the record began (the quote's line, for one
                # never closed); nothing after it can be read.
                yield at + 1, _line_at(path, at + 1), ValidationError("recipient", exc.problem)
                return
            number, at = at + 1, reader.line_num
            if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                if "" in header or len(set(header)) < len(header):
                    yield (
                        number,
                        ",".join(cells),
                        ValidationError(
                            "recipient", "the header has an empty or a repeated column name"
                        ),
                    )
                    return
                continue
            preview = ",".join(cells)
            if len(cells) != len(header):
                yield (
                    number,
                    preview,
                    ValidationError(
                        "recipient", f"has {len(cells)} cells where the header has {len(header)}"
                    ),
                )
                continue
            column = CHAT_COLUMN if CHAT_COLUMN in header else header[0]
            try:
                yield (
                    number,
                    preview,
                    recipient_from_row(dict(zip(header, cells, strict=True)), column),
                )
            except ValidationError as exc:
                yield number, preview, exc


def _json_rows(path: str) -> Iterator[Line]:
    with open(path, encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                row = json.loads(text)
            except ValueError:
                yield number, text, ValidationError("recipient", "is not a JSON object")
                continue
            if not isinstance(row, dict):
                yield number, text, ValidationError("recipient", "is not a JSON object")
                continue
            try:
                yield number, text, recipient_from_row(row)
            except ValidationError as exc:
                yield number, text, exc


# -- the message of one recipient --------------------------------------------------------

_ESCAPES: dict[str, Callable[[str], str]] = {
    "html": escape_html,
    "markdownv2": escape_markdown_v2,
}


def _escape(parse_mode: str | None) -> Callable[[str], str]:
    """How a value is written into a text of ``parse_mode`` to show as itself."""
    return _ESCAPES.get((parse_mode or "").lower(), lambda value: value)


def placeholders(template: string.Template) -> list[str]:
    """The names a template fills, in order (``Template.get_identifiers`` of Python 3.11,
    written out for 3.10)."""
    names: list[str] = []
    for found in template.pattern.finditer(template.template):
        name = found.group("named") or found.group("braced")
        if name is not None and name not in names:
            names.append(name)
    return names


def _template(text: str, where: str) -> string.Template:
    template = string.Template(text)
    if any(m.group("invalid") is not None for m in template.pattern.finditer(text)):
        raise ValidationError(
            where,
            "has a $ that starts no placeholder: write $name or ${name}, and $$ for a dollar sign",
        )
    return template


class _Filled(dict[str, str]):
    """The values of one recipient for ``string.Template``: its fields, then the defaults,
    each escaped; a missing one remembered (and left empty) so the caller can name it."""

    def __init__(
        self, values: Mapping[str, str], defaults: Mapping[str, str], escape: Callable[[str], str]
    ) -> None:
        super().__init__()
        self.given, self.defaults, self.escape = values, defaults, escape
        self.missing: str | None = None

    def __missing__(self, name: str) -> str:
        value = self.given.get(name, self.defaults.get(name))
        if value is None:
            self.missing = self.missing or name
            return ""
        return self.escape(value)


class Personal:
    """The campaign's message for each recipient: its language's variant, filled in.

    Args:
        message: The default message (every language without a variant).
        variants: A message per language (``"ru"``, ``"pt-br"``), each with its own text,
            caption and buttons.
        template: Whether texts, captions and button texts and URLs are
            ``string.Template``s filled from the recipient's fields; False sends them as
            written (a ``$`` in them is a dollar sign).
        defaults: A value for a field a recipient has not got; without one, such a
            recipient is refused before the campaign claims anything.
    """

    def __init__(
        self,
        message: Message,
        variants: Mapping[str, Message] | None = None,
        *,
        template: bool = False,
        defaults: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(template, bool):
            raise ValidationTypeError("template", "must be a bool")
        self.template = template
        self.defaults: dict[str, str] = {}
        for name, value in (defaults or {}).items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValidationTypeError("defaults", "must map field names to str values")
            self.defaults[name] = value
        self.message = message
        self.variants: dict[str, Message] = {}
        for language, variant in (variants or {}).items():
            if not isinstance(language, str) or not language.strip():
                raise ValidationError("variants", "a language must be a non-blank str, e.g. ru")
            if not isinstance(variant, Message):
                raise ValidationTypeError(
                    "variants",
                    f"the {language!r} variant must be a Message, got {type(variant).__name__}",
                )
            if (variant.media is None) != (message.media is None):
                raise ValidationError(
                    "variants",
                    f"the {language!r} variant must have media when the message has, and "
                    "not otherwise",
                )
            self.variants[language.strip().lower().replace("_", "-")] = variant
        self._templates: dict[
            int, tuple[string.Template, list[tuple[tuple[int, int, str], string.Template]]]
        ] = {}
        if template:
            for language, variant in [("", message), *self.variants.items()]:
                where = "message" if not language else f"variants[{language!r}]"
                self._templates[id(variant)] = (
                    _template(variant.text, where),
                    list(_button_templates(variant, where)),
                )

    @property
    def personal(self) -> bool:
        """Whether recipients may get different messages (a template or variants)."""
        return self.template or bool(self.variants)

    def pick(self, language: str | None) -> Message:
        """The variant for ``language``: exact, then without its region, then the default."""
        if language:
            found = self.variants.get(language) or self.variants.get(language.split("-")[0])
            if found is not None:
                return found
        return self.message

    def language_of(self, language: str | None) -> str:
        """The variant ``language`` gets, by its language (``""``: the default message)."""
        if language:
            for key in (language, language.split("-")[0]):
                if key in self.variants:
                    return key
        return ""

    def render(self, recipient: Recipient) -> Message:
        """The message of ``recipient``.

        Raises:
            ValidationError: (field ``recipient``) a placeholder has no value in its
                fields nor a default.
        """
        return self._fill(self.pick(recipient.language), recipient)

    def _fill(self, variant: Message, recipient: Recipient) -> Message:
        if not self.template:
            return variant
        text, buttons = self._templates[id(variant)]
        filled = _Filled(recipient.fields, self.defaults, _escape(variant.parse_mode))
        rendered = text.substitute(filled)
        markup = variant.reply_markup
        if buttons:
            plain = _Filled(recipient.fields, self.defaults, lambda value: value)
            quoted = _Filled(
                recipient.fields, self.defaults, lambda value: urllib.parse.quote(value, safe="")
            )
            rows = [[dict(button) for button in row] for row in (markup or {})["inline_keyboard"]]
            for (r, c, key), button_template in buttons:
                values = quoted if key != "text" else plain
                rows[r][c][key] = button_template.substitute(values)
            missing = plain.missing or quoted.missing
            filled.missing = filled.missing or missing
            markup = {**(markup or {}), "inline_keyboard": rows}
        if filled.missing is not None:
            raise ValidationError(
                "recipient",
                f"has no field {filled.missing!r} for the template, and it has no default",
            )
        return replace(variant, text=rendered, reply_markup=markup)

    def bare(self, variant: Message) -> Message:
        """``variant`` with every placeholder filled with one letter: what a check of the
        message itself sees (a problem it has is no recipient's)."""
        if not self.template:
            return variant
        text, buttons = self._templates[id(variant)]
        names = set(placeholders(text))
        for _, template in buttons:
            names.update(placeholders(template))
        return self._fill(variant, Recipient(0, dict.fromkeys(names, "x")))

    def fingerprint_parts(self) -> list[str]:
        """What the campaign's fingerprint adds for a template and variants (nothing for a
        plain message, so its fingerprint is the one it always had)."""
        parts = ["template"] if self.template else []
        if self.defaults:
            parts.append(json.dumps(self.defaults, sort_keys=True))
        return parts


_TEMPLATED_KEYS = ("text", "url")


def _button_templates(
    message: Message, where: str
) -> Iterator[tuple[tuple[int, int, str], string.Template]]:
    """The templates in the buttons' texts and URLs, by row, column and key."""
    markup = message.reply_markup
    rows = markup.get("inline_keyboard") if isinstance(markup, Mapping) else None
    for r, row in enumerate(rows or []):
        for c, button in enumerate(row):
            for key in _TEMPLATED_KEYS:
                value = button.get(key) if isinstance(button, Mapping) else None
                if isinstance(value, str) and "$" in value:
                    yield (r, c, key), _template(value, f"{where} button {r + 1}.{c + 1} {key}")


# -- the local hour ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalHour:
    """Each recipient's send at ``at`` o'clock in its own time zone (``default`` for rows
    without one): the first such moment at or after ``start``."""

    at: dt.time
    default: dt.tzinfo
    start: dt.datetime

    def due(self, zone: dt.tzinfo | None) -> dt.datetime:
        """When a recipient of ``zone`` is due, as an aware UTC time."""
        local = self.start.astimezone(zone or self.default)
        when = local.replace(
            hour=self.at.hour, minute=self.at.minute, second=self.at.second, microsecond=0, fold=0
        )
        if when < local:
            # The same wall time a day later (a DST change that day keeps the hour).
            when = (local + dt.timedelta(days=1)).replace(
                hour=self.at.hour, minute=self.at.minute, second=self.at.second, microsecond=0
            )
        return _utc(when)


def _utc(when: dt.datetime) -> dt.datetime:
    # Through a UTC round trip: an aware wall time in a ZoneInfo gets its right offset.
    return when.astimezone(dt.timezone.utc)


def check_local_at(at: object, default_tz: object) -> tuple[dt.time, dt.tzinfo]:
    """``start_at_local`` and ``default_tz`` checked: a naive time, a tzinfo or a name."""
    if not isinstance(at, dt.time):
        raise ValidationTypeError(
            "start_at_local", f"must be a datetime.time, got {type(at).__name__}"
        )
    if at.tzinfo is not None:
        raise ValidationError(
            "start_at_local", "must be a local time without tzinfo (the recipient's zone applies)"
        )
    if isinstance(default_tz, str):
        try:
            return at, zoneinfo.ZoneInfo(default_tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValidationError(
                "default_tz", f"{default_tz[:40]!r} is not a time zone name"
            ) from None
    if default_tz is None:
        return at, dt.timezone.utc
    if not isinstance(default_tz, dt.tzinfo):
        raise ValidationTypeError("default_tz", "must be a tzinfo, a zone name or None")
    return at, default_tz


def as_recipient(item: object) -> Recipient:
    """A recipient of a list: a Recipient as it is, a chat id as a Recipient of it."""
    if isinstance(item, Recipient):
        return item
    return Recipient(item)  # type: ignore[arg-type]  # checked with the notification
