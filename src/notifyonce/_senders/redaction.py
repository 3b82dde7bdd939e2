"""Keeping secrets out of descriptions and exception chains (standard library only)."""

from __future__ import annotations

import re
from collections.abc import Callable

from notifyonce._errors import SendError

__all__ = ["RedactedTransportError", "chain_cause", "redact", "scrubbed", "short"]

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


class RedactedTransportError(Exception):
    """Stands in as ``__cause__`` for a sender's underlying exception: its class name and
    its text with every secret removed, and no reference to the request or its frames."""


def chain_cause(error: SendError, cause: BaseException | None, scrub: Callable[[str], str]) -> None:
    """Chain a redacted copy of ``cause``: its class name and scrubbed text, nothing else.

    Never the original: a transport exception keeps the request (whose URL holds the bot
    token) and its traceback's frames keep the URL in their locals, which error reporters
    that record local variables would capture.
    """
    if cause is None:
        return
    error.__cause__ = RedactedTransportError(f"{type(cause).__name__}: {scrub(str(cause))}")
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
