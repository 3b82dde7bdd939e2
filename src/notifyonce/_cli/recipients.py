"""``notifyonce recipients``: who the audience knows to be gone or opted out, and the
operator's changes to it.

``counts``, ``list`` and ``export`` read the recipients table beside the ledger table;
``import`` marks a file of chat ids gone (every line checked before anything is written),
``forget`` undoes a mistaken import or forgets chosen recipients, ``opt-out`` and
``opt-in`` record one recipient's choice. All go through the library's own `Audience`, so
the command line counts and changes exactly what every run reads.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from notifyonce._audience import Audience, AudienceRow, GoneReason, default_recipient_table
from notifyonce._cli.common import EXIT_OK, UsageError, plural, since_arg, sync_engine
from notifyonce._errors import ValidationError
from notifyonce._ledger.table import DEFAULT_TABLE_NAME
from notifyonce._senders.telegram.chat import validate_recipient

__all__ = ["EXPORT_PAGE", "add_parser", "run"]

#: Rows read per statement by ``export``: its memory stays that of one page.
EXPORT_PAGE = 1000
# Bad lines of an import named in the error (the count says how many more there are).
_BAD_LINES_SHOWN = 5
# Who a change made here is recorded as (the audience's `source`, and an opt-out's `how`).
_BY_HAND = "command line"
_REASONS = [r.value for r in GoneReason]
_CSV_HEADER = ["recipient", "kind", "reason", "category", "source", "since", "detail"]


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def add_parser(commands: argparse._SubParsersAction[Any], db: argparse.ArgumentParser) -> None:
    """Register ``recipients`` and its subcommands on the command line."""
    parser = commands.add_parser(
        "recipients",
        help="the audience: chats gone (blocked the bot, left) or opted out; import, undo",
        description="The chats every run skips before claiming: gone (blocked the bot, "
        "deleted the account, removed the bot from the group) or opted out of a category. "
        "Kept in the table beside the ledger table (notifyonce_recipients beside "
        "notifyonce_slots), which `notifyonce migrate` creates.",
    )
    sub = parser.add_subparsers(dest="recipients_command", required=True, metavar="SUBCOMMAND")

    counts = sub.add_parser(
        "counts", parents=[db], help="gone recipients per reason, opt-outs per category"
    )
    counts.add_argument("--json", action="store_true", help="print JSON instead of a table")

    listing = sub.add_parser(
        "list",
        parents=[db],
        help="the rows, in recipient order, a page at a time",
        description="One line per row: the recipient, why it is gone or what it opted out "
        "of, who recorded it, since when, and the provider's words. Rows come in recipient "
        "order; a full page ends with the --after that reads the next one.",
    )
    _kind_options(listing)
    listing.add_argument("--reason", choices=_REASONS, help="only gone recipients with it")
    listing.add_argument("--category", help="only opt-outs of this category")
    listing.add_argument("--source", help="only rows recorded by it (import, refusal, ...)")
    listing.add_argument(
        "--limit", type=_positive, default=100, help="at most this many rows (default: 100)"
    )
    listing.add_argument(
        "--after", metavar="RECIPIENT", help="start after this recipient's gone row"
    )
    listing.add_argument(
        "--after-category",
        metavar="CATEGORY",
        help="with --after: start after that recipient's opt-out of CATEGORY",
    )
    listing.add_argument("--json", action="store_true", help="print JSON lines")

    export = sub.add_parser(
        "export",
        parents=[db],
        help="write the rows to a CSV file, read a page at a time",
        description=f"Write every row (or the gone ones, or the opt-outs) to a CSV file "
        f"with a header, reading {EXPORT_PAGE:,} rows at a time: a million rows take the "
        "memory of one page. The file appears complete or not at all.",
    )
    _kind_options(export)
    export.add_argument(
        "--output", required=True, metavar="FILE", help="the CSV file to write ('-': stdout)"
    )

    imported = sub.add_parser(
        "import",
        parents=[db],
        help="mark the chat ids of a file gone, all or none",
        description="Mark every chat id of FILE gone, in one transaction: one chat id a "
        "line (-100123 or @channelname), blank lines and # comments skipped. Every line is "
        "checked first: a bad one is named with its line number and nothing is written. "
        "The output says how to undo it.",
    )
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--reason", required=True, choices=_REASONS, help="why they are gone")
    imported.add_argument(
        "--source", default="import", help="who to record as telling (default: import)"
    )

    forget = sub.add_parser(
        "forget",
        parents=[db],
        help="forget recipients, or undo an import: forget --source import --since WHEN",
        description="Forget everything about the RECIPIENTs named (gone and opt-outs), or "
        "every gone recipient recorded by --source, --since a time, for a --reason: the "
        "undo of a mistaken import. Prints how many rows were removed.",
    )
    forget.add_argument("recipients", nargs="*", metavar="RECIPIENT")
    forget.add_argument("--source", help="gone recipients recorded by it (e.g. import)")
    forget.add_argument(
        "--since",
        type=since_arg,
        metavar="WHEN",
        help="gone recipients recorded since WHEN: a duration ago (1h) or an ISO 8601 time "
        "with its zone",
    )
    forget.add_argument("--reason", choices=_REASONS, help="gone recipients with this reason")

    for name, verb in (("opt-out", "stop"), ("opt-in", "allow again")):
        choice = sub.add_parser(
            name,
            parents=[db],
            help=f"{verb} the notifications of a category to a recipient",
        )
        choice.add_argument("recipient", metavar="RECIPIENT")
        choice.add_argument("category", metavar="CATEGORY")


def _kind_options(parser: argparse.ArgumentParser) -> None:
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--gone", action="store_true", help="only the gone recipients")
    kind.add_argument("--opted-out", action="store_true", help="only the opt-outs")


def _audience(args: argparse.Namespace) -> Audience:
    """The audience beside the ledger table that --table and --schema name."""
    # Pooled (and disposed by `run`): an export's pages reuse one connection, where a
    # connection each (TLS set up anew each time on MariaDB) took half of its time.
    engine = sync_engine(args)
    return Audience(engine, table_name=default_recipient_table(args.table), schema=args.schema)


def _gone(args: argparse.Namespace) -> bool | None:
    """--gone: True, --opted-out: False, neither: None (both kinds)."""
    return True if args.gone else False if args.opted_out else None


def run(args: argparse.Namespace) -> int:
    """Run ``notifyonce recipients SUBCOMMAND``; the exit code."""
    command = _SUBCOMMANDS[args.recipients_command]
    audience = _audience(args)
    try:
        return command(audience, args)
    finally:
        audience.engine.dispose()


# -- reading -------------------------------------------------------------------------------


def _counts(audience: Audience, args: argparse.Namespace) -> int:
    counts = audience.counts()
    opted_out = sum(counts.opted_out.values())
    if args.json:
        data = {
            "gone": counts.gone,
            "opted_out": counts.opted_out,
            "total_gone": counts.total_gone,
            "total_opted_out": opted_out,
        }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    rows = [
        ("gone, per reason", counts.total_gone),
        *((f"  {reason}", n) for reason, n in counts.gone.items()),
        ("opted out, per category", opted_out),
        *((f"  {category}", n) for category, n in counts.opted_out.items()),
        ("rows in all", counts.total_gone + opted_out),
    ]
    label = max(len(text) for text, _ in rows)
    number = max(len(f"{n:,}") for _, n in rows)
    lines = [f"{text:<{label}}  {n:>{number},}" for text, n in rows]
    print("\n".join(lines))
    return EXIT_OK


def _after(recipient: str | None, category: str | None) -> AudienceRow | None:
    """The keyset the rows start after: a recipient's gone row, or one of its opt-outs."""
    if recipient is None:
        if category is not None:
            raise UsageError("--after-category: needs --after RECIPIENT")
        return None
    # Only the key is read (recipient, category); the rest is a placeholder.
    return AudienceRow(recipient, category, "", "", dt.datetime.now(dt.timezone.utc))


