"""A worker process for the shared rate-limit tests: sends its messages through one store.

Run as a script with a JSON config; prints one JSON line with what it sent and what failed.
With ``"ledger"`` in the config (a table name; ``"ledger_url"``, default the store's
database) the messages go through ``Notifier.send_many`` on that ledger, as a deployment's
workers send them (``"claim_delay"``: seconds added to every claim statement), and the
line also counts the rate-limit turns booked and given back.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from notifyonce import Message, SendError
from notifyonce.ratelimit import RateStore, Turn, TurnRequest
from notifyonce.telegram import TelegramSender

TOKEN = "424242:shared-limit-secret"


class CountedStore:
    """A rate store seen through its turns: how many were booked and given back."""

    def __init__(self, store: RateStore) -> None:
        self.store = store
        self.extra_jitter = store.extra_jitter
        self.outage_patience = getattr(store, "outage_patience", 0.0)
        self.booked = 0
        self.given_back = 0

    async def take_turn(self, request: TurnRequest) -> Turn:
        turn = await self.store.take_turn(request)
        self.booked += turn.booked
        return turn

    async def flood_wait(self, bot: str, chat: str, retry_after: float) -> None:
        await self.store.flood_wait(bot, chat, retry_after)

    async def give_back(self, turn: Turn) -> None:
        self.given_back += 1
        await self.store.give_back(turn)


async def open_store(config: dict[str, Any]) -> tuple[RateStore, Any]:
    """The store named in the config and what to close afterwards."""
    if config["store"] == "redis":
        import redis.asyncio

        from notifyonce.ratelimit import RedisRateStore

        client = redis.asyncio.Redis.from_url(config["url"])
        return RedisRateStore(client, prefix=config["prefix"]), client
    if config["store"] == "redis-sentinel":  # the master the sentinels name, whichever
        from redis.asyncio.sentinel import Sentinel

        from notifyonce.ratelimit import RedisRateStore

        sentinel = Sentinel([tuple(address) for address in config["sentinels"]])
        client = sentinel.master_for(config["service"])
        return RedisRateStore(client, prefix=config["prefix"]), client
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.ratelimit import SQLRateStore

    engine = create_async_engine(config["url"])
    return SQLRateStore(engine, table_name=config["table"]), engine


async def send_each(
    sender: TelegramSender, worker: int, chats: list[str], concurrency: int
) -> tuple[list[str], list[str]]:
    """Each message by ``sender.send``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)
    sent: list[str] = []
    errors: list[str] = []

    async def one(n: int, chat: str) -> None:
        async with gate:
            try:
                await sender.send(chat, Message(f"w{worker}-m{n}"))
                sent.append(f"w{worker}-m{n}")
            except SendError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(one(n, chat) for n, chat in enumerate(chats)))
    return sent, errors


async def send_many(
    sender: TelegramSender, config: dict[str, Any], engine: Any, chats: list[str]
) -> tuple[list[str], list[str]]:
    """Every message through one ``Notifier.send_many`` on the configured ledger."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, Notification, Notifier, Outcome

    own = "ledger_url" in config and config["ledger_url"] != config.get("url")
    if own or engine is None:
        engine = create_async_engine(config["ledger_url"])
    try:
        ledger = AsyncLedger(engine, table_name=config["ledger"])
        delay = float(config.get("claim_delay", 0.0))
        if delay:  # every claim statement that much slower, as on a busy database
            claim_keys, write = ledger._claim_keys, ledger._write

            async def slow_claims(*args: Any) -> Any:
                await asyncio.sleep(delay)
                return await claim_keys(*args)

            async def slow_writes(*args: Any) -> Any:  # outcomes with the next claims
                await asyncio.sleep(delay)
                return await write(*args)

            ledger._claim_keys = slow_claims  # type: ignore[method-assign]
            ledger._write = slow_writes  # type: ignore[method-assign]
        items = [Notification(chat, "bench", Message(f"m{n}")) for n, chat in enumerate(chats)]
        report = await Notifier(ledger, sender).send_many("shared_limit", items)
    finally:
        if own:
            await engine.dispose()
    sent = [r.key.subject for r in report[Outcome.SENT]]
    errors = [
        f"{r.outcome.value}: {r.error}" for r in report.results if r.outcome is not Outcome.SENT
    ]
    return sent, errors


async def main(config: dict[str, Any]) -> dict[str, Any]:
    store, resource = await open_store(config)
    counted = CountedStore(store)
    worker = int(config["worker"])
    chats = config.get("chats") or [str(worker * 10_000 + n + 1) for n in range(config["count"])]
    try:
        async with TelegramSender(
            TOKEN, base_url=config["server"], rate_store=counted, budget=float(config["budget"])
        ) as sender:
            # Warm the connection pool and the store before the common start.
            await asyncio.sleep(max(float(config["start_at"]) - time.time(), 0.0))
            if "ledger" in config:
                engine = None if config["store"].startswith("redis") else resource
                sent, errors = await send_many(sender, config, engine, chats)
            else:
                concurrency = int(config.get("concurrency", 16))
                sent, errors = await send_each(sender, worker, chats, concurrency)
    finally:
        if config["store"].startswith("redis"):
            await resource.aclose()
        else:
            await resource.dispose()
    return {
        "sent": sent,
        "errors": errors,
        "turns_booked": counted.booked,
        "turns_given_back": counted.given_back,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
