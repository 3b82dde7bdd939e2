"""The claim ledger on real databases, through both AsyncLedger and Ledger."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notifyonce import (
    Claim,
    DeliveryMode,
    LedgerError,
    SlotStatus,
    ValidationError,
    ValidationTypeError,
)
from notifyonce._keys import SlotKey
from notifyonce._ledger.ledger import _in_order

from ._ledger_env import START, UTC, Env

DEADLINE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)


# ---- claiming ---------------------------------------------------------------------------


async def test_first_claim_wins_and_second_gets_none(env: Env) -> None:
    """The first claim of a slot wins with attempt 1 and the lease; the next gets None."""
    ledger = env.make(lease=dt.timedelta(minutes=7))
    claim = await ledger.claim_slot("trial_6h", 42, DEADLINE)
    assert claim is not None
    assert (1, START + dt.timedelta(minutes=7)) == (claim.attempt, claim.lease_until)
    assert 0 <= claim.token < 2**63
    assert None is await ledger.claim_slot("trial_6h", "42", DEADLINE)
    record = await ledger.get("trial_6h", 42, DEADLINE)
    assert (SlotStatus.CLAIMED, claim.token, claim.id) == (record.status, record.token, record.id)


async def test_fresh_ledger_object_never_rewins(env: Env) -> None:
    """A restarted process (a fresh ledger object) cannot win a held or sent slot again."""
    first = await env.make().claim_slot("trial_6h", 42, DEADLINE)
    assert None is await env.make().claim_slot("trial_6h", 42, DEADLINE)
    assert await env.make().mark_sent(first)
    assert None is await env.make().claim_slot("trial_6h", 42, DEADLINE)
    assert None is await env.make().claim_slot("trial_6h", 42, DEADLINE, take_expired=True)
    assert 1 == env.count()


async def test_released_slot_is_won_again_with_every_column_renewed(env: Env) -> None:
    """A take-over renews token, attempt, lease and status together (MySQL's left-to-right
    ON DUPLICATE KEY UPDATE trap would leave some columns stale)."""
    ledger = env.make()
    first = await ledger.claim_slot("trial_6h", 42, DEADLINE)
    assert await ledger.release(first, "read timeout", may_have_delivered=True)
    env.clock.advance(MINUTE)
    second = await ledger.claim_slot("trial_6h", 42, DEADLINE, lease=dt.timedelta(hours=1))
    assert second is not None
    record = await ledger.get("trial_6h", 42, DEADLINE)
    expected = (SlotStatus.CLAIMED, 2, second.token, START + MINUTE + dt.timedelta(hours=1))
    assert expected == (record.status, record.attempt, record.token, record.lease_until)
    assert (first.id, START, START + MINUTE) == (second.id, record.created_at, record.updated_at)
    assert first.token != second.token
    assert "read timeout" == record.last_error


async def test_expired_lease_is_taken_only_with_take_expired(env: Env) -> None:
    """An expired claim is taken over only by take_expired=True, never before it expires."""
    ledger = env.make(lease=dt.timedelta(minutes=5))
    first = await ledger.claim_slot("a", 1, DEADLINE)
    assert None is await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    env.clock.advance(dt.timedelta(minutes=5, seconds=1))
    assert None is await ledger.claim_slot("a", 1, DEADLINE)
    second = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    assert second is not None
    assert (2, env.clock.now + dt.timedelta(minutes=5)) == (second.attempt, second.lease_until)
    assert first.token != second.token


async def test_stale_claim_cannot_mark_or_release_after_take_over(env: Env) -> None:
    """Fencing: the worker whose lease was taken over changes nothing and gets False."""
    ledger = env.make()
    stale = await ledger.claim_slot("a", 1, DEADLINE)
    env.clock.advance(dt.timedelta(minutes=6))
    current = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    for attempt in (
        ledger.mark_sent(stale),
        ledger.mark_failed(stale, "x"),
        ledger.mark_unknown(stale),
        ledger.release(stale),
    ):
        assert False is await attempt
    record = await ledger.get("a", 1, DEADLINE)
    assert (SlotStatus.CLAIMED, current.token, None) == (
        record.status,
        record.token,
        record.sent_at,
    )
    assert True is await ledger.mark_sent(current)


async def test_max_attempts_limits_only_expired_take_overs(env: Env) -> None:
    """max_attempts bounds taking over expired claims; a released slot is always won again."""
    ledger = env.make()
    claim = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True, max_attempts=2)
    await ledger.release(claim, may_have_delivered=True)
    claim = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True, max_attempts=2)
    assert 2 == claim.attempt
    await ledger.release(claim, may_have_delivered=True)
    claim = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True, max_attempts=2)
    assert 3 == claim.attempt  # released: certainly not delivered, so not limited
    env.clock.advance(dt.timedelta(minutes=10))
    limited = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True, max_attempts=3)
    assert None is limited
    assert 4 == (await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)).attempt


async def test_marks_record_their_result_once(env: Env) -> None:
    """mark_sent stores sent_at and the message id; any second mark returns False."""
    ledger = env.make()
    claim = await ledger.claim_slot("a", 1, DEADLINE)
    env.clock.advance(MINUTE)
    assert await ledger.mark_sent(claim, message_id=987654321)
    record = await ledger.get("a", 1, DEADLINE)
    assert (SlotStatus.SENT, START + MINUTE, "987654321") == (
        record.status,
        record.sent_at,
        record.message_id,
    )
    assert False is await ledger.mark_failed(claim, "late")
    assert False is await ledger.release(claim)


async def test_failed_and_unknown_store_a_truncated_error(env: Env) -> None:
    """mark_failed and mark_unknown keep at most 500 characters of the error."""
    ledger = env.make()
    failed = await ledger.claim_slot("a", 1, DEADLINE)
    unknown = await ledger.claim_slot("a", 2, DEADLINE)
    assert await ledger.mark_failed(failed, "x" * 2000)
    assert await ledger.mark_unknown(unknown, "read timeout")
    assert ("x" * 500, SlotStatus.FAILED) == (
        (await ledger.get("a", 1, DEADLINE)).last_error,
        (await ledger.get("a", 1, DEADLINE)).status,
    )
    assert SlotStatus.UNKNOWN == (await ledger.get("a", 2, DEADLINE)).status
    assert None is await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    assert None is await ledger.claim_slot("a", 2, DEADLINE, take_expired=True)


async def test_key_parts_compare_exactly(env: Env) -> None:
    """Case, trailing spaces and 4-byte characters make distinct slots on every database."""
    ledger = env.make()
    subjects = ["Ann", "ann", "ann ", "ann\u00e9", "ann\U0001f600"]
    for subject in subjects:
        assert None is not await ledger.claim_slot("a", subject, "cycle")
    assert len(subjects) == env.count()
    assert "ann\U0001f600" == (await ledger.get("a", "ann\U0001f600", "cycle")).key.subject


async def test_cycle_kinds_name_distinct_slots(env: Env) -> None:
    """A datetime in another zone names the same slot; a date, int and str are others."""
    ledger = env.make()
    msk = dt.timezone(dt.timedelta(hours=3))
    assert await ledger.claim_slot("a", 1, DEADLINE)
    assert None is await ledger.claim_slot("a", 1, DEADLINE.astimezone(msk))
    for cycle in (DEADLINE.date(), 1764612000, "2026-12"):
        assert None is not await ledger.claim_slot("a", 1, cycle)
    record = await ledger.get("a", 1, DEADLINE.date())
    assert (
        dt.datetime(2026, 12, 2, 12, tzinfo=UTC) == record.key.cycle_at
    )  # the day, ended everywhere
    assert None is (await ledger.get("a", 1, "2026-12")).key.cycle_at


# ---- claim_many -------------------------------------------------------------------------


async def test_claim_many_returns_won_claims_in_input_order(env: Env) -> None:
    """Won claims come back in input order, duplicates collapsed, held slots left out."""
    ledger = env.make()
    await ledger.claim_slot("a", 5, DEADLINE)
    items = [(9, DEADLINE), (5, DEADLINE), (1, DEADLINE), ("9", DEADLINE), (3, DEADLINE)]
    items += [(i, DEADLINE + dt.timedelta(days=i)) for i in range(10, 17)]
    claims = await ledger.claim_many("a", items, chunk_size=3)
    expected = ["9", "1", "3"] + [str(i) for i in range(10, 17)]
    assert expected == [c.key.subject for c in claims]
    assert len({c.token for c in claims}) == len(claims)
    assert 11 == env.count()
    for claim in claims:
        record = await ledger.get("a", claim.key.subject, claim.key.cycle)
        assert (claim.id, claim.token, 1) == (record.id, record.token, record.attempt)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(min_value=0, max_value=12))
def test_won_claims_are_put_in_input_order_by_identity_or_by_value(
    data: st.DataObject, count: int
) -> None:
    """claim_many's order: whichever keys were won, in whatever order the chunks returned
    them, and whether a claim holds the very key object it was claimed with (the fast
    path) or an equal copy of it (the way by value), the claims come out in input order."""
    keys = [SlotKey("a", str(i), "c", None) for i in range(count)]
    won = data.draw(st.lists(st.sampled_from(keys), unique=True) if keys else st.just([]))
    copied = data.draw(st.lists(st.booleans(), min_size=len(won), max_size=len(won)))
    claims = [
        Claim(dataclasses.replace(key) if copy else key, int(key.subject), 1, 1, DEADLINE)
        for key, copy in zip(won, copied, strict=True)
    ]
    ordered = _in_order(keys, claims)
    assert sorted(int(key.subject) for key in won) == [claim.id for claim in ordered]


async def test_claims_carry_the_lease_and_token_their_rows_store(env: Env) -> None:
    """Every won claim, first claims and take-overs, in a batch and alone, carries the
    lease_until and the token its row stores; a batch's tokens are distinct 63-bit ints."""
    ledger = env.make()
    first = await ledger.claim_slot("a", 0, DEADLINE)
    assert await ledger.release(first, may_have_delivered=True)
    env.clock.advance(MINUTE)
    lease = dt.timedelta(seconds=90)
    claims = await ledger.claim_many("a", [(i, DEADLINE) for i in range(600)], lease=lease)
    claims.append(await ledger.claim_slot("a", "single", DEADLINE, lease=lease))
    assert [2] + [1] * 600 == [c.attempt for c in claims]
    assert len({c.token for c in claims}) == 601
    assert all(0 <= c.token < 2**63 for c in claims)
    for claim in (claims[0], claims[599], claims[600]):
        record = await ledger.get("a", claim.key.subject, DEADLINE)
        assert (record.token, record.lease_until) == (claim.token, claim.lease_until)
        assert (START + MINUTE + lease, dt.timedelta(0)) == (
            claim.lease_until,
            claim.lease_until.utcoffset(),
        )


