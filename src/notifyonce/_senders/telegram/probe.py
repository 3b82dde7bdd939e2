"""Asking the Bot API whether a token is accepted, before a long run starts."""

from __future__ import annotations

import httpx

__all__ = ["get_me_status"]


def get_me_status(base_url: str, token: str, *, timeout: float = 15.0) -> int | str:
    """The HTTP status of ``getMe`` for ``token``, or the exception's class name.

    Only the class name when the Bot API cannot be reached: the exception text can quote
    the URL, and so the token.
    """
    try:
        answer = httpx.post(f"{base_url.rstrip('/')}/bot{token}/getMe", timeout=timeout)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return answer.status_code
