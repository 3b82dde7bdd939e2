"""TelegramSender end to end against the local BotAPIServer (real sockets on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import traceback
from collections import Counter

import httpx
import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
)
from notifyonce._senders.telegram.sender import _GRANTED
from notifyonce.ratelimit import MemoryRateStore, Turn, TurnRequest
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, Reply
from notifyonce.testing._server import busiest_window

from ._bot_api import TOKEN, sender_for


async def test_sequential_sends_reuse_one_connection(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """Twenty sends one after another travel over one keep-alive TCP connection."""
    async with sender_for(bot_api_server, client=http_client) as sender:
        for n in range(20):
            await sender.send(str(100 + n), Message(f"reminder {n}"))
    assert 20 == len(bot_api_server.deliveries)
    assert 1 == bot_api_server.connections_opened


async def test_concurrent_sends_stay_within_the_pool(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """Ninety-six concurrent sends open no more connections than the pool allows (32)."""
    async with sender_for(bot_api_server, client=http_client) as sender:
        await asyncio.gather(*(sender.send(str(n + 1), Message("x")) for n in range(96)))
    assert 96 == len(bot_api_server.deliveries)
    assert bot_api_server.connections_opened <= 32


async def test_connection_closed_by_server_while_idle_is_replaced(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """After the server closes an idle keep-alive connection, the next send opens a new one."""
    async with sender_for(bot_api_server, client=http_client) as sender:
        await sender.send("1", Message("a"))
        bot_api_server.close_connections()
        await asyncio.sleep(0.05)
        await sender.send("1", Message("b"))
    assert 2 == len(bot_api_server.deliveries)
    assert 2 == bot_api_server.connections_opened


def close_while_busy(server: BotAPIServer) -> None:
    """The server closes its idle keep-alive connections while this loop is busy: the
    closing reaches the client's socket, and the loop, held by synchronous work, never
    runs to notice it before the next send."""
    time.sleep(0.02)  # blocking, as a CPU-bound stretch of the caller's loop is
    server.close_connections()  # returns once the server has closed them
    time.sleep(0.05)


async def test_a_connection_the_server_closed_while_the_loop_was_busy_is_not_reused(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """Six sends, the server closing the idle connection before each while the loop is
    busy: each goes out once on a new connection, none is raised as uncertain."""
    async with sender_for(bot_api_server, max_retries=0, client=http_client) as sender:
        for n in range(6):
            close_while_busy(bot_api_server)
            await sender.send(str(100 + n), Message(f"reminder {n}"))
    assert 6 == len(bot_api_server.deliveries)
    assert 6 == len(bot_api_server.requests)
    assert 6 == bot_api_server.connections_opened


class BusyBeforeSending(TelegramSender):
    """A sender whose loop is busy right before each send after the first, while the
    server closes its idle connections."""

    def __init__(self, server: BotAPIServer) -> None:
        super().__init__(TOKEN, base_url=server.url, rate_limit=None)
        self.server = server
        self.sends = 0

    async def send(
        self, recipient: str | int, message: Message, *, budget: float | None = None
    ) -> Receipt:
        self.sends += 1
        if self.sends > 1:
            close_while_busy(self.server)
        return await super().send(recipient, message, budget=budget)


async def test_at_most_once_records_no_unknown_for_a_connection_closed_while_idle(
    sqlite_ledger: object, bot_api_server: BotAPIServer
) -> None:
    """At most once through the sender's own client: six runs, the server closing the
    idle connection while the loop is busy before each send, end six SENT, none unknown,
    and the server read each request once."""
    from notifyonce import AsyncLedger, DeliveryMode, Notification, Notifier, Outcome

    assert isinstance(sqlite_ledger, AsyncLedger)
    outcomes: list[Outcome] = []
    async with BusyBeforeSending(bot_api_server) as sender:
        notifier = Notifier(sqlite_ledger, sender, mode=DeliveryMode.AT_MOST_ONCE)
        for chat in range(1, 7):
            report = await notifier.send_many("remind", [Notification(chat, "c1", Message("hi"))])
            outcomes += [result.outcome for result in report.results]
    assert [Outcome.SENT] * 6 == outcomes
    assert [str(chat) for chat in range(1, 7)] == [r.chat_id for r in bot_api_server.requests]


async def test_drop_after_delivery_is_uncertain_and_not_resent(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """A connection closed after delivery raises UncertainSendError; the server saw one send."""
    bot_api_server.script("42", [Reply.drop_after_delivery()])
    async with sender_for(bot_api_server, max_retries=5, client=http_client) as sender:
        with pytest.raises(UncertainSendError):
            await sender.send("42", Message("once only"))
    assert 1 == len(bot_api_server.deliveries)
    assert 1 == len(bot_api_server.requests)


async def test_drop_after_delivery_on_a_reused_connection_is_not_resent(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """A keep-alive connection that carried an earlier send and is closed after delivering
    the next one: uncertain, never tried again on a new connection (a reused connection is
    written to at once, with no connect step to fail first)."""
    bot_api_server.script("42", [Reply.drop_after_delivery()])
    async with sender_for(bot_api_server, max_retries=5, client=http_client) as sender:
        await sender.send("41", Message("first"))
        with pytest.raises(UncertainSendError):
            await sender.send("42", Message("once only"))
    first, second = bot_api_server.requests
    assert first.connection == second.connection  # the second send reused the connection
    assert ["41", "42"] == [d.chat_id for d in bot_api_server.deliveries]
    assert 1 == bot_api_server.connections_opened


async def test_drop_before_body_is_uncertain(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """A connection closed after the request was written is uncertain even if nothing arrived."""
    bot_api_server.script(None, [Reply.drop_before_body()])
    async with sender_for(bot_api_server, max_retries=5, client=http_client) as sender:
        with pytest.raises(UncertainSendError):
            await sender.send("42", Message("x"))
    assert 0 == len(bot_api_server.deliveries)
    assert 1 == len(bot_api_server.requests)


async def test_slow_answer_after_delivery_is_uncertain(
    bot_api_server: BotAPIServer, http_client: httpx.AsyncClient | None
) -> None:
    """A read timeout (answer slower than the budget) is uncertain and not resent."""
    bot_api_server.script("42", [Reply.ok(delay=1.0)])
    async with sender_for(bot_api_server, budget=0.3, client=http_client) as sender:
        with pytest.raises(UncertainSendError):
            await sender.send("42", Message("x"))
    assert 1 == len(bot_api_server.requests)


async def test_refused_connection_is_transient(http_client: httpx.AsyncClient | None) -> None:
    """Nothing listening on the port: TransientSendError after the retries."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sender = TelegramSender(
        TOKEN,
        base_url=f"http://127.0.0.1:{port}",
        rate_limit=None,
        max_retries=2,
        backoff_base=0.01,
        client=http_client,
    )
    async with sender:
        with pytest.raises(TransientSendError):
            await sender.send("42", Message("x"))