async def test_claim_many_tells_the_two_moments_of_a_repeated_hour_apart(env: Env) -> None:
    """When clocks go back, 02:30 happens twice; Python compares the two as equal, but
    they are different cycles, and claim_many keeps them apart like claim_slot does."""
    berlin = ZoneInfo("Europe/Berlin")
    first = dt.datetime(2026, 10, 25, 2, 30, tzinfo=berlin)
    second = first.replace(fold=1)
    assert first == second  # the trap: one zone, wall clocks compared
    claims = await env.make().claim_many("a", [(1, first), (1, second), (2, second)])
    expected = ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T01:30:00Z"]
    assert expected == [c.key.cycle for c in claims]


async def test_claim_many_takes_released_and_expired(env: Env) -> None:
    """claim_many applies the same take-over rules as claim_slot."""
    ledger = env.make()
    first = await ledger.claim_many("a", [(i, DEADLINE) for i in range(4)])
    await ledger.release(first[0], may_have_delivered=True)
    await ledger.mark_sent(first[1])
    assert ["0"] == [c.key.subject for c in await ledger.claim_many("a", [(0, DEADLINE)])]
    env.clock.advance(dt.timedelta(minutes=6))
    taken = await ledger.claim_many("a", [(i, DEADLINE) for i in range(4)], take_expired=True)
    assert [("0", 3), ("2", 2), ("3", 2)] == [(c.key.subject, c.attempt) for c in taken]
    assert [] == await ledger.claim_many("a", [])


