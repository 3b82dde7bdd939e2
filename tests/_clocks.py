"""The one settable wall clock of the tests: ledgers and notifiers take it as ``clock=``.

(The senders' and limiters' monotonic clock, which moves when the code sleeps, is
``_fakes.FakeClock``.)
"""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class WallClock:
    """An aware UTC clock that only moves when told to."""

    def __init__(self, start: dt.datetime = START) -> None:
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, delta: dt.timedelta | None = None, **kwargs: float) -> None:
        """Move on by ``delta`` or by ``timedelta(**kwargs)``."""
        self.now += (delta or dt.timedelta(0)) + dt.timedelta(**kwargs)
