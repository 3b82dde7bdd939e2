"""Telegram's send limits as scheduling on monotonic deadlines.

Every send books a start time before it waits, so concurrent sends never race for a slot:

- per bot: booked start times are at least ``(1 + jitter_allowance) / bot_per_second``
  apart (a calendar, so a send that waits for its chat does not hold up other chats);
- per chat: the next send to a chat starts at least ``(1 + jitter_allowance) /
  private_chat_per_second`` (private chats) or ``(60 + jitter_allowance) /
  group_per_minute`` (groups and channels) after the previous one;
- flood waits (429 ``retry_after``) are deadlines on the same clock.

Pure pacing with spacing ``(W + j) / N`` keeps at most N sends in *any* window of W
seconds even when each request is delayed in transit by a different amount, up to ``j``
seconds: sends i and i + N leave at least ``W + j`` apart and so arrive at least ``W``
apart. ``jitter_allowance`` trades that safety for throughput (0.03 s: 97 % of the cap).

The 429 rule: a flood wait delays the chat that got it. When a second chat gets a 429
while the first chat's flood wait is still running, the flood is taken to be bot-wide and
every send waits until the latest of those deadlines. A single 429 therefore never stalls
other chats, and a real bot-wide flood stalls everything after its second answer.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = ["RateLimit", "RateLimitState", "Reservation", "chat_kind"]

_PRUNE_EVERY = 1024


def chat_kind(recipient: str) -> str:
    """``"private"`` for a positive chat id, ``"group"`` for a negative id or ``@name``."""
    return "group" if recipient.startswith(("-", "@")) else "private"


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """Telegram's send limits for one bot; pass ``rate_limit=None`` to the sender to disable.

    Args:
        bot_per_second: Messages per second across all chats (Telegram: about 30).
        private_chat_per_second: Messages per second to one private chat (about 1).
        group_per_minute: Messages per minute to one group or channel (20).
        jitter_allowance: Seconds by which requests may be delayed in transit relative to
            each other and still stay within every limit in every sliding window. Each
            limit is paced as N per ``W + jitter_allowance`` seconds.
        paid_broadcast_per_second: Messages per second of the paid broadcast lane (Telegram
            allows up to 1,000 with ``allow_paid_broadcast``, charged in Stars); used only
            by a sender created with ``allow_paid_broadcast=True``.

    Examples:
        >>> round(RateLimit(bot_per_second=20).bot_interval, 4)  # (1 + 0.03) / 20
        0.0515
    """

    bot_per_second: float | None = 30.0
    private_chat_per_second: float | None = 1.0
    group_per_minute: float | None = 20.0
    jitter_allowance: float = 0.03
    paid_broadcast_per_second: float | None = 1000.0

    def __post_init__(self) -> None:
        names = ("bot_per_second", "private_chat_per_second", "group_per_minute")
        for name in (*names, "paid_broadcast_per_second"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValidationTypeError(
                    name, f"must be a number or None, got {type(value).__name__}"
                )
            if not (value > 0 and math.isfinite(value)):
                raise ValidationError(name, "must be a positive finite number or None")
        j = self.jitter_allowance
        if isinstance(j, bool) or not isinstance(j, (int, float)):
            raise ValidationTypeError(
                "jitter_allowance", f"must be a number, got {type(j).__name__}"
            )
        if not (0 <= j < 1):
            raise ValidationError("jitter_allowance", "must be >= 0 and < 1 second")

    @property
    def bot_interval(self) -> float:
        """Seconds between two sends of the bot (0 when unlimited)."""
        if self.bot_per_second is None:
            return 0.0
        return (1 + self.jitter_allowance) / self.bot_per_second

    def chat_interval(self, recipient: str) -> float:
        """Seconds between two sends to ``recipient`` (0 when unlimited)."""
        if chat_kind(recipient) == "group":
            if self.group_per_minute is None:
                return 0.0
            return (60 + self.jitter_allowance) / self.group_per_minute
        if self.private_chat_per_second is None:
            return 0.0
        return (1 + self.jitter_allowance) / self.private_chat_per_second


@dataclass(frozen=True, slots=True)
class Reservation:
    """A start time for one send; ``booked`` is False when it was further than allowed.

    ``flood`` says whose flood wait holds an unbooked start back until ``at``: ``"bot"`` or
    ``"chat"``; None when the start was only further than allowed.
    """

    chat: str
    at: float
    booked: bool
    previous_chat_ready: float | None = None
    flood: str | None = None


class RateLimitState:
    """The pure scheduler: no clock, no sleeping. Callers pass ``now`` (monotonic seconds)."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._bot_interval = limit.bot_interval
        self._booked: list[float] = []  # sorted future start times of the bot
        # How many neighbours in _booked have room for a start between them: while none
        # has, a start that conflicts goes after the last one, found without a walk.
        self._gaps = 0
        self._chat_ready: dict[str, float] = {}  # earliest next start per chat
        self._chat_flood: dict[str, float] = {}  # flood-wait deadline per chat
        self._bot_flood = -math.inf
        self._calls = 0

    def reserve(
        self, chat: str, now: float, max_wait: float = math.inf, ready_in: float = 0.0
    ) -> Reservation:
        """Book the earliest start for a send to ``chat``, no earlier than ``now + ready_in``,
        unless it is after ``now + max_wait``."""
        self._calls += 1
        if self._calls % _PRUNE_EVERY == 0:
            self._prune(now)
        chat_flood = self._chat_flood.get(chat, -math.inf)
        flood_until = max(chat_flood, self._bot_flood)
        if flood_until > now:
            # A flood wait books nothing: the caller waits it out (or gives up) and asks again.
            whose = "bot" if self._bot_flood >= chat_flood else "chat"
            return Reservation(chat, flood_until, booked=False, flood=whose)
        ready = max(now + ready_in, self._chat_ready.get(chat, -math.inf))
        at = self._earliest_bot_slot(ready, now)
        if at - now > max_wait:
            return Reservation(chat, at, booked=False)
        if self._bot_interval > 0:
            self._insert(at)
        previous = self._chat_ready.get(chat)
        interval = self.limit.chat_interval(chat)
        if interval > 0:
            self._chat_ready[chat] = at + interval
        return Reservation(chat, at, booked=True, previous_chat_ready=previous)

    def cancel(self, reservation: Reservation) -> None:
        """Give back a booked start that will not be used (the caller gave up waiting)."""
        if not reservation.booked:
            return
        index = bisect.bisect_left(self._booked, reservation.at)
        if index < len(self._booked) and self._booked[index] == reservation.at:
            self._remove(index)
        chat = reservation.chat
        if self._chat_ready.get(chat) == reservation.at + self.limit.chat_interval(chat):
            if reservation.previous_chat_ready is None:
                del self._chat_ready[chat]
            else:
                self._chat_ready[chat] = reservation.previous_chat_ready

    def flood_wait(self, chat: str, retry_after: float, now: float) -> None:
        """Record a 429: delay ``chat``, or everything when another chat is already waiting."""
        deadline = now + max(retry_after, 0.0)
        others = [d for c, d in self._chat_flood.items() if c != chat and d > now]
        self._chat_flood[chat] = max(deadline, self._chat_flood.get(chat, -math.inf))
        if others:
            self._bot_flood = max(self._bot_flood, deadline, *others)

    def _earliest_bot_slot(self, ready: float, now: float) -> float:
        interval = self._bot_interval
        if interval <= 0:
            return ready
        booked = self._booked
        # Starts before now - interval can no longer conflict with anything.
        stale = bisect.bisect_left(booked, now - interval)
        if stale:
            if self._gaps:
                self._gaps -= sum(map(self._gap, booked[:stale], booked[1 : stale + 1]))
            del booked[:stale]
        at = ready
        index = bisect.bisect_right(booked, at - interval)
        if index == len(booked) or booked[index] >= at + interval:
            return at  # nothing booked within an interval of it
        if not self._gaps:
            # Every start from the first conflicting one on is within two intervals of
            # the next: the walk below would end after the last.
            return booked[-1] + interval
        while index < len(booked) and booked[index] < at + interval:
            at = max(at, booked[index] + interval)
            index += 1
        return at

    def _gap(self, before: float, after: float) -> bool:
        """Whether a start fits between two neighbouring starts (as the walk sees it)."""
        interval = self._bot_interval
        return after >= before + interval + interval

    def _insert(self, at: float) -> None:
        booked = self._booked
        index = bisect.bisect_right(booked, at)
        gaps = self._gaps
        if index:
            gaps += self._gap(booked[index - 1], at)
        if index < len(booked):
            gaps += self._gap(at, booked[index])
            if index:
                gaps -= self._gap(booked[index - 1], booked[index])
        booked.insert(index, at)
        self._gaps = gaps

    def _remove(self, index: int) -> None:
        booked = self._booked
        at = booked.pop(index)
        gaps = self._gaps
        if index:
            gaps -= self._gap(booked[index - 1], at)
        if index < len(booked):
            gaps -= self._gap(at, booked[index])
            if index:
                gaps += self._gap(booked[index - 1], booked[index])
        self._gaps = gaps

    def _prune(self, now: float) -> None:
        self._chat_ready = {c: t for c, t in self._chat_ready.items() if t > now}
        self._chat_flood = {c: t for c, t in self._chat_flood.items() if t > now}
