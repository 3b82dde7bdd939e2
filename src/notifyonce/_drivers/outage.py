"""A run waits out its database going away instead of ending at the first failure.

A managed PostgreSQL fails over, MariaDB is restarted for maintenance, a pooler drops
its connections: for a few seconds every statement of a run fails with
`LedgerUnavailableError`. Ending the run there leaves most of a campaign for somebody to
start again; going on blindly would hand dead connections to claims. So the first
statement that finds the database away opens an outage, which the run's other
statements join: sends already claimed finish (they need no database), their outcomes
wait in memory (the recorder's backlog bounds them, and a full backlog stops new sends),
and nothing new is claimed. One task probes the database every half second (a cut
connection it meets makes SQLAlchemy renew the whole pool); when it answers, the
connections the run kept for itself are dropped and the statements run again. A
database away longer than the run's patience ends the run as the first failure did
before: gently, with the sends under way settled by the sweep.

The statement that failed may still have committed before its connection was cut: its
claims are released by their tokens before they are made again, and an outcome whose
write is run again is compared with its row (see `AsyncLedger._rerun`).

What the operator reads: one line when the database goes away, one when it is back (with
how long it was away), and at the end of the run how many outcomes waited meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from notifyonce._drivers.errors import database_detail
from notifyonce._errors import LedgerUnavailableError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Outage"]

logger = logging.getLogger("notifyonce.notifier")

#: Seconds between two probes of a database that is away.
PROBE_EVERY = 0.5


class Outage:
    """The database's absences during one run, and the waiting for its return.

    ``patience`` is how many seconds one absence may last (0: the run does not wait).
    ``epoch`` counts the returns: a statement that started in an earlier epoch and failed
    is run again after waiting (see `AsyncLedger._rerun`).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        patience: float,
        on_back: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.engine = engine
        self.patience = patience
        # What else holds connections that were cut (a run's claim lanes): let them go.
        self.on_back = on_back
        self.epoch = 0
        self.waited = 0.0  # seconds the run spent waiting, over all absences
        self.absences = 0
        self.kept = 0  # outcomes answered while it was away, written once it was back
        # Set once the database answered in this run: one that never did is not away but
        # misconfigured (a wrong URL, a missing table), and the run ends at once.
        self.armed = False
        self._back: asyncio.Future[None] | None = None

    @property
    def away(self) -> bool:
        """The database is away right now (a probe is waiting for it)."""
        return self._back is not None and not self._back.done()

    async def wait(self, exc: LedgerUnavailableError) -> None:
        """Return once the database answers again; raise ``exc`` (or why waiting ended)
        when it stayed away past the patience."""
        if self.patience <= 0 or not self.armed:
            raise exc
        if self._back is None or self._back.done():
            if self._back is not None and self._back.exception() is not None:
                raise exc  # gave up already: the run is ending
            self._back = asyncio.ensure_future(self._probe(exc))
        await asyncio.shield(self._back)

    def persisting(
        self, exc: LedgerUnavailableError, since: float
    ) -> LedgerUnavailableError | None:
        """The error that ends a statement failing since ``since`` (``time.monotonic()``)
        although its database answers each probe, once that lasted past the patience;
        None while it may still be a database coming back. Without this bound a statement
        that fails for a reason of its own would be run again for ever."""
        if time.monotonic() - since <= self.patience:
            return None
        error = LedgerUnavailableError(
            f"{exc}; the database answers, but this statement failed each time it ran "
            f"again for {_seconds(self.patience)}, the run's patience"
        )
        error.__cause__ = exc
        return error

    async def _probe(self, exc: LedgerUnavailableError) -> None:
        self.absences += 1
        started = time.monotonic()
        logger.warning(
            "the database is away (%s): sends paused, waiting up to %s for it to come back",
            _cause(exc),
            _seconds(self.patience),
        )
        last: BaseException = exc
        while time.monotonic() - started < self.patience:
            await asyncio.sleep(PROBE_EVERY)
            try:
                await self._probe_once()
            except Exception as again:
                last = again
                continue
            if self.on_back is not None:
                await self.on_back()
            away = time.monotonic() - started
            self.waited += away
            self.epoch += 1
            logger.warning("the database is back after %s: sending again", _seconds(away))
            return
        self.waited += time.monotonic() - started
        raise LedgerUnavailableError(
            f"database unavailable for {_seconds(self.patience)}, the run's patience "
            f"({_cause(last)})"
        ) from last

    async def _probe_once(self) -> None:
        """Raise unless the database answers ``SELECT 1``.

        Through SQLAlchemy's connection, so that a cut connection taken from the pool
        invalidates the pool (every connection made before is made again when next
        checked out), as SQLAlchemy does on any disconnect it sees.
        """
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    def told(self) -> str | None:
        """What the run says of its outages at its end (None: there were none)."""
        if not self.absences:
            return None
        times = "once" if self.absences == 1 else f"{self.absences} times"
        return (
            f"the database was away {times} ({_seconds(self.waited)} in all); "
            f"{self.kept:,} outcomes answered meanwhile were kept and written when it was back"
        )

    async def close(self) -> None:
        """Stop probing (the run ended while the database was away)."""
        back, self._back = self._back, None
        if back is not None and not back.done():
            back.cancel()
            with contextlib.suppress(BaseException):
                await back


def _cause(exc: BaseException) -> str:
    """The driver's words for why the database is away (never a statement's values)."""
    cause = exc.__cause__ if isinstance(exc, LedgerUnavailableError) else exc
    return str(exc) if cause is None else database_detail(cause)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
