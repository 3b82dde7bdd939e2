"""What a bot's updates say about its audience, and what is written for each: once, for
both bot libraries.

The aiogram router and the python-telegram-bot handlers only take the chat, its type,
the bot's new status, a command's argument or a button's data out of their library's
objects and call these; the replies they send are the texts these return. Nothing here
imports a bot library.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict

from notifyonce._audience import AsyncAudience, GoneReason, normalize_category
from notifyonce._buttons import unsubscribe_category
from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = ["DEFAULT_TEXTS", "AudienceOptions", "AudienceRules", "membership_change"]

logger = logging.getLogger("notifyonce.audience")

#: The replies, by name; each may use ``{category}``, ``{categories}`` (the ones the
#: commands accept), ``{stop}`` and ``{subscribe}`` (the commands' names).
DEFAULT_TEXTS: Mapping[str, str] = {
    # /stop [category], and /stop with a category the bot does not know
    "stopped": "Done: no more {category} messages. Send /{subscribe} {category} to get them again.",
    "unknown": "There is no such category. Send /{stop} or /{subscribe} with one of: {categories}.",
    # /subscribe [category]
    "subscribed": "Done: you will get {category} messages again.",
    # the unsubscribe button (the answer to its press, shown briefly at the top)
    "pressed": "Unsubscribed from {category}.",
}
# Telegram's rule for a bot command's name.
_COMMAND = re.compile(r"[a-z0-9_]{1,32}")
_SOURCE = "update"  # who recorded what these write: the bot's updates

# The bot's statuses in a chat that mean it is in the chat (restricted: if a member).
_IN = ("member", "administrator", "creator")


def membership_change(
    chat_type: str, status: str, is_member: bool | None = None
) -> GoneReason | Literal["back"] | None:
    """What a ``my_chat_member`` update means for the chat: gone (and why), back, or
    nothing to record.

    Args:
        chat_type: ``"private"``, ``"group"``, ``"supergroup"`` or ``"channel"``.
        status: The bot's new status in the chat.
        is_member: For ``"restricted"``, whether the bot is still in the chat.

    Examples:
        >>> membership_change("private", "kicked"), membership_change("private", "member")
        (<GoneReason.BLOCKED: 'blocked'>, 'back')
        >>> membership_change("supergroup", "left"), membership_change("channel", "administrator")
        (<GoneReason.KICKED: 'kicked'>, 'back')
    """
    if status in _IN or (status == "restricted" and is_member):
        return "back"
    if status in ("kicked", "left") or (status == "restricted" and is_member is False):
        return GoneReason.BLOCKED if chat_type == "private" else GoneReason.KICKED
    return None


class AudienceOptions(TypedDict, total=False):
    """The settings both bot helpers take, as keywords (see `AudienceRules.build` for
    their defaults and `notifyonce.aiogram.audience_router` for what each means)."""

    default_category: str
    categories: Iterable[str]
    stop_command: str
    subscribe_command: str
    start_comes_back: bool
    texts: Mapping[str, str] | None


@dataclass(frozen=True)
class AudienceRules:
    """The helpers' settings, checked once when the router or the handlers are built, and
    what each update writes to the audience.

    Build with `build`; the bot adapters call the async methods.
    """

    audience: AsyncAudience
    default_category: str
    categories: tuple[str, ...]
    stop_command: str
    subscribe_command: str
    start_comes_back: bool
    texts: Mapping[str, str]

    @classmethod
    def build(
        cls,
        audience: object,
        *,
        default_category: object = "promo",
        categories: object = (),
        stop_command: object = "stop",
        subscribe_command: object = "subscribe",
        start_comes_back: object = True,
        texts: object = None,
    ) -> AudienceRules:
        """Every argument checked, each error naming it, before a handler exists.

        Raises:
            ValidationTypeError: ``audience`` is not an AsyncAudience; a wrong type.
            ValidationError: A command that is not Telegram's 1-32 lowercase letters,
                digits and underscores, or the two the same; a bad category; a text of
                an unknown name or with a placeholder these texts do not have.
        """
        if not isinstance(audience, AsyncAudience):
            raise ValidationTypeError(
                "audience", f"must be an AsyncAudience, got {type(audience).__name__}"
            )
        default = normalize_category(default_category)
        if isinstance(categories, (str, bytes)) or not isinstance(categories, Iterable):
            raise ValidationTypeError(
                "categories", f"must be an iterable of str, got {type(categories).__name__}"
            )
        named = tuple(dict.fromkeys([default, *(normalize_category(c) for c in categories)]))
        stop, subscribe = (
            _command("stop_command", stop_command),
            _command("subscribe_command", subscribe_command),
        )
        if stop == subscribe:
            raise ValidationError("subscribe_command", "must differ from stop_command")
        if not isinstance(start_comes_back, bool):
            raise ValidationTypeError("start_comes_back", "must be a bool")
        return cls(
            audience,
            default,
            named,
            stop,
            subscribe,
            start_comes_back,
            _texts(texts),
        )

    def _say(self, name: str, category: str = "") -> str:
        return self.texts[name].format(
            category=category,
            categories=", ".join(self.categories),
            stop=self.stop_command,
            subscribe=self.subscribe_command,
        )

    def _category(self, argument: str | None) -> str | None:
        """The category a command names (its default without an argument), or None
        when it names none the bot accepts."""
        wanted = (argument or "").strip() or self.default_category
        return wanted if wanted in self.categories else None

    async def membership(
        self, chat_id: int, chat_type: str, status: str, is_member: bool | None = None
    ) -> None:
        """The bot's status in the chat changed: remember it gone, or back."""
        change = membership_change(chat_type, status, is_member)
        if change == "back":
            await self.audience.come_back(chat_id)
        elif change is not None:
            await self.audience.mark_gone(chat_id, change, source=_SOURCE)
            logger.debug("chat %s is gone (%s), told by an update", chat_id, change.value)

    async def started(self, chat_id: int) -> None:
        """``/start``: the user is talking to the bot, so it can reach them again."""
        if self.start_comes_back:
            await self.audience.come_back(chat_id)

    async def stop(self, chat_id: int, argument: str | None) -> str:
        """``/stop [category]``: the opt-out, and the reply."""
        category = self._category(argument)
        if category is None:
            return self._say("unknown")
        await self.audience.opt_out(chat_id, category, how="command", source=_SOURCE)
        return self._say("stopped", category)

    async def subscribe(self, chat_id: int, argument: str | None) -> str:
        """``/subscribe [category]``: the opt-in, and the reply."""
        category = self._category(argument)
        if category is None:
            return self._say("unknown")
        await self.audience.opt_in(chat_id, category)
        return self._say("subscribed", category)

    async def pressed(self, chat_id: int, data: str | None) -> str:
        """A press of an unsubscribe button: the opt-out, and the answer to the press. A
        category the bot does not accept writes nothing (button data can be forged)."""
        category = unsubscribe_category(data or "")
        if category is None or category not in self.categories:
            return self._say("unknown")
        await self.audience.opt_out(chat_id, category, how="button", source=_SOURCE)
        return self._say("pressed", category)


def _command(field: str, value: object) -> str:
    """A command's name as Telegram takes it."""
    if not isinstance(value, str) or not _COMMAND.fullmatch(value):
        raise ValidationError(field, "must be 1-32 lowercase letters, digits or underscores (no /)")
    return value


def _texts(texts: object) -> Mapping[str, str]:
    """The default texts, with those given instead; each checked by filling it in."""
    if texts is None:
        return DEFAULT_TEXTS
    if not isinstance(texts, Mapping):
        raise ValidationTypeError("texts", f"must be a mapping, got {type(texts).__name__}")
    unknown = sorted(str(k) for k in texts if k not in DEFAULT_TEXTS)
    if unknown:
        raise ValidationError(
            "texts", f"has no {', '.join(unknown)}; it has {', '.join(DEFAULT_TEXTS)}"
        )
    merged = {**DEFAULT_TEXTS, **texts}
    for name, text in merged.items():
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("texts", f"{name}: must be a non-blank str")
        try:
            text.format(category="", categories="", stop="", subscribe="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValidationError(
                "texts",
                f"{name}: only {{category}}, {{categories}}, {{stop}} and {{subscribe}} can "
                f"be filled in ({type(exc).__name__})",
            ) from None
    return merged
