"""A support bot: an operator's reply in a support group is relayed to the client once.

Operators answer clients in the topics of a support group (one topic per client). The bot
long-polls ``getUpdates`` and copies each operator reply to the client's private chat.

- The relay is a notifyonce slot keyed on the update: action ``"relay"``, subject = the
  client's chat, cycle = ``update_id``. Telegram re-delivers every update the bot has not
  confirmed, so after a restart or a re-read the slot says "already relayed" and nothing
  is sent twice.
- A transient network failure does not advance the offset: the batch stops there and is
  read again. The offset is a high-water mark, so the rest of the batch is not confirmed
  either. Replays are capped (``MAX_NETWORK_REPLAYS``); then the offset moves on with an
  ERROR log naming ``chat_id`` and ``message_id`` (never the text), so a person can find
  the reply in the topic and forward it by hand.
- The Notifier runs at-least-once with ``max_attempts = 1 + MAX_NETWORK_REPLAYS``: a send
  whose answer was lost is tried again rather than lost silently (a visible duplicate
  beats a lost reply), and the ledger bounds the attempts across restarts too.
- Notes to the topic ("the client blocked the bot") have their own narrow budget, and
  their failure never decides the update's fate.

    python examples/support_relay/bot.py --simulate     # a scripted run, in-process, in seconds
    python examples/support_relay/bot.py --token 123:ABC --support-chat -1001234567890

In the support group, ``/bind <client chat id>`` inside a topic binds the topic to a
client. ``NOTIFYONCE_BOT_TOKEN`` and ``NOTIFYONCE_DATABASE_URL`` work too.

The bot keeps its state in tables of its own (``notifyonce_relay_topics`` and the ledger
``notifyonce_relay_slots``), so it never touches your application's tables; the
simulation refuses a database where they already exist and drops them when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from notifyonce import (
    AsyncLedger,
    DeliveryMode,
    Message,
    Notifier,
    Outcome,
    PermanentSendError,
    Receipt,
    SendError,
    SlotStatus,
    TransientSendError,
    UncertainSendError,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import OK, FakeSender

logger = logging.getLogger("support_relay")
HERE = Path(__file__).resolve().parent

#: Seconds Telegram holds a getUpdates request open when there is nothing new.
LONG_POLL = 30
#: The read timeout of getUpdates is the long poll plus this margin; connect stays short.
READ_MARGIN = 10.0
CONNECT_TIMEOUT = 5.0
#: Re-reads of one update after transient failures before the offset moves on anyway: a
#: reply that can never be delivered must not block every other client's replies.
MAX_NETWORK_REPLAYS = 3
#: One attempt per read of the update; also the bound on duplicates of an uncertain send.
RELAY_MAX_ATTEMPTS = 1 + MAX_NETWORK_REPLAYS
#: Seconds one relay send may take (its retries included) before the update is replayed.
RELAY_BUDGET = 15.0
#: Seconds for a note to the topic: secondary, so it must not stall the poll loop.
NOTE_BUDGET = 5.0
#: How long a relay claim holds its slot: well above RELAY_BUDGET, short enough that a
#: slot left by a crashed poller is taken over within a minute.
RELAY_LEASE = dt.timedelta(seconds=60)
#: Seconds to wait before re-reading after the n-th replay of an update.
REPLAY_DELAYS = (1.0, 2.0, 4.0)

# Tables of the example's own: pointed at your database, it never touches your tables.
TOPICS_TABLE = "notifyonce_relay_topics"
LEDGER_TABLE = "notifyonce_relay_slots"
# The ledger's create_schema() makes tables beside its own: the recipients (who blocked the
# bot), a digest's events and the frequency caps' seats.
RECIPIENTS_TABLE = f"{LEDGER_TABLE}_recipients"
BESIDE_TABLES = (RECIPIENTS_TABLE, f"{LEDGER_TABLE}_digest_events", f"{LEDGER_TABLE}_cap_seats")


def drop_ledger_tables(conn: sa.Connection) -> None:
    """Drop the ledger's table and the tables beside it, if they are there (their indexes
    go with them)."""
    for name in (LEDGER_TABLE, *BESIDE_TABLES):
        sa.Table(name, sa.MetaData()).drop(conn, checkfirst=True)


metadata = sa.MetaData()
# Which client each topic of the support group belongs to (``/bind`` writes it).
topics_table = sa.Table(
    TOPICS_TABLE,
    metadata,
    sa.Column("thread_id", sa.BigInteger, primary_key=True),
    sa.Column("client_chat_id", sa.BigInteger, nullable=False),
)


class BudgetSender(Protocol):
    """A sender whose sends take a per-call budget (``TelegramSender`` is one)."""

    async def send(
        self, recipient: str, message: Message, *, budget: float | None = None
    ) -> Receipt: ...


class UpdateSource(Protocol):
    """Where updates come from: ``getUpdates`` (confirming everything below ``offset``)."""

    async def get_updates(self, offset: int | None) -> list[dict[str, Any]]: ...


class BotAPIUpdates:
    """A minimal ``getUpdates`` long-poller on its own reused ``httpx.AsyncClient``."""

    def __init__(self, token: str, base_url: str = "https://api.telegram.org") -> None:
        self._url = f"{base_url.rstrip('/')}/bot{token}/getUpdates"
        self._client = httpx.AsyncClient(
            # Split timeouts: only the read waits for the long poll; a scalar 40 s timeout
            # would make a connect to a dead host wait 40 s too.
            timeout=httpx.Timeout(
                connect=CONNECT_TIMEOUT, read=LONG_POLL + READ_MARGIN, write=10.0, pool=5.0
            ),
            # Keep the one connection between polls instead of httpx's 5 s default.
            limits=httpx.Limits(max_connections=2, keepalive_expiry=LONG_POLL + 30.0),
        )

    def __repr__(self) -> str:
        return "BotAPIUpdates(token=<redacted>)"

    async def get_updates(self, offset: int | None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"timeout": LONG_POLL, "allowed_updates": ["message"]}
        if offset is not None:
            params["offset"] = offset
        try:
            response = await self._client.post(self._url, json=params)
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            # str(exc) may carry the URL, and with it the token: keep only the class.
            raise TransientSendError(f"getUpdates: {type(exc).__name__}") from None
        if not body.get("ok"):
            raise TransientSendError("getUpdates refused", code=body.get("error_code"))
        return list(body["result"])

    async def aclose(self) -> None:
        await self._client.aclose()


class Topics:
    """Topic -> client chat, read once at start and written through on ``/bind``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.clients: dict[int, int] = {}

    async def load(self) -> Topics:
        async with self.engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            rows = await conn.execute(sa.select(topics_table))
            self.clients = {row.thread_id: row.client_chat_id for row in rows}
        return self

    async def bind(self, thread: int, client: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(topics_table.delete().where(topics_table.c.thread_id == thread))
            await conn.execute(
                topics_table.insert().values(thread_id=thread, client_chat_id=client)
            )
        self.clients[thread] = client


class Relay:
    """Decides one update's fate: True confirms it, False asks for a re-read."""

    def __init__(
        self,
        notifier: Notifier,
        sender: BudgetSender,
        support_chat: str,
        topics: Topics,
        given_up: list[int] | None = None,
    ) -> None:
        self.notifier = notifier
        self.given_up = [] if given_up is None else given_up  # update ids left to a person
        self.sender = sender
        self.support_chat = support_chat
        self.topics = topics

    async def process(self, update: dict[str, Any]) -> bool:
        msg = update.get("message") or {}
        if str(msg.get("chat", {}).get("id")) != self.support_chat or "text" not in msg:
            return True  # not an operator's reply: nothing to relay
        if msg.get("from", {}).get("is_bot"):
            return True
        thread = msg.get("message_thread_id")
        text: str = msg["text"]
        if text.startswith("/bind") and thread is not None:
            arg = text.removeprefix("/bind").strip()
            if arg.lstrip("-").isdigit():
                await self.topics.bind(thread, int(arg))
            else:
                await self.note(thread, "Usage: /bind <client chat id>")
            return True
        client = self.topics.clients.get(thread) if thread is not None else None
        if client is None:
            await self.note(thread, "This topic is not bound to a client: /bind <chat id>.")
            return True
        update_id = update["update_id"]
        outcome = await self.notifier.send_once(
            "relay", client, update_id, Message(text), recipient=str(client)
        )
        if outcome in (Outcome.SENT, Outcome.LEASE_LOST):
            return True
        if outcome is Outcome.RETRY:
            return False  # certainly or possibly not delivered: read the update again
        if outcome is Outcome.FAILED:
            await self.note(thread, "Not delivered: the client blocked the bot or left.")
            return True
        if outcome is Outcome.DUPLICATE:
            record = await self.notifier.ledger.get("relay", client, update_id)
            if record is not None and record.status in (SlotStatus.SENT, SlotStatus.FAILED):
                return True  # settled before a restart or re-read: nothing is sent again
            if record is not None and record.status is SlotStatus.CLAIMED:
                # Held by another poller, or left by one that crashed mid-send: wait out
                # the lease; the next read takes the slot over (at-least-once).
                left = (record.lease_until - self.notifier.ledger.now()).total_seconds()
                await asyncio.sleep(min(max(left, 0.0), RELAY_LEASE.total_seconds()))
                return False
        # UNKNOWN, or the ledger's attempts are used up (they survive restarts).
        self.give_up(update)
        return True

    def give_up(self, update: dict[str, Any]) -> None:
        """Move on from an update, with what a person needs to find it (never the text)."""
        msg = update.get("message") or {}
        logger.error(
            "reply not relayed, forward it by hand: chat_id=%s message_id=%s update_id=%s",
            msg.get("chat", {}).get("id"),
            msg.get("message_id"),
            update.get("update_id"),
        )
        if update.get("update_id") not in self.given_up:
            self.given_up.append(update["update_id"])

    async def note(self, thread: int | None, text: str) -> None:
        """A secondary send to the topic: narrow budget, and its failure changes nothing."""
        options = {} if thread is None else {"message_thread_id": thread}
        try:
            await self.sender.send(
                self.support_chat, Message(text, options=options), budget=NOTE_BUDGET
            )
        except (SendError, RuntimeError) as exc:
            logger.warning("note to topic %s not sent: %s", thread, type(exc).__name__)


class Poller:
    """The poll loop's state: the offset and how often each update was replayed."""

    def __init__(
        self,
        source: UpdateSource,
        relay: Relay,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.source = source
        self.relay = relay
        self.offset: int | None = None
        self.replays: Counter[int] = Counter()
        self._sleep = sleep

    async def poll_once(self) -> int:
        """Read one batch and handle it; return how many updates were confirmed."""
        updates = await self.source.get_updates(self.offset)
        confirmed = 0
        for update in updates:
            update_id = update["update_id"]
            if not await self.relay.process(update):
                self.replays[update_id] += 1
                replay = self.replays[update_id]
                if replay <= MAX_NETWORK_REPLAYS:
                    # Confirming any later update would confirm this one too: stop here,
                    # and give the network a moment before the batch is read again.
                    await self._sleep(REPLAY_DELAYS[min(replay, len(REPLAY_DELAYS)) - 1])
                    break
                self.relay.give_up(update)
            self.replays.pop(update_id, None)
            self.offset = update_id + 1
            confirmed += 1
        return confirmed

    async def run_forever(self) -> None:
        delay = 1.0
        while True:
            try:
                await self.poll_once()
                delay = 1.0
            except (SendError, httpx.HTTPError) as exc:  # getUpdates failed: offset kept
                logger.warning(
                    "getUpdates failed (%s); retrying in %.0f s", type(exc).__name__, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def make_notifier(engine: AsyncEngine, sender: BudgetSender) -> Notifier:
    return Notifier(
        AsyncLedger(engine, table_name=LEDGER_TABLE, lease=RELAY_LEASE),
        sender,
        mode=DeliveryMode.AT_LEAST_ONCE,
        max_attempts=RELAY_MAX_ATTEMPTS,
    )


async def no_wait(seconds: float) -> None:
    """The simulation's sleep: replays happen at once."""


# -- the simulation ------------------------------------------------------------------

SUPPORT = -1001000
CLIENTS = {11: 501, 12: 502, 13: 503, 14: 504, 15: 505}  # topic -> client chat


class FakeUpdates:
    """Telegram's side of getUpdates: keeps every update until an offset confirms it."""

    def __init__(self, updates: list[dict[str, Any]], batch: int, fail_calls: set[int]) -> None:
        self.pending = list(updates)
        self.batch = batch
        self.fail_calls = fail_calls
        self.calls = 0
        self.reads: Counter[int] = Counter()
        self.confirmed_unsettled: list[int] = []  # confirmed while neither delivered nor refused
        self.settled: Callable[[int], bool] = lambda update_id: True

    async def get_updates(self, offset: int | None) -> list[dict[str, Any]]:
        self.calls += 1
        if self.calls in self.fail_calls:
            raise TransientSendError("getUpdates: ConnectError")
        if offset is not None:
            for update in self.pending:
                if update["update_id"] < offset and not self.settled(update["update_id"]):
                    self.confirmed_unsettled.append(update["update_id"])
            self.pending = [u for u in self.pending if u["update_id"] >= offset]
        batch = self.pending[: self.batch]
        self.reads.update(u["update_id"] for u in batch)
        return batch


class SimSender:
    """FakeSender behind TelegramSender's ``send(..., budget=)`` signature."""

    def __init__(self, fake: FakeSender) -> None:
        self.fake = fake
        self.budgets: list[float | None] = []

    async def send(
        self, recipient: str, message: Message, *, budget: float | None = None
    ) -> Receipt:
        self.budgets.append(budget)
        return await self.fake.send(recipient, message)


def scripted_updates() -> list[dict[str, Any]]:
    replies = [(11, "a"), (12, "b"), (13, "c"), (11, "d"), (14, "e"), (12, "f"), (15, "g"),
               (13, "h"), (11, "i"), (14, "j")]  # fmt: skip
    updates: list[dict[str, Any]] = [
        {"update_id": 1000, "message": {"message_id": 1, "chat": {"id": 501}, "text": "help"}}
    ]
    for n, (topic, text) in enumerate(replies, start=1):
        updates.append(
            {
                "update_id": 1000 + n,
                "message": {
                    "message_id": 100 + n,
                    "chat": {"id": SUPPORT},
                    "from": {"id": 7, "is_bot": False},
                    "message_thread_id": topic,
                    "text": f"operator reply {text}",
                },
            }
        )
    return updates


async def simulate(database_url: str) -> int:
    """Run the scripted scenario; print the summary; return 1 on a mismatch."""
    fake = FakeSender()
    network = TransientSendError("ConnectError")
    fake.script("502", [network, OK])  # a network failure: the batch is re-read, then relayed
    fake.fail_next(UncertainSendError("ReadTimeout"), recipient="503", delivered=True)
    fake.fail_next(PermanentSendError("Forbidden: bot was blocked", code=403), recipient="504")
    fake.fail_next(network, recipient=str(SUPPORT))  # the note about the blocked client
    fake.script("505", [network] * (1 + MAX_NETWORK_REPLAYS))  # never reachable: capped
    sender = SimSender(fake)
    updates = scripted_updates()
    texts = {u["update_id"]: u["message"]["text"] for u in updates if u["message"].get("from")}
    source = FakeUpdates(updates, batch=4, fail_calls={2})

    def settled(update_id: int) -> bool:  # delivered, or refused for good by Telegram
        return update_id not in texts or any(
            r.message.text == texts[update_id]
            and (r.delivered or isinstance(r.error, PermanentSendError))
            for r in fake.records
        )

    source.settled = settled
    engine = create_async_engine(database_url)
    async with engine.connect() as conn:
        existing = await conn.run_sync(lambda c: set(sa.inspect(c).get_table_names()))
    taken = sorted(existing & {TOPICS_TABLE, LEDGER_TABLE, *BESIDE_TABLES})
    if taken:
        await engine.dispose()
        print(
            f"error: the database already has {', '.join(taken)}: the simulation creates and "
            "drops its own tables and writes into no other. Drop them or use another database.",
            file=sys.stderr,
        )
        return 2
    await AsyncLedger(engine, table_name=LEDGER_TABLE).create_schema()
    given_up: list[int] = []

    topics = Topics(engine)
    await topics.load()
    for thread, client in CLIENTS.items():
        await topics.bind(thread, client)

    async def start() -> Poller:  # a (re)start: new objects; only the database and Telegram remain
        relay = Relay(
            make_notifier(engine, sender),
            sender,
            str(SUPPORT),
            await Topics(engine).load(),
            given_up,
        )
        return Poller(source, relay, sleep=no_wait)

    poller, restarts, failed_polls = await start(), 0, 0
    for _ in range(50):
        if not source.pending:
            break
        try:
            await poller.poll_once()
        except TransientSendError:
            failed_polls += 1
            continue
        if not restarts and (poller.offset or 0) > 1005:
            # Killed after relaying a batch, before the next getUpdates confirmed it.
            poller, restarts = await start(), 1
    async with engine.begin() as conn:  # the simulation's tables go with it
        await conn.run_sync(drop_ledger_tables)
        await conn.run_sync(metadata.drop_all)
    await engine.dispose()

    replies = [u for u in updates if u["message"]["chat"]["id"] == SUPPORT]
    to_clients = Counter(r.message.text for r in fake.sent if r.recipient != str(SUPPORT))
    counts = Counter(to_clients[u["message"]["text"]] for u in replies)
    lost_answers = sum(
        1 for r in fake.records if r.delivered and isinstance(r.error, UncertainSendError)
    )
    resent = sum((n - 1) * k for n, k in counts.items() if n > 1) - lost_answers
    notes = [
        b for b, r in zip(sender.budgets, fake.records, strict=True) if r.recipient == str(SUPPORT)
    ]
    refused = sum(1 for r in fake.records if isinstance(r.error, PermanentSendError))
    silent = [u for u in source.confirmed_unsettled if u not in given_up]
    print(
        f"support relay: {len(replies)} operator replies to {len(CLIENTS)} clients, "
        f"{len(updates)} updates, batches of 4"
    )
    print()
    print(f"  getUpdates calls            {source.calls}   failed: {failed_polls} (offset kept)")
    print(
        f"  updates read again          {sum(source.reads.values()) - len(updates)}"
        f"   restarts before the offset was confirmed: {restarts}"
    )
    print(
        f"  replies delivered           {len(replies) - counts[0]}"
        f"   refused (client blocked the bot): {refused}"
        f"   given up after {MAX_NETWORK_REPLAYS} replays: {len(given_up)}"
    )
    print(f"  delivered exactly once      {counts[1]}")
    print(
        f"  delivered twice             {counts[2]}   (Telegram's answer lost after delivery:"
        f" at-least-once, at most {RELAY_MAX_ATTEMPTS} attempts)"
    )
    print(f"  re-sent by a replay of a relayed update: {resent}")
    print(
        f"  notes to topics             {len(notes)}   budget {NOTE_BUDGET:g} s each;"
        " a failed note changed nothing"
    )
    print(
        f"  offset moved past an undelivered reply: {len(source.confirmed_unsettled)}"
        f"   without an ERROR log: {len(silent)}"
    )
    print()
    ok = (not silent and not resent and not source.pending
          and counts[1] + counts[2] + refused + len(given_up) == len(replies))  # fmt: skip
    print("no reply lost silently; no relayed update sent again." if ok else "MISMATCH")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="run a scripted scenario in-process (network failures, a restart) and exit",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("NOTIFYONCE_BOT_TOKEN"),
        help="the bot's token (default: $NOTIFYONCE_BOT_TOKEN); needed unless --simulate",
    )
    parser.add_argument(
        "--support-chat",
        metavar="CHAT_ID",
        help="the support group's chat id, e.g. -1001234567890; needed unless --simulate",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("NOTIFYONCE_DATABASE_URL"),
        metavar="URL",
        help="SQLAlchemy async URL, e.g. postgresql+asyncpg://user@host/db "
        "(default: $NOTIFYONCE_DATABASE_URL, else a SQLite file next to this script); "
        f"the bot uses only its own tables {TOPICS_TABLE} and {LEDGER_TABLE}",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.simulate:
        path = HERE / "simulation.sqlite3"
        path.unlink(missing_ok=True)
        return asyncio.run(simulate(args.database_url or f"sqlite+aiosqlite:///{path}"))
    if not (args.token and args.support_chat):
        parser.error("--token and --support-chat are needed (or --simulate)")
    url = args.database_url or f"sqlite+aiosqlite:///{HERE / 'relay.sqlite3'}"

    async def run() -> None:
        engine = create_async_engine(url)
        await AsyncLedger(engine, table_name=LEDGER_TABLE).create_schema()
        topics = await Topics(engine).load()
        source = BotAPIUpdates(args.token)
        try:
            async with TelegramSender(args.token, budget=RELAY_BUDGET) as sender:
                relay = Relay(make_notifier(engine, sender), sender, args.support_chat, topics)
                await Poller(source, relay).run_forever()
        finally:
            await source.aclose()
            await engine.dispose()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
