"""``python manage.py notifyonce_sweep``: ``notifyonce sweep`` on the ledger of the
Django database that ``settings.NOTIFYONCE`` names."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from notifyonce._cli.ledger import SWEEP_DESCRIPTION, add_sweep_arguments, sweep_ledger
from notifyonce.contrib.django.management._ledger import run_on_ledger


class Command(BaseCommand):
    help = "Settle the ledger's claims whose lease expired. " + SWEEP_DESCRIPTION

    def add_arguments(self, parser: CommandParser) -> None:
        add_sweep_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run_on_ledger(sweep_ledger, options, self.stdout.write)
