"""A worker process for the crash and multi-process tests (run as a script, killed at will).

It sends the same notifications as every other worker, through TelegramSender to the test's
local Bot API server, repeating until every slot of the action is settled or its time is up.
Each worker sends as its own bot id (``config["bot_id"]``), so the server can tell whose
request is in flight.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncLedger,
    DeliveryMode,
    Message,
    Notification,
    Notifier,
    SlotStatus,
)
from notifyonce.telegram import RateLimit, TelegramSender

ACTION = "crash_test"
CYCLE = "cycle-1"
SETTLED = {SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN}


async def main(config: dict[str, Any]) -> int:
    engine = create_async_engine(str(config["db_url"]))
    ledger = AsyncLedger(
        engine, table_name=str(config["table"]), lease=dt.timedelta(seconds=config["lease"])
    )
    subjects = int(config["subjects"])
    items = [Notification(s, CYCLE, Message(f"reminder {s}")) for s in range(1, subjects + 1)]
    deadline = time.monotonic() + float(config["seconds"])
    sender = TelegramSender(
        f"{int(config['bot_id'])}:worker-secret",
        base_url=str(config["server"]),
        rate_limit=RateLimit() if config.get("rate_limit") else None,
        budget=2.0,
    )
    options = {k: int(config[k]) for k in ("batch_size", "concurrency") if k in config}
    notifier = Notifier(
        ledger,
        sender,
        mode=DeliveryMode(str(config["mode"])),
        max_attempts=int(config["max_attempts"]),
        sweep_every=dt.timedelta(seconds=float(config.get("sweep_every", 0.2))),
        keep_results=False,
        **options,  # type: ignore[arg-type]
    )
    try:
        while time.monotonic() < deadline:
            await notifier.send_many(ACTION, items)
            stats = await ledger.stats()
            done = sum(n for (a, st), n in stats.counts.items() if a == ACTION and st in SETTLED)
            if done == subjects:
                return 0
            await asyncio.sleep(0.1)
        return 3
    finally:
        await sender.aclose()
        await engine.dispose()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(json.loads(sys.argv[1]))))
