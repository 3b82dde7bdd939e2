"""A TelegramSender on the local BotAPIServer, as the end-to-end and media tests make one."""

from __future__ import annotations

from typing import Any

from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "987654:E2E-secret_token"


def sender_for(server: BotAPIServer, **options: Any) -> TelegramSender:
    """A sender with the bot ``TOKEN`` on ``server``; no rate limit unless given one."""
    options.setdefault("rate_limit", None)
    return TelegramSender(TOKEN, base_url=server.url, **options)
