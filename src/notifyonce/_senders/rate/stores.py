"""Where the limiter's state lives: the store protocol, the in-memory store, the turn rule.

A *turn* is permission for one send to start after a wait. Shared stores (SQL, Redis) keep
one row or hash per scope and decide a turn with the generic cell rate algorithm (GCRA) in
its pacing form: each scope has a *theoretical arrival time* ``tat``, the earliest start of
its next send. A turn for a send to ``chat`` on a lane (the bot's 30/s, or the paid
broadcast lane):

1. waits, without booking anything, while the chat's ``tat``, the chat's flood wait or the
   bot's flood wait is in the future (so a chat being paced never holds a bot slot);
2. otherwise starts at ``at = max(now, lane.tat)`` and moves ``lane.tat`` to
   ``at + lane_interval`` and ``chat.tat`` to ``at + chat_interval``; or books nothing
   when ``at`` is beyond the caller's ``max_wait``.

The 429 rule (the same as the in-memory limiter's): a flood wait delays its chat; a second
chat flooding while the first one's wait still runs makes it bot-wide.

`decide_turn` and `decide_flood` are that rule as pure functions; the SQL store
runs them between reading and writing rows it holds locked, the Redis store runs the same
rule as one Lua script, and the tests compare both with the functions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol, runtime_checkable

from notifyonce._errors import (
    FloodWaitError,
    RateStoreUnavailableError,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._senders.telegram.ratelimit import RateLimit, RateLimitState, Reservation

__all__ = [
    "BOT_LANE",
    "PAID_LANE",
    "Grant",
    "MemoryRateStore",
    "RateStore",
    "RateStoreUnavailableError",
    "ScopeState",
    "SharedRateLimiter",
    "Turn",
    "TurnRequest",
    "bot_key",
    "decide_flood",
    "decide_turn",
]

logger = logging.getLogger("notifyonce.ratelimit")

#: Seconds between two asks of a rate store that cannot be reached.
_STORE_PROBE = 0.5

BOT_LANE = "bot"
PAID_LANE = "paid"


def bot_key(token: str) -> str:
    """The budget key of a bot: the numeric id before the token's colon.

    A token without a numeric id gets a digest instead, so the token itself is never
    stored.

    Examples:
        >>> bot_key("123456:ABC-secret")
        '123456'
    """
    head, _, _ = token.partition(":")
    if head.isdigit() and 0 < len(head) <= 20:
        return head
    return "h" + hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRequest:
    """What a sender asks a store for: a turn for one send.

    Attributes:
        bot: The bot's budget key (see [`bot_key`][notifyonce.ratelimit.bot_key]).
        chat: The recipient (a chat id string or ``@channel``).
        lane: ``"bot"`` (the bot's own per-second budget) or ``"paid"`` (paid broadcasts).
        limit: The limits in force; the store derives the intervals from it.
        max_wait: Seconds the caller can wait; a start further away is not booked.
        ready_in: Seconds from now before which the send cannot leave (the caller's own
            steps before it, such as claiming its slot): the start is booked no earlier.
    """

    bot: str
    chat: str
    lane: str
    limit: RateLimit
    max_wait: float
    ready_in: float = 0.0

    @property
    def lane_interval(self) -> float:
        """Seconds between two starts on the request's lane (0 when unlimited)."""
        if self.lane == PAID_LANE:
            paid = self.limit.paid_broadcast_per_second
            return 0.0 if paid is None else (1 + self.limit.jitter_allowance) / paid
        return self.limit.bot_interval

    @property
    def chat_interval(self) -> float:
        """Seconds between two starts to the request's chat (0 when unlimited)."""
        return self.limit.chat_interval(self.chat)


@dataclass(frozen=True, slots=True)
class Turn:
    """A store's answer.

    Attributes:
        wait: Seconds from now until the send may start (booked), or until it is worth
            asking again (not booked).
        booked: True when the start is this send's; False when nothing was booked: the
            chat is still paced or in a flood wait, or the start is beyond ``max_wait``.
        at: The start on the store's own clock (seconds), when booked.
        handle: Store-specific, given back to
            [`RateStore.give_back`][notifyonce.ratelimit.RateStore.give_back].
        flood: Whose flood wait holds an unbooked turn: ``"chat"`` (this chat's 429),
            ``"bot"`` (a bot-wide one), or None (pacing, or nothing holds it).
    """

    wait: float
    booked: bool
    at: float | None = None
    handle: object = None
    flood: str | None = None


@runtime_checkable
class RateStore(Protocol):
    """Where the limiter keeps its state. Every method is atomic for the bot it names."""

    #: Seconds added to the limit's ``jitter_allowance`` when pacing through this store:
    #: its varying round trips spread the start times further.
    extra_jitter: float

    async def take_turn(self, request: TurnRequest) -> Turn:
        """Book the earliest start for the request's send, or say how long to wait."""
        ...

    async def flood_wait(self, bot: str, chat: str, retry_after: float) -> None:
        """Record a 429 answer: delay ``chat`` (or the whole bot) by ``retry_after`` s."""
        ...

    async def give_back(self, turn: Turn) -> None:
        """Return a booked start that will not be used (may be a no-op)."""
        ...


@dataclass(slots=True)
class ScopeState:
    """One scope's row: a bot, a lane or a chat (times in the store's clock, seconds)."""

    tat: float = 0.0
    flood_until: float = 0.0
    flood_chat: str | None = None  # bot rows: the chat whose flood wait ends last
    chat_flood_until: float = 0.0  # bot rows: when that chat's flood wait ends


def decide_turn(
    now: float,
    bot: ScopeState,
    lane: ScopeState,
    chat: ScopeState,
    *,
    lane_interval: float,
    chat_interval: float,
    max_wait: float,
    ready_in: float = 0.0,
) -> float | None:
    """Apply the turn rule; returns the start (mutating ``lane`` and ``chat``) or None.

    None means nothing was booked; the wait is then `hold_until` - now (the chat is
    not ready) or ``lane.tat`` - now (beyond ``max_wait``). ``lane`` may be ``bot``. The
    start is ``ready_in`` seconds from now at the earliest.
    """
    if hold_until(now, bot, chat) > now:
        return None
    at = max(now + ready_in, lane.tat)
    if at - now > max_wait:
        return None
    if lane_interval > 0:
        lane.tat = at + lane_interval
    if chat_interval > 0:
        chat.tat = at + chat_interval
    return at


def hold_until(now: float, bot: ScopeState, chat: ScopeState) -> float:
    """When the chat may next start, ignoring the lane's pacing."""
    return max(now, chat.tat, chat.flood_until, bot.flood_until)


def decide_flood(
    now: float, bot: ScopeState, chat_key: str, chat: ScopeState, seconds: float
) -> None:
    """Apply the 429 rule to ``bot`` and ``chat`` (mutating both)."""
    deadline = now + max(seconds, 0.0)
    chat.flood_until = max(chat.flood_until, deadline)
    if bot.chat_flood_until > now and bot.flood_chat not in (None, chat_key):
        bot.flood_until = max(bot.flood_until, deadline, bot.chat_flood_until)
    if deadline >= bot.chat_flood_until or bot.chat_flood_until <= now:
        bot.flood_chat, bot.chat_flood_until = chat_key, deadline


def turn_from(
    now: float, bot: ScopeState, lane: ScopeState, chat: ScopeState, request: TurnRequest
) -> Turn:
    """The Turn for ``request`` given the rows as read (mutates them when booked)."""
    at = decide_turn(
        now,
        bot,
        lane,
        chat,
        lane_interval=request.lane_interval,
        chat_interval=request.chat_interval,
        max_wait=request.max_wait,
        ready_in=request.ready_in,
    )
    if at is not None:
        return Turn(at - now, booked=True, at=at)
    hold = hold_until(now, bot, chat)
    if hold > now:
        return Turn(hold - now, booked=False, flood=flood_of(hold, bot, chat))
    return Turn(max(now, lane.tat) - now, booked=False)


def flood_of(hold: float, bot: ScopeState, chat: ScopeState) -> str | None:
    """Whose flood wait sets ``hold`` (see `hold_until`): ``"bot"``, ``"chat"`` or None."""
    if bot.flood_until >= hold:
        return "bot"
    if chat.flood_until >= hold:
        return "chat"
    return None


class MemoryRateStore:
    """The limiter's state in this process only: the default of every sender.

    Each (bot, lane, limits) gets its own calendar (see ``RateLimitState``): a send waiting
    for its chat books a later bot slot and other chats fill the slots before it. Share one
    instance between senders of one bot in one process; across processes or hosts use
    [`SQLRateStore`][notifyonce.ratelimit.SQLRateStore] or
    [`RedisRateStore`][notifyonce.ratelimit.RedisRateStore].

    Args:
        clock: Monotonic clock (tests inject a fake one).

    Examples:
        >>> store = MemoryRateStore()
    """

    extra_jitter = 0.0

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._states: dict[tuple[str, str, RateLimit], RateLimitState] = {}

    def _state(self, bot: str, lane: str, limit: RateLimit) -> RateLimitState:
        key = (bot, lane, limit)
        state = self._states.get(key)
        if state is None:
            lane_limit = limit
            if lane == PAID_LANE:
                lane_limit = dataclasses.replace(
                    limit, bot_per_second=limit.paid_broadcast_per_second
                )
            state = self._states[key] = RateLimitState(lane_limit)
        return state

    async def take_turn(self, request: TurnRequest) -> Turn:
        """Book the earliest start on this process's calendar."""
        state = self._state(request.bot, request.lane, request.limit)
        now = self._clock()
        reservation = state.reserve(request.chat, now, request.max_wait, request.ready_in)
        at = reservation.at if reservation.booked else None
        return Turn(
            reservation.at - now, reservation.booked, at, (state, reservation), reservation.flood
        )

    async def flood_wait(self, bot: str, chat: str, retry_after: float) -> None:
        """Delay ``chat`` on every calendar of ``bot``."""
        now = self._clock()
        for (state_bot, _, _), state in self._states.items():
            if state_bot == bot:
                state.flood_wait(chat, retry_after, now)

    async def give_back(self, turn: Turn) -> None:
        """Free the calendar slot of a turn that will not be used."""
        if isinstance(turn.handle, tuple):
            state, reservation = turn.handle
            if isinstance(state, RateLimitState) and isinstance(reservation, Reservation):
                state.cancel(reservation)


@dataclass(frozen=True, slots=True)
class Grant:
    """A booked turn handed to its send: ``due`` is its start on the limiter's clock."""

    turn: Turn
    due: float


# Handover points kept before the passed ones (of an event loop closed before them) go.
_POINTS_KEPT = 4096


class SharedRateLimiter:
    """Takes turns from a store for one sender; sleeps on the sender's clock."""

    def __init__(
        self,
        limit: RateLimit,
        store: RateStore,
        bot: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.limit = limit
        extra = getattr(store, "extra_jitter", 0.0)
        # The pacing limit: the store's own spread added to the caller's allowance.
        self._pacing = (
            dataclasses.replace(limit, jitter_allowance=min(limit.jitter_allowance + extra, 0.5))
            if extra
            else limit
        )
        self.store = store
        self.bot = bot
        self._clock = clock
        self._sleep = sleep
        self._asking = asyncio.Lock()
        # The last failure of the store, and how many there were: a request that queued
        # behind a failing one fails with it instead of waiting out the same fault again
        # (a held lock would otherwise cost each queued send its own lock_timeout).
        self._failure: RateStoreUnavailableError | None = None
        self._failures = 0
        # How long a store that went away (Redis restarted, its database failed over) is
        # waited for, and the latest start this limiter booked: after a restart the store
        # has forgotten every booking, so none is made again before this one's time.
        self._patience = float(getattr(store, "outage_patience", 0.0) or 0.0)
        self._horizon = 0.0
        self._answered = False  # a store that never answered is misconfigured, not away
        # The handovers on a ``together`` grid still to come, by their moment: the event
        # loop that waits for it and the turns' waiters, woken by one timer (see `_handover`).
        self._points: dict[float, tuple[asyncio.AbstractEventLoop, list[asyncio.Future[None]]]]
        self._points = {}

    @property
    def tolerance(self) -> float:
        """How late (seconds) a send may leave after its booked start and keep the limits."""
        return self._pacing.jitter_allowance / 2

    async def acquire(
        self,
        chat: str,
        max_wait: float,
        *,
        lane: str = BOT_LANE,
        flood_limit: float = math.inf,
        ready_in: float = 0.0,
        together: float = 0.0,
    ) -> Grant | float:
        """Wait for this send's turn; return it, or the seconds needed if beyond ``max_wait``.

        The turn's start is booked at least ``ready_in`` seconds ahead and handed over
        that much before it: a caller with steps of its own before the send (a claim) takes
        them then, and its send leaves at the start booked for it (`Grant.due`). With
        ``together``, turns are handed over on a grid of that many seconds (up to that much
        earlier still), so the turns starting in one step of it are handed over at the
        same moment and their callers' steps can share one statement. A flood wait is
        waited out only up to ``flood_limit`` seconds.

        Raises:
            RateStoreUnavailableError: The store failed; the caller must not send.
            FloodWaitError: A flood wait (the chat's or the bot's) holds the turn for longer
                than ``flood_limit``.
        """
        start = self._clock()
        # Waking up late (a busy event loop) would bunch this send with the next booked
        # ones; half the jitter allowance is tolerated, beyond that the send asks again.
        tolerance = self.tolerance
        while True:
            remaining = max_wait - (self._clock() - start)
            request = TurnRequest(
                bot=self.bot,
                chat=chat,
                lane=lane,
                limit=self._pacing,
                max_wait=max(remaining, 0.0),
                ready_in=ready_in,
            )
            # One request at a time per sender: the sender's concurrent sends would only
            # queue on the store's lock, and the time spent queueing there is time the
            # store's "now" cannot see.
            failures = self._failures
            async with self._asking:
                if self._failures != failures and self._failure is not None:
                    raise RateStoreUnavailableError(str(self._failure))
                turn = await self._ask(partial(self.store.take_turn, request))
            if not turn.booked and turn.flood is not None and turn.wait > flood_limit:
                whose = "the bot's" if turn.flood == "bot" else "the chat's"
                raise FloodWaitError(
                    f"rate limit: {whose} flood wait ends in {turn.wait:.0f} s",
                    retry_after=turn.wait,
                    bot_wide=turn.flood == "bot",
                )
            if not turn.booked and turn.wait > remaining:
                return turn.wait
            now = self._clock()
            due = now + turn.wait
            handover = due
            if turn.booked:
                handover -= ready_in
                if together > 0:
                    handover -= handover % together
                self._horizon = max(self._horizon, due)
            delay = handover - now
            if delay <= 0:
                if turn.booked:
                    return Grant(turn, due)
                continue
            try:
                if turn.booked and together > 0 and self._sleep is asyncio.sleep:
                    await self._handover(handover, delay)
                else:
                    await self._sleep(delay)
            except BaseException:
                if turn.booked:
                    await asyncio.shield(self._give_back(turn))
                raise
            if turn.booked:
                if self._clock() - handover <= tolerance:
                    return Grant(turn, due)
                await self._give_back(turn)

    async def _handover(self, point: float, delay: float) -> None:
        """Sleep ``delay`` seconds, to ``point`` of the ``together`` grid, as
        ``asyncio.sleep`` would: the turns handed over at one point (ten at 1,000 msg/s on
        a 10 ms grid) share one timer, set by the first of them, instead of a timer each."""
        loop = asyncio.get_running_loop()
        waiting = self._points.get(point)
        if waiting is None or waiting[0] is not loop:  # a point of a loop gone: start anew
            if len(self._points) >= _POINTS_KEPT:  # points of loops closed before them
                now = self._clock()
                self._points = {p: w for p, w in self._points.items() if p > now}
            waiting = self._points[point] = (loop, [])
            loop.call_later(delay, self._hand_over, point, waiting)
        waiter: asyncio.Future[None] = loop.create_future()
        waiting[1].append(waiter)
        await waiter

    def _hand_over(
        self,
        point: float,
        waiting: tuple[asyncio.AbstractEventLoop, list[asyncio.Future[None]]],
    ) -> None:
        if self._points.get(point) is waiting:
            del self._points[point]
        for waiter in waiting[1]:
            if not waiter.done():  # a cancelled one gave its turn back itself
                waiter.set_result(None)

    async def give_back(self, grant: Grant) -> None:
        """Give back a turn that will not be used at its start (never raises)."""
        await asyncio.shield(self._give_back(grant.turn))

    async def flood_wait(self, chat: str, retry_after: float) -> None:
        """Record a 429 for ``chat`` in the store (a failing store is logged, not raised)."""
        try:
            await self.store.flood_wait(self.bot, chat, retry_after)
        except Exception as exc:  # the next turn fails closed anyway
            logger.warning("rate store: could not record a flood wait (%s)", type(exc).__name__)

    async def _give_back(self, turn: Turn) -> None:
        try:
            await self.store.give_back(turn)
        except Exception as exc:  # a slot not given back only costs throughput
            logger.debug("rate store: could not give a turn back (%s)", type(exc).__name__)

    async def _ask(self, call: Callable[[], Awaitable[Turn]]) -> Turn:
        """The store's answer to ``call``. A store that cannot be reached is asked again
        every half second for up to its ``outage_patience`` (this sender's other sends
        wait behind the lock meanwhile), then fails closed."""
        started = self._clock()
        away = False
        while True:
            try:
                turn = await call()
            except RateStoreUnavailableError as exc:  # the store said why itself
                self._failed(exc)
                raise
            except Exception as exc:
                waited = self._clock() - started
                if waited >= self._patience or not self._answered:
                    failure = RateStoreUnavailableError(
                        f"rate store unavailable ({type(exc).__name__})"
                        + (f" for {waited:.0f} s" if away else "")
                        + "; nothing was sent"
                    )
                    self._failed(failure)
                    raise failure from exc
                if not away:
                    away = True
                    logger.warning(
                        "rate store %r is away (%s): sends paused, waiting up to %.0f s",
                        self.store,
                        type(exc).__name__,
                        self._patience,
                    )
                # A restarted store has forgotten the turns booked before: ask again no
                # sooner than this limiter's latest booked start, so that no turn it hands
                # out now lands among those.
                await self._sleep(max(_STORE_PROBE, self._horizon - self._clock()))
                continue
            if away:
                logger.warning(
                    "rate store %r is back after %.1f s", self.store, self._clock() - started
                )
            self._answered = True
            return turn

    def _failed(self, failure: RateStoreUnavailableError) -> None:
        self._failure = failure
        self._failures += 1


def infinite_wait(seconds: float) -> float:
    """``seconds``, or a large finite number for infinity (stores keep finite numbers)."""
    return seconds if math.isfinite(seconds) else 1e12


def check_extra_jitter(value: object) -> float:
    """``value`` if it is a number of seconds in [0, 0.5), else a ValidationError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationTypeError("extra_jitter", f"must be a number, got {type(value).__name__}")
    if not 0 <= value < 0.5:
        raise ValidationError("extra_jitter", "must be >= 0 and < 0.5 seconds")
    return float(value)


def check_patience(value: object) -> float:
    """``value`` if it is a number of seconds in [0, one day], else a ValidationError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationTypeError(
            "outage_patience", f"must be a number of seconds, got {type(value).__name__}"
        )
    if not 0 <= value <= 86_400:
        raise ValidationError("outage_patience", "must be from 0 to 86400 seconds")
    return float(value)
