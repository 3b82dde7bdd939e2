"""AppriseSender: any Apprise service URL as a notifyonce channel."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apprise

from notifyonce._errors import (
    PermanentSendError,
    SendError,
    TransientSendError,
    UncertainSendError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._media import refuse_media
from notifyonce._message import Message, Receipt

__all__ = ["AppriseSender", "classify_apprise_result"]

_FORMATS = {"html": "html", "markdown": "markdown", "markdownv2": "markdown"}


def classify_apprise_result(
    result: object, failure: type[SendError] = UncertainSendError
) -> SendError | None:
    """What an Apprise ``notify`` answer says about delivery; None means delivered.

    Apprise 1.x answers True, False or None (no service matched); Apprise 2.x answers an
    ``AppriseResult`` whose ``status`` also tells a partial delivery and a timeout apart.
    Neither says whether a failed service's request reached the provider, so a plain
    failure is ``failure`` (uncertain by default).

    Args:
        result: The value ``Apprise.async_notify`` returned.
        failure: The class for a failure Apprise cannot explain.

    Returns:
        None when every matched service accepted the notification, else the error.
    """
    status = getattr(result, "status", None)
    if status is not None:
        name = getattr(status, "name", str(status))
        if name == "SUCCESS":
            return None
        if name == "NOMATCH":
            return PermanentSendError("no Apprise service matched the recipient")
        if name == "PARTIAL":
            return UncertainSendError("Apprise delivered to some services and not to others")
        if name == "TIMEOUT":
            return UncertainSendError("an Apprise service did not finish in time")
        return failure("an Apprise service reported a failure")
    if result is None:
        return PermanentSendError("no Apprise service matched the recipient")
    if result:
        return None
    return failure("an Apprise service reported a failure")


class AppriseSender:
    """Sends through Apprise, so any of its services (e-mail, Slack, ntfy, ...) is a channel.

    **What cannot be known.** Apprise reports per call whether every service accepted the
    notification, not whether a failed service's request reached the provider before
    it failed (a timeout after sending and a refused connection look the same). So a
    failure is [`UncertainSendError`][notifyonce.UncertainSendError] by default: in
    at-most-once mode it is never repeated. Pass ``failure=TransientSendError`` if your
    services tolerate a duplicate better than a lost notification. With several URLs,
    Apprise 2.x reports a partial delivery, which is always uncertain (a retry would resend
    to the services that delivered); Apprise 1.x cannot tell it from a total failure.

    Args:
        urls: One Apprise URL, several, or an ``apprise.Apprise`` object you configured.
        tag_by_recipient: Send only to the services tagged with the recipient (add URLs
            with ``tag=`` on your own ``Apprise`` object); by default every service gets
            every notification and the recipient is only echoed in the receipt.
        title: The title of every notification; ``Message.options["title"]`` overrides it.
        failure: [`UncertainSendError`][notifyonce.UncertainSendError] or
            [`TransientSendError`][notifyonce.TransientSendError], for a failure Apprise cannot
            explain.

    Examples:
        >>> AppriseSender("json://localhost:8080/hooks")
        AppriseSender(services=1)
    """

    def __init__(
        self,
        urls: str | Iterable[str] | apprise.Apprise,
        *,
        tag_by_recipient: bool = False,
        title: str = "",
        failure: type[SendError] = UncertainSendError,
    ) -> None:
        if failure not in (UncertainSendError, TransientSendError):
            raise ValidationTypeError("failure", "must be UncertainSendError or TransientSendError")
        if not isinstance(title, str):
            raise ValidationTypeError("title", f"must be a str, got {type(title).__name__}")
        if isinstance(urls, apprise.Apprise):
            self.apprise = urls
        else:
            items = [urls] if isinstance(urls, str) else list(urls)
            if not items:
                raise ValidationError("urls", "must name at least one service")
            self.apprise = apprise.Apprise()
            for number, url in enumerate(items, 1):
                if not isinstance(url, str):
                    raise ValidationTypeError("urls", f"item {number} must be a str")
                # The URL itself is never echoed: Apprise URLs carry tokens and passwords.
                if not self.apprise.add(url):
                    raise ValidationError("urls", f"Apprise does not accept URL {number}")
        self.tag_by_recipient = tag_by_recipient
        self.title = title
        self.failure = failure

    def __repr__(self) -> str:
        return f"AppriseSender(services={len(self.apprise)})"

    def check(self, recipient: str, message: Message) -> None:
        """Raise [`ValidationError`][notifyonce.ValidationError] for a blank recipient or a
        non-Message (the Notifier calls it before claiming)."""
        if not isinstance(recipient, str) or not recipient.strip():
            raise ValidationError("recipient", "must be a non-empty str")
        if not isinstance(message, Message):
            raise ValidationTypeError("message", f"must be a Message, got {type(message).__name__}")
        refuse_media(message.media, "AppriseSender")

    async def send(self, recipient: str, message: Message) -> Receipt:
        """Notify every matching service and return a receipt for ``recipient``.

        Raises:
            ValidationError: ``recipient`` or ``message`` is invalid (nothing was sent).
            PermanentSendError: No service matched the recipient's tag.
            UncertainSendError: A service failed (by default), timed out, or only some
                services delivered.
            TransientSendError: A service failed and ``failure=TransientSendError``.
        """
        self.check(recipient, message)
        options: dict[str, Any] = dict(message.options)
        kwargs: dict[str, Any] = {
            "body": message.text,
            "title": str(options.pop("title", self.title)),
            "body_format": _FORMATS.get((message.parse_mode or "").lower(), "text"),
        }
        if "notify_type" in options:
            kwargs["notify_type"] = options.pop("notify_type")
        if self.tag_by_recipient:
            kwargs["tag"] = recipient
        result = await self.apprise.async_notify(**kwargs)
        error = classify_apprise_result(result, self.failure)
        if error is not None:
            raise error
        return Receipt(recipient)
