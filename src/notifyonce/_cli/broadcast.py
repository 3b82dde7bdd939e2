"""``notifyonce broadcast``: one message to many Telegram chats, resumable, with progress.

Exit codes: the table of every command's is in docs/guides/cli.md ("Exit codes"). In
short, 0 all handled (or every chat handled by another run still sending them: a second
scheduler), 1 chats need attention or the run stopped before its end (its summary says
why in one line, with the next step), 2 usage error (nothing written), 3 the database, 130
interrupted.

A stop is told in one line, never one per chat: the run logs ``run of ... stopped`` with
its counts, the summary says it in the words of its cause (`stop_line`), and the counts
are this run's, as the progress line's; the unknown chats listed are the campaign's, with
how many are this run's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce._broadcast import (
    Broadcast,
    BroadcastProgress,
    BroadcastReport,
    RecipientSource,
    held_here,
    recipients_from_file,
    recipients_from_query,
    skipped_text,
    stop_items,
    stop_line,
    unknown_text,
)
from notifyonce._buttons import inline_keyboard
from notifyonce._caps import FrequencyCap
from notifyonce._cli import personal
from notifyonce._cli.common import (
    DURATION_HELP,
    ENV_URL,
    EXIT_DATABASE,
    EXIT_OK,
    UsageError,
    add_loop_options,
    async_url,
    duration_arg,
    engine_error,
    event_loop,
    fail,
    parse_duration,
    plural,
    pooler_options,
)
from notifyonce._drivers import url_driver
from notifyonce._errors import LedgerError, SenderConfigError, ValidationError
from notifyonce._keys import Subject
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._loop import run as run_loop
from notifyonce._media import Album, Copy, Document, Media, Photo, Video
from notifyonce._message import Message, Receipt, Sender
from notifyonce._notifier import Notifier
from notifyonce._outcome import DeliveryMode
from notifyonce._personal import Recipient
from notifyonce._progress_chat import ProgressMessage
from notifyonce._results import DRY_RUN_SEND
from notifyonce._senders.telegram.api_url import DEFAULT_API_URL, ENV_API_URL, default_api_url
from notifyonce._senders.telegram.chat import validate_recipient
from notifyonce._senders.telegram.file_sql import default_file_table
from notifyonce._senders.telegram.payload import check_message

if TYPE_CHECKING:
    from rich.live import Live

__all__ = ["add_parser", "render_bar", "render_line", "render_lines", "run"]

ENV_TOKEN = "NOTIFYONCE_BOT_TOKEN"  # noqa: S105 (the variable's name, not a secret)
EXIT_ATTENTION = 1
EXIT_INTERRUPTED = 130

_LISTED = 100  # unknown chats printed in full up to this many
_BAR_WIDTH = 24
_BAR_MIN, _BAR_MAX = 10, 40  # a narrower bar says nothing; a wider one only takes room
_ETA_CAP = 100 * 3600.0


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> None:
    """Register ``broadcast`` on the command line's subcommands."""
    parser = commands.add_parser(
        "broadcast",
        parents=[db],
        help="send one message to many Telegram chats, once each; re-run to resume",
        description="Send the text of --text-file to every chat id of --recipients-file or "
        "--recipients-sql, once per (--action, --campaign): running the same command "
        "again after a crash or Ctrl-C sends only to the chats not handled yet. With "
        "--photo, --document or --video the file is sent with the text as its caption, "
        "with --album (or --photo and --video repeated) 2-10 photos and videos as one album; "
        "it is uploaded once and sent by Telegram's file_id after that, also by a "
        "resumed run. With --copy-from a message already in Telegram (an admin's post) "
        "is copied to every chat. The bot token is read from "
        f"${ENV_TOKEN} (or the variable --token-env names), never from an argument.",
        epilog="Exit codes: 0 all handled (or by another run of the campaign), 1 chats need "
        "attention or the run stopped early (the summary says why), 2 usage error, 3 "
        "database error, 130 interrupted (run again to resume); see the command line "
        "guide's table.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--recipients-file",
        metavar="PATH",
        help="chat ids one a line, or rows: CSV with a header or JSON lines (chat_id, "
        "language, tz, and fields for --template)",
    )
    source.add_argument(
        "--recipients-sql",
        metavar="SELECT",
        help="a SELECT whose first column is the chat id, run against --database-url; "
        "every column is kept (language, tz, and fields for --template)",
    )
    parser.add_argument(
        "--text-file",
        metavar="PATH",
        help="the message text (required without media; with media, the caption)",
    )
    media = parser.add_mutually_exclusive_group()
    # --photo and --video repeat (an album, in the order given), so they are checked
    # against the others by hand, in _media: argparse's group refuses a second kind.
    for kind, what in (("photo", "image (up to 10 MB)"), ("video", "video (up to 50 MB)")):
        parser.add_argument(
            f"--{kind}",
            metavar="PATH",
            dest="media_files",
            action=_InOrder,
            const=kind,
            help=f"send this {what}; --photo and --video repeated (2-10 in all) send an album",
        )
    media.add_argument("--document", metavar="PATH", help="send this file (up to 50 MB)")
    media.add_argument(
        "--album",
        metavar="FILE",
        nargs="+",
        help="send these 2-10 photos (.jpg, .jpeg, .png, .webp) and videos (.mp4, .m4v, "
        ".mov) as one album (sendMediaGroup), the caption under the first",
    )
    media.add_argument(
        "--copy-from",
        metavar="CHAT:MESSAGE_ID",
        help="copy this message (any content: text, photo, poll...) to every chat with "
        "copyMessage, e.g. an admin's post: -100123:42; --caption-file overrides its caption",
    )
    parser.add_argument(
        "--caption-file",
        metavar="PATH",
        help="the media's caption (instead of --text-file; up to 1024 characters)",
    )
    parser.add_argument(
        "--buttons-file",
        metavar="PATH",
        help="inline buttons under the message: a JSON list of rows, each a list of "
        'buttons such as {"text": ..., "url": ...}, with one action of any kind Telegram '
        "gives bots (url, callback_data, web_app, login_url, switch_inline_query, "
        "switch_inline_query_current_chat, switch_inline_query_chosen_chat, copy_text); "
        "checked before anything is claimed",
    )
    parser.add_argument(
        "--parse-mode",
        choices=["HTML", "MarkdownV2"],
        default=None,
        help="how Telegram reads the text's formatting (default: plain text)",
    )
    parser.add_argument("--action", required=True, help="what is broadcast, e.g. news")
    parser.add_argument("--campaign", required=True, help="the campaign id, e.g. 2026-12-tariff")
    parser.add_argument(
        "--token-env",
        default=ENV_TOKEN,
        metavar="NAME",
        help=f"environment variable holding the bot token (default: {ENV_TOKEN})",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help=f"the Bot API server (default: ${ENV_API_URL}, else {DEFAULT_API_URL}); "
        "`notifyonce serve-test-api` runs a local one for trying the command",
    )
    parser.add_argument(
        "--mode",
        choices=["at-most-once", "at-least-once"],
        default="at-most-once",
        help="a send whose outcome is unknown (no answer came back) is recorded and never "
        "sent again (at-most-once, the default), or sent again up to --max-attempts "
        "(at-least-once: a duplicate is possible, a miss is not)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="at-least-once: how many times one chat may be tried in all (default: 3)",
    )
    parser.add_argument(
        "--allow-changed-message",
        action="store_true",
        help="resume a campaign although its text or media differ from what it started "
        "with: the chats not handled yet get the new message",
    )
    parser.add_argument(
        "--resume-cancelled",
        action="store_true",
        help="run a campaign that was cancelled from the operator console (notifyonce web) "
        "again: withdraw the cancel and send to the chats not handled yet",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="sends in flight at most")
    parser.add_argument(
        "--database-patience",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="when the database goes away mid-run (a restart, a failover), pause and wait "
        "this long for it before stopping (default 60; 0: stop at once)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        metavar="PER_SECOND",
        help="messages per second for the whole bot (default 30, or 1000 with --paid; 0: no limit)",
    )
    parser.add_argument(
        "--paid",
        action="store_true",
        help="use Telegram's paid broadcast lane (allow_paid_broadcast; costs Stars)",
    )
    parser.add_argument(
        "--lease",
        type=duration_arg,
        default=dt.timedelta(minutes=5),
        metavar="DURATION",
        help="how long a claim is held before a crashed run's sends count as unknown",
    )
    parser.add_argument(
        "--at",
        type=_start_time,
        default=None,
        metavar="TIME",
        help="wait until this time before the first send, e.g. 2026-12-24T10:00+01:00 (with "
        "its UTC offset); two schedulers starting the campaign then send each chat once. "
        "A time past is refused, unless --at-or-now",
    )
    parser.add_argument(
        "--at-or-now",
        action="store_true",
        help="with --at: start at once when that time has passed (a scheduler that fired "
        "late, a run resumed after it), saying so in one line",
    )
    parser.add_argument(
        "--progress-chat",
        metavar="CHAT_ID",
        default=None,
        help="also show the progress in this chat (an admin's): one message, edited in place "
        "at most every 3 s, ending with the summary",
    )
    parser.add_argument("--dry-run", action="store_true", help="send nothing; count what would go")
    parser.add_argument(
        "--category",
        default=None,
        metavar="NAME",
        help="what recipients opt out of, and what --cap counts (default: the action)",
    )
    parser.add_argument(
        "--cap",
        action="append",
        type=_cap_arg,
        default=[],
        metavar="CATEGORY=N/DURATION",
        help="at most N notifications of CATEGORY per chat within DURATION, whichever "
        "campaign sends them, e.g. promo=2/7d (repeatable); a chat over it is skipped as "
        "capped. Every campaign of that category must give the same cap",
    )
    parser.add_argument(
        "--progress-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between progress updates (default: 0.2 on a terminal, else 5)",
    )
    add_loop_options(parser)
    personal.add_options(parser)


