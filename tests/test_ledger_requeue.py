"""Putting settled slots back on purpose (requeue), listing them (slots), and key parts the
drivers cannot store: on every database, through AsyncLedger and Ledger."""

from __future__ import annotations

import datetime as dt

import pytest

from notifyonce import SlotStatus, ValidationError

from ._ledger_env import START, UTC, Env

DEADLINE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)


async def _settle(env: Env, action: str, outcomes: dict[int, SlotStatus]) -> None:
    """Claim one slot per subject and record the given outcome for each."""
    ledger = env.make()
    for subject, status in outcomes.items():
        claim = await ledger.claim_slot(action, subject, DEADLINE)
        if status is SlotStatus.SENT:
            await ledger.mark_sent(claim)
        elif status is SlotStatus.FAILED:
            await ledger.mark_failed(claim, "[401] Unauthorized")
        elif status is SlotStatus.UNKNOWN:
            await ledger.mark_unknown(claim, "read timeout")


async def test_requeue_puts_back_exactly_the_unknown_slots_of_one_action(env: Env) -> None:
    """requeue releases the action's unknown slots only; the next claim wins exactly those."""
    await _settle(
        env,
        "trial_6h",
        {1: SlotStatus.UNKNOWN, 2: SlotStatus.UNKNOWN, 3: SlotStatus.SENT, 4: SlotStatus.FAILED},
    )
    await _settle(env, "trial_1h", {1: SlotStatus.UNKNOWN})
    await env.make().claim_slot("trial_6h", 5, DEADLINE)  # a live claim
    ledger = env.make()

    keys = await ledger.requeue("trial_6h", status="unknown")

    assert [("trial_6h", "1"), ("trial_6h", "2")] == sorted((k.action, k.subject) for k in keys)
    won = [s for s in range(1, 6) if await ledger.claim_slot("trial_6h", s, DEADLINE)]
    assert [1, 2] == won
    other = await ledger.get("trial_1h", 1, DEADLINE)
    assert SlotStatus.UNKNOWN == other.status
    record = await ledger.get("trial_6h", 1, DEADLINE)
    assert (SlotStatus.CLAIMED, 2) == (record.status, record.attempt)


async def test_requeue_of_failed_slots_after_a_token_fix(env: Env) -> None:
    """Slots burnt as failed by a wrong token are put back with status='failed'."""
    await _settle(env, "a", {1: SlotStatus.FAILED, 2: SlotStatus.FAILED, 3: SlotStatus.UNKNOWN})
    keys = await env.make().requeue("a", status=SlotStatus.FAILED)
    assert ["1", "2"] == sorted(k.subject for k in keys)
    record = await env.make().get("a", 1, DEADLINE)
    assert (SlotStatus.RELEASED, "[401] Unauthorized") == (record.status, record.last_error)


async def test_requeue_dry_run_changes_nothing(env: Env) -> None:
    """dry_run returns what would be requeued and leaves every row as it was."""
    await _settle(env, "a", {1: SlotStatus.UNKNOWN, 2: SlotStatus.UNKNOWN})
    keys = await env.make().requeue("a", status="unknown", dry_run=True)
    assert ["1", "2"] == sorted(k.subject for k in keys)
    statuses = [(await env.make().get("a", s, DEADLINE)).status for s in (1, 2)]
    assert [SlotStatus.UNKNOWN, SlotStatus.UNKNOWN] == statuses
    assert None is await env.make().claim_slot("a", 1, DEADLINE)


async def test_requeue_since_and_subjects_narrow_the_rows(env: Env) -> None:
    """since keeps only outcomes recorded at or after it; subjects keeps only those."""
    await _settle(env, "a", {1: SlotStatus.UNKNOWN})
    env.clock.advance(HOUR)
    await _settle(env, "a", {2: SlotStatus.UNKNOWN, 3: SlotStatus.UNKNOWN})
    ledger = env.make()
    since = START + HOUR
    assert ["2", "3"] == sorted(
        k.subject for k in await ledger.requeue("a", status="unknown", since=since, dry_run=True)
    )
    keys = await ledger.requeue("a", status="unknown", since=since, subjects=[3])
    assert ["3"] == [k.subject for k in keys]
    assert [] == await ledger.requeue("a", status="unknown", since=since, subjects=[3])


