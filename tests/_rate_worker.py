"""A worker process for the shared rate-limit tests: sends its messages through one store.

Run as a script with a JSON config; prints one JSON line with what it sent and what failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from notifyonce import Message, SendError
from notifyonce.ratelimit import RateStore
from notifyonce.telegram import TelegramSender

TOKEN = "424242:shared-limit-secret"


async def open_store(config: dict[str, Any]) -> tuple[RateStore, Any]:
    """The store named in the config and what to close afterwards."""
    if config["store"] == "redis":
        import redis.asyncio

        from notifyonce.ratelimit import RedisRateStore

        client = redis.asyncio.Redis.from_url(config["url"])
        return RedisRateStore(client, prefix=config["prefix"]), client
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.ratelimit import SQLRateStore

    engine = create_async_engine(config["url"])
    return SQLRateStore(engine, table_name=config["table"]), engine


async def main(config: dict[str, Any]) -> dict[str, Any]:
    store, resource = await open_store(config)
    worker = int(config["worker"])
    chats = config.get("chats") or [str(worker * 10_000 + n + 1) for n in range(config["count"])]
    gate = asyncio.Semaphore(int(config.get("concurrency", 16)))
    sent: list[str] = []
    errors: list[str] = []

    async def one(sender: TelegramSender, n: int, chat: str) -> None:
        async with gate:
            try:
                await sender.send(chat, Message(f"w{worker}-m{n}"))
                sent.append(f"w{worker}-m{n}")
            except SendError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    try:
        async with TelegramSender(
            TOKEN, base_url=config["server"], rate_store=store, budget=float(config["budget"])
        ) as sender:
            # Warm the connection pool and the store before the common start.
            await asyncio.sleep(max(float(config["start_at"]) - time.time(), 0.0))
            await asyncio.gather(*(one(sender, n, chat) for n, chat in enumerate(chats)))
    finally:
        if config["store"] == "redis":
            await resource.aclose()
        else:
            await resource.dispose()
    return {"sent": sent, "errors": errors}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
