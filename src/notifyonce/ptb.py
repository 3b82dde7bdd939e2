"""A Sender over an existing python-telegram-bot ``Bot`` (v21+), and handlers that keep the
audience up to date from the bot's updates.

Needs the ``ptb`` extra::

    pip install "notifyonce[ptb]"

Examples:
    >>> from telegram import Bot
    >>> from notifyonce.ptb import PTBSender
    >>> sender = PTBSender(Bot("123:ABC"))
"""

from __future__ import annotations

try:
    import telegram  # noqa: F401 (checked here so the error names the extra)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'notifyonce.ptb needs python-telegram-bot: pip install "notifyonce[ptb]"'
    ) from exc

from notifyonce._bots.ptb import audience_handlers
from notifyonce._senders.telegram.ptb import PTBSender, classify_ptb_error

__all__ = ["PTBSender", "audience_handlers", "classify_ptb_error"]
