"""The rate stores: the turn rule, atomic turns under concurrency, shared flood waits,
failing closed, the paid lane and per-bot budgets."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    Message,
    Notification,
    Notifier,
    TransientSendError,
    ValidationError,
)
from notifyonce._senders.rate.stores import ScopeState, decide_flood, turn_from
from notifyonce.ratelimit import (
    DEFAULT_LOCK_TIMEOUT,
    MemoryRateStore,
    RateLimit,
    RateStore,
    RateStoreUnavailableError,
    RedisRateStore,
    SQLRateStore,
    Turn,
    TurnRequest,
    bot_key,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

from ._databases import Backend, drop_table, make_backend, redis_url
from ._fakes import FakeClock
from .conftest import ASYNC_BACKENDS

SLOW_BOT = RateLimit(bot_per_second=1.0, jitter_allowance=0.0)


def stopwatch() -> Callable[[], float]:
    """Seconds since this call, read when called: what a lower bound on a wait takes off."""
    started = time.monotonic()
    return lambda: time.monotonic() - started


def request(chat: str, limit: RateLimit = SLOW_BOT, bot: str = "1", **kw: Any) -> TurnRequest:
    return TurnRequest(bot=bot, chat=chat, lane=kw.get("lane", "bot"), limit=limit, max_wait=1e6)


# -- the rule ---------------------------------------------------------------------------

arrivals = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=0.2, allow_nan=False),
        st.sampled_from(["1", "2", "3", "-100", "@news", *(str(n) for n in range(10, 40))]),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(arrivals)
def test_turn_rule_keeps_every_spacing(sends: list[tuple[float, str]]) -> None:
    """Whatever the arrivals, bot starts are a bot interval apart and each chat's starts a
    chat interval apart; every send starts no earlier than it arrived."""
    limit = RateLimit()
    bot, lane_rows, chats = ScopeState(), None, {}  # lane is the bot row
    now = 0.0
    starts: list[tuple[float, str]] = []
    for gap, chat in sends:
        now += gap
        asked = now
        while True:
            row = chats.setdefault(chat, ScopeState())
            turn = turn_from(asked, bot, lane_rows or bot, row, request(chat, limit))
            if turn.booked:
                starts.append((asked + turn.wait, chat))
                break
            asked += turn.wait
        assert starts[-1][0] >= now
    times = sorted(t for t, _ in starts)
    assert all(b - a >= limit.bot_interval - 1e-9 for a, b in itertools.pairwise(times))
    for chat in {c for _, c in starts}:
        own = sorted(t for t, c in starts if c == chat)
        gap = limit.chat_interval(chat)
        assert all(b - a >= gap - 1e-9 for a, b in itertools.pairwise(own))


def test_second_chat_flooding_makes_the_flood_bot_wide() -> None:
    """One chat's 429 holds only that chat; a second chat's 429 during it holds the bot."""
    bot, seven, eight, nine = ScopeState(), ScopeState(), ScopeState(), ScopeState()
    decide_flood(0.0, bot, "7", seven, 5.0)
    assert (5.0, 0.0) == (seven.flood_until, bot.flood_until)
    decide_flood(1.0, bot, "8", eight, 2.0)
    assert 5.0 == bot.flood_until
    turn = turn_from(1.0, bot, bot, nine, request("9"))
    assert (False, 4.0) == (turn.booked, turn.wait)


# -- every store ------------------------------------------------------------------------


@pytest.fixture(params=[*ASYNC_BACKENDS, pytest.param("redis", id="redis")])
async def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RateStore]:
    """Each shared store: SQLRateStore on every database, and RedisRateStore."""
    if request.param == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(redis_url())
        prefix = f"nfo_t_{uuid.uuid4().hex[:12]}:"
        yield RedisRateStore(client, prefix=prefix)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        return
    backend = make_backend(request.param, tmp_path)
    options = {} if backend.dialect == "sqlite" else {"pool_size": 20, "max_overflow": 20}
    engine = create_async_engine(backend.async_url, **options)
    table = backend.unique_table()
    # Thirty turns asked at once queue on the bot's row: with both cores busy (the suite
    # runs in parallel) the last one waited over the default 2 s. What these tests check
    # is the calendar, not the lock timeout (its own tests below set one).
    store = SQLRateStore(engine, table_name=table, lock_timeout=30.0)
    await store.create_schema()
    yield store
    await engine.dispose()
    # In a thread: a test that failed may leave turns running on this event loop, in
    # transactions that hold the table until the loop lets them finish.
    await asyncio.to_thread(drop_table, backend, table)


async def test_concurrent_turns_never_share_a_start(shared_store: RateStore) -> None:
    """Thirty turns asked at once on 1 msg/s: thirty distinct starts one second apart."""
    turns = await asyncio.gather(*(shared_store.take_turn(request(str(n + 1))) for n in range(30)))
    assert all(turn.booked for turn in turns)
    starts = sorted(turn.at for turn in turns if turn.at is not None)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert 29 == len(gaps)
    assert [1.0] * 29 == pytest.approx(gaps)


async def test_store_paces_a_chat_and_holds_its_flood_wait(shared_store: RateStore) -> None:
    """A chat's second turn waits its interval without booking; a 429 holds the chat, and a
    second chat's 429 holds the whole bot. (A wait is what is left of the interval: each
    lower bound takes off the time the calls took, so a slow machine keeps it.)"""
    limit = RateLimit()
    took = stopwatch()
    first = await shared_store.take_turn(request("7", limit))
    again = await shared_store.take_turn(request("7", limit))
    assert (True, False, None) == (first.booked, again.booked, again.flood)
    assert 1.0 - took() <= again.wait <= 1.03
    took = stopwatch()
    await shared_store.flood_wait("1", "8", 3.0)
    held = await shared_store.take_turn(request("8", limit))
    other = await shared_store.take_turn(request("9", limit))
    assert (False, True, "chat") == (held.booked, other.booked, held.flood)
    assert 3.0 - took() <= held.wait <= 3.0
    await shared_store.flood_wait("1", "10", 1.0)
    bot_wide = await shared_store.take_turn(request("11", limit))
    assert (False, "bot") == (bot_wide.booked, bot_wide.flood)
    assert 3.0 - took() <= bot_wide.wait <= 3.0


async def test_each_bot_has_its_own_budget(shared_store: RateStore) -> None:
    """Two bots on one store: the second bot's first turn does not wait for the first's."""
    took = stopwatch()
    await shared_store.take_turn(request("5", bot="111"))
    second_of_first = await shared_store.take_turn(request("6", bot="111"))
    first_of_other = await shared_store.take_turn(request("6", bot="222"))
    assert second_of_first.wait >= 1.0 - took()
    assert 0.0 == first_of_other.wait


async def test_beyond_max_wait_nothing_is_booked(shared_store: RateStore) -> None:
    """A start further away than max_wait is reported and left for the next caller."""
    await shared_store.take_turn(request("5"))
    took = stopwatch()
    refused = await shared_store.take_turn(
        TurnRequest(bot="1", chat="6", lane="bot", limit=SLOW_BOT, max_wait=0.5)
    )
    taken = await shared_store.take_turn(request("6"))
    assert (False, True) == (refused.booked, taken.booked)
    assert 0.5 < refused.wait
    # The same start, seen later: the waits differ by at most the time the calls took.
    assert refused.wait - took() - 0.001 <= taken.wait <= refused.wait + 0.001


async def test_a_turn_given_back_frees_its_start_and_its_chat(shared_store: RateStore) -> None:
    """A turn no send used, given back: the next turn of its chat takes the same start at
    once, instead of waiting for the chat's next second."""
    first = await shared_store.take_turn(request("5"))
    await shared_store.give_back(first)
    again = await shared_store.take_turn(request("5"))
    assert (True, True) == (first.booked, again.booked)
    assert again.wait < 0.5


