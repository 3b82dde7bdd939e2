"""What every command of the command line shares: exit codes, the database URL, durations,
counts, and the error line a failure prints.

The commands import this module; it imports none of them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from notifyonce._audience.table import default_recipient_table
from notifyonce._drivers import missing_driver, url_driver
from notifyonce._drivers.postgresql import pgbouncer_options
from notifyonce._errors import ValidationError
from notifyonce._ledger.side_tables import default_cap_table, default_digest_table
from notifyonce._loop import ENV_UVLOOP, LoopChoice, choose_loop
from notifyonce._schedule.durations import MAX_DURATION
from notifyonce._senders.telegram.file_sql import default_file_table

__all__ = [
    "DURATION_HELP",
    "DURATION_UNITS",
    "ENV_URL",
    "EXIT_DATABASE",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_loop_options",
    "async_url",
    "database_error",
    "duration_arg",
    "engine_error",
    "event_loop",
    "fail",
    "ledger_tables",
    "missing_table",
    "parse_duration",
    "plural",
    "pooler_options",
    "since_arg",
    "sync_engine",
    "sync_url",
]

ENV_URL = "NOTIFYONCE_DATABASE_URL"

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_DATABASE = 3

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_UNITS = "s seconds, m minutes, h hours, d days, w weeks"
DURATION_HELP = f"a duration such as 30s, 15m, 12h, 7d, 2w or 1h30m ({DURATION_UNITS}; no months)"


class UsageError(Exception):
    """A usage error: the command line prints it and exits with 2."""


def add_loop_options(parser: argparse.ArgumentParser) -> None:
    """``--no-uvloop`` and ``--verbose``, on the commands that run an event loop."""
    parser.add_argument(
        "--no-uvloop",
        dest="uvloop",
        action="store_false",
        help="run on asyncio's own event loop even when uvloop (the speed extra) is "
        f"installed; {ENV_UVLOOP}=0 in the environment does the same",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="say on stderr which event loop the command runs on (uvloop or asyncio) and why",
    )


def event_loop(args: argparse.Namespace) -> LoopChoice:
    """The loop the command runs on (`add_loop_options`'s flags, ``NOTIFYONCE_UVLOOP``);
    with ``--verbose``, said once on stderr."""
    try:
        choice = choose_loop(args.uvloop)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.verbose:
        print(choice.describe(), file=sys.stderr, flush=True)
    return choice


def parse_duration(text: str) -> dt.timedelta:
    """Parse ``"30d"``, ``"12h"``, ``"1h30m"``, ``"90s"`` or ``"2w"`` into a timedelta.

    Units are lower-case and exact: ``s`` seconds, ``m`` minutes, ``h`` hours, ``d`` days,
    ``w`` weeks. There is no month (months differ in length): ``1M`` and ``1mo`` are
    refused with a message, rather than read as one minute.

    Examples:
        >>> parse_duration("1h30m")
        datetime.timedelta(seconds=5400)

    Raises:
        ValidationError: the text is not such a duration, or is zero.
    """
    compact = text.strip().replace(" ", "")
    if re.search(r"\d(M|mo)", compact):
        raise ValidationError(
            "duration",
            f"{text!r}: months have no fixed length; write days (30d) or weeks (4w), "
            "or 'm' for minutes",
        )
    if re.search(r"\d[SHDW]", compact):
        raise ValidationError(
            "duration", f"{text!r}: units are lower-case ({DURATION_UNITS}), e.g. 12h"
        )
    parts = _DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValidationError(
            "duration", f"{text!r} is not like 30s, 15m, 12h, 7d, 2w or 1h30m ({DURATION_UNITS})"
        )
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValidationError("duration", f"{text!r} must be longer than zero")
    if seconds > MAX_DURATION.total_seconds():
        raise ValidationError("duration", f"{text!r} is longer than 100 years")
    return dt.timedelta(seconds=seconds)


def since_arg(text: str) -> dt.datetime:
    """``--since``: a duration ago, or an aware ISO 8601 time."""
    if text[:1].isdigit() and not re.fullmatch(r"\d{4}-.*", text):
        return dt.datetime.now(dt.timezone.utc) - duration_arg(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither {DURATION_HELP} nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone: add one, e.g. {text}+00:00")
    return when


def duration_arg(text: str) -> dt.timedelta:
    """A duration option (`parse_duration`), refused as argparse refuses a bad value."""
    try:
        return parse_duration(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun that agrees with it: ``1 chat``, ``2 chats``, ``1,000 chats``.

    Examples:
        >>> plural(1, "chat"), plural(1000, "chat"), plural(2, "chat has", "chats have")
        ('1 chat', '1,000 chats', '2 chats have')
    """
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def _with_driver(raw: str, sync: bool) -> str:
    """``raw`` with a DBAPI a sync (or async) engine can use, as the database's driver
    says (the password kept); a URL of another database as it is."""
    try:
        url = make_url(raw)
    except ArgumentError:
        # Not echoed: a URL can carry a password.
        raise UsageError("the database URL is not a valid SQLAlchemy URL") from None
    driver = url_driver(url)
    if driver is not None:
        url = driver.sync_url(url) if sync else driver.async_url(url)
    return url.render_as_string(hide_password=False)


def sync_url(raw: str | None) -> str:
    """The database URL for the commands that run on a sync engine."""
    if not raw:
        raise UsageError(f"no database URL: pass --database-url or set ${ENV_URL}")
    return _with_driver(raw, sync=True)


def async_url(raw: str) -> str:
    """The database URL for a broadcast, which runs on an async engine."""
    return _with_driver(raw, sync=False)


def pooler_options(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """The engine options ``--pgbouncer`` asks for (`pgbouncer_options` for ``url``'s
    driver), or none without it; a usage error naming the option when ``url`` is not a
    PostgreSQL one."""
    if not getattr(args, "pgbouncer", False):
        return {}
    try:
        return pgbouncer_options(url)
    except ValidationError as exc:
        raise UsageError(f"--pgbouncer: {exc.problem}") from None


def sync_engine(args: argparse.Namespace, **options: Any) -> sa.Engine:
    """An engine on the database that ``--database-url`` (or ``$NOTIFYONCE_DATABASE_URL``)
    names, made with ``options`` (and those of ``--pgbouncer``); a usage error when it
    cannot be made."""
    url = sync_url(args.database_url or os.environ.get(ENV_URL))
    options = {**options, **pooler_options(args, url)}
    try:
        return sa.create_engine(url, **options)
    except (ImportError, ArgumentError, NoSuchModuleError) as exc:
        raise UsageError(engine_error(exc)) from None


def engine_error(exc: Exception) -> str:
    """Why an engine could not be made from the URL; a missing driver names its extra."""
    hint = missing_driver(exc)
    if hint is not None:
        return hint
    if isinstance(exc, (ImportError, NoSuchModuleError)):
        # These name a module or a dialect; other errors may quote the URL (a password).
        return f"cannot use this database URL: {type(exc).__name__}: {exc}"
    return f"cannot use this database URL: {type(exc).__name__}"


def ledger_tables(table: str) -> list[str]:
    """The ledger table and the tables beside it that `notifyonce migrate` creates."""
    # Lazy: the SQL rate store's module needs httpx (the telegram and webhook extras),
    # which the ledger's commands do without.
    from notifyonce._senders.rate.sql import default_rate_table

    return [
        table,
        default_rate_table(table),
        default_file_table(table),
        default_recipient_table(table),
        default_digest_table(table),
        default_cap_table(table),
    ]


_ABSENT = ("no such table", "does not exist", "doesn't exist", "unknown table")
# What PostgreSQL and MySQL/MariaDB say when the URL names a database the server lacks.
_NO_DATABASE = re.compile(r'database "[^"]*" does not exist|unknown database', re.IGNORECASE)


def _missing_table(message: str, tables: Sequence[str]) -> bool:
    """Whether ``message`` says that one of ``tables`` (the ledger's own) is missing.

    Only those: a missing database, or a missing table of the reader's own (say, in a
    broadcast's --recipients-sql), is not cured by `notifyonce migrate`.
    """
    text = message.lower()
    if _authentication_failed(text) or _NO_DATABASE.search(text):
        return False
    if not any(absent in text for absent in _ABSENT):
        return False
    # The name as a whole word: "notifyonce_slots" but not "notifyonce_slots_archive".
    return any(re.search(rf"(?<![\w$]){re.escape(t.lower())}(?![\w$])", text) for t in tables)


# What PostgreSQL (libpq, asyncpg) and MySQL/MariaDB say when they refuse the credentials.
_AUTH_FAILURES = (
    "password authentication failed",
    "authentication failed for user",
    "invalidpassworderror",
    "invalidauthorizationspecificationerror",
    "access denied for user",
    "no password supplied",
)
_UNKNOWN_ROLE = re.compile(r'fatal:\s+role "[^"]*" does not exist')


def _authentication_failed(message: str) -> bool:
    text = message.lower()
    return any(marker in text for marker in _AUTH_FAILURES) or bool(_UNKNOWN_ROLE.search(text))


def missing_table(message: str, tables: Sequence[str]) -> bool:
    """Whether a database error's ``message`` says that one of ``tables`` is missing (a
    database not migrated), and nothing else (a missing database, refused credentials)."""
    return _missing_table(message, tables)


def database_error(message: str, tables: Sequence[str] = ("notifyonce_slots",)) -> str:
    """The error line for a database failure, with a hint where one helps: an
    authentication failure says so, a missing ledger table suggests `notifyonce migrate`,
    a missing database says to create it."""
    if _authentication_failed(message):
        detail = re.sub(r"^database (?:unavailable|error) \((.*)\)$", r"\1", message)
        return f"authentication failed: the database refused the URL's user or password ({detail})"
    if _NO_DATABASE.search(message):
        return f"{message}; the URL names a database the server does not have: create it first"
    hint = "; run `notifyonce migrate` first?" if _missing_table(message, tables) else ""
    return f"{message}{hint}"


def fail(code: int, message: str) -> NoReturn:
    """Print ``message`` as the command line's error line and exit with ``code``."""
    print(f"notifyonce: error: {message}", file=sys.stderr)
    raise SystemExit(code)