def _cap_arg(text: str) -> FrequencyCap:
    """``--cap promo=2/7d``: a FrequencyCap, refused as argparse refuses a bad value."""
    category, _, rule = text.partition("=")
    count, _, window = rule.partition("/")
    if not category or not count.isdigit() or not window:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not like promo=2/7d (a category, how many, per {DURATION_HELP})"
        )
    try:
        return FrequencyCap(category, int(count), parse_duration(window))
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.field} {exc.problem}") from None


class _InOrder(argparse.Action):
    """--photo and --video: each use adds ``(kind, path)`` to one list, so a repeated mix
    keeps the order it was given in (the album's order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", [])
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        # A new list each time: the default one is shared by every parse.
        found = [*getattr(namespace, self.dest), (self.const, values)]
        setattr(namespace, self.dest, found)


def _start_time(value: str) -> dt.datetime:
    """--at: an ISO 8601 time with its UTC offset (``Z`` for UTC)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "not an ISO 8601 time: expected e.g. 2026-12-24T10:00+01:00"
        ) from None
    if when.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            "has no UTC offset: add it, e.g. 2026-12-24T10:00+01:00 (or Z for UTC)"
        )
    return when


def run(args: argparse.Namespace) -> int:
    """Run ``notifyonce broadcast``; the exit code."""
    _check_start(args.at, args.at_or_now)
    message = _message(args)
    args.personal = personal.broadcast_options(args, message, _read_text, _buttons)
    args.base_url = args.base_url or default_api_url()
    token = os.environ.get(args.token_env, "")
    if not token and not args.dry_run:
        raise UsageError(f"no bot token: set ${args.token_env}")
    for name in ("concurrency", "max_attempts"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.recipients_file and not os.path.isfile(args.recipients_file):
        raise UsageError("--recipients-file: no such file")
    url = args.database_url or os.environ.get(ENV_URL)
    if not url:
        raise UsageError(f"no database URL: pass --database-url or set ${ENV_URL}")
    url = async_url(url)
    options = pooler_options(args, url)  # checked before the Bot API is asked anything
    _check_sqlite_file(url)  # a usage error (exit 2) is told before the database's state
    tty = sys.stderr.isatty()
    every = args.progress_every or (0.2 if tty else 5.0)
    try:
        make_sender = _no_sender if args.dry_run else _telegram(args, token)
        ask = None if args.dry_run else partial(_check_token, args.base_url, token, args.token_env)
        loop = event_loop(args)  # before the coroutine: a usage error leaves none unawaited
        return run_loop(_broadcast(args, message, make_sender, url, options, tty, every, ask), loop)
    except SenderConfigError as exc:
        raise UsageError(f"the sender is set up wrong, nothing more was sent: {exc}") from None


def _check_sqlite_file(url: str) -> None:
    """A SQLite ledger whose file does not exist was never migrated: said before anything
    connects, as connecting would leave an empty file behind."""
    parsed = make_url(url)
    driver = url_driver(parsed)
    path = None if driver is None else driver.absent_file(parsed)
    if path is not None:
        fail(
            EXIT_DATABASE,
            f"the database file {path} does not exist: run `notifyonce migrate` first "
            "(it makes the file and the ledger's tables); nothing was sent",
        )


async def _check_ledger(engine: AsyncEngine, table: str, schema: str | None) -> None:
    """The ledger's table is there, before anything else is read from the database: a
    database never migrated is told in those words, not in those of the first statement
    that failed (the campaign's cancel request)."""
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: sa.inspect(sync).has_table(table, schema=schema))
    if not found:
        raise LedgerError(f"the ledger table {table!r} does not exist; nothing was sent")


