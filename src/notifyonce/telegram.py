"""Telegram Bot API sender.

Needs the ``telegram`` extra (httpx)::

    pip install "notifyonce[telegram]"

Examples:
    >>> from notifyonce.telegram import RateLimit, TelegramSender
    >>> TelegramSender("123:ABC", rate_limit=RateLimit(bot_per_second=20))
    TelegramSender(base_url='https://api.telegram.org', token=<redacted>)
"""

from __future__ import annotations

try:
    import httpx  # noqa: F401 (checked here so the error names the extra)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'notifyonce.telegram needs httpx: pip install "notifyonce[telegram]"'
    ) from exc

from notifyonce._errors import RedactedTransportError, SenderClosedError
from notifyonce._senders.http import HTTPOptions
from notifyonce._senders.telegram.file_sql import SQLFileIdStore
from notifyonce._senders.telegram.files import FileIdStore, MemoryFileIdStore
from notifyonce._senders.telegram.markup import escape_html, escape_markdown_v2
from notifyonce._senders.telegram.ratelimit import RateLimit
from notifyonce._senders.telegram.sender import (
    CONNECT_TIMEOUT,
    DEFAULT_BUDGET,
    DEFAULT_LIMITS,
    POOL_TIMEOUT,
    WRITE_TIMEOUT,
    TelegramSender,
)

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_BUDGET",
    "DEFAULT_LIMITS",
    "POOL_TIMEOUT",
    "WRITE_TIMEOUT",
    "FileIdStore",
    "HTTPOptions",
    "MemoryFileIdStore",
    "RateLimit",
    "RedactedTransportError",
    "SQLFileIdStore",
    "SenderClosedError",
    "TelegramSender",
    "escape_html",
    "escape_markdown_v2",
]
