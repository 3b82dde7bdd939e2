"""A scheduler process of tests/test_queues_apscheduler.py (run as a script, killed at
will): APScheduler 3 runs one job every second under ``once_job``; its side effect is a
line appended to a file (the outside counter), after a pause so kills land mid-job."""

from __future__ import annotations

import datetime as dt
import os
import random
import time
from pathlib import Path

import sqlalchemy as sa

from _queue_storm import record_effect, worker_ledger_options
from notifyonce import Claim, Ledger
from notifyonce.queues.apscheduler import once_job


def make_ledger() -> Ledger:
    url, options = worker_ledger_options()
    return Ledger(sa.create_engine(url), **options)


@once_job(
    make_ledger,
    "effect",
    period=dt.timedelta(seconds=1),
    mode=os.environ["NFO_MODE"],
    max_attempts=5,
)
def effect(claim: Claim) -> None:
    """The side effect for this run time (its Unix second); while it runs a marker file
    says which process holds a claim, so the test kills a holder."""
    second = int(
        dt.datetime.strptime(claim.key.cycle + "+0000", "%Y-%m-%dT%H:%M:%SZ%z").timestamp()
    )
    marker = Path(os.environ["NFO_COUNTER"]).with_name(f"holding-{os.getpid()}-{second}")
    marker.touch()
    time.sleep(random.uniform(0.1, 0.4))
    record_effect(second, claim.token)
    time.sleep(random.uniform(0.0, 0.2))
    marker.unlink()


if __name__ == "__main__":
    from apscheduler.schedulers.blocking import BlockingScheduler

    scheduler = BlockingScheduler(timezone="UTC")
    scheduler.add_job(effect, "cron", second="*", max_instances=20, misfire_grace_time=1)
    scheduler.start()
