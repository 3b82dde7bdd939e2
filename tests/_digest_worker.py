"""A digest flusher process for the digest storm (run as a script, killed at will).

It flushes the storm's digest for the end of its simulated day until a flush finds
nothing due, through a sender that appends each delivered digest's event keys to a
journal file (one ``os.write`` of one line per digest: a SIGKILL never leaves half a
line), then exits 0.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import time
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger, Digest, DigestEvent, Message, Notifier, Receipt

ACTION = "storm_digest"


class JournalSender:
    """Delivers by appending the digest's event keys to the journal."""

    def __init__(self, path: str, latency: float) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.latency = latency
        self.count = 0

    async def send(self, recipient: str, message: Message) -> Receipt:
        if self.latency:
            await asyncio.sleep(self.latency)
        line = json.dumps({"to": recipient, "keys": message.text.split(",")}) + "\n"
        os.write(self.fd, line.encode())
        self.count += 1
        return Receipt(recipient=recipient, message_id=self.count)


def render(subject: str, events: list[DigestEvent]) -> Message:
    return Message(",".join(event.key for event in events))


async def main(config: dict[str, Any]) -> int:
    engine = create_async_engine(str(config["db_url"]))
    try:
        ledger = AsyncLedger(
            engine, table_name=str(config["table"]), lease=dt.timedelta(seconds=config["lease"])
        )
        digest = Digest(ledger, ACTION, every=dt.timedelta(hours=1), batch_size=200)
        sender = JournalSender(str(config["journal"]), float(config["latency"]))
        notifier = Notifier(ledger, sender, concurrency=8, sweep_every=dt.timedelta(seconds=1))
        now = dt.datetime.fromisoformat(str(config["now"]))
        deadline = time.monotonic() + float(config["seconds"])
        while time.monotonic() < deadline:
            report = await digest.flush(notifier, render, now=now)
            if report.windows == 0:
                return 0
            if report.sent == 0:
                # What is left is held by a killed flusher until its lease ends and the
                # sweep settles it.
                await asyncio.sleep(0.2)
        return 2
    finally:
        await engine.dispose()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        sys.exit(asyncio.run(main(json.load(file))))
