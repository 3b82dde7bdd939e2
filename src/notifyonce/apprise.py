"""A Sender for any Apprise service URL.

Needs the ``apprise`` extra::

    pip install "notifyonce[apprise]"

Examples:
    >>> from notifyonce.apprise import AppriseSender
    >>> sender = AppriseSender(["json://localhost:8080/hooks"])
"""

from __future__ import annotations

try:
    import apprise  # noqa: F401 (checked here so the error names the extra)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'notifyonce.apprise needs Apprise: pip install "notifyonce[apprise]"'
    ) from exc

from notifyonce._senders.apprise import AppriseSender, classify_apprise_result

__all__ = ["AppriseSender", "classify_apprise_result"]
