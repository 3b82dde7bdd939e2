"""Every exception notifyonce raises.

The tree::

    NotifyOnceError
    ├── ValidationError (also ValueError)        bad input, raised before anything is written
    │   ├── ValidationTypeError (also TypeError) a value of the wrong type
    │   └── ScheduleError                        an invalid Schedule, listing every problem
    ├── LedgerError                              the database failed; the cause is chained
    │   └── LedgerUnavailableError               could not reach the database, or lost it mid-call
    └── SendError                                a sender could not deliver
        ├── PermanentSendError                   refused for good: never retried
        │   └── MessageRefusedError              the message itself is refused, for every
        │                                        recipient alike: the run stops, slots kept
        ├── TransientSendError                   certainly not delivered: retry later
        │   ├── FloodWaitError                   a flood wait longer than the sender waits out
        │   ├── RateStoreUnavailableError        the rate store could not be asked for a turn
        │   └── SenderClosedError                the sender (or its client) was closed
        │       (also RuntimeError)
        ├── UncertainSendError                   may have been delivered: never blindly retried
        └── SenderConfigError                    the sender is set up wrong (a rejected token,
                                                 a wrong URL): nothing was delivered; stop
                                                 the run, fix it

    RedactedTransportError                       not raised: the ``__cause__`` a sender chains
                                                 in place of a transport's own exception

Messages never contain a bot token or a message text: only field names, key parts,
provider codes and descriptions.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "FloodWaitError",
    "LedgerError",
    "LedgerUnavailableError",
    "MessageRefusedError",
    "NotifyOnceError",
    "PermanentSendError",
    "RateStoreUnavailableError",
    "RedactedTransportError",
    "ScheduleError",
    "SendError",
    "SenderClosedError",
    "SenderConfigError",
    "TransientSendError",
    "UncertainSendError",
    "ValidationError",
    "ValidationTypeError",
]


class NotifyOnceError(Exception):
    """The base of every exception raised by notifyonce."""


class ValidationError(NotifyOnceError, ValueError):
    """An argument is invalid; nothing was written.

    Attributes:
        field: The name of the offending argument (``"cycle"``, ``"subject"``, ...).
        problem: What is wrong with it, in words.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self) -> tuple[type[ValidationError], tuple[str, str]]:
        return (type(self), (self.field, self.problem))


class ValidationTypeError(ValidationError, TypeError):
    """An argument has the wrong type; nothing was written."""


class ScheduleError(ValidationError):
    """A [`Schedule`][notifyonce.Schedule] is invalid.

    The message lists every problem found, not only the first one.

    Attributes:
        problems: One sentence per violated rule, each naming the windows and numbers.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__("schedule", f"{count} {noun}:\n{lines}")

    def __reduce__(self) -> tuple[type[ScheduleError], tuple[tuple[str, ...]]]:  # type: ignore[override]
        return (type(self), (self.problems,))


class LedgerError(NotifyOnceError):
    """A database operation of the ledger failed. The driver's exception is ``__cause__``."""


class LedgerUnavailableError(LedgerError):
    """The database could not be reached or the connection was lost during the call.

    When this is raised by a claim, no claim was returned: the slot may or may not have
    been taken, and a later claim finds out which.
    """


class SendError(NotifyOnceError):
    """A sender could not deliver a message.

    Attributes:
        code: The provider's error code (an HTTP status or Telegram's ``error_code``), if any.
        description: The provider's description of the error, if any. Never contains the
            message text or a secret.
        about_message: True when the refusal is about the message, not its recipient (bad
            entities, a text too long, a media file gone): every recipient of that message
            would be refused alike. Nothing was delivered. Until a send of its run
            succeeds, the Notifier gives such a slot back instead of burning it, and stops
            the run after three of them (see [`Report.stopped`][notifyonce.Report]).
    """

    def __init__(
        self,
        description: str = "",
        *,
        code: int | None = None,
        about_message: bool = False,
    ) -> None:
        self.code = code
        self.description = description
        self.about_message = about_message
        text = description or type(self).__name__
        super().__init__(f"[{code}] {text}" if code is not None else text)


