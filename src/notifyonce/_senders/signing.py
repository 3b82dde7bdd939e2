"""Webhook signatures: HMAC-SHA256 of a timestamp and the exact body bytes.

Standard library only, so a receiver can verify without installing httpx.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = [
    "DEFAULT_TOLERANCE",
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "sign",
    "verify_signature",
]

#: The header carrying the slot's idempotency key.
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The header carrying ``sha256=<hex>``.
SIGNATURE_HEADER = "X-Notifyonce-Signature"
#: The header carrying the signing time in whole Unix seconds.
TIMESTAMP_HEADER = "X-Notifyonce-Timestamp"
#: Seconds a signature stays acceptable either side of the receiver's clock.
DEFAULT_TOLERANCE = 300.0


def secret_bytes(secret: object, field: str = "secret") -> bytes:
    """The shared secret as bytes; a ValidationError naming ``field`` if unusable."""
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes):
        raise ValidationTypeError(field, f"must be str or bytes, got {type(secret).__name__}")
    if not secret:
        raise ValidationError(field, "must not be empty")
    return secret


def sign(body: bytes, secret: str | bytes, timestamp: int) -> str:
    """The signature header value for ``body`` sent at ``timestamp``.

    The signed bytes are ``b"<timestamp>." + body``: binding the time into the signature
    lets a receiver refuse a captured request replayed later.

    Examples:
        >>> sign(b'{"text":"hi"}', "s3cret", 1700000000)[:7]
        'sha256='
    """
    mac = hmac.new(secret_bytes(secret), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify_signature(
    body: bytes,
    signature: str | None,
    timestamp: str | None,
    secret: str | bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: Callable[[], float] = time.time,
) -> bool:
    """Whether a webhook request was signed by a sender holding ``secret``, recently.

    Call it in your receiver with the raw body bytes (before any JSON parsing) and the
    values of the ``X-Notifyonce-Signature`` and ``X-Notifyonce-Timestamp`` headers.

    Args:
        body: The request body exactly as received.
        signature: The signature header's value, or None when it is missing.
        timestamp: The timestamp header's value, or None when it is missing.
        secret: The shared secret given to [`WebhookSender`][notifyonce.webhook.WebhookSender].
        tolerance: Seconds the timestamp may differ from ``now()``; older or future
            requests are refused (a replay, or a badly wrong clock).
        now: The receiver's wall clock.

    Returns:
        True only if both headers are present, the timestamp is within ``tolerance`` and
        the signature matches (compared in constant time).

    Examples:
        >>> body = b'{"recipient":"42"}'
        >>> header = sign(body, "s3cret", 1700000000)
        >>> verify_signature(body, header, "1700000000", "s3cret", now=lambda: 1700000010)
        True
        >>> verify_signature(body + b" ", header, "1700000000", "s3cret", now=lambda: 1700000010)
        False
    """
    key = secret_bytes(secret)
    if signature is None or timestamp is None:
        return False
    try:
        sent_at = int(timestamp.strip())
    except ValueError:
        return False
    if not math.isfinite(tolerance) or abs(now() - sent_at) > tolerance:
        return False
    expected = sign(body, key, sent_at)
    return hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace"))