async def test_a_turn_given_back_after_a_later_one_keeps_the_later_start(
    shared_store: RateStore,
) -> None:
    """Compare-and-set: once a later turn was booked, giving back an earlier one frees its
    chat but leaves the bot's next start where the later turn put it."""
    took = stopwatch()
    first = await shared_store.take_turn(request("5"))
    second = await shared_store.take_turn(request("6"))
    await shared_store.give_back(first)
    third = await shared_store.take_turn(request("7"))
    fourth = await shared_store.take_turn(request("5"))
    assert all(turn.booked for turn in (first, second, third, fourth))
    waits = [second.wait, third.wait, fourth.wait]
    # 1, 2 and 3 s after the first start, less the time the calls took since.
    late = took()
    assert [] == [w for n, w in enumerate(waits, 1) if not n - late - 0.01 <= w <= n + 0.01]


async def test_a_turn_is_booked_ready_in_ahead(shared_store: RateStore) -> None:
    """A request that cannot leave for ready_in seconds gets its start no earlier."""
    ahead = TurnRequest(bot="1", chat="5", lane="bot", limit=SLOW_BOT, max_wait=1e6, ready_in=0.5)
    took = stopwatch()
    turn = await shared_store.take_turn(ahead)
    assert turn.booked
    assert 0.5 - took() <= turn.wait <= 0.5


# -- the sender on a store ---------------------------------------------------------------

OK = {"ok": True, "result": {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}}}


def recording_client(bodies: list[dict[str, Any]]) -> httpx.AsyncClient:
    def handler(req: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(req.content))
        return httpx.Response(200, json=OK)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("store", ["sql", "redis"])