def _check_start(at: dt.datetime | None, or_now: bool) -> None:
    """--at a time past is a usage error without --at-or-now: a typo in the date (a year
    behind) would otherwise start the campaign now, which nobody asked for."""
    if at is None:
        if or_now:
            raise UsageError("--at-or-now: needs --at TIME (without --at it starts now anyway)")
        return
    now = dt.datetime.now(dt.timezone.utc)
    if at <= now and not or_now:
        raise UsageError(
            f"--at: {at.isoformat()} is past (it is {now:%Y-%m-%dT%H:%M:%S}Z now): give a "
            "time to come, leave --at out to start now, or add --at-or-now to start at "
            "once when that time has passed"
        )


def _start_line(at: dt.datetime) -> str:
    """The one line a broadcast with --at starts with: what it waits for, or that the
    time has passed (with --at-or-now) and it starts now."""
    if at <= dt.datetime.now(dt.timezone.utc):
        return f"--at {at.isoformat()} has passed: starting now"
    return f"waiting until {at.isoformat()} to start"


def _message(args: argparse.Namespace) -> Message:
    media = _media(args)
    if media is None and args.caption_file:
        raise UsageError(
            "--caption-file: needs --photo, --document, --video, --album or --copy-from"
        )
    if isinstance(media, Album) and args.buttons_file is not None:
        raise UsageError("--buttons-file: Telegram sends no buttons under an album")
    if media is not None and args.caption_file and args.text_file:
        raise UsageError("--caption-file: give the caption once, not also as --text-file")
    option = "--caption-file" if args.caption_file else "--text-file"
    path = args.caption_file or args.text_file
    if path is None and media is None:
        raise UsageError(
            "--text-file: required (or send media: --photo, --document, --video, --album, "
            "--copy-from)"
        )
    if media is not None and media.kind == "copy" and args.text_file:
        raise UsageError(
            "--text-file: a copy keeps the post's text; override a caption with --caption-file"
        )
    text = "" if path is None else _read_text(option, path)
    if not text and media is None:
        raise UsageError(f"{option}: the file is empty")
    options = {"allow_paid_broadcast": True} if args.paid else {}
    buttons = None if args.buttons_file is None else _buttons(args.buttons_file)
    try:
        message = Message(
            text, parse_mode=args.parse_mode, options=options, media=media, reply_markup=buttons
        )
        # What Telegram would refuse for every chat (markup it cannot parse, a text too
        # long) stops here, before the database is opened: a dry run reports it too.
        check_message(personal.template_check(message, args.template))
    except ValidationError as exc:
        raise UsageError(f"{option}: {exc.field} {exc.problem}") from None
    return message


