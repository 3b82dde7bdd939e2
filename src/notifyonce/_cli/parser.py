"""The ``notifyonce`` command line: check schedules, look at and maintain the ledger.

Exit codes (stable, for scripts):

- 0: done; ``check``: the schedule is valid.
- 1: ``check``: the schedule is invalid (every problem is printed).
- 2: usage error: bad arguments, a bad database URL, a module or attribute not found.
- 3: the database could not be reached or failed.
- 141: the reader of the output closed it (``| head``): the rest was not printed.

This module holds the argument tree and `main`; the commands live beside it
(``ledger``, ``broadcast``, ``recipients``, ``serve``, ``web``) and share ``common``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from notifyonce._broadcast import command_line_words
from notifyonce._cli import broadcast, campaign, ledger, recipients, serve, web
from notifyonce._cli.common import (
    DURATION_HELP,
    ENV_URL,
    EXIT_DATABASE,
    EXIT_USAGE,
    UsageError,
    database_error,
    fail,
    ledger_tables,
    since_arg,
)
from notifyonce._errors import LedgerError, ValidationError
from notifyonce._ledger.table import SlotStatus
from notifyonce._version import __version__

__all__ = ["main"]

EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command its reader left


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reads a negative chat id as a value, also as the chat of
    ``CHAT:MESSAGE_ID``: ``--copy-from -1001234567890:42``, as a channel's post is
    written, was refused ("expected one argument").

    argparse reads an argument that starts with '-' as an option unless it looks like a
    negative number (and no option does, as none here does); this adds a negative chat
    id with a message id to what looks like one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plain = self._negative_number_matcher.pattern  # as this Python's argparse has it
        self._negative_number_matcher = re.compile(rf"{plain}|^-[0-9]+:[0-9]+$")


def _parser() -> argparse.ArgumentParser:
    """The whole argument tree: the ledger's commands here, the others from their modules."""
    # Typed as the base class, which the commands' modules take; add_subparsers makes the
    # subcommands' parsers of this one's class, so each of them is a _Parser too.
    parser: argparse.ArgumentParser = _Parser(
        prog="notifyonce",
        description="Check send schedules and look after the notifyonce ledger.",
        epilog=f"The database URL comes from --database-url or ${ENV_URL}. Exit codes: "
        "0 ok, 1 invalid schedule, 2 usage error, 3 database error.",
    )
    parser.add_argument("--version", action="version", version=f"notifyonce {__version__}")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--database-url",
        metavar="URL",
        help="the database, as a SQLAlchemy URL: postgresql://user:password@host/db "
        "(postgres:// and async drivers such as postgresql+asyncpg work too), "
        f"mysql://..., sqlite:///path.db (default: ${ENV_URL})",
    )
    db.add_argument(
        "--table",
        default="notifyonce_slots",
        help="ledger table name, as given to the ledger (default: notifyonce_slots)",
    )
    db.add_argument(
        "--schema", default=None, help="database schema of the table (default: the search path)"
    )
    db.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the PostgreSQL URL is a pooler in transaction mode (PgBouncer's pool_mode = "
        "transaction): prepare no statement that outlives it (asyncpg and psycopg)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser(
        "check",
        help="validate a Schedule and draw its timeline",
        description=(
            "Import MODULE:ATTRIBUTE (a Schedule, or a zero-argument callable returning "
            "one), validate it and draw its timeline."
        ),
    )
    check.add_argument("target", metavar="MODULE:ATTRIBUTE")
    check.add_argument(
        "--width", type=int, default=72, help="timeline width in characters (default: 72)"
    )
    check.add_argument(
        "--svg",
        metavar="FILE",
        default=None,
        help="also draw the timeline, with the runs of the job, as an SVG picture in FILE",
    )

    stats = commands.add_parser("stats", parents=[db], help="slots per action and status")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")

    sweep = commands.add_parser(
        "sweep",
        parents=[db],
        help="settle claims whose lease expired",
        description=ledger.SWEEP_DESCRIPTION,
    )
    ledger.add_sweep_arguments(sweep)
    purge = commands.add_parser(
        "purge",
        parents=[db],
        help="delete slots whose cycle ended long ago",
        description=ledger.PURGE_DESCRIPTION,
    )
    ledger.add_purge_arguments(purge)

    migrate = commands.add_parser(
        "migrate", parents=[db], help="create or upgrade the ledger table (Alembic)"
    )
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    _add_operator_commands(commands, db)
    broadcast.add_parser(commands, db)
    campaign.add_parser(commands, db)
    recipients.add_parser(commands, db)
    serve.add_parser(commands)
    web.add_parser(commands, db)
    return parser


