"""Notifier + WebhookSender + a deduplicating receiver: at-least-once gives exactly-once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from notifyonce import AsyncLedger, DeliveryMode, Message, Notification, Notifier, Outcome
from notifyonce.testing import WebhookReceiver, WebhookReply
from notifyonce.webhook import WebhookSender

PERIOD_END = datetime(2026, 12, 1, tzinfo=timezone.utc)


async def test_lost_answers_are_retried_and_processed_once(
    async_engine: object, async_table: str
) -> None:
    """Answers lost after processing are retried by the Notifier with the same key, and the
    receiver processes every slot exactly once."""
    ledger = AsyncLedger(
        async_engine,  # type: ignore[arg-type]
        table_name=async_table,
        lease=timedelta(seconds=1),
    )
    await ledger.create_schema()
    async with WebhookReceiver(secret="s") as receiver:
        receiver.script([WebhookReply.drop_after_processing()] * 3)
        async with WebhookSender(f"{receiver.url}/hook", secret="s", budget=2.0) as sender:
            notifier = Notifier(ledger, sender, mode=DeliveryMode.AT_LEAST_ONCE)
            notifications = [
                Notification(user, PERIOD_END, Message(f"6 hours left, user {user}"))
                for user in range(6)
            ]
            # Job runs: each run retries what the previous one left uncertain.
            for _ in range(5):
                await notifier.send_many("trial_6h", notifications)
            outcomes = [
                await notifier.send_once("trial_6h", n.subject, n.cycle, n.message)
                for n in notifications
            ]
        counts = receiver.counts()
        retried = [r.outcome for r in receiver.requests].count("duplicate")
        keys_per_recipient = {
            r.json["recipient"]: r.key for r in receiver.processed if r.json is not None
        }
    assert {Outcome.DUPLICATE} == set(outcomes)
    assert 3 == retried  # the three lost answers were resent with their slot's key
    assert 6 == len(counts)
    assert {1} == set(counts.values())
    assert None not in counts
    assert 6 == len(set(keys_per_recipient.values()))
