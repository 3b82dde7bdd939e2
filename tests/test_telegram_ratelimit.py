"""The rate limiter's pure scheduling: caps in every sliding window, throughput, flood waits."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import ValidationError, ValidationTypeError
from notifyonce._senders.rate.stores import BOT_LANE, Grant, MemoryRateStore, SharedRateLimiter
from notifyonce._senders.telegram.ratelimit import RateLimitState
from notifyonce.telegram import RateLimit

from ._fakes import FakeClock

EPS = 1e-9
PRIVATE = ["1", "2", "3", "4", "5"]
GROUPS = ["-100", "-1001", "@news"]


def busiest(times: list[float], window: float) -> int:
    """The most events in any half-open window [t, t + window)."""
    times = sorted(times)
    best = start = 0
    for end, at in enumerate(times):
        while at - times[start] >= window - EPS:
            start += 1
        best = max(best, end - start + 1)
    return best


requests = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=0.5, allow_nan=False),  # gap since the previous request
        st.sampled_from(PRIVATE + GROUPS + [str(n) for n in range(10, 60)]),
    ),
    min_size=1,
    max_size=150,
)


@settings(max_examples=150, deadline=None)
@given(requests, st.lists(st.floats(min_value=0, max_value=0.03), min_size=150, max_size=150))
def test_no_window_ever_exceeds_a_cap(
    arrivals: list[tuple[float, str]], shifts: list[float]
) -> None:
    """Whatever the arrivals, no 1 s window has over 30 starts, no chat over its own cap,
    even when each start is delayed in transit by up to the jitter allowance."""
    state = RateLimitState(RateLimit())
    now = 0.0
    starts: list[tuple[float, str]] = []
    for (gap, chat), shift in zip(arrivals, shifts[: len(arrivals)], strict=True):
        now += gap
        reservation = state.reserve(chat, now)
        assert reservation.booked
        assert reservation.at >= now
        starts.append((reservation.at + shift, chat))
    assert busiest([t for t, _ in starts], 1.0) <= 30
    for chat in {c for _, c in starts}:
        times = [t for t, c in starts if c == chat]
        if chat.startswith(("-", "@")):
            assert busiest(times, 60.0) <= 20
        else:
            assert busiest(times, 1.0) <= 1


def walked_start(booked: list[float], ready: float, interval: float) -> float:
    """The earliest start at or after ``ready`` at least ``interval`` from every start in
    ``booked``, by walking them all: the model the scheduler's shortcut must match."""
    at = ready
    for start in sorted(booked):
        if start <= at - interval:
            continue
        if start >= at + interval:
            break
        at = start + interval
    return at


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=0.01, allow_nan=False),  # time passing
            st.floats(min_value=0, max_value=0.05, allow_nan=False),  # ready_in
            st.integers(min_value=0, max_value=3),  # 0: give back an earlier turn
            st.integers(min_value=0, max_value=10**6),  # which one
        ),
        max_size=120,
    )
)
def test_the_next_start_is_the_one_a_walk_over_every_booking_finds(
    steps: list[tuple[float, float, int, int]],
) -> None:
    """Starts booked and given back at random, at 1,000 msg/s: every start the scheduler
    books is the one a walk over all the bookings finds (it skips the walk while no two
    neighbouring bookings have room between them), and its count of such neighbours
    stays exact."""
    state = RateLimitState(RateLimit(bot_per_second=1000, private_chat_per_second=None))
    interval = state._bot_interval
    now, held = 0.0, []
    for number, (passed, ready_in, kind, pick) in enumerate(steps):
        now += passed
        if kind == 0 and held:
            state.cancel(held.pop(pick % len(held)))
        else:
            live = [at for at in state._booked if at > now - interval]
            reservation = state.reserve(str(number), now, ready_in=ready_in)
            assert walked_start(live, now + ready_in, interval) == reservation.at
            held.append(reservation)
        pairs = itertools.pairwise(state._booked)
        assert sum(b >= a + interval + interval for a, b in pairs) == state._gaps


def test_throughput_reaches_the_cap() -> None:
    """300 sends to 300 chats, all queued at once, run at 30 per 1.03 s: 97 % of the cap."""
    state = RateLimitState(RateLimit())
    starts = [state.reserve(str(1000 + n), 0.0).at for n in range(300)]
    assert 30 == busiest(starts, 1.0)
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    assert 30 / 1.03 == pytest.approx(rate)


def test_waiting_chat_does_not_hold_up_others() -> None:
    """A send waiting for its chat books a later bot slot; other chats fill the slots before it."""
    state = RateLimitState(RateLimit())
    assert 0.0 == state.reserve("7", 0.0).at
    assert 1.03 == pytest.approx(state.reserve("7", 0.0).at)
    others = [state.reserve(str(100 + n), 0.0).at for n in range(5)]
    assert all(at < 1.0 for at in others)


