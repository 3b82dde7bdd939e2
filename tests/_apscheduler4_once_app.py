"""A scheduler process of tests/test_queues_apscheduler.py for APScheduler 4 (run as a
script from the site directory the test installs it into, killed at will): the job of
_apscheduler_once_app, every second, under a scheduler of its own (each process has its
own memory data store, as two replicas that share nothing); ``once_job`` reads the run's
scheduled fire time from APScheduler 4's ``current_job``."""

from __future__ import annotations

from apscheduler import Scheduler
from apscheduler.triggers.cron import CronTrigger

from _apscheduler_once_app import effect

if __name__ == "__main__":
    with Scheduler() as scheduler:
        # runs waiting for a held slot must not hold back the next second's
        task = scheduler.configure_task(effect, max_running_jobs=20, misfire_grace_time=1)
        trigger = CronTrigger(second="*", timezone="UTC")
        scheduler.add_schedule(task.id, trigger, id="effect")
        scheduler.run_until_stopped()
