"""The one rule every HTTP sender applies to an error status: may the message have gone?

TelegramSender, WebhookSender, AiogramSender and PTBSender all end here once they know the
status of an answer that did not deliver, so a 502 means the same thing whichever library
made the request. Pure functions, standard library only.

- 3xx, 401, 404, 405: the sender is set up wrong (a bad token, a wrong URL or method; we
  never follow redirects) -> [`SenderConfigError`][notifyonce.SenderConfigError]. Every send would
  fail alike.
- 408, 409, 425, 429, and 5xx other than 502/504: the server said it did not act on the
  request -> [`TransientSendError`][notifyonce.TransientSendError].
- 502, 504: a gateway forwarded the request and the upstream failed or was slow; the
  upstream may have acted on it -> [`UncertainSendError`][notifyonce.UncertainSendError].
- Every other 4xx: the same request would be refused again ->
[`PermanentSendError`][notifyonce.PermanentSendError].
"""

from __future__ import annotations

import re
from http import HTTPStatus

from notifyonce._errors import (
    PermanentSendError,
    SenderConfigError,
    SendError,
    TransientSendError,
    UncertainSendError,
)

__all__ = [
    "MAX_RETRY_AFTER",
    "error_for_status",
    "retry_after_in",
    "status_in",
]

#: The longest flood wait taken from an answer; a larger (or infinite) one is capped so a
#: malformed answer cannot block a chat for the sender's lifetime.
MAX_RETRY_AFTER = 3600.0

_CONFIG = frozenset({401, 404, 405})
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})
_GATEWAY = frozenset({502, 504})
# "Too Many Requests: retry after 3" (the Bot API's wording when `parameters` is missing).
_RETRY_AFTER = re.compile(r"retry after (\d+(?:\.\d+)?)", re.IGNORECASE)
# "Bad Gateway (502)": how python-telegram-bot writes a status it could not parse.
_STATUS_IN_PARENS = re.compile(r"\((\d{3})\)")
_PHRASES = {status.phrase.lower(): int(status) for status in HTTPStatus}
_PHRASES["gateway time-out"] = 504  # nginx's spelling


def error_for_status(
    status: int, description: str, *, retry_after: float | None = None
) -> SendError:
    """The error an answer with this (non-2xx) status means; ``code`` is the status.

    Args:
        status: The HTTP status, or the provider's ``error_code`` when it gives one.
        description: What the provider said, already free of secrets.
        retry_after: Seconds the provider asked to wait (429, 503), if it said.

    Examples:
        >>> type(error_for_status(502, "Bad Gateway")).__name__
        'UncertainSendError'
    """
    if status in _GATEWAY:
        return UncertainSendError(description, code=status)
    if status in _CONFIG or 300 <= status < 400:
        return SenderConfigError(description, code=status)
    if status >= 500 or status in _RETRYABLE_4XX:
        return TransientSendError(description, code=status, retry_after=retry_after)
    if 200 <= status < 300:
        # Something answered "OK" without saying what happened: it may have been sent.
        return UncertainSendError(description, code=status)
    return PermanentSendError(description, code=status)


def retry_after_in(description: str) -> float | None:
    """The seconds in a description like ``"Too Many Requests: retry after 3"``, or None.

    Examples:
        >>> retry_after_in("Too Many Requests: retry after 3")
        3.0
    """
    found = _RETRY_AFTER.search(description)
    return None if found is None else min(float(found.group(1)), MAX_RETRY_AFTER)


def status_in(description: str) -> int | None:
    """The HTTP status a library's error text names, or None when it names none.

    For libraries that keep only the text of an answer: ``"Bad Gateway (502)"``, or a
    description that starts with a status phrase (``"Gateway Timeout"``,
    ``"Too Many Requests: retry after 3"``).

    Examples:
        >>> status_in("Bad Gateway"), status_in("Forbidden: bot was blocked by the user")
        (502, 403)
    """
    found = _STATUS_IN_PARENS.search(description)
    if found is not None and int(found.group(1)) in _BY_CODE:
        return int(found.group(1))
    head = description.split(":", 1)[0].split(".", 1)[0].strip().lower()
    return _PHRASES.get(head)


_BY_CODE = frozenset(int(status) for status in HTTPStatus)