async def test_slots_lists_by_status_action_and_since(env: Env) -> None:
    """slots returns the records with a status, newest change first, within the limit."""
    await _settle(env, "a", {1: SlotStatus.UNKNOWN})
    env.clock.advance(HOUR)
    await _settle(env, "a", {2: SlotStatus.UNKNOWN, 3: SlotStatus.SENT})
    await _settle(env, "b", {4: SlotStatus.UNKNOWN})
    ledger = env.make()
    listed = await ledger.slots(status="unknown", action="a")
    assert ["2", "1"] == [r.key.subject for r in listed]
    assert "read timeout" == listed[0].last_error
    assert 3 == len(await ledger.slots(status=SlotStatus.UNKNOWN))
    assert 1 == len(await ledger.slots(status="unknown", limit=1))
    since = await ledger.slots(status=["unknown", "sent"], since=START + HOUR, action="a")
    assert ["2", "3"] == sorted(r.key.subject for r in since)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"status": "sent"}, "status"),
        ({"status": "claimed"}, "status"),
        ({"status": "nonsense"}, "status"),
        ({"status": []}, "status"),
        ({"status": "unknown", "since": dt.datetime(2026, 1, 1)}, "since"),
        ({"status": "unknown", "subjects": [1.5]}, "subject"),
        ({"status": "unknown", "dry_run": "yes"}, "dry_run"),
    ],
)
async def test_requeue_refuses_bad_arguments_before_any_sql(
    env: Env, kwargs: dict[str, object], field: str
) -> None:
    """A status that is not settled, a naive since, a bad subject: refused, nothing changed."""
    await _settle(env, "a", {1: SlotStatus.SENT})
    with pytest.raises(ValidationError) as info:
        await env.make().requeue("a", **kwargs)
    assert field == info.value.field
    assert SlotStatus.SENT == (await env.make().get("a", 1, DEADLINE)).status


@pytest.mark.parametrize("bad", ["u\ud800", "u\x00"], ids=["lone-surrogate", "nul"])
async def test_unstorable_key_parts_are_refused_before_any_chunk_is_written(
    env: Env, bad: str
) -> None:
    """A lone surrogate or NUL in the last item of claim_many is a ValidationError before
    any chunk is written (0.1.0 wrote the earlier chunks, then failed in the driver)."""
    items = [(1, DEADLINE), (2, DEADLINE), (bad, DEADLINE)]
    with pytest.raises(ValidationError) as info:
        await env.make().claim_many("a", items, chunk_size=1)
    assert "subject" == info.value.field
    assert 0 == env.count()


async def test_a_datetime_near_the_end_of_time_is_refused_without_sql(env: Env) -> None:
    """An aware datetime near datetime.min is a ValidationError naming the cycle, no row."""
    near_min = dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=3)))
    with pytest.raises(ValidationError) as info:
        await env.make().claim_slot("a", 1, near_min)
    assert "cycle" == info.value.field
    assert 0 == env.count()


async def test_requeue_and_slots_of_one_cycle_leave_the_other_cycles(env: Env) -> None:
    """cycle= narrows requeue and slots to one cycle: the subject's slot of the next
    cycle keeps its status (the console requeues the slots chosen on a page this way)."""
    ledger = env.make()
    for cycle in (DEADLINE, DEADLINE + HOUR):
        claim = await ledger.claim_slot("a", 1, cycle)
        await ledger.mark_unknown(claim, "read timeout")
    listed = await ledger.slots(status="unknown", action="a", cycle=DEADLINE)
    keys = await ledger.requeue("a", status="unknown", subjects=[1], cycle=DEADLINE)
    assert ["2026-12-01T18:00:00Z"] == [r.key.cycle for r in listed]
    assert ["2026-12-01T18:00:00Z"] == [k.cycle for k in keys]
    assert SlotStatus.RELEASED == (await ledger.get("a", 1, DEADLINE)).status
    assert SlotStatus.UNKNOWN == (await ledger.get("a", 1, DEADLINE + HOUR)).status
