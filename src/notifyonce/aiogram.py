"""A Sender over an existing aiogram 3 ``Bot``.

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

from notifyonce._senders.telegram.aiogram import AiogramSender, classify_aiogram_error

__all__ = ["AiogramSender", "classify_aiogram_error"]
