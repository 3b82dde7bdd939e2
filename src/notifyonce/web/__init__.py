"""The operator console: `notifyonce web`, or an ASGI app to mount in your own.

Pages answer an operator's questions about the ledger (what each action and campaign did
and which state each campaign is in, one subject's history, a campaign's progress and the
command that resumes it, the unknown and failed slots by error, the leases held, the flood
waits, a search by campaign, subject or error), and two actions behind a confirmation:
requeue chosen unknown or failed slots, cancel a campaign. Needs the ``web`` extra:
``pip install 'notifyonce[web]'``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("notifyonce.web needs the web extra: pip install 'notifyonce[web]'") from exc

from notifyonce.web._app import create_app
from notifyonce.web._security import WebAuth

__all__ = ["WebAuth", "create_app"]
