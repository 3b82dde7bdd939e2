"""``notifyonce campaign edit|delete|follow-up``: after the send.

Each is a run over the chats a campaign reached, streamed from the ledger: ``edit`` and
``delete`` are revisions of the campaign (see ``notifyonce._revision``: a slot per chat,
so a killed run resumes and a repeated one changes nothing), ``follow-up`` a new campaign
to the chats with one outcome of an old one. Everything that can be refused is refused
before any request or claim: a bad file or option, a campaign that sent nothing or is
still running, and, for a delete, messages past Telegram's 48 hours (counted and said;
``--what-is-possible`` deletes the others).

``edit`` and ``delete`` are at-least-once unless ``--mode at-most-once``: Telegram makes
their retry harmless, so a killed run leaves no chat unknown. ``follow-up`` sends new
messages, where a retry could send a chat a second one: it stays at-most-once unless
``--mode at-least-once``, and says so when it starts.

Exit codes: 0 done; 1 some chats need attention (unknown, failed, held, to retry); 2 a
usage error (nothing was tried); 3 the database failed; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import sys
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce._broadcast import Broadcast, BroadcastProgress, BroadcastReport, held_here
from notifyonce._buttons import inline_keyboard
from notifyonce._cli.common import (
    ENV_URL,
    UsageError,
    add_loop_options,
    async_url,
    duration_arg,
    engine_error,
    event_loop,
    plural,
    pooler_options,
)
from notifyonce._errors import SenderConfigError, ValidationError
from notifyonce._ledger.ledger import AsyncLedger
from notifyonce._loop import run as run_loop
from notifyonce._message import Message
from notifyonce._notifier import Notifier
from notifyonce._outcome import DeliveryMode
from notifyonce._progress_chat import ProgressMessage
from notifyonce._revision import (
    FOLLOW_UP_STATUSES,
    CampaignRevision,
    recipients_from_campaign,
)
from notifyonce._senders.telegram.chat import validate_recipient

__all__ = ["add_parser", "run"]

ENV_TOKEN = "NOTIFYONCE_BOT_TOKEN"  # noqa: S105 (the variable's name, not a secret)
EXIT_ATTENTION = 1
EXIT_INTERRUPTED = 130
#: Said when a follow-up starts without --mode: why it is not at-least-once as a revision is.
FOLLOW_UP_MODE = (
    "follow-up is at-most-once: it sends new messages, and a chat whose send may have "
    "gone through is not sent a second one (--mode at-least-once to retry those)."
)


def delivery_mode(args: argparse.Namespace) -> DeliveryMode:
    """``--mode``, or the command's default: at-least-once for a revision (edit,
    delete: a retry is harmless), at-most-once for a follow-up (a retry is a new message)."""
    if args.mode is not None:
        return DeliveryMode(args.mode.replace("-", "_"))
    if args.campaign_command == "follow-up":
        return DeliveryMode.AT_MOST_ONCE
    return DeliveryMode.AT_LEAST_ONCE


def add_parser(commands: argparse._SubParsersAction[Any], db: argparse.ArgumentParser) -> None:
    """``campaign`` and its three subcommands."""
    campaign = commands.add_parser(
        "campaign",
        help="after the send: edit, delete or follow up a campaign, once per chat",
        description="Edit or delete each message a broadcast sent, or send a follow-up to "
        "the chats with one outcome, once per chat and resumable (run it again after a "
        f"crash). The bot token is read from ${ENV_TOKEN} (or --token-env).",
    )
    actions = campaign.add_subparsers(dest="campaign_command", required=True, metavar="WHAT")
    common = argparse.ArgumentParser(add_help=False, parents=[db])
    common.add_argument("--action", required=True, help="the campaign's action, e.g. news")
    common.add_argument("--campaign", required=True, help="the campaign id")
    common.add_argument("--token-env", default=ENV_TOKEN, metavar="NAME")
    common.add_argument("--base-url", default=None, metavar="URL", help="the Bot API server")
    common.add_argument(
        "--rate",
        type=float,
        default=30.0,
        metavar="PER_SECOND",
        help="requests per second for the whole bot, edits and deletes like sends "
        "(default 30; 0: no limit)",
    )
    common.add_argument("--concurrency", type=int, default=16, help="requests in flight at most")
    common.add_argument(
        "--mode",
        choices=["at-most-once", "at-least-once"],
        default=None,
        help="edit and delete: at-least-once by default (a retried edit or delete is "
        "harmless); follow-up: at-most-once by default (a retry would be a second message)",
    )
    common.add_argument("--lease", type=duration_arg, default=dt.timedelta(minutes=5))
    common.add_argument("--progress-every", type=float, default=5.0, metavar="SECONDS")
    common.add_argument(
        "--progress-chat",
        metavar="CHAT_ID",
        default=None,
        help="also show the progress in this chat (an admin's): one message, edited in place",
    )
    add_loop_options(common)
    text = argparse.ArgumentParser(add_help=False)
    text.add_argument("--parse-mode", choices=["HTML", "MarkdownV2"], default=None)

    edit = actions.add_parser(
        "edit",
        parents=[common, text],
        help="edit every message the campaign sent, once",
        description="editMessageText, editMessageCaption or editMessageReplyMarkup on "
        "each message the campaign sent (an album's caption is on its first item). The "
        "same edit run again changes nothing; another edit is the next revision.",
    )
    what = edit.add_mutually_exclusive_group()
    what.add_argument("--text-file", metavar="PATH", help="the new text (text messages)")
    what.add_argument("--caption-file", metavar="PATH", help="the new caption (media)")
    edit.add_argument(
        "--buttons-file",
        metavar="PATH",
        help="the new inline keyboard, as for broadcast (without it, an edit of the text "
        "removes the keyboard, as Telegram does)",
    )

    delete = actions.add_parser(
        "delete",
        parents=[common],
        help="delete every message the campaign sent, once",
        description="deleteMessage on each message the campaign sent (deleteMessages for "
        "an album's items). Telegram lets a bot delete its messages for 48 hours: when "
        "some are older, the command says how many and refuses, unless "
        "--what-is-possible.",
    )
    delete.add_argument(
        "--what-is-possible",
        action="store_true",
        help="delete the messages younger than 48 hours and leave the older ones",
    )

    follow = actions.add_parser(
        "follow-up",
        parents=[common, text],
        help="a new campaign to the chats with one outcome of this one",
        description=f"{FOLLOW_UP_MODE} A new campaign (--to-campaign) of the same action "
        "to the chats of this one whose outcome is --only, resumable like any broadcast.",
    )
    follow.add_argument("--only", required=True, choices=sorted(FOLLOW_UP_STATUSES))
    follow.add_argument("--to-campaign", required=True, help="the follow-up's campaign id")
    follow.add_argument("--text-file", required=True, metavar="PATH", help="its text")


def run(args: argparse.Namespace) -> int:
    """Run ``notifyonce campaign ...``; the exit code."""
    edit: dict[str, Any] = {}
    if args.campaign_command == "edit":
        edit = _edit_args(args)
    elif args.campaign_command == "follow-up":
        edit = {"text": _read("--text-file", args.text_file)}
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if args.progress_chat is not None:
        try:
            validate_recipient(args.progress_chat)
        except ValidationError as exc:
            raise UsageError(f"--progress-chat: {exc.problem}") from None
    if args.rate < 0:
        raise UsageError("--rate must be 0 (no limit) or positive")
    url = args.database_url or os.environ.get(ENV_URL)
    if not url:
        raise UsageError(f"no database URL: pass --database-url or set ${ENV_URL}")
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"no bot token: set ${args.token_env}")
    try:
        loop = event_loop(args)  # before the coroutine: a usage error leaves none unawaited
        return run_loop(_run(args, async_url(url), token, edit), loop)
    except SenderConfigError as exc:
        raise UsageError(f"the sender is set up wrong, nothing more was done: {exc}") from None


def _edit_args(args: argparse.Namespace) -> dict[str, Any]:
    """The edit's text or caption and keyboard, read and checked before anything else."""
    if args.text_file is None and args.caption_file is None and args.buttons_file is None:
        raise UsageError("edit needs --text-file, --caption-file or --buttons-file")
    markup = None
    if args.buttons_file is not None:
        try:
            rows = json.loads(_read("--buttons-file", args.buttons_file))
            markup = inline_keyboard(rows, "--buttons-file")
        except ValueError as exc:
            problem = exc.problem if isinstance(exc, ValidationError) else f"not JSON ({exc})"
            raise UsageError(f"--buttons-file: {problem}") from None
    caption = args.caption_file is not None
    path = args.caption_file if caption else args.text_file
    text = None if path is None else _read("--caption-file" if caption else "--text-file", path)
    return {"text": text, "caption": caption, "reply_markup": markup}