async def test_mark_many_refuses_two_outcomes_for_one_row(env: Env) -> None:
    """Two entries for one claim are refused before anything is written."""
    ledger = env.make()
    first, second = await ledger.claim_many("a", [(1, DEADLINE), (2, DEADLINE)])
    results = [
        (first, SlotStatus.SENT, "m-1"),
        (second, SlotStatus.SENT, "m-2"),
        (first, SlotStatus.FAILED, "again"),
    ]
    with pytest.raises(ValidationError, match="appears twice") as caught:
        await ledger.mark_many(results)
    assert "results" == caught.value.field
    records = [await ledger.get("a", i, DEADLINE) for i in (1, 2)]
    assert [SlotStatus.CLAIMED, SlotStatus.CLAIMED] == [r.status for r in records]


async def test_mark_many_applies_each_mark_once(env: Env) -> None:
    """mark_many marks live claims and returns False for stale ones."""
    ledger = env.make()
    claims = await ledger.claim_many("a", [(i, DEADLINE) for i in range(5)])
    stale = claims[4]
    await ledger.release(stale)
    renewed = await ledger.claim_slot("a", 4, DEADLINE)
    results = [
        (claims[0], SlotStatus.SENT, "m-1"),
        (claims[1], SlotStatus.FAILED, "blocked"),
        (claims[2], SlotStatus.UNKNOWN, None),
        (claims[3], SlotStatus.RELEASED, "429"),
        (stale, SlotStatus.SENT, None),
    ]
    assert [True, True, True, True, False] == await ledger.mark_many(results)
    records = [await ledger.get("a", i, DEADLINE) for i in range(5)]
    assert [
        (SlotStatus.SENT, "m-1", None),
        (SlotStatus.FAILED, None, "blocked"),
        (SlotStatus.UNKNOWN, None, None),
        (SlotStatus.RELEASED, None, "429"),
        (SlotStatus.CLAIMED, None, None),
    ] == [(r.status, r.message_id, r.last_error) for r in records]
    assert START == records[0].sent_at
    assert renewed.token == records[4].token


