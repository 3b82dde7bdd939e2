"""``notifyonce broadcast``'s options of a campaign that speaks to each recipient.

A template (``--template``, ``--default``), variants by language (``--text-file-for``,
``--caption-file-for``, ``--buttons-file-for``) and the recipient's own hour
(``--at-local``, ``--default-tz``). Kept apart from the command's module so that the
command only registers them and hands what they say to its `Broadcast`; every option is
checked here, before the database is opened.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable
from typing import Any

from notifyonce._cli.common import UsageError
from notifyonce._errors import ValidationError
from notifyonce._message import Message
from notifyonce._personal import FORMATS, Personal, check_local_at
from notifyonce._senders.telegram.payload import check_message

__all__ = ["add_options", "broadcast_options", "checked"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """Register the options of a personalised campaign on ``broadcast``."""
    parser.add_argument(
        "--recipients-format",
        choices=FORMATS,
        default="auto",
        help="how --recipients-file is written: one chat id a line, CSV with a header "
        "(chat_id, language, tz and any fields), JSON lines; auto (the default) reads the "
        "extension (.csv, .jsonl), else the first line",
    )
    parser.add_argument(
        "--template",
        action="store_true",
        help="fill $name and ${name} in the texts, captions and buttons from each "
        "recipient's columns ($$ is a dollar sign), each value escaped for --parse-mode; "
        "without it a text is sent as written",
    )
    parser.add_argument(
        "--default",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="with --template: the value of FIELD for recipients without one (repeatable); "
        "without a default such a recipient stops the campaign before anything is sent",
    )
    for kind, what in (("text", "text"), ("caption", "caption"), ("buttons", "buttons")):
        parser.add_argument(
            f"--{kind}-file-for",
            action="append",
            default=[],
            metavar="LANG=PATH",
            help=f"the {what} for recipients whose language is LANG (e.g. ru=news.ru.html; "
            f"repeatable); --{kind}-file is every other language's",
        )
    parser.add_argument(
        "--at-local",
        type=_local_time,
        default=None,
        metavar="HH:MM",
        help="send to each recipient at this time of day in its own tz (its row's tz "
        "column, else --default-tz), the first such time after the campaign starts: the "
        "run lasts up to a day",
    )
    parser.add_argument(
        "--default-tz",
        default=None,
        metavar="ZONE",
        help="with --at-local: the time zone of recipients without one, e.g. Europe/Berlin "
        "(default: UTC)",
    )


def _local_time(value: str) -> dt.time:
    try:
        return dt.time.fromisoformat(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError("not a time of day: expected e.g. 10:00") from None


def _pairs(option: str, values: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict; a usage error naming the one without ``=``."""
    found: dict[str, str] = {}
    for value in values:
        key, equals, rest = value.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"{option}: expected KEY=VALUE, got {value[:40]!r}")
        if key.strip().lower() in found:
            raise UsageError(f"{option}: {key.strip()} is given twice")
        found[key.strip().lower()] = rest
    return found


def broadcast_options(
    args: argparse.Namespace,
    message: Message,
    read_text: Callable[[str, str], str],
    read_buttons: Callable[[str], dict[str, object]],
) -> dict[str, Any]:
    """The `Broadcast` arguments these options give (none of them: ``{}``), every
    variant checked as Telegram would check it, before the database is opened."""
    defaults = _pairs("--default", args.default)
    if defaults and not args.template:
        raise UsageError("--default: needs --template")
    texts = _pairs("--text-file-for", args.text_file_for)
    captions = _pairs("--caption-file-for", args.caption_file_for)
    buttons = _pairs("--buttons-file-for", args.buttons_file_for)
    media = message.media is not None
    if texts and media:
        raise UsageError("--text-file-for: with media, give each language's --caption-file-for")
    if captions and not media:
        raise UsageError("--caption-file-for: needs media (for a text, --text-file-for)")
    variants: dict[str, Message] = {}
    for language in sorted({*texts, *captions, *buttons}):
        text = message.text
        if language in texts:
            text = read_text(f"--text-file-for {language}", texts[language])
        elif language in captions:
            text = read_text(f"--caption-file-for {language}", captions[language])
        markup = message.reply_markup
        if language in buttons:
            markup = read_buttons(buttons[language])
        variants[language] = Message(
            text,
            parse_mode=message.parse_mode,
            options=message.options,
            media=message.media,
            reply_markup=markup,
        )
    options: dict[str, Any] = {}
    if args.template or variants:
        try:
            personal = Personal(message, variants, template=args.template, defaults=defaults)
        except ValidationError as exc:
            raise UsageError(f"--template: {exc.field} {exc.problem}") from None
        for language, variant in personal.variants.items():
            checked(f"--text-file-for {language}", personal.bare(variant))
        options.update(template=args.template, variants=variants, defaults=defaults)
    if args.at_local is not None:
        try:
            check_local_at(args.at_local, args.default_tz)
        except ValidationError as exc:
            raise UsageError(f"--{exc.field.replace('_', '-')}: {exc.problem}") from None
        options.update(start_at_local=args.at_local, default_tz=args.default_tz)
    elif args.default_tz is not None:
        raise UsageError("--default-tz: needs --at-local")
    return options


def checked(option: str, message: Message) -> None:
    """What Telegram would refuse for every chat, as a usage error naming ``option``."""
    try:
        check_message(message)
    except ValidationError as exc:
        raise UsageError(f"{option}: {exc.field} {exc.problem}") from None


def template_check(message: Message, template: bool) -> Message:
    """The message a check sees: a template's with each placeholder one letter (a
    MarkdownV2 ``${first_name}`` is no markup problem: its value is escaped)."""
    if not template:
        return message
    try:
        return Personal(message, template=True).bare(message)
    except ValidationError as exc:
        raise UsageError(f"--text-file: {exc.field} {exc.problem}") from None