async def test_unreachable_store_fails_closed(store: str) -> None:
    """When the store does not answer, the send raises RateStoreUnavailableError (transient)
    and nothing reaches Telegram."""
    if store == "sql":
        rate_store: RateStore = SQLRateStore(
            create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
        )
    else:
        import redis.asyncio

        rate_store = RedisRateStore(redis.asyncio.Redis(host="127.0.0.1", port=9))
    bodies: list[dict[str, Any]] = []
    client = recording_client(bodies)
    async with client, TelegramSender("1:x", client=client, rate_store=rate_store) as sender:
        with pytest.raises(RateStoreUnavailableError) as info:
            await sender.send("42", Message("x"))
    assert isinstance(info.value, TransientSendError)
    assert [] == bodies


async def test_paid_lane_is_opt_in_and_paced_by_its_own_cap() -> None:
    """Only a sender made with allow_paid_broadcast sets the flag, and it is paced at the
    paid cap (100 sends: 0.1 s at 1,000/s) instead of 30/s."""
    clock = FakeClock()
    bodies: list[dict[str, Any]] = []
    client = recording_client(bodies)
    options: dict[str, Any] = {"client": client, "clock": clock, "sleep": clock.sleep}
    async with client:
        async with TelegramSender("1:x", allow_paid_broadcast=True, **options) as paid:
            for n in range(100):
                await paid.send(str(n + 1), Message("x"))
        assert 0.1 < clock.now < 0.11
        async with TelegramSender("2:y", **options) as plain:
            await plain.send("1", Message("x"))
    assert [True] * 100 + [None] == [b.get("allow_paid_broadcast") for b in bodies]


def test_bot_key_is_the_numeric_id_and_never_the_token() -> None:
    """The budget key is the token's bot id; a token without one is digested, not stored."""
    assert "123456" == bot_key("123456:AAE-secret")
    odd = bot_key("not-a-telegram-token")
    assert odd.startswith("h")
    assert "token" not in odd


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"rate_store": object()}, "rate_store"),
        ({"rate_store": MemoryRateStore(), "rate_limit": None}, "rate_store"),
        ({"allow_paid_broadcast": "yes"}, "allow_paid_broadcast"),
    ],
)
def test_bad_rate_options_name_the_field(options: dict[str, Any], field: str) -> None:
    """A wrong rate_store or allow_paid_broadcast is refused, naming the option."""
    with pytest.raises(ValidationError) as info:
        TelegramSender("1:x", **options)
    assert field == info.value.field


def test_memory_store_keeps_todays_calendar() -> None:
    """The default store is the in-process calendar: 30 sends at once start 1.03 / 30 apart."""
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    waits = [asyncio.run(store.take_turn(request(str(n + 1), RateLimit()))).wait for n in range(3)]
    assert [0.0, 1.03 / 30, 2 * 1.03 / 30] == pytest.approx(waits)
    assert math.isclose(RateLimit().bot_interval, 1.03 / 30)


async def test_purge_deletes_only_idle_rows(shared_store: RateStore) -> None:
    """purge() deletes rows whose times have all passed and keeps the bot's pending start."""
    if not isinstance(shared_store, SQLRateStore):
        pytest.skip("Redis keys expire by themselves")
    unpaced_chats = RateLimit(bot_per_second=1.0, private_chat_per_second=None)
    took = stopwatch()
    await shared_store.take_turn(request("5", unpaced_chats))
    assert 1 == await shared_store.purge(idle=0.0)  # the chat's row; the bot's start is ahead
    second = await shared_store.take_turn(request("6", unpaced_chats))
    assert second.wait >= 1.0 - took()


# -- a lock held by another session ------------------------------------------------------

# A turn that waited out a held lock ends far sooner than this: it only guards the test
# run against the old behaviour, a wait for ever.
LOCK_GUARD = 30.0


@contextlib.asynccontextmanager
async def row_held(engine: AsyncEngine, table: str, scope: str) -> AsyncIterator[None]:
    """Another session updates ``scope``'s row and keeps its transaction open (on SQLite
    that holds the database's write lock)."""
    async with engine.connect() as holder:
        await holder.execute(
            sa.text(f"UPDATE {table} SET tat = tat WHERE scope = :scope"), {"scope": scope}
        )
        try:
            yield
        finally:
            await holder.rollback()


@pytest.fixture(params=ASYNC_BACKENDS)
async def sql_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """(backend, engine) on each database, for a store and a session that holds its rows."""
    backend = make_backend(request.param, tmp_path)
    engine = create_async_engine(backend.async_url)
    yield backend, engine
    await engine.dispose()


