"""``python manage.py notifyonce_purge``: ``notifyonce purge`` on the ledger of the
Django database that ``settings.NOTIFYONCE`` names."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from notifyonce._cli.ledger import PURGE_DESCRIPTION, add_purge_arguments, purge_ledger
from notifyonce.contrib.django.management._ledger import run_on_ledger


class Command(BaseCommand):
    help = "Delete the ledger's slots whose cycle ended long ago. " + PURGE_DESCRIPTION

    def add_arguments(self, parser: CommandParser) -> None:
        add_purge_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run_on_ledger(purge_ledger, options, self.stdout.write)
