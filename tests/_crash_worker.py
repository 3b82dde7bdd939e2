"""A worker process for the crash and multi-process tests (run as a script, killed at will).

It sends the same notifications as every other worker, through TelegramSender to the test's
local Bot API server, repeating until every slot of the action is settled or its time is up.
Each worker sends as its own bot id (``config["bot_id"]``), so the server can tell whose
request is in flight.

With ``config["album"]`` (a list of photo paths) it is instead one run of an album
broadcast, as ``notifyonce broadcast`` runs a single photo (which has no album option):
the recipients file, file ids kept beside the ledger, the progress in an admin chat; it
exits 1 when chats of the campaign have an unknown outcome, 0 otherwise.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    Album,
    AsyncLedger,
    Broadcast,
    DeliveryMode,
    Message,
    Notification,
    Notifier,
    Photo,
    ProgressMessage,
    SlotStatus,
    pgbouncer_options,
    recipients_from_file,
)
from notifyonce.telegram import RateLimit, SQLFileIdStore, TelegramSender

ACTION = "crash_test"
CYCLE = "cycle-1"
SETTLED = {SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN}


async def main(config: dict[str, Any]) -> int:
    url = str(config["db_url"])
    # Behind PgBouncer in transaction mode (``config["pgbouncer"]``): no named statements.
    engine = create_async_engine(url, **(pgbouncer_options(url) if config.get("pgbouncer") else {}))
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


async def album_broadcast(config: dict[str, Any]) -> int:
    """One run of the album campaign ``config["campaign"]`` of action ``news``."""
    engine = create_async_engine(str(config["db_url"]))
    table = str(config["table"])
    ledger = AsyncLedger(engine, table_name=table, lease=dt.timedelta(seconds=config["lease"]))
    files = SQLFileIdStore(engine, table_name=f"{table}_file_ids")
    sender = TelegramSender(
        str(config["token"]), base_url=str(config["server"]), rate_limit=None, file_store=files
    )
    album = Album([Photo(Path(path)) for path in config["album"]])
    try:
        report = await Broadcast(
            Notifier(ledger, sender, concurrency=int(config["concurrency"])),
            "news",
            str(config["campaign"]),
            Message(str(config["caption"]), media=album),
            recipients_from_file(str(config["recipients"])),
            every=0.2,
            progress_chat=ProgressMessage(sender, int(config["progress_chat"])),
        ).run()
    finally:
        await sender.aclose()
        await engine.dispose()
    print(f"{report.progress.sent} sent, {len(report.unknown)} unknown")
    return 1 if report.unknown else 0


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    run = album_broadcast if "album" in settings else main
    raise SystemExit(asyncio.run(run(settings)))