def test_group_pacing_is_twenty_per_minute() -> None:
    """Sends to a group are spaced (60 + 0.03) / 20 s apart."""
    state = RateLimitState(RateLimit())
    starts = [state.reserve("-1001", 0.0).at for _ in range(21)]
    assert 20 == busiest(starts, 60.0)
    assert 60.03 == pytest.approx(starts[-1] - starts[0])


def test_flood_wait_on_one_chat_delays_only_that_chat() -> None:
    """A single 429 delays its chat until the deadline and leaves other chats alone."""
    state = RateLimitState(RateLimit())
    state.flood_wait("7", 5.0, now=0.0)
    held = state.reserve("7", 0.0)
    assert (False, 5.0, "chat") == (held.booked, held.at, held.flood)
    assert 0.0 == state.reserve("8", 0.0).at


def test_second_chat_flooding_makes_it_bot_wide() -> None:
    """A 429 on a second chat while the first still waits delays every send to the latest one."""
    state = RateLimitState(RateLimit())
    state.flood_wait("7", 5.0, now=0.0)
    state.flood_wait("8", 2.0, now=1.0)
    held = state.reserve("9", 1.0)
    assert (False, 5.0, "bot") == (held.booked, held.at, held.flood)
    assert 5.0 == state.reserve("9", 5.0).at
    assert 5.0 < state.reserve("10", 5.0).at  # the next bot slot after 5.0


def test_reservation_beyond_max_wait_is_not_booked() -> None:
    """A start further than max_wait is reported, not booked: the next caller gets it."""
    state = RateLimitState(RateLimit())
    state.flood_wait("7", 10.0, now=0.0)
    state.reserve("8", 0.0)
    refused = state.reserve("9", 0.0, max_wait=0.01)
    assert (False, None) == (refused.booked, refused.flood)
    assert refused.at == state.reserve("9", 0.0).at > 0.01


def test_cancel_gives_the_slot_back() -> None:
    """A cancelled reservation frees its bot slot and its chat's next start."""
    state = RateLimitState(RateLimit())
    first = state.reserve("7", 0.0)
    state.cancel(first)
    assert 0.0 == state.reserve("7", 0.0).at


def test_disabled_limits_never_wait() -> None:
    """With every limit None, every send starts at once."""
    state = RateLimitState(
        RateLimit(bot_per_second=None, private_chat_per_second=None, group_per_minute=None)
    )
    assert [0.0] * 50 == [state.reserve("7", 0.0).at for _ in range(50)]


def test_stale_state_is_pruned() -> None:
    """Chats whose pacing ended are forgotten, so memory does not grow with every chat ever seen."""
    state = RateLimitState(RateLimit())
    for n in range(3000):
        state.reserve(str(n + 1), now=float(n))
    assert len(state._chat_ready) < 1100
    assert len(state._booked) <= 2


def limiter_on(
    clock: FakeClock | None = None, sleep: Any = None
) -> tuple[SharedRateLimiter, RateLimitState]:
    """The limiter a TelegramSender paces with (its own memory store), and the store's
    calendar for the bot's lane."""
    options: dict[str, Any] = {} if clock is None else {"clock": clock}
    store = MemoryRateStore(**options)
    limiter = SharedRateLimiter(RateLimit(), store, "bot", **options, sleep=sleep or asyncio.sleep)
    return limiter, store._state("bot", BOT_LANE, RateLimit())


async def test_async_limiter_sleeps_until_the_booked_start() -> None:
    """acquire() sleeps exactly until the start it booked, on the injected clock."""
    clock = FakeClock()
    limiter, _ = limiter_on(clock, clock.sleep)
    assert isinstance(await limiter.acquire("7", max_wait=math.inf), Grant)
    assert isinstance(await limiter.acquire("7", max_wait=math.inf), Grant)
    assert [1.03] == clock.waits
    await limiter.flood_wait("7", 30.0)
    assert 30.0 == await limiter.acquire("7", max_wait=5.0)


async def test_turns_starting_in_one_step_are_handed_over_together() -> None:
    """With ``together=0.1``, nine turns at 30/s (starts 34.3 ms apart) are handed over
    in threes at 0, 100 and 200 ms, the step of the grid each start falls in: never after
    its start, and each still due at its own start. Without it each is handed over at its
    start."""
    interval = 1.03 / 30
    for together, handed in ((0.1, [0.0] * 3 + [0.1] * 3 + [0.2] * 3), (0.0, None)):
        clock = FakeClock()
        limiter, _ = limiter_on(clock, clock.sleep)
        grants, times = [], []
        for _ in range(9):
            grant = await limiter.acquire("7" + str(len(grants)), math.inf, together=together)
            assert isinstance(grant, Grant)
            grants.append(grant.due)
            times.append(clock.now)
        assert [n * interval for n in range(9)] == pytest.approx(grants)
        assert (handed or grants) == pytest.approx(times)