def _buttons(path: str) -> dict[str, object]:
    """The --buttons-file keyboard, checked button by button (named by row and column)."""
    try:
        rows = json.loads(_read_text("--buttons-file", path))
    except ValueError as exc:
        raise UsageError(f"--buttons-file: not JSON ({exc})") from None
    try:
        return inline_keyboard(rows, "--buttons-file")
    except ValidationError as exc:
        raise UsageError(f"{exc.field}: {exc.problem}") from None


def _read_text(option: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: cannot read it ({type(exc).__name__})") from None


def _media(args: argparse.Namespace) -> Media | Album | Copy | None:
    """The --photo, --document or --video file, or the album of --album or of --photo and
    --video repeated, checked (each file exists, is readable, within its size; the album's
    kinds and size), or the --copy-from message."""
    files: list[tuple[str, str]] = args.media_files
    given = next((f"--{kind}" for kind, _ in files), None)
    other = next(
        (f"--{name.replace('_', '-')}" for name in _ALONE if getattr(args, name) is not None),
        None,
    )
    if other is not None and given is not None:
        if other == "--album":
            raise UsageError(
                "--album: give the album either as --album FILE... or as --photo and "
                "--video repeated, not both"
            )
        raise UsageError(f"{other}: not allowed with {given}: it is sent alone")
    if args.copy_from is not None:
        return _copy_from(args.copy_from)
    if args.document is not None:
        return _file("--document", Document, args.document)
    if args.album is not None:
        items = [
            _file(f"--album: item {number}", _album_kind(number, path), path)
            for number, path in enumerate(args.album, 1)
        ]
        return _album("--album", items)
    if len(files) == 1:
        kind, path = files[0]
        return _file(f"--{kind}", _KINDS[kind], path)
    if files:
        items = [_file(f"--{kind}", _KINDS[kind], path) for kind, path in files]
        return _album("--photo/--video", items)
    return None


# The media options that go alone: with one of them, no --photo or --video.
_ALONE = ("copy_from", "document", "album")
_KINDS: dict[str, type[Photo] | type[Video]] = {"photo": Photo, "video": Video}
# What --album reads as a photo and as a video: the formats sendMediaGroup takes as such.
_PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
_VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov")


def _album_kind(number: int, path: str) -> type[Photo] | type[Video]:
    """Photo or Video, by the file's extension; a usage error for any other file."""
    suffix = Path(path).suffix.lower()
    if suffix in _PHOTO_SUFFIXES:
        return Photo
    if suffix in _VIDEO_SUFFIXES:
        return Video
    raise UsageError(
        f"--album: item {number} ({Path(path).name}) is not a photo or a video: an album "
        f"takes photos ({', '.join(_PHOTO_SUFFIXES)}) and videos ({', '.join(_VIDEO_SUFFIXES)})"
    )


def _file(option: str, kind: type[Media], path: str) -> Media:
    """The file as ``kind``, checked (exists, readable, within the upload limit)."""
    try:
        return kind(Path(path))
    except ValidationError as exc:
        raise UsageError(f"{option}: {exc.problem}") from None


def _album(option: str, items: list[Media]) -> Album:
    """The files as one album, checked (2 to 10 items)."""
    try:
        return Album(items)
    except ValidationError as exc:
        raise UsageError(f"{option}: {exc.problem}") from None


def _copy_from(value: str) -> Copy:
    """``CHAT:MESSAGE_ID`` as a checked Copy; a usage error naming the part that is wrong."""
    chat, colon, message = value.rpartition(":")
    if not colon or not chat:
        raise UsageError("--copy-from: expected CHAT:MESSAGE_ID, e.g. -100123:42")
    try:
        number = int(message)
    except ValueError:
        raise UsageError("--copy-from: the message id must be a number") from None
    try:
        return Copy(int(chat) if chat.lstrip("-").isdigit() else chat, number)
    except ValidationError as exc:
        raise UsageError(f"--copy-from: {exc.field} {exc.problem}") from None


class _ThenAsk(RecipientSource):
    """``source`` as it is, but once the broadcast has checked every recipient (which it
    does before its first claim) ``ask`` runs (the token's ``getMe``), in a thread."""

    def __init__(self, source: RecipientSource, ask: Callable[[], None]) -> None:
        self.source = source
        self.ask = ask

    def __aiter__(self) -> AsyncIterator[Subject]:
        return self.source.__aiter__()

    async def rows(self) -> AsyncIterator[Recipient]:
        async for row in self.source.rows():
            yield row

    async def count(self) -> int | None:
        return await self.source.count()

    async def check(self, rule: Callable[[Subject], None]) -> int | None:
        checked = await self.source.check(rule)
        await asyncio.to_thread(self.ask)
        return checked

    async def check_rows(self, rule: Callable[[Recipient], None]) -> int | None:
        checked = await self.source.check_rows(rule)
        await asyncio.to_thread(self.ask)
        return checked


class _NoSender:
    """Stands in for Telegram in a dry run, where nothing is sent (or uploaded), and
    refuses what Telegram would, as the real run does."""

    async def send(self, recipient: str, message: Message) -> Receipt:
        raise AssertionError("a dry run sends nothing")

    def check(self, recipient: str, message: Message) -> None:
        # Lazy here and below: the Bot API sender needs httpx (the telegram extra).
        from notifyonce._senders.telegram.sender import prepare

        prepare(recipient, message)


def _no_sender(engine: AsyncEngine) -> Sender:
    return _NoSender()


async def _broadcast(
    args: argparse.Namespace,
    message: Message,
    make_sender: Callable[[AsyncEngine], Sender],
    url: str,
    options: dict[str, Any],
    tty: bool,
    every: float,
    ask: Callable[[], None] | None = None,
) -> int:
    """The broadcast on ``url``'s ledger; ``ask`` checks the token with the Bot API (None
    in a dry run), once the recipients are read."""
    try:
        engine = create_async_engine(url, **options)
    except Exception as exc:  # a missing driver, a bad dialect name
        raise UsageError(engine_error(exc)) from None
    sender: Sender | None = None
    try:
        await _check_ledger(engine, args.table, args.schema)
        sender = make_sender(engine)
        ledger = AsyncLedger(engine, table_name=args.table, schema=args.schema, lease=args.lease)
        notifier = Notifier(
            ledger,
            sender,
            mode=DeliveryMode(args.mode.replace("-", "_")),
            max_attempts=args.max_attempts,
            concurrency=args.concurrency,
            dry_run=args.dry_run,
            outage_patience=dt.timedelta(seconds=args.database_patience),
            caps=args.cap,
        )
        if args.recipients_file:
            source = recipients_from_file(args.recipients_file, format=args.recipients_format)
        else:
            source = recipients_from_query(engine, args.recipients_sql)  # the ledger's database
        if ask is not None:
            # The Bot API's getMe once every recipient is checked, not before: a bad file
            # is told without a request to Telegram.
            source = _ThenAsk(source, ask)
        display = _Display(sys.stderr, tty)
        progress_chat = None
        if args.progress_chat is not None and not args.dry_run:
            try:
                validate_recipient(args.progress_chat)
            except ValidationError as exc:
                raise UsageError(f"--progress-chat: {exc.problem}") from None
            progress_chat = ProgressMessage(sender, args.progress_chat)  # type: ignore[arg-type]
        try:
            broadcast = Broadcast(
                notifier,
                args.action,
                args.campaign,
                message,
                source,
                on_progress=display.show,
                every=every,
                allow_changed_message=args.allow_changed_message,
                resume_cancelled=args.resume_cancelled,
                start_at=args.at,
                progress_chat=progress_chat,
                category=args.category,
                **args.personal,
            )
            if args.at is not None:
                print(_start_line(args.at), file=sys.stderr)
            try:
                report = await _run_interruptibly(broadcast)
            except LedgerError as exc:
                last = broadcast._last
                if last is None:  # before the first send: the error line says it all
                    raise
                # The database went away mid-campaign: one line, as a stop's, exit 3.
                name = f"{broadcast.action}/{broadcast.campaign}"
                detail = re.sub(r"^database (?:unavailable|error) \((.*)\)$", r"\1", str(exc))
                print(stop_line(name, last, "database", detail, broadcast._not_tried))
                return EXIT_DATABASE
        finally:
            display.close()
    finally:
        aclose = getattr(sender, "aclose", None)  # None when the sender was never built
        if aclose is not None:
            await aclose()
        await engine.dispose()
    print(summary(report, dry_run=args.dry_run))
    if report.cause == "interrupted":  # Ctrl-C or SIGTERM
        return EXIT_INTERRUPTED
    p = report.progress
    if handled_elsewhere(report):
        return EXIT_OK
    if report.unknown or report.held or p.retry or p.lease_lost:
        return EXIT_ATTENTION
    return EXIT_OK


async def _run_interruptibly(broadcast: Broadcast) -> BroadcastReport:
    """Run ``broadcast``; Ctrl-C and SIGTERM cancel it (it settles, then reports)."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, _interrupt(broadcast))
    try:
        return await broadcast.run()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)


def _telegram(args: argparse.Namespace, token: str) -> Callable[[AsyncEngine], Sender]:
    """Check the options and the token now; build the sender once the engine exists."""
    try:  # lazy: the telegram extra (httpx) may be missing, and the error names it
        from notifyonce.telegram import RateLimit, SQLFileIdStore, TelegramSender
    except ImportError:
        raise UsageError("broadcast needs httpx: pip install 'notifyonce[telegram]'") from None
    rate = args.rate if args.rate is not None else (1000.0 if args.paid else 30.0)
    if rate < 0:
        raise UsageError("--rate must be 0 (no limit) or positive")
    if not 0 <= args.database_patience < 86_400:
        raise UsageError("--database-patience must be 0 (stop at once) up to a day, in seconds")
    limit = RateLimit(bot_per_second=rate) if rate > 0 else None
    _check_token_format(token, args.token_env)  # the Bot API is asked once the input is read

    def make(engine: AsyncEngine) -> Sender:
        # File ids live beside the ledger (revision 0003), so a resumed run of a media
        # broadcast sends by file_id instead of uploading again.
        table = default_file_table(args.table)
        files = SQLFileIdStore(engine, table_name=table, schema=args.schema)
        try:
            return TelegramSender(token, base_url=args.base_url, rate_limit=limit, file_store=files)
        except ValidationError as exc:
            # Never echo the token: name the field only.
            raise UsageError(f"{exc.field}: {exc.problem}") from None

    return make


def _check_token_format(token: str, env: str) -> None:
    """The token's form, checked locally (a usage error naming the variable, never the
    token)."""
    from notifyonce._senders.telegram.sender import check_token  # httpx: lazy, as above

    try:
        check_token(token)
    except ValidationError as exc:
        raise UsageError(f"${env}: the {exc.field} {exc.problem}; nothing was sent") from None


def _check_token(base_url: str, token: str, env: str) -> None:
    """Ask ``getMe`` before the first send, once the local input (the message's files,
    the recipients) has been read and checked: a rejected token stops the broadcast
    before any chat is claimed, with a usage error that names the variable. (A send's 401
    is a SenderConfigError: it would stop the run too and burn no slot, but only once
    the campaign had started.)"""
    from notifyonce._senders.telegram.probe import get_me_status  # httpx: lazy, as above

    status = get_me_status(base_url, token)
    if isinstance(status, str):
        raise UsageError(f"cannot reach the Bot API at --base-url ({status})")
    if status in (401, 404):
        raise UsageError(
            f"the Bot API refused the token ({status}): check "
            f"${env} and --base-url; nothing was sent"
        )


def _interrupt(broadcast: Broadcast) -> Callable[[], None]:
    def handler() -> None:
        broadcast.cancel()

    return handler


# -- rendering ---------------------------------------------------------------------------


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA --:--"
    if seconds >= _ETA_CAP:  # a rate near zero: a number of days means nothing here
        return "ETA >99:59:59"
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}" if hours else f"ETA {minutes:02d}:{secs:02d}"


def _stopped(p: BroadcastProgress) -> bool:
    """The last snapshot of a run stopped before its end: no rate, no ETA, and the counts
    of the summary's stop line."""
    return p.finished and p.cause is not None