def _read(option: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: cannot read it ({type(exc).__name__})") from None


def _sender(args: argparse.Namespace, token: str) -> Any:
    try:  # lazy: the telegram extra (httpx) may be missing, and the error names it
        from notifyonce.telegram import RateLimit, TelegramSender
    except ImportError:
        raise UsageError("campaign needs httpx: pip install 'notifyonce[telegram]'") from None
    limit = RateLimit(bot_per_second=args.rate) if args.rate > 0 else None
    try:
        return TelegramSender(token, base_url=args.base_url, rate_limit=limit)
    except ValidationError as exc:
        raise UsageError(f"${args.token_env} or --base-url: {exc.field} {exc.problem}") from None


async def _run(args: argparse.Namespace, url: str, token: str, edit: dict[str, Any]) -> int:
    sender = _sender(args, token)
    if args.campaign_command == "edit":
        # The text's limits, before the database is even opened.
        try:
            sender.check_edit(
                edit["text"],
                parse_mode=args.parse_mode,
                reply_markup=edit["reply_markup"],
                caption=edit["caption"],
            )
        except ValidationError as exc:
            option = "--caption-file" if edit["caption"] else "--text-file"
            raise UsageError(f"{option}: the {exc.field} {exc.problem}") from None
    options = pooler_options(args, url)  # a usage error before anything is opened
    try:
        engine = create_async_engine(url, **options)
    except Exception as exc:  # a missing driver, a bad dialect name
        raise UsageError(engine_error(exc)) from None
    try:
        ledger = AsyncLedger(engine, table_name=args.table, schema=args.schema, lease=args.lease)
        mode = delivery_mode(args)
        if args.campaign_command == "follow-up" and args.mode is None:
            print(FOLLOW_UP_MODE, file=sys.stderr)
        notifier = Notifier(ledger, sender, mode=mode, concurrency=args.concurrency)
        show = _Progress(args.progress_every)
        if args.progress_chat is not None:
            show.chat = ProgressMessage(sender, args.progress_chat)
        try:
            if args.campaign_command == "follow-up":
                report = await _follow_up(args, notifier, ledger, edit["text"], show)
            else:
                report = await _revise(args, notifier, edit, show)
        except asyncio.CancelledError:
            print("interrupted: the claims were settled; run it again to go on", file=sys.stderr)
            return EXIT_INTERRUPTED
    finally:
        await sender.aclose()
        await engine.dispose()
    print(_summary(report))
    p = report.progress
    return EXIT_ATTENTION if report.unknown or report.held or p.retry or p.failed else 0


async def _revise(
    args: argparse.Namespace, notifier: Notifier, edit: dict[str, Any], show: _Progress
) -> BroadcastReport:
    revision = CampaignRevision(notifier, args.action, args.campaign, mode=notifier.mode)
    if args.campaign_command == "edit":
        return await _interruptibly(
            revision.edit(
                parse_mode=args.parse_mode, on_progress=show, progress_chat=show.chat, **edit
            )
        )
    standing = await revision.messages()
    if standing.sent and standing.past_delete_limit:
        print(
            f"{standing.past_delete_limit:,} of the {plural(standing.sent, 'message')} of "
            f"campaign {args.action}/{args.campaign} were sent more than 48 hours ago: "
            "Telegram lets a bot delete its messages for 48 hours only."
            + (
                f" Deleting the other {standing.deletable:,}."
                if args.what_is_possible
                else f" Nothing was deleted; --what-is-possible deletes the other "
                f"{standing.deletable:,}."
            ),
            file=sys.stderr,
        )
        if not args.what_is_possible:
            raise UsageError("messages past the 48-hour limit; nothing was deleted")
    return await _interruptibly(
        revision.delete(
            what_is_possible=args.what_is_possible, on_progress=show, progress_chat=show.chat
        )
    )


async def _follow_up(
    args: argparse.Namespace, notifier: Notifier, ledger: AsyncLedger, text: str, show: _Progress
) -> BroadcastReport:
    source = recipients_from_campaign(ledger, args.action, args.campaign, only=args.only)
    if not await source.count():
        raise UsageError(
            f"campaign {args.action}/{args.campaign} has no chat whose outcome is "
            f"{args.only}: nothing to follow up"
        )
    message = Message(text, parse_mode=args.parse_mode)
    broadcast = Broadcast(
        notifier,
        args.action,
        args.to_campaign,
        message,
        source,
        on_progress=show,
        progress_chat=show.chat,
    )
    return await _interruptibly(broadcast.run())


async def _interruptibly(work: Any) -> BroadcastReport:
    """Await ``work``; Ctrl-C and SIGTERM cancel it (its claims settle first)."""
    task: asyncio.Task[BroadcastReport] = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, task.cancel)
    try:
        return await task
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)


