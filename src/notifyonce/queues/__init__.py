"""Adapters that put `notifyonce.once` around the tasks of the queues people already run.

Each queue redelivers a task it is not sure ran (a worker killed before it acknowledged,
a visibility timeout, a scheduler restarted): these modules claim the task's slot before
its body, so a redelivered copy finds it done or held and skips. Each lives in its own
module and imports its queue only there (``notifyonce.queues.celery`` needs the
``celery`` extra; ``notifyonce.queues.apscheduler`` needs nothing, it wraps a plain
function), so ``import notifyonce.queues`` needs nothing.
"""

from __future__ import annotations

__all__: list[str] = []
