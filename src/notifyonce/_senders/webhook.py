"""WebhookSender: POST a JSON body over one reused httpx client, with the slot's key."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx
from typing_extensions import Unpack

from notifyonce._errors import (
    SendError,
    TransientSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._media import refuse_media
from notifyonce._message import Message, Receipt
from notifyonce._observe import note_flood
from notifyonce._senders.http import (
    DEFAULT_CLOCK,
    DEFAULT_RNG,
    DEFAULT_SLEEP,
    HTTPOptions,
    HTTPSenderBase,
    refuse_unknown_options,
)
from notifyonce._senders.redaction import Secrets, chain_cause, scrubbed
from notifyonce._senders.retry import parse_retry_after
from notifyonce._senders.signing import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    secret_bytes,
    sign,
)
from notifyonce._senders.status import error_for_status

__all__ = ["Accepted", "BodyBuilder", "WebhookSender", "classify_webhook_response", "default_body"]

logger = logging.getLogger("notifyonce.webhook")

#: Builds the JSON-serialisable body of one send from the recipient and the message.
BodyBuilder = Callable[[str, Message], Any]


@dataclass(frozen=True, slots=True)
class Accepted:
    """The receiver answered 2xx; ``message_id`` is its ``id``/``message_id`` if it sent one."""

    message_id: int | str | None


def default_body(recipient: str, message: Message) -> dict[str, Any]:
    """The JSON body WebhookSender posts unless given a ``body_builder``.

    Examples:
        >>> default_body("42", Message("hi", idempotency_key="k1"))["idempotency_key"]
        'k1'
    """
    return {
        "recipient": recipient,
        "text": message.text,
        "parse_mode": message.parse_mode,
        "silent": message.silent,
        "link_preview": message.link_preview,
        "reply_markup": None if message.reply_markup is None else dict(message.reply_markup),
        "options": dict(message.options),
        "idempotency_key": message.idempotency_key,
    }


def _header_safe(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _message_id(body: bytes) -> int | str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    for name in ("message_id", "id"):
        value = data.get(name)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return value
    return None


def _reason(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def classify_webhook_response(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: Callable[[], float] = time.time,
) -> Accepted | SendError:
    """Classify one HTTP answer of a webhook receiver.

    The description is only the status and its phrase: a receiver's error body may echo
    the message, so it is never copied into an exception.

    Args:
        status: The HTTP status code.
        headers: The response headers (case-insensitive, e.g. ``httpx.Headers``).
        body: The response body; read only for an ``id`` on success.
        now: Wall clock for a ``Retry-After`` HTTP-date.

    Returns:
        `Accepted`, or the error the sender should raise.
    """
    description = _reason(status)
    if 200 <= status < 300:
        return Accepted(_message_id(body))
    # 409: a request with the same idempotency key is still being processed: retryable.
    # 401, 404, 405, 3xx: the URL or the credentials are wrong (SenderConfigError).
    retry_after = parse_retry_after(headers.get("retry-after"), now=now)
    return error_for_status(status, description, retry_after=retry_after)


def _display_url(url: httpx.URL) -> str:
    """Scheme, host and port only: paths and queries of webhook URLs often hold tokens."""
    port = f":{url.port}" if url.port is not None else ""
    hidden = "/..." if url.raw_path not in (b"", b"/") else ""
    return f"{url.scheme}://{url.host}{port}{hidden}"


class WebhookSender(HTTPSenderBase):
    """POSTs each message as JSON to one URL, with the slot's ``Idempotency-Key``.

    One ``httpx.AsyncClient`` is created on the first send and reused (keep-alive); a
    client you pass in is used as is and never closed here. Timeouts are split (connect,
    write, pool, and read = what is left of the send's budget) and only failures that
    certainly did not deliver are retried, inside one budget per send.

    **Idempotency.** ``message.idempotency_key`` (set by the Notifier, the same on every
    attempt of one slot) is sent as the ``Idempotency-Key`` header and in the default
    body. When it is None no header is sent and the receiver cannot deduplicate. With a
    receiver that processes each key once, at-least-once mode delivers exactly once.

    **Signature.** With ``secret``, every attempt carries ``X-Notifyonce-Timestamp``
    (Unix seconds) and ``X-Notifyonce-Signature: sha256=<hex>``, the HMAC-SHA256 of
    ``b"<timestamp>." + body``. Receivers check it with
    [`verify_signature`][notifyonce.webhook.verify_signature].

    **Failures.** 2xx delivers. 408, 409, 425, 429 and 5xx other than 502/504 are
    transient (``retry_after`` from ``Retry-After``, seconds or an HTTP-date); 502/504 from
    a gateway are uncertain (the receiver may have processed it); 401, 404, 405 and 3xx
    are a [`SenderConfigError`][notifyonce.SenderConfigError] (the URL or the credentials
    are wrong); other 4xx are permanent. Connect errors, refusals and pool timeouts are
    transient; a timeout or reset after the request was written, or a failure of a
    transport that cannot tell where it happened, is uncertain.

    **Secrets.** The secret, your ``headers``' values and the URL's path, query and
    credentials never appear in logs, reprs or exception messages; the repr shows only
    scheme, host and port.

    Args:
        url: The receiver's ``http://`` or ``https://`` URL.
        secret: The shared HMAC secret, or None to send unsigned.
        signature_header: The name of the signature header.
        timestamp_header: The name of the timestamp header.
        headers: Extra headers (e.g. ``Authorization``); their values are kept secret.
        body_builder: Builds the JSON-serialisable body from ``(recipient, message)``;
            defaults to [`default_body`][notifyonce.webhook.default_body].
        client: Your own ``httpx.AsyncClient`` (not closed by the sender).
        **http: Timeouts, pool limits and retries: ``budget``, ``connect_timeout``,
            ``write_timeout``, ``pool_timeout``, ``limits``, ``max_retries``,
            ``backoff_base``, ``backoff_max`` (see
            [`HTTPOptions`][notifyonce.webhook.HTTPOptions]).
        clock: Monotonic clock (tests inject a fake one).
        sleep: Async sleep (tests inject a fake one).
        rng: Returns a float in [0, 1) for jitter.
        wall_clock: Unix time for the signature timestamp and ``Retry-After`` dates.

    Examples:
        >>> sender = WebhookSender("https://hooks.example.com/T0/secret-path?token=abc",
        ...                        secret="s3cret")
        >>> sender
        WebhookSender(url='https://hooks.example.com/...')
    """

    def __init__(
        self,
        url: str,
        *,
        secret: str | bytes | None = None,
        signature_header: str = SIGNATURE_HEADER,
        timestamp_header: str = TIMESTAMP_HEADER,
        headers: Mapping[str, str] | None = None,
        body_builder: BodyBuilder | None = None,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = DEFAULT_CLOCK,
        sleep: Callable[[float], Awaitable[object]] = DEFAULT_SLEEP,
        rng: Callable[[], float] = DEFAULT_RNG,
        wall_clock: Callable[[], float] = time.time,
        **http: Unpack[HTTPOptions],
    ) -> None:
        refuse_unknown_options(self, http)
        if not isinstance(url, str):
            raise ValidationTypeError("url", f"must be a str, got {type(url).__name__}")
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError):
            raise ValidationError("url", "is not a valid URL") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValidationError("url", "must be an http:// or https:// URL with a host")
        key = None if secret is None else secret_bytes(secret)
        for field, name in (
            ("signature_header", signature_header),
            ("timestamp_header", timestamp_header),
        ):
            if not isinstance(name, str) or not name.strip():
                raise ValidationError(field, "must be a non-empty header name")
        extra = dict(headers or {})
        for name, value in extra.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValidationTypeError("headers", "names and values must be str")
            if not _header_safe(name) or not _header_safe(value):
                # httpx would fail to encode it on every send, after nothing was sent.
                raise ValidationError("headers", "names and values must be printable ASCII")
        if body_builder is not None and not callable(body_builder):
            raise ValidationTypeError("body_builder", "must be callable or None")
        self._configure(client=client, clock=clock, sleep=sleep, rng=rng, **http)
        self.display_url = _display_url(parsed)
        self._secrets = Secrets(
            url,
            key=key,
            headers=extra,
            replacements=self._secret_strings(url, parsed, secret, extra),
        )
        self.signature_header = signature_header
        self.timestamp_header = timestamp_header
        self._body_builder: BodyBuilder = body_builder or default_body
        self._wall_clock = wall_clock

    def _secret_strings(
        self,
        url: str,
        parsed: httpx.URL,
        secret: str | bytes | None,
        headers: Mapping[str, str],
    ) -> dict[str, str]:
        hidden = "<redacted>"
        strings = {url: self.display_url, str(parsed): self.display_url}
        path_query = parsed.raw_path.decode("ascii", "replace")
        if path_query not in ("", "/"):
            strings[path_query] = "/..."
            strings[parsed.path] = "/..."
        for part in (parsed.query.decode("ascii", "replace"), parsed.userinfo.decode()):
            strings[part] = hidden
        if parsed.password:
            strings[parsed.password] = hidden
        if isinstance(secret, bytes):
            secret = secret.decode("utf-8", "replace")
        if secret:
            strings[secret] = hidden
        for value in headers.values():
            strings[value] = hidden
        # Very short fragments ("/a", "x") would mangle unrelated text without hiding much.
        return {s: r for s, r in strings.items() if len(s) >= 3}

    def __repr__(self) -> str:
        return f"WebhookSender(url={self.display_url!r})"

    async def __aenter__(self) -> WebhookSender:
        return self

    def _encode(self, recipient: str, message: Message) -> bytes:
        try:
            return json.dumps(
                self._body_builder(recipient, message),
                ensure_ascii=False,
                separators=(",", ":"),
                allow_nan=False,
            ).encode()
        except (TypeError, ValueError) as exc:
            # The exception text may quote a value of the message: name the type only.
            raise ValidationTypeError(
                "message", f"the webhook body is not JSON-serialisable ({type(exc).__name__})"
            ) from None

    def _headers_for(self, body: bytes, key: str | None) -> dict[str, str]:
        headers = {**self._secrets.headers, "content-type": "application/json"}
        if key is not None:
            headers[IDEMPOTENCY_HEADER] = key
        if self._secrets.key is not None:
            timestamp = int(self._wall_clock())
            headers[self.timestamp_header] = str(timestamp)
            headers[self.signature_header] = sign(body, self._secrets.key, timestamp)
        return headers

    async def send(
        self, recipient: str, message: Message, *, budget: float | None = None
    ) -> Receipt:
        """POST ``message`` for ``recipient`` and return the receipt.

        Args:
            recipient: Any non-empty string; it goes into the body as ``recipient``.
            message: What to send; ``idempotency_key`` becomes the ``Idempotency-Key``.
            budget: Seconds for this send instead of the sender's ``budget``.

        Returns:
            ``Receipt(recipient, message_id)`` where ``message_id`` is the ``id`` or
            ``message_id`` of the receiver's JSON answer, if any.

        Raises:
            ValidationError: ``recipient`` or ``message`` is invalid (nothing was sent).
            PermanentSendError: The receiver refused for good (4xx other than
                401/404/405 and 408/409/425/429).
            SenderConfigError: The URL or the credentials are wrong (401, 404, 405, 3xx).
            TransientSendError: Not delivered; ``retry_after`` says when to try again.
            UncertainSendError: May have been delivered.
        """
        body = self._prepare(recipient, message)
        key = message.idempotency_key
        try:
            return await self._send(recipient, body, key, self._budget(budget))
        except SendError as exc:
            error = exc
        # Error reporters record the locals of every frame an exception passed through:
        # leave them neither the body (the message text) nor the raw transport exception.
        del message, body
        raise scrubbed(error)

    def check(self, recipient: str, message: Message) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] if this send would be
        refused before any request: a blank recipient, a bad idempotency key, a body that is
        not JSON.

        The Notifier calls it before claiming, so such a notification burns no slot.
        """
        self._prepare(recipient, message)

    def _prepare(self, recipient: object, message: object) -> bytes:
        """The encoded body, after every check that needs no request."""
        if not isinstance(recipient, str):
            raise ValidationTypeError("recipient", f"must be a str, got {type(recipient).__name__}")
        if not recipient.strip():
            raise ValidationError("recipient", "must not be empty or blank")
        if not isinstance(message, Message):
            raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
        refuse_media(message.media, "WebhookSender")
        key = message.idempotency_key
        if key is not None and (not isinstance(key, str) or not key or not _header_safe(key)):
            raise ValidationError(
                "idempotency_key", "must be a non-empty printable ASCII str (a header) or None"
            )
        return self._encode(recipient, message)

    async def _send(self, recipient: str, body: bytes, key: str | None, budget: float) -> Receipt:
        client = self._get_client()
        deadline = self._clock() + budget
        plan = self._retry_plan(deadline)

        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise TransientSendError("the send budget ran out before an attempt")
            response, cause, certain = await self._post(
                client,
                self._secrets.url,
                body,
                self._headers_for(body, key),
                remaining,
                self._secrets.scrub,
            )
            if isinstance(response, SendError):
                error = response
            else:
                outcome = classify_webhook_response(
                    response.status_code, response.headers, response.content, now=self._wall_clock
                )
                if isinstance(outcome, Accepted):
                    return Receipt(recipient, outcome.message_id)
                error = outcome
            note_flood(error)  # the Notifier's observer, when it has one
            wait = plan.next_wait(error, certain_transport=certain)
            if wait is None:
                chain_cause(error, cause, self._secrets.scrub)
                raise error
            await self._pause(logger, "webhook", plan, error, wait)