def _add_operator_commands(
    commands: argparse._SubParsersAction[Any], db: argparse.ArgumentParser
) -> None:
    """``list`` and ``requeue``: look at settled slots, and put them back knowingly."""
    since_help = (
        f"only slots whose outcome was recorded since WHEN: {DURATION_HELP} ago, "
        "or an ISO 8601 time with its zone"
    )
    listing = commands.add_parser(
        "list",
        parents=[db],
        help="list slots with a status (e.g. unknown), newest first",
        description="List the slots with a status, most recently changed first, with "
        "their last error. Use it before `requeue` to see what would be sent again.",
    )
    listing.add_argument(
        "--status",
        required=True,
        action="append",
        choices=[s.value for s in SlotStatus],
        help="the status to list (repeatable)",
    )
    listing.add_argument("--action", help="only this action")
    listing.add_argument("--since", type=since_arg, metavar="WHEN", help=since_help)
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default: 100)")
    listing.add_argument("--json", action="store_true", help="print JSON lines instead of a table")

    requeue = commands.add_parser(
        "requeue",
        parents=[db],
        help="put unknown or failed slots back, so the next run sends them",
        description="Release the slots of one action whose outcome was unknown or failed, "
        "so the next run claims and sends them again. An unknown slot may have been "
        "delivered: requeueing it accepts a possible duplicate. Try --dry-run first.",
    )
    requeue.add_argument("--action", required=True, help="the action whose slots to put back")
    requeue.add_argument(
        "--status",
        required=True,
        action="append",
        choices=["unknown", "failed"],
        help="which outcome to put back (repeatable)",
    )
    requeue.add_argument("--since", type=since_arg, metavar="WHEN", help=since_help)
    requeue.add_argument(
        "--subject",
        action="append",
        dest="subjects",
        metavar="SUBJECT",
        help="only this subject (repeatable)",
    )
    requeue.add_argument(
        "--dry-run", action="store_true", help="show what would be requeued; change nothing"
    )


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    **ledger.COMMANDS,
    "broadcast": broadcast.run,
    "campaign": campaign.run,
    "recipients": recipients.run,
    "serve-test-api": serve.run,
    "web": web.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docs)."""
    args = _parser().parse_args(argv)
    tables = ledger_tables(args.table) if hasattr(args, "table") else []
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader gone (``| head``) is told here, not at exit
        return code
    except BrokenPipeError:
        # The reader of the output closed it: nothing more to print, no traceback. The
        # rest of the output goes nowhere, so Python's own flush at exit has no pipe to
        # fail on; the exit code is a shell's for a command killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE
    except UsageError as exc:
        fail(EXIT_USAGE, str(exc))
    except ValidationError as exc:
        # In the command line's words: a flag (--resume-cancelled), not Python's argument.
        fail(EXIT_USAGE, command_line_words(str(exc)))
    except LedgerError as exc:
        fail(EXIT_DATABASE, database_error(str(exc), tables))
    except SQLAlchemyError as exc:  # from Alembic's own connection (migrate), a query's
        lines = str(exc.orig if isinstance(exc, DBAPIError) else exc).strip().splitlines()
        first = lines[0] if lines else ""
        message = f"database error ({type(exc).__name__}: {first})"
        fail(EXIT_DATABASE, database_error(message, tables))
