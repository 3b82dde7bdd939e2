"""audience_handlers: python-telegram-bot handlers that keep the audience up to date."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Update
from telegram.ext import (
    ApplicationHandlerStop,
    BaseHandler,
    CallbackQueryHandler,
    ChatMemberHandler,
    CommandHandler,
    ContextTypes,
)
from typing_extensions import Unpack

from notifyonce._audience import AsyncAudience
from notifyonce._bots.rules import AudienceOptions, AudienceRules
from notifyonce._buttons import UNSUBSCRIBE_PREFIX
from notifyonce._errors import ValidationTypeError

__all__ = ["audience_handlers"]

Context = ContextTypes.DEFAULT_TYPE


def audience_handlers(
    audience: AsyncAudience,
    *,
    group: int = -1,
    **options: Unpack[AudienceOptions],
) -> dict[int, list[BaseHandler[Update, Any, Any]]]:
    """python-telegram-bot handlers that tell ``audience`` what the bot's updates say:
    pass them to ``application.add_handlers(...)``.

    They record what [`audience_router`][notifyonce.aiogram.audience_router] records
    for aiogram: the bot blocked in a private chat (``GoneReason.BLOCKED``) or removed
    from a group or channel (``GoneReason.KICKED``) from ``my_chat_member``, and back
    when it is a member again; ``/start`` brings the user back; ``/stop [category]`` and
    ``/subscribe [category]`` opt out and in with a short reply; a press of the
    [`unsubscribe_button`][notifyonce.unsubscribe_button] opts out and is answered.

    They sit in a handler group of their own (``group``, -1 by default: before your
    handlers in group 0), so ``my_chat_member`` and ``/start`` go on to your own
    handlers too (python-telegram-bot runs one handler per group); ``/stop``,
    ``/subscribe`` and the button's presses end there (``ApplicationHandlerStop``), so a
    catch-all "unknown command" handler of yours does not answer them too.

    Args:
        audience: Where to record it; usually ``AsyncAudience.beside(ledger)``.
        group: The handler group; lower than your handlers' groups.
        **options: ``default_category``, ``categories``, ``stop_command``,
            ``subscribe_command``, ``start_comes_back`` and ``texts``, as for
            [`audience_router`][notifyonce.aiogram.audience_router].

    Returns:
        ``{group: [handlers]}``, as ``Application.add_handlers`` takes it.

    Raises:
        ValidationError: A bad argument, named; raised here, before any update.

    Examples:
        >>> from telegram.ext import Application
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from notifyonce import AsyncAudience
        >>> audience = AsyncAudience(create_async_engine("sqlite+aiosqlite://"))
        >>> application = Application.builder().token("123:ABC").build()
        >>> application.add_handlers(audience_handlers(audience, categories=["digest"]))
        >>> len(application.handlers[-1])
        5
    """
    rules = AudienceRules.build(audience, **options)
    if isinstance(group, bool) or not isinstance(group, int):
        raise ValidationTypeError("group", f"must be an int, got {type(group).__name__}")

    async def membership(update: Update, context: Context) -> None:
        change = update.my_chat_member
        if change is None:
            return
        member = change.new_chat_member
        is_member = getattr(member, "is_member", None)
        await rules.membership(change.chat.id, change.chat.type, member.status, is_member)

    async def start(update: Update, context: Context) -> None:
        if update.effective_chat is not None:
            await rules.started(update.effective_chat.id)

    async def stop(update: Update, context: Context) -> None:
        await _reply(update, rules.stop, context.args)

    async def subscribe(update: Update, context: Context) -> None:
        await _reply(update, rules.subscribe, context.args)

    async def pressed(update: Update, context: Context) -> None:
        query = update.callback_query
        if query is None:
            return
        message = query.message
        chat = message.chat.id if message is not None else query.from_user.id
        await query.answer(await rules.pressed(chat, query.data))
        raise ApplicationHandlerStop

    handlers: list[BaseHandler[Update, Any, Any]] = [
        ChatMemberHandler(membership, ChatMemberHandler.MY_CHAT_MEMBER),
        CommandHandler(rules.stop_command, stop),
        CommandHandler(rules.subscribe_command, subscribe),
        CallbackQueryHandler(pressed, pattern=f"^{re.escape(UNSUBSCRIBE_PREFIX)}"),
    ]
    if rules.start_comes_back:
        handlers.append(CommandHandler("start", start))
    return {group: handlers}


async def _reply(
    update: Update, command: Callable[[int, str | None], Awaitable[str]], args: list[str] | None
) -> None:
    """Run a command's rule for the chat, send its reply, and end the update there."""
    chat, message = update.effective_chat, update.effective_message
    if chat is None or message is None:
        return
    reply = await command(chat.id, " ".join(args or ()) or None)
    await message.reply_text(reply, parse_mode=None)
    raise ApplicationHandlerStop