async def test_flood_wait_is_honoured(bot_api_server: BotAPIServer) -> None:
    """A 429 with retry_after 1 is retried no sooner than 1 s later, then delivered."""
    bot_api_server.script("42", [Reply.flood(1)])
    async with sender_for(bot_api_server, rate_limit=RateLimit()) as sender:
        receipt = await sender.send("42", Message("x"))
    first, second = bot_api_server.requests
    assert 429 == first.reply.status
    assert second.at - first.at >= 1.0
    assert Receipt("42", bot_api_server.deliveries[0].message_id, None) == receipt


async def test_migration_is_followed(bot_api_server: BotAPIServer) -> None:
    """A migrated group gets the message at its new id, and the receipt carries it."""
    bot_api_server.script("-4001", [Reply.migrate(-1004001)])
    async with sender_for(bot_api_server) as sender:
        receipt = await sender.send("-4001", Message("x"))
    assert "-1004001" == receipt.migrated_to == receipt.recipient
    assert ["-1004001"] == [d.chat_id for d in bot_api_server.deliveries]


@pytest.mark.parametrize(
    ("reply", "error_class", "requests"),
    [
        (Reply.blocked(), PermanentSendError, 1),
        (Reply.chat_not_found(), PermanentSendError, 1),
        (Reply.html(502), UncertainSendError, 1),
        (Reply.html(500), TransientSendError, 3),
    ],
    ids=["blocked", "chat-not-found", "502-html", "500-html"],
)
async def test_refusals_over_the_wire(
    bot_api_server: BotAPIServer,
    http_client: httpx.AsyncClient | None,
    reply: Reply,
    error_class: type[SendError],
    requests: int,
) -> None:
    """Real HTTP answers map to the same classes as in the unit tests."""
    bot_api_server.script("42", [reply] * 3)
    async with sender_for(
        bot_api_server, max_retries=2, backoff_base=0.01, client=http_client
    ) as sender:
        with pytest.raises(error_class):
            await sender.send("42", Message("x"))
    assert requests == len(bot_api_server.requests)
    assert 0 == len(bot_api_server.deliveries)


async def test_wrong_token_is_a_config_error() -> None:
    """The server's 401 for a bad token says the sender is wrong: SenderConfigError."""
    with BotAPIServer(token="1:right") as server:
        async with sender_for(server) as sender:
            with pytest.raises(SenderConfigError) as info:
                await sender.send("42", Message("x"))
        assert [] == server.deliveries
    assert 401 == info.value.code


