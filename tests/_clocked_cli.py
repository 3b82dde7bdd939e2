"""``notifyonce`` (run as a script) with its ledger on a wall clock the test sets.

For the crash test of a local-time campaign: the command line as users run it, except that
the ledger's clock (the campaign's "now") is read from the file named by
``NOTIFYONCE_TEST_CLOCK`` (an ISO time the test rewrites), so a day of local hours passes in
seconds and a process killed and started again reads the same clock. Each new time read is
written to ``<file>.seen``, so the test knows the process has seen it.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path


class FileClock:
    """The time written in ``path``; each new one noted in ``<path>.seen``."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.seen = Path(f"{path}.seen")
        self.last = ""

    def __call__(self) -> dt.datetime:
        text = self.path.read_text(encoding="utf-8").strip()
        if text != self.last:
            self.last = text
            written = Path(f"{self.seen}.tmp")
            written.write_text(text, encoding="utf-8")
            os.replace(written, self.seen)
        return dt.datetime.fromisoformat(text)


def run() -> int:
    import notifyonce._cli.broadcast as command
    from notifyonce._cli.parser import main
    from notifyonce._ledger.ledger import AsyncLedger

    clock = FileClock(os.environ["NOTIFYONCE_TEST_CLOCK"])

    class ClockedLedger(AsyncLedger):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, clock=clock, **kwargs)  # type: ignore[arg-type]

    command.AsyncLedger = ClockedLedger  # type: ignore[misc]
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
