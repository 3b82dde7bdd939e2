"""Test helpers for code that sends with notifyonce.

- [`FakeSender`][notifyonce.testing.FakeSender]: an in-memory [`Sender`][notifyonce.Sender]
  that records every send and plays scripted failures of each class.
- [`BotAPIServer`][notifyonce.testing.BotAPIServer]: a Bot-API-shaped HTTP server on
  127.0.0.1 for end-to-end tests of [`TelegramSender`][notifyonce.telegram.TelegramSender],
  aiogram and python-telegram-bot bots (standard library only).
- [`WebhookReceiver`][notifyonce.testing.WebhookReceiver]: a webhook endpoint on 127.0.0.1
  that processes each ``Idempotency-Key`` once, verifies signatures and fails on cue
  (standard library only).
- pytest fixtures ``fake_sender`` and ``bot_api_server``, registered automatically through
  the ``notifyonce`` pytest plugin.

Nothing here needs httpx.

Examples:
    >>> from notifyonce.testing import OK, FakeSender
    >>> from notifyonce import TransientSendError
    >>> sender = FakeSender()
    >>> sender.script("42", [TransientSendError("flood", code=429, retry_after=3), OK])
"""

from __future__ import annotations

from notifyonce.testing._fake import OK, FakeSender, SendRecord
from notifyonce.testing._receiver import (
    WebhookDelivery,
    WebhookReceiver,
    WebhookReply,
    WebhookRequest,
)
from notifyonce.testing._server import BotAPIServer, Change, Delivery, Reply, Request, Upload

__all__ = [
    "OK",
    "BotAPIServer",
    "Change",
    "Delivery",
    "FakeSender",
    "Reply",
    "Request",
    "SendRecord",
    "Upload",
    "WebhookDelivery",
    "WebhookReceiver",
    "WebhookReply",
    "WebhookRequest",
]