class PermanentSendError(SendError):
    """The provider refused the message for good (bot blocked, chat not found).

    Retrying cannot help. The Notifier records the slot as ``failed``. A rejected token is
    not this but a [`SenderConfigError`][notifyonce.SenderConfigError]: it refuses every
    send alike, and burns no slot.

    Attributes:
        gone: When the refusal says the recipient cannot be reached at all (it blocked
            the bot, deleted its account, the chat does not exist), why: a
            [`GoneReason`][notifyonce.GoneReason] value such as ``"blocked"``. The
            Notifier then remembers the recipient as gone in its audience, and later
            notifications skip it before any claim or request. None otherwise.
    """

    def __init__(
        self,
        description: str = "",
        *,
        code: int | None = None,
        about_message: bool = False,
        gone: str | None = None,
    ) -> None:
        super().__init__(description, code=code, about_message=about_message)
        self.gone = gone


class MessageRefusedError(PermanentSendError):
    """The provider refused the message itself, not its recipient: every recipient would
    be refused alike (the message a copy is made from was deleted or cannot be copied).

    Nothing was delivered. The Notifier burns no recipient's slot for it: the slot is
    given back (``RETRY``), the run stops (the sends under way finish, the rest come back
    ``RETRY`` untried) and [`Report.stopped`][notifyonce.Report] says why. Fix the message
    (or use a new campaign id) and run again.
    """


class TransientSendError(SendError):
    """The message was certainly not delivered, and a later attempt may succeed.

    Raised for connection failures before the request was sent, pool and connect
    timeouts, rate limiting (HTTP 429) and server errors answered by the server.

    Attributes:
        retry_after: Seconds the provider asked to wait before the next attempt, or None.
    """

    def __init__(
        self,
        description: str = "",
        *,
        code: int | None = None,
        retry_after: float | None = None,
        about_message: bool = False,
    ) -> None:
        super().__init__(description, code=code, about_message=about_message)
        self.retry_after = retry_after


class FloodWaitError(TransientSendError):
    """A flood wait (Telegram's 429 ``retry_after``) longer than the sender waits out.

    Raised by a sender's rate-limit turn before anything is claimed or sent. The Notifier
    gives the notification back as ``RETRY`` and goes on with the others when the wait is
    one chat's; when it is the whole bot's, it stops the run: the sends under way finish,
    the rest come back as ``RETRY``, and [`Report.stopped`][notifyonce.Report] says why.

    Attributes:
        retry_after: Seconds until the flood wait ends.
        bot_wide: True when the whole bot waits, False when one chat does.
    """

    def __init__(self, description: str = "", *, retry_after: float, bot_wide: bool) -> None:
        super().__init__(description, code=429, retry_after=retry_after)
        self.bot_wide = bot_wide


class RateStoreUnavailableError(TransientSendError):
    """The rate store could not be asked for a turn, so nothing was sent (fail closed)."""


class SenderClosedError(TransientSendError, RuntimeError):
    """The sender (or the caller's client) was closed: certainly nothing was sent.

    A [`TransientSendError`][notifyonce.TransientSendError], so a Notifier releases the slot
    for a later run instead of recording an unknown outcome; also a ``RuntimeError``,
    because it is a usage error.
    """


class UncertainSendError(SendError):
    """The message may or may not have been delivered.

    Raised when the request left this process but no answer came back: a read timeout, or
    a connection reset or closed after the request was written. Resending risks a
    duplicate; the delivery mode decides what happens next.
    """


class SenderConfigError(SendError):
    """The sender itself is set up wrong, not the message: every send would fail alike.

    Raised for a rejected bot token (401), an unknown API method or a wrong ``base_url``
    (404), and the like. Nothing was delivered. The Notifier does not burn the slot: it
    frees the claims of the run and raises this error, so the same reminders go out once
    the configuration is fixed.
    """


class RedactedTransportError(Exception):
    """Stands in as ``__cause__`` for a sender's underlying exception: its class name and
    its text with every secret removed, and no reference to the request or its frames."""
