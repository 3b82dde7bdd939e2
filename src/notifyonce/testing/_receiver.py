"""WebhookReceiver: a deduplicating webhook endpoint on 127.0.0.1 for tests.

Standard library only. It processes each ``Idempotency-Key`` once, answers a repeat with
the first answer, checks signatures when given the secret, and can be scripted to fail
in each way a real receiver does (including dropping the connection after processing).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from notifyonce._senders.signing import (
    DEFAULT_TOLERANCE,
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify_signature,
)
from notifyonce.testing._server import LocalServer, Scripts, read_head

__all__ = ["WebhookDelivery", "WebhookReceiver", "WebhookReply", "WebhookRequest"]


@dataclass(frozen=True, slots=True)
class WebhookReply:
    """How the receiver answers one request. Build with the class methods.

    Attributes:
        status: The HTTP status to answer (ignored when the connection is dropped).
        processes: Whether the receiver processes the request before answering.
        drop: Close the connection without answering.
        retry_after: A ``Retry-After`` header value, if any.
        delay: Seconds to wait before answering.

    Examples:
        >>> WebhookReply.drop_after_processing().processes
        True
    """

    status: int = 200
    processes: bool = True
    drop: bool = False
    retry_after: str | None = None
    delay: float = 0.0

    @classmethod
    def ok(cls, *, delay: float = 0.0) -> WebhookReply:
        """Process (unless a duplicate) and answer 200 after ``delay`` seconds."""
        return cls(delay=delay)

    @classmethod
    def refuse(cls, status: int, *, retry_after: str | float | None = None) -> WebhookReply:
        """Answer ``status`` without processing (429, 503, 400, ...)."""
        header = None if retry_after is None else str(retry_after)
        return cls(status, processes=False, retry_after=header)

    @classmethod
    def fail_after_processing(cls, status: int = 500) -> WebhookReply:
        """Process, then answer ``status`` anyway (a receiver whose reply failed)."""
        return cls(status)

    @classmethod
    def drop_after_processing(cls) -> WebhookReply:
        """Process, then close the connection without answering (a lost answer)."""
        return cls(drop=True)

    @classmethod
    def drop_before_processing(cls) -> WebhookReply:
        """Close the connection after reading the request, without processing it."""
        return cls(processes=False, drop=True)


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """A request the receiver read in full.

    Attributes:
        path: The request path (with the query).
        key: The ``Idempotency-Key`` header, or None.
        outcome: ``"processed"``, ``"duplicate"``, ``"refused"`` (scripted, not
            processed) or ``"bad_signature"``.
        connection: Which TCP connection (1, 2, ...) carried it.
    """

    path: str
    key: str | None
    outcome: str
    connection: int
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """A request the receiver processed (each key at most once when deduplicating).

    Attributes:
        id: The receiver's id for it (1, 2, ...), answered as ``{"id": ...}``.
        key: The ``Idempotency-Key``, or None.
        json: The body parsed as JSON, or None if it is not JSON.
        body: The raw body.
        headers: The request headers, names lower-cased.
        path: The request path.
        at: Server-side ``time.monotonic()`` when it was processed.
    """

    id: int
    key: str | None
    json: Any
    body: bytes = field(repr=False)
    headers: dict[str, str] = field(repr=False)
    path: str
    at: float


class WebhookReceiver(LocalServer):
    """A webhook endpoint on 127.0.0.1 that processes each idempotency key once.

    Accepts ``POST`` on any path. A request whose ``Idempotency-Key`` was processed before
    is answered 200 with the first id and ``"duplicate": true`` and is not processed
    again; a request without the header is processed every time. With ``secret``, a
    request whose signature does not verify is answered 401 and not processed.

    Args:
        secret: The shared secret to verify ``X-Notifyonce-Signature`` with, or None.
        deduplicate: False processes every request (a receiver that ignores the key).
        tolerance: Seconds of timestamp skew accepted by the signature check.
        latency: Seconds added before every answer.

    Examples:
        >>> with WebhookReceiver() as receiver:
        ...     receiver.script([WebhookReply.drop_after_processing()])
        ...     receiver.url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        deduplicate: bool = True,
        tolerance: float = DEFAULT_TOLERANCE,
        latency: float = 0.0,
    ) -> None:
        super().__init__()
        self.secret = secret
        self.deduplicate = deduplicate
        self.tolerance = tolerance
        self.latency = latency
        self._ids = itertools.count(1)
        self._processed: list[WebhookDelivery] = []
        self._requests: list[WebhookRequest] = []
        self._first_id: dict[str, int] = {}
        self._scripts: Scripts[WebhookReply] = Scripts()

    def __repr__(self) -> str:
        return f"WebhookReceiver(url={self.url!r})"

    # -- scripting and inspecting -------------------------------------------------------

    def script(self, replies: Iterable[WebhookReply], *, key: str | None = None) -> None:
        """Queue replies for requests with ``key`` (None: the next requests, any key).

        A key's own queue is used before the shared one; when both are used up the
        receiver processes and answers 200 again.
        """
        with self._lock:
            self._scripts.add(key, replies)

    @property
    def processed(self) -> list[WebhookDelivery]:
        """Every processed request, in order."""
        with self._lock:
            return list(self._processed)

    @property
    def requests(self) -> list[WebhookRequest]:
        """Every request read in full, processed or not."""
        with self._lock:
            return list(self._requests)

    def counts(self) -> dict[str | None, int]:
        """How many times each idempotency key was processed (None: requests without one)."""
        counts: dict[str | None, int] = {}
        for delivery in self.processed:
            counts[delivery.key] = counts.get(delivery.key, 0) + 1
        return counts

    def reset(self) -> None:
        """Forget processed requests, seen keys and scripts (connections stay open)."""
        with self._lock:
            self._processed.clear()
            self._requests.clear()
            self._first_id.clear()
            self._scripts.clear()

    # -- HTTP ---------------------------------------------------------------------------

    def _next_reply(self, key: str | None) -> WebhookReply:
        with self._lock:
            return self._scripts.pop(key, WebhookReply.ok())

    def _signed(self, headers: dict[str, str], body: bytes) -> bool:
        if self.secret is None:
            return True
        return verify_signature(
            body,
            headers.get(SIGNATURE_HEADER.lower()),
            headers.get(TIMESTAMP_HEADER.lower()),
            self.secret,
            tolerance=self.tolerance,
        )

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> bool:
        request = await read_head(reader)
        if request is None:
            return False
        verb, path, headers = request
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        keep_alive = headers.get("connection", "").lower() != "close"
        key = headers.get(IDEMPOTENCY_HEADER.lower())

        def record(outcome: str) -> None:
            with self._lock:
                self._requests.append(
                    WebhookRequest(path, key, outcome, connection, dict(headers), body)
                )

        if verb != "POST":
            return await self._answer(writer, 405, b'{"error":"POST only"}', keep_alive)
        if not self._signed(headers, body):
            record("bad_signature")
            return await self._answer(writer, 401, b'{"error":"bad signature"}', keep_alive)

        reply = self._next_reply(key)
        if not reply.processes:
            record("refused")
            if reply.drop:
                return False
            retry = [] if reply.retry_after is None else [("Retry-After", reply.retry_after)]
            await asyncio.sleep(self.latency + reply.delay)
            answer = json.dumps({"error": reply.status}).encode()
            return await self._answer(writer, reply.status, answer, keep_alive, headers=retry)

        # Check and record with no await in between: the event loop makes it atomic.
        with self._lock:
            first = self._first_id.get(key) if key is not None and self.deduplicate else None
            duplicate = first is not None
            if first is None:
                first = next(self._ids)
                if key is not None:
                    self._first_id[key] = first
                try:
                    parsed = json.loads(body) if body else None
                except ValueError:
                    parsed = None
                self._processed.append(
                    WebhookDelivery(first, key, parsed, body, dict(headers), path, time.monotonic())
                )
        record("duplicate" if duplicate else "processed")
        if reply.drop:
            return False
        if self.latency or reply.delay:
            await asyncio.sleep(self.latency + reply.delay)
        answer = json.dumps({"id": first, "duplicate": duplicate}).encode()
        return await self._answer(writer, reply.status, answer, keep_alive)
