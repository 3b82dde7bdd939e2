"""The Notifier's ways into the ledger, for the doubles that fake a database's moments.

A run writes its outcomes and its next claims in one call, ``AsyncLedger._write`` (one
statement on PostgreSQL). A double that slows, fails or pauses the claims
(``_claim_keys``) or the marks (``_mark_checked``) makes that call go through both, so it
sees every claim and every mark of the run; the combined statement itself is tested
against the databases elsewhere (tests/test_plans.py, tests/test_lost_answers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from notifyonce import AsyncLedger, Claim


async def written_apart(
    ledger: AsyncLedger, results: Sequence[Any], keys: list[Any], options: Any, *args: Any
) -> tuple[list[bool], list[Claim]]:
    """``ledger._write`` as two calls: the marks, then the claims (either as overridden)."""
    landed = await ledger._mark_checked(results, *args)
    return landed, await ledger._claim_keys(keys, options, *args)


class ApartLedger(AsyncLedger):
    """An AsyncLedger whose run writes go through `_mark_checked` and `_claim_keys`."""

    async def _write(
        self, results: Sequence[Any], keys: list[Any], options: Any, *args: Any
    ) -> tuple[list[bool], list[Claim]]:
        return await written_apart(self, results, keys, options, *args)


def write_apart(ledger: AsyncLedger) -> None:
    """Make this ledger's run writes go through its (patched) `_mark_checked` and
    `_claim_keys`."""

    async def write(results: Sequence[Any], keys: list[Any], options: Any, *args: Any) -> Any:
        return await written_apart(ledger, results, keys, options, *args)

    ledger._write = write  # type: ignore[method-assign]
