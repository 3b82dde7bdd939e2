"""The ``notifyonce`` pytest plugin: ``fake_sender`` and ``bot_api_server`` fixtures.

Registered through the ``pytest11`` entry point, so it loads in every pytest run of a
project that has notifyonce installed: it imports only pytest at import time, and the
fixtures import their helpers when first used. None of them needs httpx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from notifyonce.testing import BotAPIServer, FakeSender


@pytest.fixture
def fake_sender() -> FakeSender:
    """A fresh [`FakeSender`][notifyonce.testing.FakeSender] for each test."""
    from notifyonce.testing import FakeSender

    return FakeSender()


@pytest.fixture
def bot_api_server() -> Iterator[BotAPIServer]:
    """A running [`BotAPIServer`][notifyonce.testing.BotAPIServer] on 127.0.0.1, stopped afterwards.

    Pass ``bot_api_server.url`` as ``TelegramSender(base_url=...)``.
    """
    from notifyonce.testing import BotAPIServer

    with BotAPIServer() as server:
        yield server