def _count_items(p: BroadcastProgress) -> list[str]:
    if _stopped(p):
        return stop_items(p, p.not_tried, p.cause)
    items = [
        f"sent {p.sent:,}",
        f"failed {p.failed:,}",
        f"unknown {p.unknown:,}",
        f"already done {p.duplicate:,}",
    ]
    # In the summary's words: tried and given back (the next run tries them again) apart
    # from not tried (no request went out).
    if p.given_back:
        items.append(f"given back {p.given_back:,}")
    if p.untried:
        items.append(f"not tried {p.untried:,}")
    if DRY_RUN_SEND in p.skips:
        items.append(f"would send {p.skips[DRY_RUN_SEND]:,}")
    skipped = skipped_text(p)
    if p.waiting and p.next_due is not None:
        items.append(f"waiting for their hour {p.waiting:,}")  # when: in place of the ETA
    return items + ([skipped] if skipped else [])


def _counts(p: BroadcastProgress) -> str:
    return "  ".join(_count_items(p))


def _speed(p: BroadcastProgress) -> str:
    if _stopped(p):
        return f"stopped ({p.cause})"
    if p.waiting and p.next_due is not None:
        # Rows wait for their hour: the end is not the rate's to tell, the next batch is.
        return f"{p.rate:,.0f}/s  next batch due {p.next_due:%Y-%m-%d %H:%M} UTC"
    return f"{p.rate:,.0f}/s  {_eta(p.eta)}"


