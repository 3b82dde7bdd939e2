"""What the app's management commands share: the ledger of ``settings.NOTIFYONCE`` and
its errors told in one line.

A database the app's migration never ran on fails each statement with "no such table",
which reached ``manage.py`` as three chained tracebacks; here it becomes Django's
``CommandError`` (one line, exit 1) saying to run ``python manage.py migrate notifyonce``,
as the ledger's own guard says.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError

from notifyonce._cli.common import missing_table
from notifyonce._errors import LedgerError
from notifyonce._ledger.ledger import Ledger
from notifyonce.contrib.django._connect import MIGRATE_COMMAND, database_alias, ledger

__all__ = ["run_on_ledger"]


def run_on_ledger(
    act: Callable[[Ledger, argparse.Namespace, Callable[[str], object]], object],
    options: dict[str, Any],
    say: Callable[[str], object],
) -> None:
    """Run ``act`` (the command line's sweep or purge) on the ledger; a ledger error is a
    one-line ``CommandError``, a missing table's saying to run the app's migration."""
    made = ledger()
    try:
        act(made, argparse.Namespace(**options), say)
    except LedgerError as exc:
        if missing_table(str(exc), [made.table_name]):
            raise CommandError(
                f"the ledger table {made.table_name!r} does not exist in the database "
                f"{database_alias()!r}: run `{MIGRATE_COMMAND}` first"
            ) from None
        raise CommandError(str(exc)) from None
    finally:
        made.engine.dispose()
