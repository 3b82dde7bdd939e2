"""Telegram's send limits, kept in memory or shared by every worker through a store.

One process needs nothing: a sender keeps its limits in memory. Several processes or hosts
sending for one bot share a store, and each send takes its turn from it::

    from notifyonce.ratelimit import SQLRateStore
    store = SQLRateStore(async_engine)      # or RedisRateStore(redis.asyncio.Redis(...))
    await store.create_schema()             # or the shipped Alembic migration
    async with TelegramSender(token, rate_store=store) as sender: ...

Budgets are keyed by the bot's numeric id (from its token), so senders of different bots
never share a budget. When the store cannot be reached, nothing is sent: the send fails
with [`RateStoreUnavailableError`][notifyonce.ratelimit.RateStoreUnavailableError], a
[`TransientSendError`][notifyonce.TransientSendError].

Examples:
    >>> from notifyonce.ratelimit import MemoryRateStore, RateLimit, RateStore
    >>> isinstance(MemoryRateStore(), RateStore)
    True
"""

from __future__ import annotations

from notifyonce._errors import RateStoreUnavailableError
from notifyonce._senders.rate.redis import RedisRateStore
from notifyonce._senders.rate.sql import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_RATE_TABLE_NAME,
    SQLRateStore,
)
from notifyonce._senders.rate.stores import (
    MemoryRateStore,
    RateStore,
    Turn,
    TurnRequest,
    bot_key,
)
from notifyonce._senders.telegram.ratelimit import RateLimit

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_RATE_TABLE_NAME",
    "MemoryRateStore",
    "RateLimit",
    "RateStore",
    "RateStoreUnavailableError",
    "RedisRateStore",
    "SQLRateStore",
    "Turn",
    "TurnRequest",
    "bot_key",
]
