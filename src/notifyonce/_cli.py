"""The ``notifyonce`` command line: check schedules, look at and maintain the ledger.

Exit codes (stable, for scripts):

- 0: done; ``check``: the schedule is valid.
- 1: ``check``: the schedule is invalid (every problem is printed).
- 2: usage error: bad arguments, a bad database URL, a module or attribute not found.
- 3: the database could not be reached or failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from notifyonce import _cli_broadcast, _cli_serve, _cli_web
from notifyonce._errors import LedgerError, ScheduleError, ValidationError
from notifyonce._ledger.table import SlotStatus
from notifyonce._outcome import DeliveryMode
from notifyonce._schedule.durations import format_duration
from notifyonce._version import __version__

if TYPE_CHECKING:
    from notifyonce._ledger.ledger import Ledger
    from notifyonce._ledger.records import LedgerStats

__all__ = ["main", "parse_duration", "plural"]

ENV_URL = "NOTIFYONCE_DATABASE_URL"

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_DATABASE = 3

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_MAX_DURATION = dt.timedelta(days=36525)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_UNITS = "s seconds, m minutes, h hours, d days, w weeks"
_DURATION_HELP = f"a duration such as 30s, 15m, 12h, 7d, 2w or 1h30m ({DURATION_UNITS}; no months)"

# Async drivers (and bare dialect names) map to the sync driver the CLI uses.
_SYNC_DRIVERS = {
    # Plain names resolve to drivers the extras do not install (psycopg2, mysqlclient).
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",  # the scheme Heroku, Render and libpq print
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
    "postgresql+asyncpg": "postgresql+psycopg",
    "postgresql+psycopg_async": "postgresql+psycopg",
    "sqlite+aiosqlite": "sqlite",
    "mysql+asyncmy": "mysql+pymysql",
    "mysql+aiomysql": "mysql+pymysql",
    "mariadb+asyncmy": "mariadb+pymysql",
    "mariadb+aiomysql": "mariadb+pymysql",
}


class _UsageError(Exception):
    pass


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
    if seconds > _MAX_DURATION.total_seconds():
        raise ValidationError("duration", f"{text!r} is longer than 100 years")
    return dt.timedelta(seconds=seconds)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        description="at-most-once: expired claims become unknown; at-least-once: they "
        "are released for another attempt while attempts remain.",
    )
    sweep.add_argument(
        "--mode",
        choices=["at-most-once", "at-least-once"],
        default="at-most-once",
        help="the delivery mode of the jobs that use these actions (default: at-most-once)",
    )
    sweep.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="at-least-once: claims a slot may have in all (default: 3)",
    )
    sweep.add_argument(
        "--action",
        action="append",
        dest="actions",
        metavar="ACTION",
        help="sweep only this action (repeatable); jobs with other delivery modes may "
        "share the table",
    )

    purge = commands.add_parser(
        "purge",
        parents=[db],
        help="delete slots whose cycle ended long ago",
        description="Delete slots whose cycle (as a point in time) is older than "
        "--older-than. A slot whose cycle can still fire is never deleted.",
    )
    purge.add_argument(
        "--older-than",
        required=True,
        type=_duration_arg,
        metavar="DURATION",
        help=_DURATION_HELP,
    )
    purge.add_argument(
        "--opaque-finished-before",
        type=_since_arg,
        metavar="WHEN",
        help="also delete the slots whose cycle is an int or a str (a broadcast's campaign "
        f"id), have no live claim and last changed before WHEN: {_DURATION_HELP} ago, or "
        "an ISO 8601 time with its zone. Only for such cycles that cannot fire again: a "
        "slot deleted while its cycle can still fire is sent again",
    )
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="count the slots that would be deleted, and delete nothing",
    )

    migrate = commands.add_parser(
        "migrate", parents=[db], help="create or upgrade the ledger table (Alembic)"
    )
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    _add_operator_commands(commands, db)
    _cli_broadcast.add_parser(commands, db)
    _cli_serve.add_parser(commands)
    _cli_web.add_parser(commands, db)
    return parser


def _add_operator_commands(
    commands: argparse._SubParsersAction[Any], db: argparse.ArgumentParser
) -> None:
    """``list`` and ``requeue``: look at settled slots, and put them back knowingly."""
    since_help = (
        f"only slots whose outcome was recorded since WHEN: {_DURATION_HELP} ago, "
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
    listing.add_argument("--since", type=_since_arg, metavar="WHEN", help=since_help)
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
    requeue.add_argument("--since", type=_since_arg, metavar="WHEN", help=since_help)
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


def _since_arg(text: str) -> dt.datetime:
    """``--since``: a duration ago, or an aware ISO 8601 time."""
    if text[:1].isdigit() and not re.fullmatch(r"\d{4}-.*", text):
        return dt.datetime.now(dt.timezone.utc) - _duration_arg(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither {_DURATION_HELP} nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone: add one, e.g. {text}+00:00")
    return when


def _duration_arg(text: str) -> dt.timedelta:
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


def _sync_url(raw: str | None) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not raw:
        raise _UsageError(f"no database URL: pass --database-url or set ${ENV_URL}")
    try:
        url = make_url(raw)
    except ArgumentError:
        # Not echoed: a URL can carry a password.
        raise _UsageError("the database URL is not a valid SQLAlchemy URL") from None
    sync_driver = _SYNC_DRIVERS.get(url.drivername)
    if sync_driver is not None:
        url = url.set(drivername=sync_driver)
    return url.render_as_string(hide_password=False)


def _ledger(args: argparse.Namespace) -> Ledger:
    import sqlalchemy as sa

    from notifyonce._ledger.ledger import Ledger

    url = _sync_url(args.database_url or os.environ.get(ENV_URL))
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    except (ImportError, sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise _UsageError(engine_error(exc)) from None
    return Ledger(engine, table_name=args.table, schema=args.schema)


def engine_error(exc: Exception) -> str:
    """Why an engine could not be made from the URL; a missing driver names its extra."""
    from sqlalchemy.exc import NoSuchModuleError

    from notifyonce._drivers import missing_driver

    hint = missing_driver(exc)
    if hint is not None:
        return hint
    if isinstance(exc, (ImportError, NoSuchModuleError)):
        # These name a module or a dialect; other errors may quote the URL (a password).
        return f"cannot use this database URL: {type(exc).__name__}: {exc}"
    return f"cannot use this database URL: {type(exc).__name__}"


def _load(target: str) -> object:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise _UsageError(f"{target!r} is not MODULE:ATTRIBUTE")
    sys.path.insert(0, os.getcwd())
    try:
        value: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise _UsageError(f"cannot import {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise _UsageError(f"{module_name!r} has no attribute {attribute!r}") from None
    return value


def _check(args: argparse.Namespace) -> int:
    from notifyonce._schedule.schedule import Schedule

    try:
        schedule = _load(args.target)
        if callable(schedule) and not isinstance(schedule, Schedule):
            schedule = schedule()
    except ScheduleError as exc:
        print(f"invalid schedule {args.target}: {exc.problem}")
        return EXIT_INVALID
    except _UsageError:
        raise
    except Exception as exc:  # the user's module or function failed: not "invalid"
        raise _UsageError(f"loading {args.target} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(schedule, Schedule):
        raise _UsageError(f"{args.target} is a {type(schedule).__name__}, not a Schedule")
    print(schedule.render(width=args.width))
    if args.svg is not None:
        from notifyonce._schedule.timeline_svg import render_timeline_svg

        try:
            with open(args.svg, "w", encoding="utf-8") as picture:
                picture.write(render_timeline_svg(schedule))
        except OSError as exc:
            raise _UsageError(f"cannot write {args.svg}: {exc.strerror}") from None
        print(f"\ndrew the timeline in {args.svg}")
    print(f"\n{args.target}: valid")
    return EXIT_OK


def _stats(args: argparse.Namespace) -> int:
    stats = _ledger(args).stats()
    if args.json:
        print(json.dumps(_stats_dict(stats), indent=2))
    else:
        print(_render_stats(stats))
    return EXIT_OK


def _stats_dict(stats: LedgerStats) -> dict[str, object]:
    actions: dict[str, dict[str, int]] = {}
    for (action, status), count in sorted(stats.counts.items()):
        actions.setdefault(action, {})[status.value] = count
    oldest = stats.oldest_live_claim
    return {
        "actions": actions,
        "live_claims": stats.live_claims,
        "oldest_live_claim": oldest.isoformat() if oldest is not None else None,
        "expired_leases": stats.expired_leases,
        "unknown": stats.unknown,
    }


def _render_stats(stats: LedgerStats) -> str:
    statuses = list(SlotStatus)
    rows = _stats_dict(stats)["actions"]
    assert isinstance(rows, dict)
    width = max([len("action"), *(len(a) for a in rows)])
    lines = [f"{'action':<{width}}  " + "  ".join(f"{s.value:>8}" for s in statuses)]
    for action, counts in rows.items():
        cells = "  ".join(f"{counts.get(s.value, 0):>8}" for s in statuses)
        lines.append(f"{action:<{width}}  {cells}")
    if not rows:
        lines.append("(the ledger is empty)")
    oldest = stats.oldest_live_claim
    lines += [
        "",
        f"live claims:     {stats.live_claims}"
        + (f" (oldest taken {oldest:%Y-%m-%d %H:%M:%S} UTC)" if oldest is not None else ""),
        f"expired leases:  {stats.expired_leases}"
        + ("  (run `notifyonce sweep`)" if stats.expired_leases else ""),
        f"unknown outcomes: {stats.unknown}",
    ]
    return "\n".join(lines)


def _sweep(args: argparse.Namespace) -> int:
    mode = DeliveryMode(args.mode.replace("-", "_"))
    result = _ledger(args).sweep(mode, max_attempts=args.max_attempts, actions=args.actions)
    print(f"expired leases: {len(result.unknown)} now unknown, {len(result.released)} released")
    for key in result.unknown:
        print(f"  unknown   {key}")
    for key in result.released:
        print(f"  released  {key}")
    return EXIT_OK


def _purge(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    what = f"whose cycle ended more than {format_duration(args.older_than)} ago"
    opaque = args.opaque_finished_before
    if opaque is not None:
        what += f", or whose int or str cycle last changed before {opaque:%Y-%m-%d %H:%M:%S %Z}"
    if args.dry_run:
        # The same DELETE, in a transaction that is rolled back: the count is exact.
        with ledger.engine.connect() as connection:
            count = ledger._run(ledger._plan_purge(args.older_than, opaque), connection=connection)
            connection.rollback()
        print(f"would delete {plural(count, 'slot')} {what} (dry run)")
        return EXIT_OK
    deleted = ledger.purge(older_than=args.older_than, opaque_finished_before=opaque)
    print(f"deleted {plural(deleted, 'slot')} {what}")
    return EXIT_OK


def _migrate(args: argparse.Namespace) -> int:
    from alembic.util import CommandError

    from notifyonce.migrations import _upgrade_on

    ledger = _ledger(args)
    before = _revisions(ledger, args.table, args.schema)
    try:
        with ledger.engine.begin() as connection:
            adopted = _upgrade_on(connection, args.table, args.schema, None, args.revision)
    except CommandError as exc:
        raise _UsageError(f"migrate: {exc}") from None
    after = _revisions(ledger, args.table, args.schema)
    name = f"ledger table {args.table!r}"
    if adopted:
        # Tables made by create_schema(): their revisions were recorded, not run.
        print(
            f"{name}: its tables were made without the migration (create_schema()); "
            f"{plural(len(adopted), 'revision')} recorded as done without running: "
            f"{', '.join(adopted)}"
        )
        if adopted[-1] != after:
            print(f"{name} upgraded from {adopted[-1]} to {after}")
    elif before == after:
        print(f"{name} is already at {after}: nothing to do")
    else:
        print(f"{name} upgraded from {before or 'nothing'} to {after}")
    return EXIT_OK


def _revisions(ledger: Ledger, table: str, schema: str | None) -> str:
    """The revisions the ledger table's own version table records, or "" before any."""
    from alembic.runtime.migration import MigrationContext

    from notifyonce.migrations import default_version_table

    options = {"version_table": default_version_table(table), "version_table_schema": schema}
    with ledger.engine.connect() as connection:
        heads = MigrationContext.configure(connection, opts=options).get_current_heads()
    return ", ".join(sorted(heads))