def _head(p: BroadcastProgress, width: int) -> str:
    """The bar (``width`` wide inside its brackets; none at 0), the share and the count."""
    if not p.total:
        return f"{p.handled:,} handled"
    share = f"{100 * p.handled / p.total:5.1f}%  {p.handled:,}/{p.total:,}"
    if width <= 0:
        return share
    filled = min(width, int(width * p.handled / p.total))
    return f"[{'#' * filled}{'-' * (width - filled)}] {share}"


def render_bar(p: BroadcastProgress, width: int = _BAR_WIDTH) -> str:
    """One terminal line: a bar (when the total is known), counts, rate and ETA."""
    return f"{_head(p, width)}  {_counts(p)}  {_speed(p)}"


def render_lines(p: BroadcastProgress, columns: int) -> list[str]:
    """The progress display for a terminal ``columns`` wide, every line within it.

    One line when the bar, counts, rate and ETA fit with a bar of at least
    ``_BAR_MIN`` characters; else the bar with the share, the rate and the ETA on one
    line and the counts below (wrapped between counts when need be). On a terminal too
    narrow for that the bar goes first; the rate and the ETA are never cut.
    """
    one = min(_BAR_MAX, columns - len(render_bar(p, 0)) - 3)
    if p.total and one >= _BAR_MIN:
        return [render_bar(p, one)]
    if not p.total and len(render_bar(p, 0)) <= columns:
        return [render_bar(p, 0)]
    speed = _speed(p)
    bar = min(_BAR_MAX, columns - len(f"{_head(p, 0)}  {speed}") - 3)
    if bar >= _BAR_MIN or len(f"{_head(p, 0)}  {speed}") <= columns:
        lines = [f"{_head(p, bar if bar >= _BAR_MIN else 0)}  {speed}"]
    else:
        lines = [_head(p, 0), speed]
    line = ""
    for item in _count_items(p):
        if line and len(f"{line}  {item}") > columns:
            lines.append(line)
            line = item
        else:
            line = f"{line}  {item}" if line else item
    return [*lines, line]