# ---- sweep and purge --------------------------------------------------------------------


async def test_sweep_at_most_once_turns_expired_claims_unknown(env: Env) -> None:
    """At-most-once: an expired claim becomes UNKNOWN; live ones stay; the old token is dead."""
    ledger = env.make()
    expired = await ledger.claim_slot("a", 1, DEADLINE, lease=MINUTE)
    await ledger.claim_slot("a", 2, DEADLINE, lease=dt.timedelta(hours=1))
    env.clock.advance(dt.timedelta(minutes=2))
    result = await ledger.sweep(DeliveryMode.AT_MOST_ONCE)
    assert (["1"], []) == ([k.subject for k in result.unknown], result.released)
    assert SlotStatus.UNKNOWN == (await ledger.get("a", 1, DEADLINE)).status
    assert SlotStatus.CLAIMED == (await ledger.get("a", 2, DEADLINE)).status
    assert False is await ledger.mark_sent(expired)
    assert None is await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    assert ([], []) == tuple(vars(await ledger.sweep(DeliveryMode.AT_MOST_ONCE)).values())


async def test_sweep_at_least_once_releases_until_max_attempts(env: Env) -> None:
    """At-least-once: expired claims under max_attempts are released, the rest UNKNOWN."""
    ledger = env.make(lease=MINUTE)
    await ledger.claim_slot("a", 1, DEADLINE)
    second = await ledger.claim_slot("a", 2, DEADLINE)
    await ledger.release(second, may_have_delivered=True)
    await ledger.claim_slot("a", 2, DEADLINE)  # attempt 2
    env.clock.advance(dt.timedelta(minutes=2))
    result = await ledger.sweep(DeliveryMode.AT_LEAST_ONCE, max_attempts=2)
    assert (["1"], ["2"]) == (
        [k.subject for k in result.released],
        [k.subject for k in result.unknown],
    )
    assert 2 == (await ledger.claim_slot("a", 1, DEADLINE)).attempt


async def test_sweep_is_bounded_by_limit(env: Env) -> None:
    """sweep settles at most `limit` rows per call, oldest leases first."""
    ledger = env.make(lease=MINUTE)
    for i in range(5):
        await ledger.claim_slot("a", i, DEADLINE)
        env.clock.advance(dt.timedelta(seconds=1))
    env.clock.advance(dt.timedelta(minutes=5))
    first = await ledger.sweep(DeliveryMode.AT_MOST_ONCE, limit=2)
    rest = await ledger.sweep(DeliveryMode.AT_MOST_ONCE, limit=10)
    assert (["0", "1"], ["2", "3", "4"]) == (
        [k.subject for k in first.unknown],
        [k.subject for k in rest.unknown],
    )


