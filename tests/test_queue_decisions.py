"""What every queue adapter decides after ``once``: run the task again, and when, or not.

The adapters (Celery, dramatiq, taskiq, arq, APScheduler) share these decisions
(``notifyonce.queues._common``); each condition is pinned here at its boundary, on each
database, so that a slip in one shows here and not only in a queue's kill storm.
"""

from __future__ import annotations

import datetime as dt
import types
from typing import Any

import pytest
import sqlalchemy as sa

import notifyonce.queues._common as common
from notifyonce import (
    AsyncLedger,
    Claim,
    DeliveryMode,
    Ledger,
    NotDoneError,
    OnceGuard,
    Outcome,
    SlotStatus,
    once,
)
from notifyonce.queues._common import (
    GuardSpec,
    LedgerSource,
    retry_delay,
    run_guarded,
    run_retrying_async,
)

from ._clocks import UTC

CYCLE = dt.datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE


class BoomError(Exception):
    """An exception that says nothing about whether the body did its work."""


async def _ended(ledger: AsyncLedger, mode: DeliveryMode, how: str, subject: int = 1) -> OnceGuard:
    """A guard after its body: ``how`` is done, not-done, uncertain, held or finished."""
    if how == "held":
        assert await ledger.claim_slot("job", subject, CYCLE) is not None
    if how == "finished":
        claim = await ledger.claim_slot("job", subject, CYCLE)
        assert claim is not None
        await ledger.mark_sent(claim)
    guard = once(ledger, "job", subject, CYCLE, mode=mode, max_attempts=3)
    errors = {"not-done": NotDoneError("later"), "uncertain": BoomError("maybe")}
    raised: list[Exception] = []
    try:
        async with guard:
            if guard.claim is not None and how in errors:
                raise errors[how]
    except Exception as exc:
        raised.append(exc)
    assert ([errors[how]] if how in errors else []) == raised
    return guard


@pytest.mark.parametrize("mode", [AMO, ALO], ids=["amo", "alo"])
@pytest.mark.parametrize(
    "how", ["done", "not-done", "uncertain", "held", "finished"], ids=lambda how: how
)
async def test_retry_delay_runs_again_only_what_is_not_done_or_held_at_least_once(
    ledger: AsyncLedger, mode: DeliveryMode, how: str
) -> None:
    """A released slot (not done; at least once, an uncertain end with attempts left) is
    run again in a second; a slot another worker holds, at least once, only after one
    lease and a second (the holder may be dead, its claim then taken over), at most once
    never (the holder settles it); a done or finished slot never (no retry loop)."""
    lease = ledger.lease.total_seconds()
    guard = await _ended(ledger, mode, how)
    expected = {
        "done": None,
        "not-done": 1.0,
        "uncertain": 1.0 if mode is ALO else None,
        "held": lease + 1.0 if mode is ALO else None,
        "finished": None,
    }[how]
    assert expected == retry_delay(guard, lease)


@pytest.mark.parametrize("status", ["sent", "failed", "unknown"])
async def test_a_slot_finished_any_way_is_done_at_once_in_both_modes(
    ledger: AsyncLedger, status: str
) -> None:
    """A task redelivered after its slot finished (sent, failed, unknown) is skipped and
    done in both modes: no retry, so no loop of redeliveries."""
    claim = await ledger.claim_slot("job", 1, CYCLE)
    assert claim is not None
    if status == "sent":
        await ledger.mark_sent(claim)
    elif status == "failed":
        await ledger.mark_failed(claim, "refused")
    else:
        await ledger.mark_unknown(claim)
    delays = []
    for mode in (AMO, ALO):
        guard = once(ledger, "job", 1, CYCLE, mode=mode)
        async with guard:
            assert guard.claim is None
        delays.append((guard.skipped, retry_delay(guard, 60.0)))
    assert [(SlotStatus(status), None)] * 2 == delays


def test_run_guarded_runs_the_body_with_the_claim_and_keeps_its_error(
    sync_engine: sa.Engine, sync_table: str
) -> None:
    """The body runs with the won claim and its value comes back; a body whose slot is
    done is not run; a body's exception comes back after the slot recorded it (not
    done: released), never swallowed."""
    ledger = Ledger(sync_engine, table_name=sync_table)
    ledger.create_schema()
    ran: list[Claim] = []

    def body(claim: Claim) -> str:
        ran.append(claim)
        return "value"

    first = run_guarded(once(ledger, "job", 1, CYCLE), body)
    again = run_guarded(once(ledger, "job", 1, CYCLE), body)

    def failing(claim: Claim) -> str:
        raise NotDoneError("later")

    guard = once(ledger, "job", 2, CYCLE)
    value, error = run_guarded(guard, failing)
    record = ledger.get("job", 2, CYCLE)
    assert ("value", None) == first
    assert (None, None) == again
    assert 1 == len(ran)
    assert isinstance(ran[0], Claim)
    assert None is value
    assert isinstance(error, NotDoneError)
    assert Outcome.RETRY == guard.outcome
    assert record is not None
    assert SlotStatus.RELEASED == record.status


@pytest.mark.parametrize("mode", [AMO, ALO], ids=["amo", "alo"])
async def test_an_async_task_is_tried_again_in_process_and_its_error_raised_at_the_end(
    ledger: AsyncLedger, mode: DeliveryMode
) -> None:
    """A body that is not done the first time runs again in the same call and its value
    comes back; a body that fails uncertainly at most once raises after its slot was
    recorded unknown, and is not run again."""
    spec = GuardSpec("job", lambda n: (n, CYCLE), mode, 3, ())
    calls: list[int] = []

    async def flaky(claim: Claim) -> str:
        calls.append(claim.attempt)
        if len(calls) == 1:
            raise NotDoneError("later")
        return "value"

    value = await run_retrying_async(spec, ledger, (1,), {}, 2, flaky)
    failed: list[int] = []

    async def boom(claim: Claim) -> str:
        failed.append(claim.attempt)
        raise BoomError("maybe")

    with pytest.raises(BoomError):
        await run_retrying_async(
            GuardSpec("job", lambda n: (n, CYCLE), AMO, 3, ()), ledger, (2,), {}, 2, boom
        )
    record = await ledger.get("job", 2, CYCLE)
    assert "value" == value
    assert 2 == len(calls)
    assert [1] == failed
    assert record is not None
    assert SlotStatus.UNKNOWN == record.status


def test_a_ledger_function_is_called_once_per_process(
    sync_engine: sa.Engine, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger given as a function is made once in a process and made again in a
    forked child (another pid), which must not use its parent's engine."""
    made: list[Ledger] = []

    def make() -> Ledger:
        made.append(Ledger(sync_engine, table_name=sync_table))
        return made[-1]

    source = LedgerSource(make, Ledger)
    pid: dict[str, Any] = {"now": 100}
    monkeypatch.setattr(common, "os", types.SimpleNamespace(getpid=lambda: pid["now"]))
    first, again = source.get(), source.get()
    pid["now"] = 101
    child = source.get()
    assert 2 == len(made)
    assert first is again
    assert child is made[1]
    assert child is not first