async def test_wrong_base_url_is_a_config_error() -> None:
    """A base_url with a wrong path gets the server's 404: SenderConfigError, nothing sent."""
    with BotAPIServer() as server:
        async with TelegramSender(TOKEN, base_url=server.url + "/api", rate_limit=None) as sender:
            with pytest.raises(SenderConfigError) as info:
                await sender.send("42", Message("x"))
        assert [] == server.deliveries
    assert 404 == info.value.code


class BookedStarts(MemoryRateStore):
    """The sender's own in-process store, recording each start it books (chat, time) and
    forgetting one given back: the limiter's decisions, free of the scheduling delays
    that the times a request left the client or reached the server carry."""

    def __init__(self) -> None:
        super().__init__()
        self.booked: list[tuple[str, float, Turn]] = []

    async def take_turn(self, request: TurnRequest) -> Turn:
        turn = await super().take_turn(request)
        if turn.booked and turn.at is not None:
            self.booked.append((request.chat, turn.at, turn))
        return turn

    async def give_back(self, turn: Turn) -> None:
        self.booked = [entry for entry in self.booked if entry[2] is not turn]
        await super().give_back(turn)

    def busiest(self, seconds: float, chat: str | None = None) -> int:
        starts = (at for c, at, _ in self.booked if chat is None or c == chat)
        return busiest_window(starts, seconds)


# Under load a request that left late can reach the server within tens of milliseconds of
# the next one, which left on time: the times the server saw (and those a client hook
# sees) measure the machine as much as the limiter. So the caps are asserted on the starts
# the limiter booked, which hold them by construction at any speed; how close to the caps
# the sends come is the benchmarks' business (the schedule is pinned on a fake clock in
# test_telegram_ratelimit.py).


async def test_bot_wide_rate_limit_observed_by_the_server(bot_api_server: BotAPIServer) -> None:
    """Sixty sends to sixty chats: all delivered, never more than 30 started in a second."""
    store = BookedStarts()
    async with sender_for(bot_api_server, rate_limit=RateLimit(), rate_store=store) as sender:
        await asyncio.gather(*(sender.send(str(1000 + n), Message("x")) for n in range(60)))
    assert 60 == len(bot_api_server.deliveries)
    assert store.busiest(1.0) <= 30


async def test_a_send_kept_waiting_for_a_connection_takes_a_new_turn(
    bot_api_server: BotAPIServer,
) -> None:
    """One connection, held for a second by a slow answer: the turns of the four sends
    queued behind it pass while they wait for it. Each gives its turn back once it has the
    connection and takes a new one, so it reaches the server right after the start it
    kept, not most of a second after a start long past (where sends bunch with the turns
    booked next and a second holds more than the cap)."""
    bot_api_server.script("1", [Reply.ok(delay=1.0)])
    store = BookedStarts()
    chats = [str(n) for n in range(1, 6)]
    async with sender_for(
        bot_api_server,
        rate_limit=RateLimit(bot_per_second=20),
        rate_store=store,
        limits=httpx.Limits(max_connections=1),
    ) as sender:
        await asyncio.gather(*(sender.send(chat, Message("x")) for chat in chats))
    arrived = {d.chat_id: d.at for d in bot_api_server.deliveries}
    kept = {chat: at for chat, at, _ in store.booked}
    assert set(chats) == set(arrived) == set(kept)
    late = {chat: round(arrived[chat] - kept[chat], 3) for chat in chats}
    # The four queued sends waited about a second for the connection; a send that left
    # on its old turn arrives that late. 0.5 s leaves room for a busy machine.
    assert all(-0.001 <= seconds < 0.5 for seconds in late.values()), late
    assert min(kept[chat] for chat in chats[1:]) > kept["1"] + 0.9


async def test_per_chat_rate_limits_observed_by_the_server(bot_api_server: BotAPIServer) -> None:
    """Three sends to one private chat start 1 s apart; two to a group 3 s apart."""
    store = BookedStarts()
    async with sender_for(bot_api_server, rate_limit=RateLimit(), rate_store=store) as sender:
        await asyncio.gather(
            *(sender.send("7", Message("x")) for _ in range(3)),
            *(sender.send("-1007", Message("x")) for _ in range(2)),
        )
    assert [("-1007", 2), ("7", 3)] == sorted(
        Counter(d.chat_id for d in bot_api_server.deliveries).items()
    )
    assert 1 == store.busiest(1.0, chat="7")
    assert 1 == store.busiest(3.0, chat="-1007")