async def test_late_wake_up_books_again() -> None:
    """A send whose sleep overran (busy loop) books a fresh start instead of bunching."""
    clock = FakeClock()

    async def oversleep(seconds: float) -> None:
        await clock.sleep(seconds)
        clock.now += 0.5  # the event loop was blocked

    limiter, state = limiter_on(clock, oversleep)
    state.flood_wait("7", 1.0, now=0.0)
    assert isinstance(await limiter.acquire("7", max_wait=math.inf), Grant)
    # The flood wait ended at 1.0, the wake-up came at 1.5: the start booked is 1.5.
    assert [1.0] == clock.waits
    assert [1.5] == state._booked
    assert 1.5 + 1.03 == state._chat_ready["7"]


async def test_cancelled_wait_releases_the_slot() -> None:
    """A caller cancelled while waiting gives its booked start back."""
    limiter, state = limiter_on()
    state.flood_wait("7", 60.0, now=time.monotonic())
    task = asyncio.ensure_future(limiter.acquire("7", max_wait=math.inf))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [] == state._booked


@pytest.mark.parametrize(
    ("options", "field", "error"),
    [
        ({"bot_per_second": 0}, "bot_per_second", ValidationError),
        ({"group_per_minute": "20"}, "group_per_minute", ValidationTypeError),
        ({"jitter_allowance": 1.5}, "jitter_allowance", ValidationError),
        ({"private_chat_per_second": math.inf}, "private_chat_per_second", ValidationError),
    ],
)
def test_invalid_limits_name_the_field(
    options: dict[str, object], field: str, error: type[ValidationError]
) -> None:
    """Bad RateLimit options raise the right error naming the option."""
    with pytest.raises(error) as info:
        RateLimit(**options)  # type: ignore[arg-type]
    assert field == info.value.field


def count_handover_timers(loop: asyncio.AbstractEventLoop, limiter: SharedRateLimiter) -> list[int]:
    """Count the timers ``loop`` is asked for that hand over ``limiter``'s turns."""
    timers = [0]
    call_later = loop.call_later

    def counted(delay: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(callback, "__func__", None) is SharedRateLimiter._hand_over:
            timers[0] += 1
        return call_later(delay, callback, *args, **kwargs)

    loop.call_later = counted  # type: ignore[method-assign]
    return timers


async def test_turns_handed_over_at_one_point_share_one_timer() -> None:
    """Five waiters for one point of the grid: one timer wakes them all (not one each)."""
    limiter, _ = limiter_on()
    timers = count_handover_timers(asyncio.get_running_loop(), limiter)
    point = time.monotonic() + 0.02
    await asyncio.gather(*(limiter._handover(point, 0.02) for _ in range(5)))
    assert 1 == timers[0]
    assert {} == limiter._points  # nothing kept once handed over


async def test_acquire_on_a_grid_waits_at_shared_points() -> None:
    """The turns of a sender on the default sleep, on a 20 ms grid at 200 msg/s (starts
    5.15 ms apart), wait at shared points: fewer timers than turns waited for, and every
    turn still handed over before its start."""
    limiter = SharedRateLimiter(RateLimit(bot_per_second=200), MemoryRateStore(), "bot")
    timers = count_handover_timers(asyncio.get_running_loop(), limiter)
    waits = []
    handover = limiter._handover

    async def counted(point: float, delay: float) -> None:
        waits.append(point)
        await handover(point, delay)
        assert time.monotonic() >= point

    limiter._handover = counted  # type: ignore[method-assign]
    chats = [str(n) for n in range(1, 25)]
    grants = await asyncio.gather(*(limiter.acquire(c, math.inf, together=0.02) for c in chats))
    assert all(isinstance(grant, Grant) for grant in grants)
    assert len(waits) >= 12  # most turns started ahead of their grid point
    assert timers[0] == len(set(waits)) < len(waits)


async def test_a_cancelled_handover_leaves_the_others_to_wake() -> None:
    """A waiter cancelled before its point (its send stopped) wakes no one and stops no
    one: the others at the point are handed over."""
    limiter, _ = limiter_on()
    point = time.monotonic() + 0.02
    waiters = [asyncio.ensure_future(limiter._handover(point, 0.02)) for _ in range(3)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 3.0)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [None, None] == results[1:]


def test_a_point_of_a_closed_event_loop_is_not_waited_on() -> None:
    """A limiter used again on a new event loop (a second ``asyncio.run``) does not wait
    at a point whose timer belonged to a loop that closed before it."""
    limiter, _ = limiter_on()
    point = time.monotonic() + 0.5

    async def stopped_before_the_point() -> None:
        waiter = asyncio.ensure_future(limiter._handover(point, 0.5))
        await asyncio.sleep(0.01)
        waiter.cancel()

    asyncio.run(stopped_before_the_point())

    async def again() -> None:
        await asyncio.wait_for(limiter._handover(point, point - time.monotonic()), 3.0)

    asyncio.run(again())