async def test_sweep_settles_only_the_actions_and_the_cycle_it_is_given(env: Env) -> None:
    """actions= and cycle= narrow a sweep: a campaign's run settles its own cycle's expired
    claims, never another cycle's of its action or another action's; a bad cycle is refused
    before anything is written."""
    ledger = env.make(lease=MINUTE)
    for action, subject, cycle in (("a", 1, "c1"), ("a", 2, "c2"), ("b", 3, "c1")):
        await ledger.claim_slot(action, subject, cycle)
    env.clock.advance(dt.timedelta(minutes=2))
    with pytest.raises(ValidationTypeError, match="cycle"):
        await ledger.sweep(DeliveryMode.AT_LEAST_ONCE, actions=["a"], cycle=1.5)  # type: ignore[arg-type]
    first = await ledger.sweep(DeliveryMode.AT_LEAST_ONCE, actions=["a"], cycle="c1")
    rest = await ledger.sweep(DeliveryMode.AT_MOST_ONCE, cycle="c1")
    assert (["1"], [], ["3"]) == (
        [k.subject for k in first.released],
        first.unknown,
        [k.subject for k in rest.unknown],
    )
    assert SlotStatus.CLAIMED == (await ledger.get("a", 2, "c2")).status


async def test_purge_never_frees_a_slot_that_can_still_fire(env: Env) -> None:
    """purge deletes only old cycles nobody holds; opaque cycles only when asked; a dry run
    counts them and deletes nothing."""
    ledger = env.make(lease=dt.timedelta(days=30))
    old = START - dt.timedelta(days=10)
    recent = START - dt.timedelta(hours=1)
    sent = await ledger.claim_slot("a", "sent-old", old)
    await ledger.mark_sent(sent)
    await ledger.claim_slot("a", "held-old", old)  # a live claim on an old cycle
    await ledger.claim_slot("a", "expired-old", old, lease=MINUTE)
    # Recent cycles nobody holds any more: only their age keeps them (no live lease).
    await ledger.claim_slot("a", "recent-expired", recent, lease=MINUTE)
    recent_sent = await ledger.claim_slot("a", "recent-sent", recent)
    await ledger.mark_sent(recent_sent)
    await ledger.claim_slot("a", "opaque", "campaign-7", lease=MINUTE)
    env.clock.advance(dt.timedelta(minutes=2))
    # A dry run counts exactly what a purge would delete, and deletes nothing.
    assert 2 == await ledger.purge(older_than=dt.timedelta(days=7), dry_run=True)
    assert 6 == env.count()
    assert 2 == await ledger.purge(older_than=dt.timedelta(days=7))
    assert None is await ledger.get("a", "sent-old", old)
    assert None is await ledger.get("a", "expired-old", old)
    assert [SlotStatus.CLAIMED, SlotStatus.SENT] == [
        (await ledger.get("a", s, recent)).status for s in ("recent-expired", "recent-sent")
    ]
    assert 4 == env.count()
    assert 0 == await ledger.purge(older_than=dt.timedelta(days=7))
    assert 1 == await ledger.purge(
        older_than=dt.timedelta(days=7), opaque_finished_before=env.clock.now, dry_run=True
    )
    assert 4 == env.count()
    assert 1 == await ledger.purge(
        older_than=dt.timedelta(days=7), opaque_finished_before=env.clock.now
    )
    assert None is await ledger.get("a", "opaque", "campaign-7")


# ---- reads ------------------------------------------------------------------------------


async def test_last_sent_gives_latest_delivery_per_subject(env: Env) -> None:
    """last_sent returns the latest sent_at per subject across actions, after `since`."""
    ledger = env.make()
    for action, subject, advance in (("a", 1, 0), ("b", 1, 5), ("a", 2, 1), ("a", 3, 0)):
        env.clock.advance(dt.timedelta(minutes=advance))
        claim = await ledger.claim_slot(action, subject, DEADLINE)
        if subject != 3:
            await ledger.mark_sent(claim)
    result = await ledger.last_sent([1, "2", 3, 4], since=START)
    assert {"1": START + dt.timedelta(minutes=5), "2": START + dt.timedelta(minutes=6)} == result
    assert {} == await ledger.last_sent([1], since=START + dt.timedelta(hours=1))


async def test_stats_counts_statuses_and_leases(env: Env) -> None:
    """stats counts rows per action and status, live claims and expired leases."""
    ledger = env.make()
    await ledger.claim_slot("a", 1, DEADLINE, lease=MINUTE)
    env.clock.advance(dt.timedelta(seconds=30))
    await ledger.claim_slot("a", 2, DEADLINE, lease=dt.timedelta(hours=1))
    unknown = await ledger.claim_slot("b", 1, DEADLINE)
    await ledger.mark_unknown(unknown)
    env.clock.advance(dt.timedelta(minutes=1))
    stats = await ledger.stats()
    assert {("a", SlotStatus.CLAIMED): 2, ("b", SlotStatus.UNKNOWN): 1} == dict(stats.counts)
    assert (1, START + dt.timedelta(seconds=30), 1, 1) == (
        stats.live_claims,
        stats.oldest_live_claim,
        stats.expired_leases,
        stats.unknown,
    )