async def test_a_row_held_by_another_session_fails_the_turn_closed(sql_engine: Any) -> None:
    """While another session holds the bot's row, a turn gives up after lock_timeout
    (busy_timeout on SQLite) with RateStoreUnavailableError naming the store and the wait;
    once the row is free, turns are booked again."""
    backend, engine = sql_engine
    table = backend.unique_table()
    store = SQLRateStore(engine, table_name=table, lock_timeout=0.3, busy_timeout=0.3)
    try:
        await store.create_schema()
        await store.take_turn(request("5"))
        async with row_held(engine, table, "b:1"):
            with pytest.raises(RateStoreUnavailableError) as info:
                await asyncio.wait_for(store.take_turn(request("6")), LOCK_GUARD)
        after = await store.take_turn(request("6"))
    finally:
        drop_table(backend, table)
    option = "busy_timeout" if backend.dialect == "sqlite" else "lock_timeout"
    assert f"{store!r} waited {option} (0.3 s)" in str(info.value)
    assert after.booked


class CountingStore(SQLRateStore):
    """An SQLRateStore that counts the turns asked of the database."""

    turns = 0

    async def take_turn(self, request: TurnRequest) -> Turn:
        self.turns += 1
        return await super().take_turn(request)


async def test_a_held_rate_row_stops_send_many_with_nothing_claimed_or_sent(
    ledger: AsyncLedger, async_backend: Backend, bot_api_server: BotAPIServer, tmp_path: Path
) -> None:
    """With the default lock_timeout, a rate store whose bot row another session holds
    stops send_many with RateStoreUnavailableError after one wait: the sends queued behind
    the first fail with it instead of waiting again. Nothing is claimed, nothing reaches
    Telegram, and the error names the store and the wait. (The store is on the ledger's
    database; on SQLite in a file of its own, with a busy_timeout of 2 s, since a session
    holding a SQLite row holds the whole file, the ledger's too.)"""
    if async_backend.dialect == "sqlite":
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'rate.sqlite3'}")
        wait = "busy_timeout"
    else:
        engine = ledger.engine
        wait = "lock_timeout"
    table = async_backend.unique_table()
    store = CountingStore(engine, table_name=table, busy_timeout=DEFAULT_LOCK_TIMEOUT)
    items = [Notification(chat, "c1", Message("x")) for chat in (1, 2, 3)]
    try:
        await store.create_schema()
        await store.take_turn(request("1", bot="424242"))
        async with (
            TelegramSender(
                "424242:LOCKED-secret", base_url=bot_api_server.url, rate_store=store
            ) as sender,
            row_held(engine, table, "b:424242"),
        ):
            run = Notifier(ledger, sender, concurrency=3).send_many("remind", items)
            store.turns = 0
            with pytest.raises(RateStoreUnavailableError) as info:
                await asyncio.wait_for(run, LOCK_GUARD)
        async with ledger.engine.connect() as conn:
            rows = (await conn.execute(sa.select(ledger.table.c.status))).scalars().all()
    finally:
        if engine is ledger.engine:
            drop_table(async_backend, table)
        else:
            await engine.dispose()
    assert f"waited {wait} ({DEFAULT_LOCK_TIMEOUT:g} s)" in str(info.value)
    assert 1 == store.turns
    assert [] == bot_api_server.requests
    assert [] == rows


@pytest.mark.mariadb
async def test_a_turn_gives_a_mysql_session_its_own_lock_wait_back(tmp_path: Path) -> None:
    """On MySQL the turn's lock wait is the session's for the turn only: the connection
    goes back to the pool (and to the ledger) with the server's own setting."""
    backend = make_backend("mariadb", tmp_path)
    engine = create_async_engine(backend.async_url, pool_size=1, max_overflow=0)
    table = backend.unique_table()
    store = SQLRateStore(engine, table_name=table, lock_timeout=1.0)
    try:
        await store.create_schema()
        await store.take_turn(request("5"))
        wait = "innodb_lock_wait_timeout"
        query = sa.text(f"SELECT @@SESSION.{wait}, @@GLOBAL.{wait}")
        async with engine.connect() as conn:
            session, server = (await conn.execute(query)).one()
    finally:
        await engine.dispose()
        drop_table(backend, table)
    assert server == session


@pytest.mark.parametrize("field", ["lock_timeout", "busy_timeout"])
@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, "2", True])
def test_a_bad_lock_timeout_names_the_field(field: str, value: object) -> None:
    """lock_timeout and busy_timeout are positive finite numbers of seconds (lock_timeout
    may be None: no bound)."""
    engine = create_async_engine("sqlite+aiosqlite://")
    with pytest.raises(ValidationError) as info:
        SQLRateStore(engine, **{field: value})  # type: ignore[arg-type]
    assert field == info.value.field
    assert SQLRateStore(engine, lock_timeout=None).lock_timeout is None
