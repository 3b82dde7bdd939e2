"""The ledger's commands: ``check`` a schedule, and ``stats``, ``sweep``, ``purge``,
``migrate``, ``list`` and ``requeue`` on the ledger table.

`COMMANDS` maps each command's name to its function: it takes the parsed arguments and
returns the exit code; a usage error is raised as ``UsageError``, a database failure as
the ledger's own error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError

from notifyonce._audience import Audience, AudienceCounts
from notifyonce._cli.common import (
    DURATION_HELP,
    EXIT_INVALID,
    EXIT_OK,
    UsageError,
    duration_arg,
    plural,
    since_arg,
    sync_engine,
)
from notifyonce._errors import ScheduleError
from notifyonce._ledger.ledger import Ledger
from notifyonce._ledger.records import LedgerStats
from notifyonce._ledger.table import SlotStatus
from notifyonce._outcome import DeliveryMode
from notifyonce._schedule.durations import format_duration
from notifyonce._schedule.schedule import Schedule
from notifyonce._schedule.timeline_svg import render_timeline_svg
from notifyonce.migrations import _upgrade_on, default_version_table

__all__ = [
    "COMMANDS",
    "PURGE_DESCRIPTION",
    "SWEEP_DESCRIPTION",
    "add_purge_arguments",
    "add_sweep_arguments",
    "purge_ledger",
    "sweep_ledger",
]


def _ledger(args: argparse.Namespace) -> Ledger:
    """The ledger that --database-url, --table and --schema name, on a sync engine."""
    engine = sync_engine(args, poolclass=sa.pool.NullPool)
    return Ledger(engine, table_name=args.table, schema=args.schema)


def _load(target: str) -> object:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"{target!r} is not MODULE:ATTRIBUTE")
    sys.path.insert(0, os.getcwd())
    try:
        value: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attribute!r}") from None
    return value


def _check(args: argparse.Namespace) -> int:
    """``notifyonce check``: validate a Schedule and draw its timeline."""
    try:
        schedule = _load(args.target)
        if callable(schedule) and not isinstance(schedule, Schedule):
            schedule = schedule()
    except ScheduleError as exc:
        print(f"invalid schedule {args.target}: {exc.problem}")
        return EXIT_INVALID
    except UsageError:
        raise
    except Exception as exc:  # the user's module or function failed: not "invalid"
        raise UsageError(f"loading {args.target} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(schedule, Schedule):
        raise UsageError(f"{args.target} is a {type(schedule).__name__}, not a Schedule")
    print(schedule.render(width=args.width))
    if args.svg is not None:
        try:
            with open(args.svg, "w", encoding="utf-8") as picture:
                picture.write(render_timeline_svg(schedule))
        except OSError as exc:
            raise UsageError(f"cannot write {args.svg}: {exc.strerror}") from None
        print(f"\ndrew the timeline in {args.svg}")
    print(f"\n{args.target}: valid")
    return EXIT_OK


def _stats(args: argparse.Namespace) -> int:
    """``notifyonce stats``: slots per action and status, and the audience's counts."""
    ledger = _ledger(args)
    stats = ledger.stats()
    audience = _audience_counts(ledger)
    if args.json:
        data = _stats_dict(stats)
        data["audience"] = (
            None if audience is None else {"gone": audience.gone, "opted_out": audience.opted_out}
        )
        print(json.dumps(data, indent=2))
    else:
        print(_render_stats(stats))
        print(_render_audience(audience))
    return EXIT_OK


def _audience_counts(ledger: Ledger) -> AudienceCounts | None:
    """The counts of the audience beside the ledger, or None without its table (a
    database not migrated since the audience came)."""
    audience = Audience.beside(ledger)
    t = audience.table
    with ledger.engine.connect() as conn:
        if not sa.inspect(conn).has_table(t.name, schema=t.schema):
            return None
    return audience.counts()


def _render_audience(counts: AudienceCounts | None) -> str:
    """The line that says how many chats every run skips, as `recipients counts` does."""
    if counts is None:
        return "audience: no recipients table beside the ledger (run `notifyonce migrate`)"
    parts = []
    for what, by in (("gone", counts.gone), ("opted out", counts.opted_out)):
        each = ", ".join(f"{name} {n:,}" for name, n in by.items())
        parts.append(f"{what} {sum(by.values()):,}" + (f" ({each})" if each else ""))
    return "audience: " + "; ".join(parts)


def _stats_dict(stats: LedgerStats) -> dict[str, object]:
    """The ledger's numbers as ``stats --json`` prints them."""
    actions: dict[str, dict[str, int]] = {}
    for (action, status), count in sorted(stats.counts.items()):
        actions.setdefault(action, {})[status.value] = count
    for action, count in stats.capped.items():
        actions.setdefault(action, {})["capped"] = count  # of its released rows
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
    # "capped": of the released rows, those a frequency cap held back (shown once one is).
    columns = [s.value for s in statuses] + (["capped"] if stats.capped else [])
    lines = [f"{'action':<{width}}  " + "  ".join(f"{c:>8}" for c in columns)]
    for action, counts in rows.items():
        cells = "  ".join(f"{counts.get(c, 0):>8}" for c in columns)
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


