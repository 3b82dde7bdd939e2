"""Which Bot API server a sender talks to when it is not told (no httpx needed)."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_API_URL", "ENV_API_URL", "default_api_url"]

DEFAULT_API_URL = "https://api.telegram.org"
# Set it to try a bot against a local server (`notifyonce serve-test-api`) without
# changing its code: every sender built without base_url, and the broadcast command, use it.
ENV_API_URL = "NOTIFYONCE_BOT_API_URL"


def default_api_url() -> str:
    """``$NOTIFYONCE_BOT_API_URL`` when it is set, else Telegram's own server."""
    return os.environ.get(ENV_API_URL) or DEFAULT_API_URL