async def test_token_never_in_logs_or_errors(
    bot_api_server: BotAPIServer,
    http_client: httpx.AsyncClient | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At DEBUG on httpx, httpcore, aiohttp and notifyonce, no record and no error text has
    the token."""
    for name in ("httpx", "httpcore", "aiohttp", "notifyonce"):
        caplog.set_level(logging.DEBUG, logger=name)
    bot_api_server.script("42", [Reply.drop_after_delivery(), Reply.html(500), Reply.blocked()])
    secret = "secret " + "words"  # built, so the traceback's source lines do not show it
    texts = []
    async with sender_for(
        bot_api_server, max_retries=1, backoff_base=0.01, client=http_client
    ) as sender:
        await sender.send("1", Message(secret))
        for _ in range(2):
            try:
                await sender.send("42", Message(secret))
            except SendError as exc:
                texts.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    assert 2 == len(texts)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "sendMessage attempt 1 failed" in logged  # the sender's own retry line ran
    if http_client is not None:  # a client of the user's goes through httpx, which logs
        assert "HTTP Request: POST" in logged
        assert "send_request_headers" in logged  # httpcore's own DEBUG trace ran too
    for text in [*texts, logged]:
        assert TOKEN not in text
        assert secret not in text


async def test_an_int_chat_id_is_sent_as_aiogram_gives_it(bot_api_server: BotAPIServer) -> None:
    """send(42, ...) and send(-100123, ...) work as their strings do; a bool is refused."""
    from notifyonce import ValidationTypeError

    async with sender_for(bot_api_server) as sender:
        sender.check(42, Message("x"))
        first = await sender.send(42, Message("hi"))
        second = await sender.send(-100123, Message("hi"))
        with pytest.raises(ValidationTypeError, match="recipient"):
            await sender.send(True, Message("hi"))  # type: ignore[arg-type]
    assert ("42", "-100123") == (first.recipient, second.recipient)
    assert ["42", "-100123"] == [d.chat_id for d in bot_api_server.deliveries]


async def test_the_server_url_comes_from_the_environment_by_default(
    bot_api_server: BotAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without base_url, a sender talks to $NOTIFYONCE_BOT_API_URL when it is set."""
    monkeypatch.setenv("NOTIFYONCE_BOT_API_URL", bot_api_server.url)
    async with TelegramSender(TOKEN, rate_limit=None) as sender:
        assert bot_api_server.url == sender.base_url
        await sender.send("42", Message("hi"))
    assert 1 == len(bot_api_server.deliveries)
    monkeypatch.delenv("NOTIFYONCE_BOT_API_URL")
    assert "https://api.telegram.org" == TelegramSender(TOKEN).base_url


async def test_a_wrong_token_is_logged_as_a_wrong_token_not_as_a_retry(
    sqlite_ledger: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A rejected token stops the run with one ERROR naming the cause; the slots given
    back are logged (at DEBUG: the stop is that one line) as released for a later run,
    never as a 'retry' of the 401."""
    from notifyonce import AsyncLedger, Notification, Notifier

    assert isinstance(sqlite_ledger, AsyncLedger)
    with BotAPIServer(token="987654:the-right-one") as server:
        async with sender_for(server) as sender:
            notifier = Notifier(sqlite_ledger, sender, concurrency=2)
            items = [Notification(chat, "c1", Message("hi")) for chat in (1, 2, 3)]
            with (
                caplog.at_level(logging.DEBUG, logger="notifyonce"),
                pytest.raises(SenderConfigError),
            ):
                await notifier.send_many("news", items)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("notifyonce")]
    errors = [m for m in messages if "is set up wrong" in m]
    assert 1 == len(errors)
    assert errors[0].startswith("TelegramSender is set up wrong ([401] Unauthorized)")
    assert [] == [m for m in messages if m.startswith("retry ")]
    given_back = [r for r in caplog.records if "news/" in r.getMessage()]
    assert given_back, "the slots given back are logged"
    assert all(r.getMessage().startswith("released for a later run: news/") for r in given_back)
    assert [] == [r for r in caplog.records if r.levelno >= logging.WARNING and r in given_back]
    assert TOKEN not in caplog.text


async def test_a_turn_no_send_used_is_given_back_and_a_used_one_is_not(
    bot_api_server: BotAPIServer,
) -> None:
    """`turn`'s block gives its turn back when nothing inside sent (the slot was another
    worker's, the body raised), keeps it when the send inside used it, and holds it only
    inside: a send after the block takes a turn of its own."""
    store = BookedStarts()
    async with sender_for(bot_api_server, rate_limit=RateLimit(), rate_store=store) as sender:
        async with sender.turn("7"):
            assert _GRANTED.get() is not None
            # nothing sent
        assert [] == store.booked
        assert _GRANTED.get() is None  # a send to "7" now takes a turn of its own
        with pytest.raises(LookupError):
            async with sender.turn("8"):
                raise LookupError
        assert [] == store.booked
        async with sender.turn("9"):
            await sender.send("9", Message("used"))
        assert ["9"] == [chat for chat, _, _ in store.booked]
        await sender.send("9", Message("after the block"))
        assert ["9", "9"] == [chat for chat, _, _ in store.booked]
    assert 2 == len(bot_api_server.deliveries)
