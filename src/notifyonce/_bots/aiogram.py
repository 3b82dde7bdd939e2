"""audience_router: an aiogram 3 Router that keeps the audience up to date from updates."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.dispatcher.event.bases import SkipHandler
from aiogram.filters import Command, CommandObject, CommandStart
from aiogram.types import CallbackQuery, ChatMemberUpdated, Message
from typing_extensions import Unpack

from notifyonce._audience import AsyncAudience
from notifyonce._bots.rules import AudienceOptions, AudienceRules
from notifyonce._buttons import UNSUBSCRIBE_PREFIX

__all__ = ["audience_router"]


def audience_router(
    audience: AsyncAudience,
    *,
    name: str = "notifyonce.audience",
    **options: Unpack[AudienceOptions],
) -> Router:
    """An aiogram ``Router`` that tells ``audience`` what the bot's updates say.

    - **The bot blocked or removed** (``my_chat_member``): in a private chat, the bot
      kicked means the user blocked it (``mark_gone(chat, GoneReason.BLOCKED,
      source="update")``); in a group or channel, left or kicked means it was removed
      (``GoneReason.KICKED``). Member or administrator again: ``come_back(chat)``.
    - **``/start``**: the user is talking to the bot again: ``come_back(chat)``
      (unless ``start_comes_back=False``).
    - **``/stop [category]``**: ``opt_out(chat, category, how="command")`` with a short
      reply; without a category, ``default_category``. **``/subscribe [category]``**:
      ``opt_in``.
    - **The unsubscribe button** ([`unsubscribe_button`][notifyonce.unsubscribe_button]):
      ``opt_out(chat, category, how="button")``, and the press is answered.

    ``my_chat_member`` and ``/start`` go on to your own handlers after it (the router's
    handlers raise aiogram's ``SkipHandler``), so your welcome still runs; ``/stop``,
    ``/subscribe`` and the button's presses end here. Include it **before** your own
    routers: aiogram offers an update to the routers in the order they were included,
    and to handlers registered on the ``Dispatcher`` itself before any of them, so a
    ``/start`` handler there, or in a router included earlier, keeps ``/start`` from it
    (a user who unblocks the bot is still recorded: Telegram sends ``my_chat_member``).

    Args:
        audience: Where to record it; usually ``AsyncAudience.beside(ledger)``, the one
            the Notifier asks.
        name: The router's name.
        **options: The keywords below, each optional.

    Keyword Args:
        default_category (str): What ``/stop`` and ``/subscribe`` without an argument
            name (``"promo"``).
        categories (Iterable[str]): Further categories ``/stop <category>``,
            ``/subscribe <category>`` and the unsubscribe buttons may name. Any other is
            answered with the list and writes nothing (a button's data can be forged).
        stop_command (str): The opt-out command's name, without the slash (``"stop"``).
        subscribe_command (str): The opt-in command's name (``"subscribe"``).
        start_comes_back (bool): Whether ``/start`` brings a gone user back (True).
        texts (Mapping[str, str] | None): Replies to use instead of the defaults, by
            name (``"stopped"``, ``"subscribed"``, ``"unknown"``, ``"pressed"``); each
            may use ``{category}``, ``{categories}``, ``{stop}`` and ``{subscribe}``.
            They are sent as plain text.

    Raises:
        ValidationError: A bad argument, named; raised here, before any update.

    Examples:
        >>> from aiogram import Dispatcher
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from notifyonce import AsyncAudience
        >>> audience = AsyncAudience(create_async_engine("sqlite+aiosqlite://"))
        >>> dp = Dispatcher()
        >>> router = dp.include_router(audience_router(audience, categories=["digest"]))
        >>> router.name
        'notifyonce.audience'
    """
    rules = AudienceRules.build(audience, **options)
    router = Router(name=name)

    @router.my_chat_member()
    async def membership(event: ChatMemberUpdated) -> None:
        member = event.new_chat_member
        is_member = getattr(member, "is_member", None)
        # Older aiogram releases (3.13 among them) give the status and the chat type as
        # str enums, which format as their names on Python 3.11 and later: their values.
        status = str(getattr(member.status, "value", member.status))
        kind = str(getattr(event.chat.type, "value", event.chat.type))
        await rules.membership(event.chat.id, kind, status, is_member)
        raise SkipHandler  # the bot's own my_chat_member handlers still get it

    if rules.start_comes_back:

        @router.message(CommandStart())
        async def start(message: Message) -> None:
            await rules.started(message.chat.id)
            raise SkipHandler  # the bot's own /start handler still answers

    @router.message(Command(rules.stop_command))
    async def stop(message: Message, command: CommandObject) -> None:
        await message.answer(await rules.stop(message.chat.id, command.args), parse_mode=None)

    @router.message(Command(rules.subscribe_command))
    async def subscribe(message: Message, command: CommandObject) -> None:
        reply = await rules.subscribe(message.chat.id, command.args)
        await message.answer(reply, parse_mode=None)

    @router.callback_query(F.data.startswith(UNSUBSCRIBE_PREFIX))
    async def pressed(query: CallbackQuery) -> None:
        chat = query.message.chat.id if query.message is not None else query.from_user.id
        await query.answer(await rules.pressed(chat, query.data))

    return router