# ---- the caller's transaction -----------------------------------------------------------


async def test_claim_in_callers_transaction_is_not_committed_by_the_ledger(env: Env) -> None:
    """With connection=, the claim lives in the caller's transaction: rollback undoes it."""
    from ._ledger_env import maybe_await

    ledger = env.make()
    async with env.caller_connection() as conn:
        claim = await ledger.claim_slot("a", 1, DEADLINE, connection=conn)
        assert claim is not None
        await maybe_await(conn.rollback())
    assert 0 == env.count()
    async with env.caller_connection() as conn:
        claim = await ledger.claim_slot("a", 1, DEADLINE, connection=conn)
        await maybe_await(conn.commit())
    assert 1 == env.count()
    assert None is await ledger.claim_slot("a", 1, DEADLINE)


# ---- bad input --------------------------------------------------------------------------


async def test_bad_input_raises_naming_the_field_and_writes_nothing(env: Env) -> None:
    """Every kind of bad input raises ValidationError naming the field, before any SQL."""
    ledger = env.make()
    naive = dt.datetime(2026, 12, 1, 18, 0)
    fake = Claim(make_fake_key(), 1, 1, 1, START)
    cases: list[tuple[str, Any]] = [
        ("cycle", ledger.claim_slot("a", 1, naive)),
        ("cycle", ledger.claim_slot("a", 1, 1.5)),
        ("cycle", ledger.claim_slot("a", 1, "")),
        ("cycle", ledger.claim_slot("a", 1, "x" * 129)),
        ("subject", ledger.claim_slot("a", None, DEADLINE)),
        ("subject", ledger.claim_slot("a", True, DEADLINE)),
        ("subject", ledger.claim_slot("a", "  ", DEADLINE)),
        ("subject", ledger.claim_slot("a", "x" * 129, DEADLINE)),
        ("action", ledger.claim_slot("", 1, DEADLINE)),
        ("action", ledger.claim_slot("a" * 65, 1, DEADLINE)),
        ("action", ledger.claim_slot(b"a", 1, DEADLINE)),
        ("action", ledger.claim_slot("a\n", 1, DEADLINE)),
        ("lease", ledger.claim_slot("a", 1, DEADLINE, lease=dt.timedelta(0))),
        ("lease", ledger.claim_slot("a", 1, DEADLINE, lease=60)),
        ("take_expired", ledger.claim_slot("a", 1, DEADLINE, take_expired="yes")),
        ("max_attempts", ledger.claim_slot("a", 1, DEADLINE, max_attempts=0)),
        ("cycle", ledger.claim_many("a", [(1, DEADLINE), (2, naive)])),
        ("items", ledger.claim_many("a", [(1, DEADLINE), 2])),
        ("items", ledger.claim_many("a", "12")),
        ("chunk_size", ledger.claim_many("a", [(1, DEADLINE)], chunk_size=0)),
        ("claim", ledger.mark_sent(None)),
        ("message_id", ledger.mark_sent(fake, message_id=1.5)),
        ("error", ledger.mark_failed(fake, None)),
        ("status", ledger.mark_many([(fake, SlotStatus.CLAIMED, None)])),
        ("mode", ledger.sweep("at_most_once")),
        ("limit", ledger.sweep(DeliveryMode.AT_MOST_ONCE, limit=0)),
        ("older_than", ledger.purge(older_than=-MINUTE)),
        ("opaque_finished_before", ledger.purge(older_than=MINUTE, opaque_finished_before=naive)),
        ("since", ledger.last_sent([1], since=naive)),
        ("subject", ledger.last_sent([1.5], since=START)),
    ]
    for field, call in cases:
        with pytest.raises(ValidationError) as caught:
            await call
        assert field == caught.value.field
    assert 0 == env.count()


def make_fake_key() -> Any:
    from notifyonce import make_key

    return make_key("a", 1, DEADLINE)


