"""Webhook sender and the receiver-side signature check.

[`WebhookSender`][notifyonce.webhook.WebhookSender] needs the ``webhook`` extra (httpx)::

    pip install "notifyonce[webhook]"

[`verify_signature`][notifyonce.webhook.verify_signature] and the header names need nothing beyond
the standard library, so a receiver can import them without httpx.

Examples:
    >>> from notifyonce.webhook import SIGNATURE_HEADER, verify_signature
    >>> SIGNATURE_HEADER
    'X-Notifyonce-Signature'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from notifyonce._errors import RedactedTransportError
from notifyonce._senders.signing import (
    DEFAULT_TOLERANCE,
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    verify_signature,
)

if TYPE_CHECKING:
    from notifyonce._senders.http import HTTPOptions
    from notifyonce._senders.webhook import BodyBuilder, WebhookSender, default_body

__all__ = [
    "DEFAULT_TOLERANCE",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "BodyBuilder",
    "HTTPOptions",
    "RedactedTransportError",
    "WebhookSender",
    "default_body",
    "sign",
    "verify_signature",
]

_NEEDS_HTTPX = {
    "BodyBuilder",
    "HTTPOptions",
    "WebhookSender",
    "default_body",
}


def __getattr__(name: str) -> Any:
    # The sender needs httpx; importing it lazily keeps verify_signature usable without.
    if name not in _NEEDS_HTTPX:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import httpx  # noqa: F401 (checked here so the error names the extra)
    except ImportError as exc:
        raise ImportError(
            f'notifyonce.webhook.{name} needs httpx: pip install "notifyonce[webhook]"'
        ) from exc
    from notifyonce._senders import http, webhook

    value = getattr(http, name, None) or getattr(webhook, name)
    globals()[name] = value
    return value
