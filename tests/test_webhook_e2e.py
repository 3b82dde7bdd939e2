"""WebhookSender against the local WebhookReceiver: at-least-once + dedup = exactly-once."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from notifyonce import (
    Message,
    PermanentSendError,
    Receipt,
    SenderConfigError,
    TransientSendError,
    UncertainSendError,
)
from notifyonce.testing import WebhookReceiver, WebhookReply
from notifyonce.webhook import WebhookSender

SECRET = "e2e-shared-secret"


def sender_for(receiver: WebhookReceiver, **options: object) -> WebhookSender:
    return WebhookSender(
        f"{receiver.url}/hooks/reminders",
        secret=SECRET,
        budget=5.0,
        backoff_base=0.01,
        backoff_max=0.05,
        **options,  # type: ignore[arg-type]
    )


async def send_at_least_once(
    sender: WebhookSender, recipient: str, message: Message, max_attempts: int, budget: float
) -> tuple[Receipt | None, int]:
    """What the Notifier does in at-least-once mode: the same message (same key) again after
    an uncertain or transient failure, up to max_attempts; a permanent one ends it."""
    for attempt in range(1, max_attempts + 1):
        try:
            return await sender.send(recipient, message, budget=budget), attempt
        except (UncertainSendError, TransientSendError):
            continue
        except PermanentSendError:
            return None, attempt
    return None, max_attempts


# Per slot: what the receiver does on the first requests carrying its key.
SCRIPTS = [
    [],
    [WebhookReply.drop_after_processing()],
    [WebhookReply.drop_after_processing(), WebhookReply.drop_after_processing()],
    [WebhookReply.fail_after_processing(502)],
    [WebhookReply.refuse(503), WebhookReply.drop_after_processing()],
    [WebhookReply.refuse(429, retry_after=0)],
    [WebhookReply.drop_before_processing(), WebhookReply.drop_after_processing()],
    [WebhookReply.ok(delay=0.8)],  # answered after the read timeout: uncertain, processed
]


async def run_slots(
    receiver: WebhookReceiver, slots: int, client: httpx.AsyncClient | None = None
) -> list[Receipt | None]:
    receipts: list[Receipt | None] = []
    async with sender_for(receiver, max_retries=0, client=client) as sender:
        for n in range(slots):
            key = f"trial_6h:{n}:2026-12-01T00:00:00Z"
            receiver.script(SCRIPTS[n % len(SCRIPTS)], key=key)
            message = Message(f"reminder {n}", idempotency_key=key)
            # A 0.5 s budget makes the 0.8 s late answer a read timeout (uncertain).
            receipt, _ = await send_at_least_once(sender, str(n), message, 5, budget=0.5)
            receipts.append(receipt)
    return receipts


async def test_at_least_once_with_deduplicating_receiver_is_exactly_once(
    http_client: httpx.AsyncClient | None,
) -> None:
    """24 slots with drops, 502s, 503s, 429s and late answers: every key processed once."""
    async with WebhookReceiver(secret=SECRET) as receiver:
        receipts = await run_slots(receiver, 24, http_client)
        counts = receiver.counts()
        outcomes = [r.outcome for r in receiver.requests]
    assert all(receipt is not None for receipt in receipts)
    assert {f"trial_6h:{n}:2026-12-01T00:00:00Z": 1 for n in range(24)} == counts
    assert outcomes.count("duplicate") > 0  # the retries did reach the receiver
    assert 0 == outcomes.count("bad_signature")


async def test_receiver_ignoring_the_key_gets_duplicates() -> None:
    """The same run against a receiver that ignores the key processes some slots twice."""
    async with WebhookReceiver(secret=SECRET, deduplicate=False) as receiver:
        await run_slots(receiver, 8)
        counts = receiver.counts()
    assert max(counts.values()) > 1


async def test_duplicate_answer_repeats_the_first_id() -> None:
    """A retried key gets the id of its first processing in the receipt."""
    async with WebhookReceiver() as receiver, sender_for(receiver) as sender:
        message = Message("x", idempotency_key="slot-a")
        first = await sender.send("1", message)
        second = await sender.send("1", message)
        assert first == second
        assert 1 == len(receiver.processed)


async def test_sequential_sends_reuse_one_connection(
    http_client: httpx.AsyncClient | None,
) -> None:
    """Ten sends travel over one keep-alive connection."""
    async with WebhookReceiver() as receiver, sender_for(receiver, client=http_client) as sender:
        for n in range(10):
            await sender.send(str(n), Message("x", idempotency_key=f"k{n}"))
        assert 1 == receiver.connections_opened


async def test_wrong_secret_is_a_config_error_and_not_processed() -> None:
    """A receiver that cannot verify the signature answers 401: the sender is set up wrong
    (SenderConfigError), nothing processed."""
    async with WebhookReceiver(secret="another-secret") as receiver, sender_for(receiver) as sender:
        with pytest.raises(SenderConfigError) as info:
            await sender.send("1", Message("x", idempotency_key="k"))
        assert 401 == info.value.code
        assert [] == receiver.processed
        assert ["bad_signature"] == [r.outcome for r in receiver.requests]


async def test_body_and_signature_seen_by_the_receiver() -> None:
    """The receiver gets the JSON body with the key, and the signature headers."""
    async with WebhookReceiver(secret=SECRET) as receiver, sender_for(receiver) as sender:
        await sender.send("7", Message("6 hours left", idempotency_key="slot-x"))
        (delivery,) = receiver.processed
    assert "/hooks/reminders" == delivery.path
    assert "slot-x" == delivery.key
    assert {"recipient": "7", "text": "6 hours left", "idempotency_key": "slot-x"}.items() <= (
        delivery.json.items()
    )
    assert delivery.headers["x-notifyonce-signature"].startswith("sha256=")


async def test_refused_connection_is_transient(http_client: httpx.AsyncClient | None) -> None:
    """A port nobody listens on gives a transient error: certainly not delivered."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sender = WebhookSender(
        f"http://127.0.0.1:{port}/hook", max_retries=1, backoff_base=0.01, client=http_client
    )
    async with sender:
        with pytest.raises(TransientSendError):
            await sender.send("1", Message("x"))


async def test_retry_after_from_the_wire_is_honoured() -> None:
    """A 429 with Retry-After: 1 is waited out inside the budget, then delivered once."""
    async with WebhookReceiver() as receiver, sender_for(receiver) as sender:
        receiver.script([WebhookReply.refuse(429, retry_after=1)])
        receipt = await sender.send("1", Message("x", idempotency_key="k"))
        assert isinstance(receipt, Receipt)
        assert ["refused", "processed"] == [r.outcome for r in receiver.requests]


async def test_connection_closed_while_idle_is_replaced(
    http_client: httpx.AsyncClient | None,
) -> None:
    """A keep-alive connection the receiver closed between sends is replaced, not an error."""
    receiver = WebhookReceiver()
    async with receiver, sender_for(receiver, max_retries=0, client=http_client) as sender:
        await sender.send("1", Message("x", idempotency_key="k1"))
        receiver.close_connections()
        # Let the close reach the client: a send racing it may be written to the dying
        # connection, which is uncertain (and the key makes a resend safe).
        await asyncio.sleep(0.05)
        await sender.send("1", Message("x", idempotency_key="k2"))
        assert {"k1": 1, "k2": 1} == receiver.counts()
