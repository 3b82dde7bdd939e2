"""A Sender over an existing aiogram 3 ``Bot``, and a Router that keeps the audience up to
date from the bot's updates.

Needs the ``aiogram`` extra::

    pip install "notifyonce[aiogram]"

Examples:
    >>> from aiogram import Bot
    >>> from notifyonce.aiogram import AiogramSender
    >>> sender = AiogramSender(Bot("123:ABC"))
"""

from __future__ import annotations

try:
    import aiogram  # noqa: F401 (checked here so the error names the extra)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'notifyonce.aiogram needs aiogram 3: pip install "notifyonce[aiogram]"'
    ) from exc

from notifyonce._bots.aiogram import audience_router
from notifyonce._senders.telegram.aiogram import AiogramSender, classify_aiogram_error

__all__ = ["AiogramSender", "audience_router", "classify_aiogram_error"]