def render_line(p: BroadcastProgress) -> str:
    """One plain log line of progress (no bar), for logs and pipes."""
    total = f"/{p.total:,}" if p.total is not None else ""
    if _stopped(p):
        return f"progress: {p.handled:,}{total} handled, {_speed(p)}: {', '.join(_count_items(p))}"
    return f"progress: {p.handled:,}{total} handled, {_counts(p)}, {_speed(p).replace('  ', ', ')}"


class _Display(logging.Handler):
    """Shows progress: on a terminal, lines redrawn in place and fitted to its width
    (rich's live display, which also keeps log lines above them); plain lines otherwise.

    While attached it also prints the library's warnings (a send whose outcome is
    unknown, ...) above the progress instead of through it.
    """

    def __init__(self, stream: IO[str], tty: bool) -> None:
        super().__init__(logging.WARNING)
        self.stream = stream
        self.tty = tty
        self.live: Live | None = None  # started by the first progress shown
        self.logger = logging.getLogger("notifyonce")
        self.logger.addHandler(self)
        # A connection cut by a database restart fails the rollback its pool gives it on
        # the way back, and SQLAlchemy logs that with a traceback (through Python's last
        # resort handler: the command configures no other) after the run said once that
        # the database is away. A failure that matters reaches the run as a ledger error.
        self.pool_log = logging.NullHandler()
        logging.getLogger("sqlalchemy.pool").addHandler(self.pool_log)

    def show(self, progress: BroadcastProgress) -> None:
        if self.tty and self.live is None:
            self.live = _live(self.stream)
            self.tty = self.live is not None  # without rich: plain lines
        if self.live is not None:
            from rich.text import Text

            console = self.live.console
            with contextlib.suppress(OSError, ValueError):
                # The terminal's own size, asked on every redraw (a resize is followed),
                # rather than $COLUMNS, which an environment may hold from another size.
                size = os.get_terminal_size(self.stream.fileno())
                console.size = (size.columns, size.lines)
            lines = render_lines(progress, console.width)
            self.live.update(Text("\n".join(lines), no_wrap=True), refresh=True)
        else:
            self.stream.write(render_line(progress) + "\n")
            self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        if self.live is not None:
            from rich.text import Text

            self.live.console.print(Text(line))  # above the live lines; no markup read
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.logger.removeHandler(self)
        logging.getLogger("sqlalchemy.pool").removeHandler(self.pool_log)
        if self.live is not None:
            self.live.stop()  # the last progress stays on screen
        super().close()