SWEEP_DESCRIPTION = (
    "at-most-once: expired claims become unknown; at-least-once: they are released for "
    "another attempt while attempts remain."
)
PURGE_DESCRIPTION = (
    "Delete slots whose cycle (as a point in time) is older than --older-than. A slot whose "
    "cycle can still fire is never deleted."
)


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweep`` (the CLI's and the Django command's)."""
    parser.add_argument(
        "--mode",
        choices=["at-most-once", "at-least-once"],
        default="at-most-once",
        help="the delivery mode of the jobs that use these actions (default: at-most-once)",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="at-least-once: claims a slot may have in all (default: 3)",
    )
    parser.add_argument(
        "--action",
        action="append",
        dest="actions",
        metavar="ACTION",
        help="sweep only this action (repeatable); jobs with other delivery modes may "
        "share the table",
    )
    parser.add_argument(
        "--campaign",
        metavar="ID",
        help="sweep only this campaign's claims (a broadcast's campaign id, its slots' "
        "cycle), so a crashed at-most-once campaign keeps its claims while an "
        "at-least-once one of the same action is swept",
    )


def add_purge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``purge`` (the CLI's and the Django command's)."""
    parser.add_argument(
        "--older-than",
        required=True,
        type=duration_arg,
        metavar="DURATION",
        help=DURATION_HELP,
    )
    parser.add_argument(
        "--opaque-finished-before",
        type=since_arg,
        metavar="WHEN",
        help="also delete the slots whose cycle is an int or a str (a broadcast's campaign "
        f"id), have no live claim and last changed before WHEN: {DURATION_HELP} ago, or "
        "an ISO 8601 time with its zone. Only for such cycles that cannot fire again: a "
        "slot deleted while its cycle can still fire is sent again",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count the slots that would be deleted, and delete nothing",
    )


def _sweep(args: argparse.Namespace) -> int:
    """``notifyonce sweep``: settle the claims whose lease expired."""
    sweep_ledger(_ledger(args), args)
    return EXIT_OK


def sweep_ledger(
    ledger: Ledger, args: argparse.Namespace, say: Callable[[str], object] = print
) -> None:
    """Settle the ledger's expired claims as the ``sweep`` options say, and tell which."""
    mode = DeliveryMode(args.mode.replace("-", "_"))
    result = ledger.sweep(
        mode, max_attempts=args.max_attempts, actions=args.actions, cycle=args.campaign
    )
    say(f"expired leases: {len(result.unknown)} now unknown, {len(result.released)} released")
    for key in result.unknown:
        say(f"  unknown   {key}")
    for key in result.released:
        say(f"  released  {key}")


def _purge(args: argparse.Namespace) -> int:
    """``notifyonce purge``: delete the slots whose cycle ended long ago."""
    purge_ledger(_ledger(args), args)
    return EXIT_OK


def purge_ledger(
    ledger: Ledger, args: argparse.Namespace, say: Callable[[str], object] = print
) -> None:
    """Delete the ledger's slots as the ``purge`` options say, and tell how many."""
    what = f"whose cycle ended more than {format_duration(args.older_than)} ago"
    opaque = args.opaque_finished_before
    if opaque is not None:
        what += f", or whose int or str cycle last changed before {opaque:%Y-%m-%d %H:%M:%S %Z}"
    count = ledger.purge(
        older_than=args.older_than, opaque_finished_before=opaque, dry_run=args.dry_run
    )
    if args.dry_run:
        say(f"would delete {plural(count, 'slot')} {what} (dry run)")
    else:
        say(f"deleted {plural(count, 'slot')} {what}")


def _migrate(args: argparse.Namespace) -> int:
    """``notifyonce migrate``: create or upgrade the ledger table (Alembic)."""
    ledger = _ledger(args)
    before = _revisions(ledger, args.table, args.schema)
    try:
        with ledger.engine.begin() as connection:
            adopted = _upgrade_on(connection, args.table, args.schema, None, args.revision)
    except CommandError as exc:
        raise UsageError(f"migrate: {exc}") from None
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
    options = {"version_table": default_version_table(table), "version_table_schema": schema}
    with ledger.engine.connect() as connection:
        heads = MigrationContext.configure(connection, opts=options).get_current_heads()
    return ", ".join(sorted(heads))


def _list(args: argparse.Namespace) -> int:
    """``notifyonce list``: the slots with a status, newest first."""
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
    """``notifyonce requeue``: put unknown or failed slots back."""
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


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": _check,
    "stats": _stats,
    "sweep": _sweep,
    "purge": _purge,
    "migrate": _migrate,
    "list": _list,
    "requeue": _requeue,
}