async def test_wrong_types_raise_type_errors(env: Env) -> None:
    """A value of the wrong type raises ValidationTypeError, also a TypeError."""
    ledger = env.make()
    with pytest.raises(TypeError) as caught:
        await ledger.claim_slot("a", [1], DEADLINE)
    assert isinstance(caught.value, ValidationTypeError)
    assert 0 == env.count()


async def test_database_errors_are_wrapped(env: Env) -> None:
    """A database error surfaces as LedgerError with the driver's error as its cause."""
    env.sql("DROP TABLE {t}")
    with pytest.raises(LedgerError) as caught:
        await env.make().claim_slot("a", 1, DEADLINE)
    assert caught.value.__cause__ is not None


def test_ledger_construction_checks_its_arguments() -> None:
    """A wrong engine kind, an empty table name or a bad lease fail at construction."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, Ledger

    sync_engine = sa.create_engine("sqlite://")
    async_engine = create_async_engine("sqlite+aiosqlite://")
    cases = [
        ("engine", lambda: AsyncLedger(sync_engine)),
        ("engine", lambda: Ledger(async_engine)),
        ("table_name", lambda: Ledger(sync_engine, table_name="")),
        ("lease", lambda: Ledger(sync_engine, lease=dt.timedelta(0))),
        ("retries", lambda: Ledger(sync_engine, retries=0)),
    ]
    for field, build in cases:
        with pytest.raises(ValidationError) as caught:
            build()
        assert field == caught.value.field


async def test_purge_keeps_a_date_cycle_until_the_day_ended_everywhere(env: Env) -> None:
    """A date cycle's slot survives purge for as long as that date lasts in any zone."""
    ledger = env.make()
    claim = await ledger.claim_slot("a", 1, DEADLINE.date())
    await ledger.mark_sent(claim)
    env.clock.now = dt.datetime.combine(DEADLINE.date(), dt.time(23, 0), UTC)
    assert 0 == await ledger.purge(older_than=dt.timedelta(hours=6))
    env.clock.now = dt.datetime(2026, 12, 2, 18, 1, tzinfo=UTC)
    assert 1 == await ledger.purge(older_than=dt.timedelta(hours=6))


# -- what a just-in-time pipeline needs: renewals, look-ups, big and odd marks ----------------


async def test_renew_extends_only_live_claims(env: Env) -> None:
    """renew() pushes the lease of held claims forward and reports lost ones as False."""
    ledger = env.make(lease=dt.timedelta(seconds=60))
    held, lost = await ledger.claim_many("a", [(1, DEADLINE), (2, DEADLINE)])
    assert await ledger.mark_sent(lost)
    env.clock.advance(dt.timedelta(seconds=50))
    assert [True, False] == await ledger.renew([held, lost])
    env.clock.advance(dt.timedelta(seconds=50))  # 100 s after the claim, 50 after renewal
    assert None is await env.make().claim_slot("a", 1, DEADLINE, take_expired=True)
    record = await ledger.get("a", 1, DEADLINE)
    assert START + dt.timedelta(seconds=110) == record.lease_until
    assert await ledger.mark_sent(held)


async def test_renew_after_a_take_over_changes_nothing(env: Env) -> None:
    """A worker whose expired claim was taken over renews nothing: same row id, another
    token. The new holder's lease stays as its claim set it, and only it can renew."""
    ledger = env.make(lease=dt.timedelta(seconds=60))
    stale = await ledger.claim_slot("a", 1, DEADLINE)
    env.clock.advance(dt.timedelta(seconds=61))
    current = await ledger.claim_slot("a", 1, DEADLINE, take_expired=True)
    assert (stale.id, True) == (current.id, stale.token != current.token)
    env.clock.advance(dt.timedelta(seconds=30))
    assert [False] == await ledger.renew([stale])
    record = await ledger.get("a", 1, DEADLINE)
    assert (current.token, current.lease_until) == (record.token, record.lease_until)
    assert [True] == await ledger.renew([current])
    record = await ledger.get("a", 1, DEADLINE)
    assert env.clock.now + dt.timedelta(seconds=60) == record.lease_until