class _Progress:
    """One progress line on stderr every ``every`` seconds (and the admin chat's message,
    with ``--progress-chat``)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.last = 0.0
        self.chat: ProgressMessage | None = None

    def __call__(self, p: BroadcastProgress) -> None:
        if p.finished or p.elapsed - self.last < self.every:
            return
        self.last = p.elapsed
        total = "?" if p.total is None else f"{p.total:,}"
        print(f"{p.done:,} of {total} handled, {p.rate:.0f}/s", file=sys.stderr, flush=True)


def _summary(report: BroadcastReport) -> str:
    """The counts in the broadcast's words; the chats another run still holds (a killed
    run's live leases) apart from those done, with when to run again."""
    p = report.progress
    held = held_here(report)
    lines = [
        f"{report.action}/{report.campaign}: done {p.sent:,}, failed {p.failed:,}, "
        f"unknown {p.unknown:,}, already done {p.duplicate - held:,}, "
        + (f"held by another run {held:,}, " if held else "")
        + f"given back {p.given_back:,}"
        + (f", not tried {p.untried:,}" if p.untried else "")
    ]
    if report.unknown:
        lines.append(f"{plural(len(report.unknown), 'chat')} have an unknown outcome:")
        lines += [f"  {chat}" for chat in report.unknown[:100]]
    if report.held:
        chats = plural(len(report.held), "chat is", "chats are")
        lines.append(
            f"{chats} still claimed by another run (or a crashed one whose lease has not "
            "expired): run again after the lease to settle them"
        )
    return "\n".join(lines)
