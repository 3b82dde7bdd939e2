"""Turns handed over together: at the paid lane's pace a claim statement per turn would
cost a round trip per message, so the turns starting in one step of a grid are handed
over at once and their claims share a statement."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from notifyonce import AsyncLedger, Message, Notification, Notifier, Observer, Outcome
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "424242:TOGETHER-secret"
CYCLE = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)


class Statements(Observer):
    """How many claims each claim statement asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def claimed(self, action: str, seconds: float, asked: int, won: int) -> None:
        self.asked.append(asked)


async def test_the_claims_of_turns_starting_together_share_a_statement(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """600 chats on the paid lane (1,000 msg/s, starts 1.03 ms apart), 32 workers: every
    chat gets its message once, and the claims go to the ledger about ten a statement (the
    turns of each 10 ms are handed over together), not one a statement as the turns come."""
    observer = Statements()
    sender = TelegramSender(
        TOKEN, base_url=bot_api_server.url, allow_paid_broadcast=True, rate_limit=RateLimit()
    )
    chats = range(5000, 5600)
    async with sender:
        notifier = Notifier(ledger, sender, concurrency=32, observer=observer)
        report = await asyncio.wait_for(
            notifier.send_many(
                "news", [Notification(chat, CYCLE, Message("Monday")) for chat in chats]
            ),
            60,
        )
    assert len(chats) == report.counts[Outcome.SENT]
    assert sorted(str(chat) for chat in chats) == sorted(
        d.chat_id for d in bot_api_server.deliveries
    )
    assert len(chats) == sum(observer.asked)
    # About ten turns start in a 10 ms step; a busy machine splits some steps in two.
    assert len(observer.asked) <= len(chats) / 4, observer.asked