async def test_not_claimable_agrees_with_the_claim(env: Env) -> None:
    """not_claimable() lists exactly the keys a claim with the same options would lose."""
    ledger = env.make(lease=dt.timedelta(seconds=60))
    items = [(i, DEADLINE) for i in range(6)]
    c = await ledger.claim_many("a", items[:5])
    await ledger.mark_sent(c[0])
    await ledger.mark_failed(c[1], "blocked")
    await ledger.release(c[2])
    await ledger.mark_unknown(c[3])
    # c[4] stays held; item 5 has no row.
    assert ["0", "1", "3", "4"] == [k.subject for k in await ledger.not_claimable("a", items)]
    env.clock.advance(dt.timedelta(seconds=61))  # c[4]'s lease ran out
    taken = await ledger.not_claimable("a", items, take_expired=True)
    assert ["0", "1", "3"] == [k.subject for k in taken]
    won = await ledger.claim_many("a", items, take_expired=True)
    assert ["2", "4", "5"] == [k.key.subject for k in won]
    assert ["4"] == [
        k.subject for k in await env.make().not_claimable("a", [(4, DEADLINE)], take_expired=True)
    ]
    assert [] == await ledger.not_claimable("a", [])


async def test_five_thousand_marks_in_one_call(env: Env) -> None:
    """mark_many of 5,000 claims lands every one (asyncpg refuses 32,767+ parameters)."""
    ledger = env.make()
    claims = await ledger.claim_many("a", [(i, DEADLINE) for i in range(5000)], chunk_size=5000)
    assert 5000 == len(claims)
    marks = [(c, SlotStatus.SENT, str(c.id)) for c in claims]
    assert [True] * 5000 == await ledger.mark_many(marks)
    counts = env.sql("SELECT status, count(*) FROM {t} GROUP BY status")
    assert [("sent", 5000)] == [tuple(row) for row in counts]


async def test_unstorable_details_are_stored_replaced(env: Env) -> None:
    """A NUL or a lone surrogate in an error or message id is replaced, never fatal."""
    ledger = env.make()
    claims = await ledger.claim_many("a", [(i, DEADLINE) for i in range(4)])
    marks = [
        (claims[0], SlotStatus.SENT, "id\x00with-nul"),
        (claims[1], SlotStatus.FAILED, "bad \ud800 surrogate"),
        (claims[2], SlotStatus.SENT, "fine"),
    ]
    assert [True, True, True] == await ledger.mark_many(marks)
    assert await ledger.mark_unknown(claims[3], "nul\x00 again")
    records = [await ledger.get("a", i, DEADLINE) for i in range(4)]
    assert "id\ufffdwith-nul" == records[0].message_id
    assert "bad \ufffd surrogate" == records[1].last_error
    assert "fine" == records[2].message_id
    assert "nul\ufffd again" == records[3].last_error


async def test_leases_are_measured_on_the_database_clock(env: Env) -> None:
    """A worker whose host clock runs 61 s ahead does not take over a fresh 60 s claim."""
    if env.dialect == "sqlite":
        pytest.skip("SQLite has no server: its workers share one host and so one clock")
    lease = dt.timedelta(seconds=60)
    honest = env.make(clock=None, lease=lease)
    ahead = env.make(clock=None, lease=lease)
    core = ahead.inner._core
    core.local_clock = lambda: dt.datetime.now(UTC) + dt.timedelta(seconds=61)
    claim = await honest.claim_slot("a", 1, DEADLINE)
    assert claim is not None
    assert None is await ahead.claim_slot("a", 1, DEADLINE, take_expired=True)
    swept = await ahead.sweep(DeliveryMode.AT_MOST_ONCE)
    assert [] == swept.unknown
    # It read the server's clock and corrected its own by about the skew.
    assert abs(core.clock_offset + dt.timedelta(seconds=61)) < dt.timedelta(seconds=2)
    assert await honest.mark_sent(claim)


async def test_every_method_reads_the_server_clock_when_due(env: Env) -> None:
    """With the server's clock due for a reading before every call, every method still works."""
    ledger = env.make(clock=None)
    core = ledger.inner._core

    def due() -> None:
        core._offset_read_at = float("-inf")

    due()
    claims = await ledger.claim_many("a", [(i, DEADLINE) for i in range(3)])
    due()
    one = await ledger.claim_slot("a", 9, DEADLINE)
    due()
    assert [True] == await ledger.renew([one])
    due()
    assert ["9"] == [k.subject for k in await ledger.not_claimable("a", [(9, DEADLINE)])]
    due()
    assert [True, True, True] == await ledger.mark_many(
        [(c, SlotStatus.SENT, None) for c in claims]
    )
    due()
    assert await ledger.release(one)
    due()
    assert 4 == sum((await ledger.stats()).counts.values())
    if env.dialect != "sqlite":
        assert core._offset_read_at > 0
