"""A small tour of the claim ledger on a SQLite file.

Run it with ``make demo`` (or ``python examples/claim_demo.py``). It shows:

1. claiming slots before sending, and marking them sent;
2. a "restart": a fresh ledger object on the same file never wins those slots again
   (the bug of an in-memory "already sent" set);
3. a race: several workers claim the same slots at the same moment; exactly one wins each.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import tempfile
from collections import Counter
from pathlib import Path

from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import AsyncLedger

UTC = dt.timezone.utc


async def main(path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    period_end = dt.datetime.now(UTC).replace(microsecond=0) + dt.timedelta(hours=6)
    users = [101, 102, 103]
    try:
        ledger = AsyncLedger(engine)
        await ledger.create_schema()

        print("1. Claim before sending, then mark sent")
        for user in users:
            claim = await ledger.claim_slot("trial_6h", user, period_end)
            assert claim is not None
            # ... the message would be sent here, after the claim was committed ...
            await ledger.mark_sent(claim, message_id=f"msg-{user}")
            print(f"   user {user}: claimed (attempt {claim.attempt}), sent")

        print("2. Restart: a fresh ledger object on the same database")
        restarted = AsyncLedger(engine)
        again = [await restarted.claim_slot("trial_6h", user, period_end) for user in users]
        print(f"   slots won again: {sum(c is not None for c in again)} of {len(users)}")
        renewed = period_end + dt.timedelta(days=30)
        fresh = await restarted.claim_slot("trial_6h", users[0], renewed)
        print(f"   user {users[0]} renewed (new cycle): won again = {fresh is not None}")
        if fresh is not None:
            await restarted.mark_sent(fresh)

        print("3. Race: 8 workers claim the same 5 slots at once")
        slots = [(user, period_end) for user in range(200, 205)]
        start = asyncio.Event()

        async def worker(number: int) -> list[str]:
            own = AsyncLedger(engine)  # each worker as its own process would build it
            await start.wait()
            won = await own.claim_many("trial_3h", slots)
            return [f"w{number}:{c.key.subject}" for c in won]

        tasks = [asyncio.ensure_future(worker(n)) for n in range(8)]
        await asyncio.sleep(0.01)  # every worker is waiting at the start line
        start.set()
        results = await asyncio.gather(*tasks)
        winners = Counter(entry.split(":")[1] for won in results for entry in won)
        print(f"   winners per slot: {dict(sorted(winners.items()))}")
        print(f"   exactly one winner each: {set(winners.values()) == {1}}")

        stats = await ledger.stats()
        counts = {f"{a}/{s.value}": n for (a, s), n in sorted(stats.counts.items())}
        print(f"Ledger now holds: {counts}")
    finally:
        await engine.dispose()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "demo.sqlite3"
        print(f"notifyonce claim demo on {database.name} (SQLite)\n")
        asyncio.run(main(database))
