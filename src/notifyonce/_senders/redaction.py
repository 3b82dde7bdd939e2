"""Keeping secrets out of descriptions, exception chains and logs (standard library only)."""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Callable, Mapping

from notifyonce._errors import RedactedTransportError, SendError

__all__ = [
    "RedactedTransportError",
    "Secrets",
    "chain_cause",
    "redact",
    "redacted",
    "scrubbed",
    "short",
]

# The token sits in the path: /bot<token>/<method>. Redacting the whole segment needs no
# registry of live tokens and also covers tokens of other senders in the same process.
_TOKEN_IN_PATH = re.compile(r"/bot[^/\s\"'<>]+")
_MAX_DESCRIPTION = 200


def redact(text: str, token: str | None = None) -> str:
    """Return ``text`` with every ``/bot<token>`` path segment (and ``token``) hidden."""
    text = _TOKEN_IN_PATH.sub("/bot<redacted>", text)
    if token:
        text = text.replace(token, "<redacted>")
    return text


def short(text: str, scrub: Callable[[str], str]) -> str:
    """``text`` on one line, scrubbed of secrets and cut to 200 characters."""
    text = scrub(" ".join(text.split()))
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."


def redacted(
    cause: BaseException, scrub: Callable[[str], str], *, quoted: bool = True
) -> RedactedTransportError:
    """The stand-in for ``cause``: its class name and, when ``quoted``, its scrubbed text.

    Not ``quoted`` for an exception whose text may hold the message: a caller's transport
    may quote the request's body in it, and scrubbing removes secrets, not message texts.
    """
    text = f"{type(cause).__name__}: {scrub(str(cause))}" if quoted else type(cause).__name__
    return RedactedTransportError(text)


def chain_cause(error: SendError, cause: BaseException | None, scrub: Callable[[str], str]) -> None:
    """Chain a redacted copy of ``cause``: its class name and scrubbed text, nothing else
    (a stand-in made by `redacted` is chained as it is).

    Never the original: a transport exception keeps the request (whose URL holds the bot
    token) and its traceback's frames keep the URL in their locals, which error reporters
    that record local variables would capture.
    """
    if cause is None:
        return
    if not isinstance(cause, RedactedTransportError):
        cause = redacted(cause, scrub)
    error.__cause__ = cause
    error.__suppress_context__ = True


def scrubbed(error: SendError) -> SendError:
    """``error`` without the frames it was raised through and without an implicit context.

    A sender raises this instead of the error it caught from its own send loop: those
    frames hold the payload (the message text) and the raw transport exception in their
    locals, which error reporters that record local variables would capture. The cause
    stays when it is a redacted stand-in (see `chain_cause`).
    """
    error.__context__ = None
    return error.with_traceback(None)


class Secrets:
    """One sender's secrets: what it needs to send, and the strings to hide wherever text goes.

    The one holder of a sender's secret values (the URL, a bot token, an HMAC key, the
    caller's headers; a Telegram sender's URL ends in ``/bot<token>/`` and each method's
    name is appended to it); its repr never shows them. ``scrub`` replaces every secret string
    (``replacements``, longest first, and ``token`` with its ``/bot<token>`` segment).

    Live instances are consulted by a filter on the ``httpx`` and ``aiohttp.client``
    loggers (httpx logs every request URL at INFO); the first instance installs it. Held
    weakly: a collected sender's secrets are forgotten.
    """

    __slots__ = ("__weakref__", "headers", "key", "replacements", "token", "url")

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        key: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        replacements: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.token = token
        self.key = key
        self.headers = dict(headers or {})
        # Longest first, so a URL is replaced as a whole before its parts are.
        self.replacements = tuple(
            sorted(((s, r) for s, r in (replacements or {}).items() if s), key=lambda p: -len(p[0]))
        )
        _LIVE_SECRETS.add(self)
        _install_log_filter()

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced."""
        for secret, replacement in self.replacements:
            if secret in text:
                text = text.replace(secret, replacement)
        return redact(text, self.token) if self.token else text

    def __repr__(self) -> str:
        return "<redacted>"


_LIVE_SECRETS: weakref.WeakSet[Secrets] = weakref.WeakSet()


class _RedactingFilter(logging.Filter):
    """Hides secrets in records of the HTTP clients' loggers (httpx logs every request URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = original = record.getMessage()
        text = redact(text)  # any /bot<token>/ segment, whichever sender made the request
        for secrets in list(_LIVE_SECRETS):
            text = secrets.scrub(text)
        if text != original:
            record.msg = text
            record.args = None
        return True


def _install_log_filter() -> None:
    """Put the filter on the HTTP clients' loggers once (idempotent)."""
    for name in ("httpx", "aiohttp.client"):  # the senders' own transport is aiohttp's
        http_logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in http_logger.filters):
            http_logger.addFilter(_RedactingFilter())