def _list(audience: Audience, args: argparse.Namespace) -> int:
    gone = _gone(args)
    if args.reason is not None:
        if gone is False:
            raise UsageError("--reason: only gone recipients have a reason; drop --opted-out")
        gone = True
    if args.category is not None:
        if gone is True:
            raise UsageError("--category: only opt-outs have a category; drop --gone/--reason")
        gone = False
    # One more than shown: whether another page follows is known, not guessed.
    rows = audience.rows(
        gone=gone,
        reason=args.reason,
        category=args.category,
        source=args.source,
        after=_after(args.after, args.after_category),
        limit=args.limit + 1,
    )
    shown, more = rows[: args.limit], len(rows) > args.limit
    if args.json:
        for row in shown:
            print(json.dumps(_as_dict(row)))
    else:
        for line in _table(shown):
            print(line)
        if not shown:
            print("no recipients match")
    if more:
        last = shown[-1]
        after = f"--after {last.recipient}"
        if last.category is not None:
            after += f" --after-category {last.category}"
        print(f"more rows follow: add {after}", file=sys.stderr)
    return EXIT_OK


def _what(row: AudienceRow) -> str:
    return f"gone: {row.reason}" if row.gone else f"opted out of {row.category}"


def _said(row: AudienceRow) -> str:
    return row.detail or "" if row.gone else f"by {row.reason}"