def _live(stream: IO[str]) -> Live | None:
    """A started live display on ``stream``, or None without rich (then plain lines)."""
    # Lazy here and in _Display: rich comes with the telegram extra, and may be missing.
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        return None
    console = Console(file=stream, highlight=False, emoji=False, markup=False)
    live = Live(console=console, auto_refresh=False, redirect_stdout=False)
    live.start()
    return live


def summary(report: BroadcastReport, *, dry_run: bool = False) -> str:
    """The final summary: counts, time and rate, the chats that need attention. A run
    stopped before its end says so in one line, in the words of its cause."""
    p = report.progress
    name = f"{report.action}/{report.campaign}"
    skipped = skipped_text(p)
    if dry_run:
        would = plural(p.skips.get(DRY_RUN_SEND, 0), "chat")
        return (
            f"dry run of {name}: would send to {would}; {p.duplicate:,} already done; "
            + (f"{skipped}; " if skipped else "")
            + "nothing was sent or recorded"
        )
    if report.cause is not None:
        lines = [
            stop_line(
                name,
                p,
                report.cause,
                report.report.stopped,
                report.not_tried,
                report.resume_at,
            )
        ]
    elif handled_elsewhere(report):
        held = held_here(report)
        return (
            f"every chat was handled by another run of {name} ({p.duplicate - held:,} "
            f"already done, {held:,} held by another run, which is still sending them): "
            "nothing to do here"
        )
    else:
        rate = p.done / p.elapsed if p.elapsed > 0 else 0.0
        held = held_here(report)
        counts = [
            f"{p.sent:,} sent, {p.failed:,} failed, {p.unknown:,} unknown, "
            f"{p.duplicate - held:,} already done",
            *([f"{held:,} held by another run"] if held else []),
            f"{p.given_back:,} given back",
            *([f"{p.untried:,} not tried"] if p.untried else []),
            *([skipped] if skipped else []),
        ]
        lines = [
            f"broadcast {name} finished in {p.elapsed:.1f} s ({rate:,.0f}/s): " + ", ".join(counts)
        ]
    if report.unknown:
        lines.append(
            f"{unknown_text(p.unknown, len(report.unknown))} (the send may or may not have "
            "arrived; they are not sent again):"
        )
        lines += [f"  {chat}" for chat in report.unknown[:_LISTED]]
        if len(report.unknown) > _LISTED:
            lines.append(f"  ... and {len(report.unknown) - _LISTED:,} more")
    if report.held:
        chats = plural(len(report.held), "chat is", "chats are")
        lines.append(
            f"{chats} still claimed by another run (or a crashed one whose lease has not "
            "expired): run again after the lease to settle them"
        )
    if p.retry and report.cause is None:
        sends = plural(p.retry, "send was", "sends were")
        lines.append(f"{sends} not delivered: run again to retry them")
    return "\n".join(lines)


def handled_elsewhere(report: BroadcastReport) -> bool:
    """Whether this run met only chats another run of the campaign had handled and is
    still sending (a second scheduler started with the same --at): nothing is wrong,
    exit 0. The chats the other run holds are its own to settle; a chat left unknown by
    any run still needs a look (exit 1)."""
    p = report.progress
    own = p.sent + p.failed + p.unknown + p.retry + p.lease_lost
    return (
        report.cause is None
        and not own
        and not report.unknown
        and bool(report.held)
        and p.duplicate > 0
    )
