"""A worker process for the crash and multi-process tests (run as a script, killed at will).

It sends the same notifications as every other worker, through TelegramSender to the test's
local Bot API server, repeating until every slot of the action is settled or its time is up.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncLedger,
    DeliveryMode,
    Message,
    Notification,
    Notifier,
    SlotStatus,
)
from notifyonce.telegram import TelegramSender

ACTION = "crash_test"
CYCLE = "cycle-1"


async def main(config: dict[str, object]) -> int:
    engine = create_async_engine(str(config["db_url"]))
    ledger = AsyncLedger(
        engine,
        table_name=str(config["table"]),
        lease=dt.timedelta(seconds=float(config["lease"])),  # type: ignore[arg-type]
    )
    subjects = int(config["subjects"])  # type: ignore[call-overload]
    items = [Notification(s, CYCLE, Message(f"reminder {s}")) for s in range(1, subjects + 1)]
    deadline = time.monotonic() + float(config["seconds"])  # type: ignore[arg-type]
    sender = TelegramSender(
        "12345:worker-secret", base_url=str(config["server"]), rate_limit=None, budget=2.0
    )
    notifier = Notifier(
        ledger,
        sender,
        mode=DeliveryMode(str(config["mode"])),
        max_attempts=int(config["max_attempts"]),  # type: ignore[call-overload]
        batch_size=8,
        concurrency=8,
        sweep_every=dt.timedelta(seconds=0.2),
    )
    settled = {SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN}
    try:
        while time.monotonic() < deadline:
            await notifier.send_many(ACTION, items)
            stats = await ledger.stats()
            done = sum(n for (a, st), n in stats.counts.items() if a == ACTION and st in settled)
            if done == subjects:
                return 0
            await asyncio.sleep(0.1)
        return 3
    finally:
        await sender.aclose()
        await engine.dispose()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(json.loads(sys.argv[1]))))