def _table(rows: list[AudienceRow]) -> Iterator[str]:
    """The rows as aligned lines: recipient, why, who recorded it, since when, the words."""
    if not rows:
        return
    cells = [
        (r.recipient, _what(r), r.source, f"{r.since:%Y-%m-%d %H:%M:%S}", _said(r)) for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    for cell in cells:
        yield "  ".join(
            [*(text.ljust(width) for text, width in zip(cell, widths, strict=False)), cell[4]]
        ).rstrip()


def _as_dict(row: AudienceRow) -> dict[str, str | None]:
    """The row as the JSON lines and the CSV file give it (in ``_CSV_HEADER``'s order)."""
    return {
        "recipient": row.recipient,
        "kind": "gone" if row.gone else "opted_out",
        "reason": row.reason,
        "category": row.category,
        "source": row.source,
        "since": row.since.isoformat(),
        "detail": row.detail,
    }


def _pages(audience: Audience, gone: bool | None) -> Iterator[list[AudienceRow]]:
    """Every row of the kind, ``EXPORT_PAGE`` at a time along the primary key: each page
    costs one index range read however deep, and only one page is held."""
    after: AudienceRow | None = None
    while True:
        page = audience.rows(gone=gone, after=after, limit=EXPORT_PAGE)
        if not page:
            return
        yield page
        if len(page) < EXPORT_PAGE:
            return
        after = page[-1]


def _export(audience: Audience, args: argparse.Namespace) -> int:
    gone = _gone(args)
    what = {True: "gone", False: "opt-out", None: ""}[gone]
    if args.output == "-":
        count = _write_csv(audience, gone, sys.stdout)
        print(f"exported {plural(count, f'{what} row'.strip())}", file=sys.stderr)
        return EXIT_OK
    partial = f"{args.output}.part"
    try:
        with open(partial, "w", encoding="utf-8", newline="") as file:
            count = _write_csv(audience, gone, file)
        # Renamed only once complete: a failed export leaves no file that looks whole.
        os.replace(partial, args.output)
    except OSError as exc:
        raise UsageError(f"--output: cannot write {args.output} ({exc.strerror})") from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    print(f"exported {plural(count, f'{what} row'.strip())} to {args.output}")
    return EXIT_OK


def _write_csv(audience: Audience, gone: bool | None, file: IO[str]) -> int:
    writer = csv.writer(file)
    writer.writerow(_CSV_HEADER)
    count = 0
    for page in _pages(audience, gone):
        writer.writerows(_as_dict(row).values() for row in page)
        count += len(page)
    return count


# -- changing --------------------------------------------------------------------------------


def _chat_ids(path: str) -> tuple[list[str], int]:
    """The chat ids of ``path`` and its number of lines; a UsageError naming the bad
    lines (up to five, and how many in all) when any line is not a chat id."""
    ids: list[str] = []
    problems: list[str] = []
    bad = number = 0
    try:
        with open(path, "rb") as lines:
            for number, raw in enumerate(lines, 1):
                problem, text = _line(raw, first=number == 1)
                if problem is None and text is not None:
                    ids.append(text)
                elif problem is not None:
                    bad += 1
                    if len(problems) < _BAD_LINES_SHOWN:
                        problems.append(f"line {number} {problem}")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
    if problems:
        more = f"; {bad:,} bad lines in all" if bad > len(problems) else ""
        raise UsageError(f"{path}: " + "; ".join(problems) + more + "; nothing was written")
    if not ids:
        raise UsageError(f"{path}: no chat id in it; nothing was written")
    return ids, number


def _line(raw: bytes, *, first: bool) -> tuple[str | None, str | None]:
    """(the problem, None) for a bad line; (None, the chat id) for a good one; (None, None)
    for a blank line or a comment."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text", None
    if first:
        text = text.removeprefix("\ufeff")  # the mark some editors put first
    text = text.strip()
    if not text or text.startswith("#"):
        return None, None
    try:
        return None, validate_recipient(text)
    except ValidationError as exc:
        return f"({text[:40]!r}): {exc.problem}", None


def _import(audience: Audience, args: argparse.Namespace) -> int:
    ids, lines = _chat_ids(args.file)
    # The rows record the time to the second: the undo names this second.
    started = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    marked = audience.mark_gone_many(ids, args.reason, source=args.source)
    repeated = len(ids) - marked
    print(
        f"marked {plural(marked, 'chat')} gone ({args.reason}, source {args.source}) from "
        f"{args.file} ({plural(lines, 'line')}"
        + (f"; {plural(repeated, 'repeated id')} counted once)" if repeated else ")")
    )
    where = "" if args.table == DEFAULT_TABLE_NAME else f" --table {args.table}"
    where += "" if args.schema is None else f" --schema {args.schema}"
    print(
        f"to undo it: notifyonce recipients forget{where} --source {_quoted(args.source)} "
        f"--since {started.isoformat()}"
    )
    return EXIT_OK


def _quoted(word: str) -> str:
    return f"'{word}'" if any(c.isspace() or c in "'\"$`\\" for c in word) else word


def _forget(audience: Audience, args: argparse.Namespace) -> int:
    filters = [args.source, args.since, args.reason]
    if args.recipients and any(f is not None for f in filters):
        raise UsageError("forget: name RECIPIENTs or --source/--since/--reason, not both")
    if args.recipients:
        removed = audience.forget(*args.recipients)
        who = plural(len(set(args.recipients)), "recipient")
        print(f"forgot {plural(removed, 'row')} (gone and opt-outs) of {who}")
        return EXIT_OK
    if all(f is None for f in filters):
        raise UsageError(
            "forget: name RECIPIENTs, or the gone ones to forget with --source, --since "
            "or --reason (e.g. --source import --since 1h to undo an import)"
        )
    removed = audience.forget_gone(source=args.source, since=args.since, reason=args.reason)
    which = [
        *([f"recorded by {args.source}"] if args.source is not None else []),
        *([f"since {args.since.isoformat(timespec='seconds')}"] if args.since is not None else []),
        *([f"with reason {args.reason}"] if args.reason is not None else []),
    ]
    print(f"forgot {plural(removed, 'gone recipient')} {', '.join(which)}")
    return EXIT_OK


def _opt_out(audience: Audience, args: argparse.Namespace) -> int:
    audience.opt_out(args.recipient, args.category, how=_BY_HAND, source=_BY_HAND)
    print(f"{args.recipient} opted out of {args.category}: no more {args.category} to it")
    return EXIT_OK


def _opt_in(audience: Audience, args: argparse.Namespace) -> int:
    if audience.opt_in(args.recipient, args.category):
        print(f"{args.recipient} opted back in to {args.category}")
    else:
        print(f"{args.recipient} had not opted out of {args.category}: nothing changed")
    return EXIT_OK


_SUBCOMMANDS: dict[str, Callable[[Audience, argparse.Namespace], int]] = {
    "counts": _counts,
    "list": _list,
    "export": _export,
    "import": _import,
    "forget": _forget,
    "opt-out": _opt_out,
    "opt-in": _opt_in,
}