def _list(args: argparse.Namespace) -> int:
    records = _ledger(args).slots(
        status=args.status, action=args.action, since=args.since, limit=args.limit
    )
    for record in records:
        row = {
            "action": record.key.action,
            "subject": record.key.subject,
            "cycle": record.key.cycle,
            "status": record.status.value,
            "attempt": record.attempt,
            "updated_at": record.updated_at.isoformat(),
            "last_error": record.last_error,
        }
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{record.status.value:<8}  {record.updated_at:%Y-%m-%d %H:%M:%S}  "
                f"{record.key}  {record.last_error or ''}".rstrip()
            )
    if not records and not args.json:
        print(f"no {'/'.join(args.status)} slots")
    return EXIT_OK


def _requeue(args: argparse.Namespace) -> int:
    keys = _ledger(args).requeue(
        args.action,
        status=args.status,
        since=args.since,
        subjects=args.subjects,
        dry_run=args.dry_run,
    )
    verb = "would requeue" if args.dry_run else "requeued"
    print(f"{verb} {len(keys)} {'/'.join(args.status)} slots of {args.action!r}")
    for key in keys:
        print(f"  {key}")
    return EXIT_OK


_COMMANDS = {
    "check": _check,
    "stats": _stats,
    "sweep": _sweep,
    "purge": _purge,
    "migrate": _migrate,
    "list": _list,
    "requeue": _requeue,
    "broadcast": _cli_broadcast.run,
    "serve-test-api": _cli_serve.run,
    "web": _cli_web.run,
}


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


def ledger_tables(table: str) -> list[str]:
    """The ledger table and the tables beside it that `notifyonce migrate` creates."""
    from notifyonce._senders.rate.sql import default_rate_table
    from notifyonce._senders.telegram.file_sql import default_file_table

    return [table, default_rate_table(table), default_file_table(table)]


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


def _database_error(message: str, tables: Sequence[str] = ("notifyonce_slots",)) -> str:
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


def _fail(code: int, message: str) -> NoReturn:
    print(f"notifyonce: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docs)."""
    args = _parser().parse_args(argv)
    tables = ledger_tables(args.table) if hasattr(args, "table") else []
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as exc:
        _fail(EXIT_USAGE, str(exc))
    except ValidationError as exc:
        _fail(EXIT_USAGE, str(exc))
    except LedgerError as exc:
        _fail(EXIT_DATABASE, _database_error(str(exc), tables))
    except SQLAlchemyError as exc:  # from Alembic's own connection (migrate), a query's
        lines = str(exc.orig if isinstance(exc, DBAPIError) else exc).strip().splitlines()
        first = lines[0] if lines else ""
        message = f"database error ({type(exc).__name__}: {first})"
        _fail(EXIT_DATABASE, _database_error(message, tables))
