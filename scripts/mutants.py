#!/usr/bin/env python3
"""Break the guarantees' code paths on purpose, one at a time, and check the tests notice.

Each mutant is a targeted breakage of one promise (a regular expression and its
replacement in one source file) with the tests that must fail because of it. The script
copies src/, tests/ and pyproject.toml to a temporary directory (the working tree is never
touched, so other test runs may go on meanwhile); for each mutant it applies the patch to
the copy, runs those tests against it, restores the file and reports:

- ``caught``: the tests failed, as they must;
- ``SURVIVED``: the tests passed with the guarantee broken (a hole in the suite);
- ``PATTERN NOT FOUND``: the code moved (e.g. the dispatch pipeline was rewritten); the
  mutant must be re-targeted. Never counted as caught.

Run it from the repository root with the services up (``make mutants``, a few minutes;
not part of every CI run). ``--only NAME`` runs some mutants, ``--list`` shows them,
``--group PART`` the mutants of one part of the library (``--list`` shows them),
``--write-docs`` rewrites the result tables in docs/mutants.md. Exit status: 0 when every
mutant was caught, 1 otherwise, 2 when the unbroken code already fails those tests.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "mutants.md"
BEGIN, END = "<!-- mutants:begin -->", "<!-- mutants:end -->"


@dataclass(frozen=True)
class Mutant:
    """One breakage: ``pattern`` (a regex that must match exactly once) -> ``replacement``."""

    name: str
    promise: str
    file: str  # relative to src/notifyonce
    pattern: str
    replacement: str
    tests: tuple[str, ...]
    group: str = ""  # the part of the library it breaks (its section below)


def sections(*items: str | Mutant) -> list[Mutant]:
    """The mutants, each of the part of the library (its ``group``, for the kill rate per
    part) named by the last str before it."""
    group, mutants = "", []
    for item in items:
        if isinstance(item, str):
            group = item
        else:
            mutants.append(replace(item, group=group))
    return mutants


GUARANTEES = "tests/test_notifier_guarantees.py"
NOTIFIER = "tests/test_notifier.py"
DISPATCH = "tests/test_dispatch.py"
LEDGER = "tests/test_ledger.py"
E2E = "tests/test_telegram_e2e.py"
AUDIENCE = "tests/test_audience.py"
DST = "tests/test_dst.py"
OUTAGES = "tests/test_outages.py"
PERSONAL = "tests/test_personal.py"
EDITS = "tests/test_campaign_edits.py"
QUEUES = (
    "tests/test_queue_decisions.py",
    "tests/test_queues_celery.py::test_once_task_registers_a_task_that_is_redelivered_when_its_worker_dies",
    "tests/test_queues_taskiq.py::test_once_task_delivered_twice_runs_its_body_once",
    "tests/test_queues_arq.py::test_once_job_run_twice_runs_its_body_once",
    "tests/test_queues_dramatiq.py::test_the_middleware_runs_a_message_delivered_twice_once",
)

MUTANTS = sections(
    # -- the Notifier (the dispatch pipeline) ------------------------------------------------
    "dispatch",
    Mutant(
        "cancel-releases-in-flight",
        "a send in flight when the run is cancelled is uncertain, never released",
        "_dispatch.py",
        r"if started\n(\s+)else INTERRUPTED",
        r"if False\n\1else INTERRUPTED",
        (GUARANTEES + "::test_cancel_while_answers_are_in_flight_never_resends",),
    ),
    Mutant(
        "alo-claims-ignore-max-attempts",
        "at-least-once take-overs stop at max_attempts",
        "_dispatch.py",
        r"return self\.max_attempts if self\.mode is DeliveryMode\.AT_LEAST_ONCE else None",
        "return None",
        (GUARANTEES + "::test_at_least_once_take_over_stops_at_max_attempts",),
    ),
    Mutant(
        "alo-never-takes-over",
        "at-least-once takes over expired claims itself (sweep_every=None loses nothing)",
        "_dispatch.py",
        r"return self\.mode is DeliveryMode\.AT_LEAST_ONCE\n",
        "return False\n",
        (GUARANTEES + "::test_at_least_once_takes_over_without_the_sweep",),
    ),
    Mutant(
        "amo-takes-over",
        "at-most-once never takes over an expired claim (its worker may have sent)",
        "_dispatch.py",
        r"return self\.mode is DeliveryMode\.AT_LEAST_ONCE\n",
        "return True\n",
        (GUARANTEES + "::test_at_most_once_never_takes_over_an_expired_claim",),
    ),
    Mutant(
        "ledger-failure-reported-recorded",
        "a ledger failure while recording outcomes is reported, never taken as recorded",
        "_dispatch.py",
        r"return \[None\] \* len\(batch\)",
        "return [True] * len(batch)",
        (GUARANTEES + "::test_ledger_failure_while_recording_is_never_reported_recorded",),
    ),
    Mutant(
        "amo-retries-uncertain",
        "at-most-once records an uncertain send UNKNOWN and never repeats it",
        "_dispatch.py",
        r"return Decision\(SlotStatus\.UNKNOWN, Outcome\.UNKNOWN, error=error",
        "return Decision(SlotStatus.RELEASED, Outcome.RETRY, error=error",
        (NOTIFIER,),
    ),
    Mutant(
        "alo-uncertain-ignores-max-attempts",
        "at-least-once retries an uncertain send only while attempts remain",
        "_dispatch.py",
        r"and attempt < max_attempts",
        "and True",
        (NOTIFIER,),
    ),
    Mutant(
        "transient-burns-the-slot",
        "a failure that certainly did not deliver releases the slot",
        "_dispatch.py",
        r"SenderConfigError\)\):\n(\s+)return Decision\(SlotStatus\.RELEASED",
        r"SenderConfigError)):\n\1return Decision(SlotStatus.FAILED",
        (NOTIFIER,),
    ),
    Mutant(
        "permanent-retried",
        "a permanent refusal is FAILED and never retried",
        "_dispatch.py",
        r"isinstance\(exc, PermanentSendError\):\n(\s+)return Decision\(SlotStatus\.FAILED",
        r"isinstance(exc, PermanentSendError):\n\1return Decision(SlotStatus.RELEASED",
        (NOTIFIER,),
    ),
    Mutant(
        "send-after-lease-expired",
        "no send starts once the claim's lease ran out",
        "_dispatch.py",
        r"if left > self\.lease_margin:",
        "if True:",
        (NOTIFIER,),
    ),
    Mutant(
        "lease-lost-reported-sent",
        "a send whose lease was taken over is reported LEASE_LOST, not SENT",
        "_dispatch.py",
        r"if landed is False and decision\.may_have_delivered:",
        "if False:",
        (NOTIFIER,),
    ),
    Mutant(
        "sweep-not-scoped-to-action",
        "the automatic sweep settles only the action being sent",
        "_notifier.py",
        r"max_attempts=self\.max_attempts, actions=actions, cycle=cycle",
        "max_attempts=self.max_attempts, actions=None, cycle=cycle",
        (NOTIFIER,),
    ),
    Mutant(
        "sweep-not-scoped-to-campaign",
        "a campaign's run sweeps only its own campaign's expired claims",
        "_broadcast.py",
        r"sweep_cycle=self\.campaign,",
        "sweep_cycle=None,",
        (EDITS,),
    ),
    Mutant(
        "claims-before-the-turn",
        "a slot is claimed only inside its recipient's rate-limit turn",
        "_dispatch.py",
        r"async with self\.turn\(item\.notification\.target\) if self\.turn else _NO_TURN:",
        "async with _NO_TURN:",
        (DISPATCH + "::test_a_slot_is_claimed_only_after_its_rate_limit_turn",),
    ),
    Mutant(
        "no-row-isolation",
        "a batch of outcomes the database refuses is written row by row",
        "_dispatch.py",
        r"if len\(batch\) > 1:",
        "if False:",
        (DISPATCH + "::test_a_refused_row_is_isolated",),
    ),
    Mutant(
        "no-lease-renewal",
        "a long send keeps its lease, so no at-least-once worker takes it over",
        "_dispatch.py",
        r"await self\.ledger\.renew\(due\)",
        "None",
        (DISPATCH + "::test_a_long_send_keeps_its_lease",),
    ),
    Mutant(
        "cancel-leaves-sends-running",
        "no send outlives a run stopped by a foreign BaseException",
        "_dispatch.py",
        r"self\.stop\(exc, hard=True\)",
        "self.stop(exc, hard=False)",
        (DISPATCH + "::test_a_foreign_base_exception_stops_every_send",),
    ),
    Mutant(
        "second-cancel-cuts-settling",
        "a second cancellation while outcomes are written still leaves every row settled",
        "_dispatch.py",
        r"await asyncio\.shield\(settling\)",
        "await settling",
        (DISPATCH + "::test_a_second_cancel_while_recording_leaves_every_row_settled",),
    ),
    Mutant(
        "cancellation-swallowed",
        "a cancelled run raises CancelledError once its claims are settled",
        "_dispatch.py",
        r"if cancelled:\n(\s+)raise asyncio\.CancelledError",
        r"if False:\n\1raise asyncio.CancelledError",
        (DISPATCH + "::test_a_second_cancel_while_recording_leaves_every_row_settled",),
    ),
    Mutant(
        "lease-margin-a-hundredth",
        "a send starts only with at least a tenth of its lease left",
        "_dispatch.py",
        r"_LEASE_MARGIN = 0\.1\n",
        "_LEASE_MARGIN = 0.01\n",
        (NOTIFIER + "::test_a_send_starts_only_with_a_tenth_of_the_lease_left",),
    ),
    Mutant(
        "recorder-drops-the-backlog",
        "every outcome waiting for its write is written, past the first 500 too",
        "_dispatch.py",
        r"del self\.pending\[:_RECORD_CHUNK\]",
        "del self.pending[:]",
        (DISPATCH + "::test_outcomes_piled_up_past_one_write_are_all_recorded",),
    ),
    Mutant(
        "recorder-backlog-unbounded",
        "workers take no new notification while 500 outcomes wait for their write",
        "_dispatch.py",
        r"self\.room\.clear\(\)",
        "pass",
        (DISPATCH + "::test_outcomes_piled_up_past_one_write_are_all_recorded",),
    ),
    Mutant(
        "cancelled-claimer-keeps-the-claim",
        "a claim won for a worker cancelled meanwhile is released, not left claimed",
        "_dispatch.py",
        r"self\.put\(_Entry\(item, claim, INTERRUPTED\)\)",
        "pass",
        (NOTIFIER + "::test_cancelled_while_claiming_frees_the_batch", DISPATCH),
    ),
    Mutant(
        "claims-after-the-stop",
        "once a run stops, a worker whose turn comes claims nothing",
        "_dispatch.py",
        r"if self\.stopping:\n(\s+)return  # nothing claimed",
        r"if False:\n\1return  # nothing claimed",
        (DISPATCH + "::test_turns_that_come_after_a_stop_claim_nothing",),
    ),
    Mutant(
        "spacing-within-a-batch",
        "two notifications for one subject in one batch do not break min_spacing",
        "_dispatch.py",
        r"\n(\s+)taken\.add\(item\.key\.subject\)",
        "\n\\1pass",
        (NOTIFIER,),
    ),
    Mutant(
        "every-attempt-counts",
        "an attempt certainly not delivered does not count against max_attempts",
        "_dispatch.py",
        r"return decision\.may_have_delivered or decision\.status is not SlotStatus\.RELEASED",
        "return True",
        (GUARANTEES,),
    ),
    # -- the senders -----------------------------------------------------------------------
    "senders",
    Mutant(
        "reused-connection-not-written",
        "a failure on a reused keep-alive connection may have delivered: never resent",
        "_senders/aiohttp_transport.py",
        r"\n *config\.on_connection_reuseconn\.append\(_on_connection\)",
        "",
        (E2E + "::test_drop_after_delivery_on_a_reused_connection_is_not_resent",),
    ),
    Mutant(
        "uncertain-send-retried",
        "a sender retries only failures that certainly did not deliver",
        "_senders/retry.py",
        r"if not isinstance\(error, TransientSendError\):",
        "if False:",
        (E2E,),
    ),
    Mutant(
        "started-connect-error-certain",
        "a connect-class error after the request started writing is uncertain",
        "_senders/transport.py",
        r"request_started is True or \(",
        "(",
        (
            "tests/test_sender_edges.py::test_a_connect_failure_after_the_write_started_is_uncertain",
        ),
    ),
    # -- the ledger ------------------------------------------------------------------------
    "ledger",
    Mutant(
        "leases-on-the-host-clock",
        "leases are measured on the database server's clock",
        "_ledger/core.py",
        r"self\.server_clock = clock is None and driver\.clock_query is not None",
        "self.server_clock = False",
        ("tests/test_ledger.py::test_leases_are_measured_on_the_database_clock",),
    ),
    Mutant(
        "purge-ignores-age",
        "purge never deletes a cycle that can still fire",
        "_ledger/core.py",
        r"gone = sa\.and_\(old, sa\.not_\(held\)\)",
        "gone = sa.not_(held)",
        ("tests/test_ledger.py::test_purge_never_frees_a_slot_that_can_still_fire",),
    ),
    Mutant(
        "purge-ignores-live-leases",
        "purge never deletes a row a live claim holds",
        "_ledger/core.py",
        r"gone = sa\.and_\(old, sa\.not_\(held\)\)",
        "gone = old",
        ("tests/test_ledger.py::test_purge_never_frees_a_slot_that_can_still_fire",),
    ),
    Mutant(
        "sweep-alo-ignores-max-attempts",
        "the at-least-once sweep releases only while attempts remain",
        "_ledger/core.py",
        r"retry = mode is DeliveryMode\.AT_LEAST_ONCE and row\.attempt < max_attempts",
        "retry = mode is DeliveryMode.AT_LEAST_ONCE",
        ("tests/test_ledger.py",),
    ),
    Mutant(
        "sweep-amo-releases",
        "the at-most-once sweep makes expired claims UNKNOWN, never free",
        "_ledger/core.py",
        r"retry = mode is DeliveryMode\.AT_LEAST_ONCE and row\.attempt < max_attempts",
        "retry = row.attempt < max_attempts",
        ("tests/test_ledger.py",),
    ),
    Mutant(
        "take-over-ignores-max-attempts",
        "a take-over of an expired claim respects max_attempts",
        "_ledger/dialects.py",
        r"expired = sa\.and_\(expired, t\.attempt < limit\)",
        "expired = expired",
        ("tests/test_ledger.py", "tests/test_ledger_model.py"),
    ),
    Mutant(
        "renew-without-token-sqlite",
        "a claim taken over (same row id, another token) cannot be renewed (SQLite)",
        "_ledger/dialects.py",
        r'\n\s+t\.c\.token == _bind\(t, "token"\),',
        "",
        (LEDGER + "::test_renew_after_a_take_over_changes_nothing",),
    ),
    Mutant(
        "renew-without-token-postgres",
        "a claim taken over (same row id, another token) cannot be renewed (PostgreSQL)",
        "_ledger/dialects.py",
        r"t\.c\.token == v\.c\.tokens, _still_claimed\(t\)\)\n(\s+)\.values\(lease_until",
        r"_still_claimed(t))\n\1.values(lease_until",
        (LEDGER + "::test_renew_after_a_take_over_changes_nothing",),
    ),
    Mutant(
        "renew-without-token-mysql",
        "a claim taken over (same row id, another token) cannot be renewed (MariaDB/MySQL)",
        "_ledger/dialects.py",
        r'sa\.tuple_\(_bind\(t, "id", f"i_\{n\}"\), _bind\(t, "token", f"k_\{n\}"\)\)',
        'sa.tuple_(_bind(t, "id", f"i_{n}"), t.c.token)',
        (LEDGER + "::test_renew_after_a_take_over_changes_nothing",),
    ),
    Mutant(
        "batch-mark-without-fencing-postgres",
        "a worker whose claim was taken over cannot mark it in a batch (PostgreSQL)",
        "_ledger/dialects.py",
        r"t\.c\.token == v\.c\.mark_tokens, _still_claimed\(t\)\)",
        r"_still_claimed(t))",
        (LEDGER, "tests/test_ledger_races.py", DISPATCH, NOTIFIER),
    ),
    Mutant(
        # (Its UPDATE's own token check is redundant: the rows are locked and filtered by
        # token first, so breaking that check alone survives as an equivalent mutant.)
        "batch-mark-landed-by-id-mysql",
        "a batch mark of a claim taken over is reported not landed (MariaDB/MySQL)",
        "_ledger/dialects.py",
        r"mine = \[r for r in rows if \(r\[0\], r\[1\]\) in live\]",
        "mine = [r for r in rows if r[0] in {i for i, _ in live}]",
        (LEDGER + "::test_mark_many_applies_each_mark_once",),
    ),
    Mutant(
        "write-keeps-lost-claims",
        "a write of outcomes and claims whose answer is lost releases its claims by token",
        "_ledger/ledger.py",
        r"(len\(marks\) <= MARK_CHUNK\n\s+return Plan\(body, Shape\.ALONE if one else "
        r"Shape\.TOGETHER), undo=undo\)",
        r"\1)",
        (
            "tests/test_lost_answers.py::"
            "test_a_run_whose_write_of_outcomes_and_claims_loses_its_answer_loses_nothing",
        ),
    ),
    Mutant(
        "write-refusal-stops-the-run",
        "a write of outcomes and claims refused for one outcome costs only that outcome",
        "_dispatch.py",
        r"outcome = await run\.ledger\._claim_keys\(keys, run\.options, keeper\)\n(\s+)except",
        r"raise\n\1except",
        (DISPATCH + "::test_a_refused_write_of_outcomes_and_claims_costs_only_the_bad_row",),
    ),
    Mutant(
        "one-key-claim-keeps-lost-claims",
        "a claim_slot on the kept connection whose answer is lost releases its row by token",
        "_ledger/ledger.py",
        r"(await greenlet_spawn\(core\.direct_failed, pooled, exc, compiled\.sql\)\n"
        r"\s+except LedgerError:\n)\s+await self\._undo\(plan\)\n",
        r"\1",
        ("tests/test_ledger_races.py::test_a_one_key_claim_whose_answer_is_lost_is_undone",),
    ),
    Mutant(
        "one-key-claim-cancelled-keeps-its-connection",
        "a claim_slot on the kept connection cancelled under way gives its connection back",
        "_ledger/ledger.py",
        r"except BaseException as exc:\n(\s+)plan = self\._plan_claim_ordered",
        r"except Exception as exc:\n\1plan = self._plan_claim_ordered",
        (
            "tests/test_ledger_races.py::"
            "test_a_one_key_claim_cancelled_under_way_gives_its_connection_back",
        ),
    ),
    Mutant(
        "mark-without-fencing",
        "a worker whose claim was taken over cannot mark the slot",
        "_ledger/dialects.py",
        r'\n *t\.c\.token == _bind\(self\.table, "token", "m_token"\),',
        "",
        ("tests/test_ledger.py", "tests/test_ledger_races.py"),
    ),
    Mutant(
        "mariadb-batches-without-the-key",
        "a batch's look-up and read-back on MariaDB search the key, whatever the batch's size",
        "_ledger/dialects.py",
        r'return select\.with_hint\(self\.table, f"FORCE INDEX \(\{key\}\)"\)',
        "return select",
        ("tests/test_plans.py::test_a_batch_of_any_size_reads_only_its_keys",),
    ),
    Mutant(
        "sqlite-watched-engine-unseen",
        "an async SQLite engine's log and cursor listeners see the ledger's statements",
        "_drivers/sqlite.py",
        r"if self\.private or is_observed\(self\.engine\):",
        "if self.private:",
        (
            "tests/test_statements.py::test_a_watched_async_sqlite_engine_hears_the_ledgers_statements",
        ),
    ),
    # -- schedules and the command line ----------------------------------------------------
    "schedules and CLI",
    Mutant(
        "overlap-up-to-a-minute",
        "windows that overlap at all are refused",
        "_schedule/rules.py",
        r"if shared > ZERO:",
        "if shared > dt.timedelta(minutes=1):",
        ("tests/test_schedule.py::test_any_overlap_is_refused",),
    ),
    Mutant(
        "window-width-unchecked",
        "a window narrower than period + max_downtime is refused",
        "_schedule/rules.py",
        r"if timing_ok and w\.width < required:",
        "if False:",
        ("tests/test_schedule.py",),
    ),
    Mutant(
        "cli-sweep-mode-ignored",
        "notifyonce sweep --mode at-least-once sweeps at least once",
        "_cli/ledger.py",
        r'mode = DeliveryMode\(args\.mode\.replace\("-", "_"\)\)',
        "mode = DeliveryMode.AT_MOST_ONCE",
        ("tests/test_cli.py",),
    ),
    # -- the audience ----------------------------------------------------------------------
    "audience",
    Mutant(
        "gone-not-skipped",
        "a recipient known to be gone is skipped before any claim or request",
        "_dispatch.py",
        r"todo = await self\._audience\(todo\)",
        "pass",
        (AUDIENCE + "::test_a_block_is_learned_once_and_skipped_by_every_later_run",),
    ),
    Mutant(
        "gone-not-learned",
        "a refusal that says its recipient is gone is remembered once its mark landed",
        "_dispatch.py",
        r"if gone is not None and landed:",
        "if False:",
        (AUDIENCE + "::test_a_block_is_learned_once_and_skipped_by_every_later_run",),
    ),
    Mutant(
        "transactional-honours-opt-outs",
        "a transactional run ignores opt-outs (gone recipients are still skipped)",
        "_audience/store.py",
        r"elif row_category == category and not transactional:",
        "elif row_category == category:",
        (AUDIENCE + "::test_opt_outs_follow_the_category_and_transactional_ignores_them",),
    ),
    Mutant(
        "opt-out-ignores-category",
        "an opt-out skips only the notifications of its category",
        "_audience/store.py",
        r"elif row_category == category and not transactional:",
        "elif not transactional:",
        (AUDIENCE + "::test_opt_outs_follow_the_category_and_transactional_ignores_them",),
    ),
    Mutant(
        "young-audience-scanned",
        "a batch's audience look-up searches the key, even on a young PostgreSQL table",
        "_drivers/postgresql.py",
        r"        asked = \(\n            sa\.func\.unnest",
        "        return Driver.rows_by_key(table, key, columns, values)\n        asked = (\n"
        "            sa.func.unnest",
        (AUDIENCE + "::test_a_young_audience_is_searched_by_its_key",),
    ),
    # -- local times at daylight-saving changes ---------------------------------------------
    "daylight-saving changes",
    Mutant(
        "dst-deadline-ignores-fold",
        "a deadline at a local time that happens twice is the occurrence its fold names",
        "_keys.py",
        r"offset = cycle\.utcoffset\(\)",
        "offset = cycle.replace(fold=0).utcoffset()",
        (DST + "::test_a_deadline_at_an_odd_local_time_names_one_moment",),
    ),
    Mutant(
        "dst-key-memo-ignores-fold",
        "the two 02:30 of a night whose clocks go back are two slots, whichever comes first",
        "_keys.py",
        r"memo = \(kind, cycle, cycle\.fold\) if kind is dt\.datetime else \(kind, cycle\)",
        "memo = (kind, cycle)",
        (DST + "::test_a_deadline_at_an_odd_local_time_names_one_moment",),
    ),
    Mutant(
        "dst-window-wall-clock",
        "a window is measured in real hours across a daylight-saving change",
        "_schedule/window.py",
        r"        return value\.astimezone\(UTC\)",
        "        return value",
        (DST + "::test_a_reminder_due_at_an_odd_local_time_is_open_once_in_real_hours",),
    ),
    Mutant(
        "quiet-offset-of-the-utc-clock",
        "quiet hours read the local clock with the offset in force at that moment",
        "_quiet.py",
        r"local = now\.astimezone\(timezone or self\.default_timezone\)\.time\(\)",
        "at = now.astimezone(dt.timezone.utc)\n        local = (at + (timezone or "
        "self.default_timezone).utcoffset(at.replace(tzinfo=None))).time()",
        (DST + "::test_quiet_hours_follow_the_local_clock_across_a_change",),
    ),
    # -- media: a file rewritten during a send ---------------------------------------------
    "media",
    Mutant(
        "media-id-kept-for-stale-hash",
        "a file rewritten between its hash and its upload never gets the new bytes' file_id",
        "_senders/telegram/sender.py",
        r"return receipt, receipt\.file_id if fresh else None",
        "return receipt, receipt.file_id",
        ("tests/test_media_race.py",),
    ),
    Mutant(
        "campaign-wait-keeps-old-fingerprint",
        "a campaign that waited for its start sends only the message it records",
        "_broadcast.py",
        r"if waited and wanted is not None and isinstance\(given, Message\):",
        "if False:",
        ("tests/test_scheduled_campaigns.py",),
    ),
    Mutant(
        "campaign-file-not-pinned",
        "a file rewritten while its campaign runs never reaches the chats left",
        "_broadcast.py",
        r"\(see `pin`\)\.\n(\s+)self\.message = await pin\(given\)",
        r"(see `pin`).\n\1self.message = given",
        ("tests/test_media_race.py",),
    ),
    Mutant(
        "pinned-file-hashed-changed-sent",
        "a pinned file whose hash changed is refused before any send",
        "_senders/telegram/files.py",
        r"if _pinned\(media\) and digest != media\._digest:",
        "if False:",
        ("tests/test_media_race.py",),
    ),
    Mutant(
        "pinned-file-read-changed-sent",
        "a pinned file whose bytes changed after its hash (its stamp kept) is not uploaded",
        "_senders/telegram/files.py",
        r"if _pinned\(media\):\n(\s+)raise changed\(media\)",
        r"if False:\n\1raise changed(media)",
        ("tests/test_media_race.py",),
    ),
    # -- a database that goes away mid-run -------------------------------------------------
    "outage",
    Mutant(
        "rerun-replays-claim",
        "a claim cut after its commit is released by its token before it is made again",
        "_ledger/ledger.py",
        r"if plan\.undo is not None:\n(\s+)await self\._run_owned\(plan\.undo, None\)\n",
        "pass\n",
        (
            OUTAGES
            + "::test_a_statement_cut_after_it_committed_is_run_again_once_the_database_is_back",
        ),
    ),
    Mutant(
        "outage-outcomes-dropped",
        "an outcome whose write was cut after its commit is confirmed by its row, not lost",
        "_ledger/ledger.py",
        r"if not doubtful:",
        "if True:",
        (
            OUTAGES
            + "::test_a_statement_cut_after_it_committed_is_run_again_once_the_database_is_back",
        ),
    ),
    Mutant(
        "outage-outcomes-alone-written-twice",
        "outcomes written alone across an outage are written once, confirmed by their rows",
        "_dispatch.py",
        r"outage\.kept \+= len\(batch\)",
        "outage.kept += len(batch)\n                written = list(await self.run.ledger."
        "_mark_checked(marks, keeper, outage))",
        (OUTAGES + "::test_outcomes_written_alone_across_an_outage_are_written_once",),
    ),
    Mutant(
        "outage-outcomes-written-twice",
        "an outcome kept across an outage is written once when the database is back",
        "_dispatch.py",
        r"run\.outage\.kept \+= len\(entries\)",
        "run.outage.kept += len(entries)\n            landed = list(await run.ledger."
        "_mark_checked(_marks(entries), keeper, run.outage))",
        (OUTAGES + "::test_outcomes_answered_while_the_database_is_away_are_kept_and_written",),
    ),
    # -- the audience: who is skipped, and what is forgotten -----------------------------
    "audience",
    Mutant(
        "skip-gone-false-still-skips",
        "skip_gone=False sends to a gone recipient (its refusal is learned again)",
        "_audience/store.py",
        r"if row_category == GONE:\n(\s+)if skip_gone:",
        r"if row_category == GONE:\n\1if True:",
        (AUDIENCE,),
    ),
    Mutant(
        "state-transactional-honours-opt-outs",
        "a recipient's state skips no transactional notification for an opt-out",
        "_audience/store.py",
        r"if not transactional and category in self\.opted_out:",
        "if category in self.opted_out:",
        (AUDIENCE,),
    ),
    Mutant(
        "state-ignores-gone",
        "a recipient's state says to skip a gone recipient, whatever the category",
        "_audience/store.py",
        r"if self\.gone is not None:\n(\s+)return f\"gone: ",
        r'if False:\n\1return f"gone: ',
        (AUDIENCE,),
    ),
    Mutant(
        "come-back-forgets-opt-outs",
        "come_back forgets only that the recipient is gone, never its opt-outs",
        "_audience/store.py",
        r"where = sa\.and_\(t\.c\.recipient == who, t\.c\.category == GONE\)",
        "where = t.c.recipient == who",
        (AUDIENCE,),
    ),
    Mutant(
        "opt-in-forgets-every-category",
        "opting in to one category keeps the other opt-outs and a gone row",
        "_audience/store.py",
        r"where = sa\.and_\(t\.c\.recipient == who, t\.c\.category == what\)",
        "where = t.c.recipient == who",
        (AUDIENCE,),
    ),
    Mutant(
        "forget-gone-without-a-filter",
        "forget_gone refuses to forget every gone recipient at once",
        "_audience/store.py",
        r"if len\(where\) == 1:",
        "if False:",
        (AUDIENCE,),
    ),
    Mutant(
        "forget-gone-since-excludes-its-moment",
        "forget_gone(since=t) forgets the recipients gone at t itself",
        "_audience/store.py",
        r"where\.append\(t\.c\.since >= since\)",
        "where.append(t.c.since > since)",
        (AUDIENCE,),
    ),
    # -- personalisation and the local hour ------------------------------------------------
    "personalisation and local time",
    Mutant(
        "template-value-not-escaped",
        "a field's value arrives as its characters, never as markup",
        "_personal.py",
        r"return self\.escape\(value\)",
        "return value",
        (PERSONAL,),
    ),
    Mutant(
        "button-url-not-quoted",
        "a value put in a button's URL is percent-encoded",
        "_personal.py",
        r'values = quoted if key != "text" else plain',
        "values = plain",
        (PERSONAL,),
    ),
    Mutant(
        "missing-field-sent-empty",
        "a recipient without a field the template needs is refused, not sent a blank",
        "_personal.py",
        r"if filled\.missing is not None:",
        "if False:",
        (PERSONAL,),
    ),
    Mutant(
        "missing-button-field-unnoticed",
        "a recipient without a field a button needs is refused too",
        "_personal.py",
        r"filled\.missing = filled\.missing or missing",
        "pass",
        (PERSONAL,),
    ),
    Mutant(
        "empty-column-hides-default",
        "an empty column takes the default, as a missing one does",
        "_personal.py",
        r"if text\.strip\(\):\n(\s+)fields\[str\(name\)\] = text",
        r"if True:\n\1fields[str(name)] = text",
        (PERSONAL,),
    ),
    Mutant(
        "variant-without-region-fallback",
        "a language with a region gets its language's variant (pt-br: pt)",
        "_personal.py",
        r'or self\.variants\.get\(language\.split\("-"\)\[0\]\)',
        "",
        (PERSONAL,),
    ),
    Mutant(
        "local-hour-own-zone-ignored",
        "each recipient's hour is read in its own time zone",
        "_personal.py",
        r"local = self\.start\.astimezone\(zone or self\.default\)",
        "local = self.start.astimezone(self.default)",
        (PERSONAL,),
    ),
    Mutant(
        "local-hour-passed-not-tomorrow",
        "a local hour already past at the start is the next day's",
        "_personal.py",
        r"if when < local:",
        "if False:",
        (PERSONAL,),
    ),
    Mutant(
        "local-hour-at-the-start-tomorrow",
        "a local hour that is the start itself is due at once, not a day later",
        "_personal.py",
        r"if when < local:",
        "if when <= local:",
        (PERSONAL,),
    ),
    Mutant(
        "local-hour-sent-early",
        "nobody is sent before their local hour",
        "_broadcast.py",
        r"if due > now:",
        "if due > now + dt.timedelta(hours=1):",
        (PERSONAL,),
    ),
    Mutant(
        "local-pass-repeats-the-handled",
        "a pass of a local-time campaign asks only for the recipients due since the last",
        "_broadcast.py",
        r"if handled_until is not None and due <= handled_until:",
        "if False:",
        (PERSONAL,),
    ),
    # -- revisions: a campaign's edits and deletes ----------------------------------------
    "revisions",
    Mutant(
        "revision-follows-the-notifiers-mode",
        "a revision is at-least-once unless told, whatever the Notifier's mode",
        "_revision.py",
        r"mode=self\.mode,",
        "mode=n.mode,",
        (EDITS,),
    ),
    Mutant(
        "delete-not-found-failed",
        'a delete Telegram answers "message to delete not found" is done',
        "_revision.py",
        r'if "message to delete not found" not in exc\.description\.lower\(\):',
        "if True:",
        (EDITS,),
    ),
    Mutant(
        "edit-not-modified-failed",
        'an edit Telegram answers "message is not modified" is done',
        "_senders/telegram/sender.py",
        r'if "message is not modified" in lowered:\n(\s+)return False',
        r"if False:\n\1return False",
        (EDITS,),
    ),
    Mutant(
        "delete-past-the-limit-tried",
        "a delete with messages past 48 hours is refused unless what_is_possible",
        "_revision.py",
        r"if standing\.past_delete_limit and not what_is_possible:",
        "if False:",
        (EDITS,),
    ),
    Mutant(
        "delete-tries-the-old",
        "a delete of what is possible never tries a message past 48 hours",
        "_revision.py",
        r"if cutoff is not None:\n(\s+)query = query\.where\(t\.c\.sent_at >= cutoff\)",
        r"if False:\n\1query = query.where(t.c.sent_at >= cutoff)",
        (EDITS,),
    ),
    Mutant(
        "delete-limit-without-margin",
        "a message ten minutes short of 48 hours counts as past the limit",
        "_revision.py",
        r"- DELETE_LIMIT \+ _DELETE_MARGIN",
        "- DELETE_LIMIT",
        (EDITS,),
    ),
    Mutant(
        "running-campaign-revised",
        "a campaign still running (chats claimed) is not revised",
        "_revision.py",
        r"if standing\.running:",
        "if False:",
        (EDITS,),
    ),
    Mutant(
        "crashed-claims-count-as-running",
        "a crashed run's claims, their lease out, do not count as running",
        "_revision.py",
        r"live = t\.c\.lease_until > ledger\.now\(\)",
        "live = sa.true()",
        (EDITS,),
    ),
    Mutant(
        "same-edit-is-a-new-revision",
        "the same edit run again is the same revision (edits nothing twice)",
        "_revision.py",
        r"if edits and edits\[-1\]\[1\] == fingerprint:",
        "if False:",
        (EDITS,),
    ),
    Mutant(
        "edit-after-the-delete",
        "a deleted campaign is not edited",
        "_revision.py",
        r'if any\(r\.kind == "delete" for r in await self\.revisions\(\)\):',
        "if False:",
        (EDITS,),
    ),
    Mutant(
        "revision-stops-after-a-full-page",
        "a revision reaches every chat, past the first page of 500",
        "_revision.py",
        r"if len\(rows\) < _PAGE:",
        "if len(rows) <= _PAGE:",
        (EDITS,),
    ),
    Mutant(
        "album-delete-first-item-only",
        "a delete removes every item of an album",
        "_revision.py",
        r"await self\.sender\.delete_messages\(recipient, ids\)",
        "await self.sender.delete_messages(recipient, ids[:1])",
        (EDITS,),
    ),
    # -- the recovery after an outage ------------------------------------------------------
    "outage",
    Mutant(
        "outage-never-armed-waits",
        "a database that never answered in the run is not waited for (misconfigured)",
        "_drivers/outage.py",
        r"if self\.patience <= 0 or not self\.armed:",
        "if self.patience <= 0:",
        (OUTAGES,),
    ),
    Mutant(
        "outage-patience-zero-waits",
        "patience zero ends the run at the first failure, with that failure",
        "_drivers/outage.py",
        r"if self\.patience <= 0 or not self\.armed:",
        "if self.patience < 0 or not self.armed:",
        (OUTAGES,),
    ),
    Mutant(
        "outage-patience-tripled",
        "a database away past the run's patience ends the run",
        "_drivers/outage.py",
        r"while time\.monotonic\(\) - started < self\.patience:",
        "while time.monotonic() - started < 3 * self.patience:",
        (OUTAGES,),
    ),
    Mutant(
        "outage-first-failed-probe-gives-up",
        "a run waits its whole patience for its database, probing again and again",
        "_drivers/outage.py",
        r"last = again\n(\s+)continue",
        r"last = again\n\1break",
        (OUTAGES,),
    ),
    Mutant(
        "outage-return-not-counted",
        "a statement cut by an outage is confirmed by its row once the database is back",
        "_drivers/outage.py",
        r"self\.epoch \+= 1",
        "pass",
        (OUTAGES,),
    ),
    Mutant(
        "outage-gave-up-waits-again",
        "once a run gave up on its database, no statement waits for it again",
        "_drivers/outage.py",
        r"raise exc  # gave up already",
        "pass  # gave up already",
        (OUTAGES,),
    ),
    Mutant(
        "outage-cut-lanes-kept",
        "the connections a run kept for itself are dropped when its database is back",
        "_drivers/outage.py",
        r"if self\.on_back is not None:",
        "if False:",
        (OUTAGES,),
    ),
    Mutant(
        "outage-armed-never",
        "a run that reached its database waits for it when it goes away",
        "_dispatch.py",
        r"self\.outage\.armed = True",
        "pass",
        (OUTAGES,),
    ),
    Mutant(
        "outage-audience-ends-the-run",
        "an audience look-up the outage cut waits for the database like the claims",
        "_dispatch.py",
        r"(skips = await check\.skips\(targets\)\n\s+break\n\s+except "
        r"LedgerUnavailableError as exc:\n(?:.*\n){3}\s+)await self\.outage\.wait\(exc\)",
        r"\1raise",
        (OUTAGES,),
    ),
    # -- the queue adapters' shared decisions ---------------------------------------------
    "queues",
    Mutant(
        "queue-released-not-retried",
        "a task whose slot was released (not done) is run again by its queue",
        "queues/_common.py",
        r"if guard\.outcome is Outcome\.RETRY:\n(\s+)return 1\.0",
        r"if False:\n\1return 1.0",
        QUEUES,
    ),
    Mutant(
        "queue-held-alo-dropped",
        "at least once, a task whose slot another worker holds is tried again later",
        "queues/_common.py",
        r"if held and guard\.mode is DeliveryMode\.AT_LEAST_ONCE:",
        "if False:",
        QUEUES,
    ),
    Mutant(
        "queue-held-amo-retried",
        "at most once, a task whose slot another worker holds is done (the holder settles it)",
        "queues/_common.py",
        r"if held and guard\.mode is DeliveryMode\.AT_LEAST_ONCE:",
        "if held:",
        QUEUES,
    ),
    Mutant(
        "queue-held-retried-within-the-lease",
        "a held slot is tried again only after the holder's lease could have ended",
        "queues/_common.py",
        r"return lease_seconds \+ 1\.0",
        "return 1.0",
        QUEUES,
    ),
    Mutant(
        "queue-finished-slot-retried",
        "a task redelivered after its slot finished is done at once, no retry loop",
        "queues/_common.py",
        r"held = guard\.skipped is SlotStatus\.CLAIMED",
        "held = guard.skipped is not None",
        QUEUES,
    ),
    Mutant(
        "queue-body-without-claim",
        "a task whose slot is not claimed never runs its body",
        "queues/_common.py",
        r"if guard\.claim is not None:\n(\s+)return body\(guard\.claim\), None",
        r"if True:\n\1return body(guard.claim), None",
        QUEUES,
    ),
    Mutant(
        "queue-body-error-lost",
        "a task body's exception reaches its queue after the slot is recorded",
        "queues/_common.py",
        r"except Exception as exc:\n(\s+)return None, exc",
        r"except Exception as exc:\n\1return None, None",
        QUEUES,
    ),
    Mutant(
        "queue-async-error-lost",
        "an async task body's exception reaches its queue after the slot is recorded",
        "queues/_common.py",
        r"if error is not None:\n(\s+)raise error",
        r"if False:\n\1raise error",
        QUEUES,
    ),
    Mutant(
        "queue-async-never-retries",
        "an async task is tried again in-process as retry_delay says",
        "queues/_common.py",
        r"for _ in range\(max_retries \+ 1\):",
        "for _ in range(1):",
        QUEUES,
    ),
    Mutant(
        "queue-ledger-shared-across-fork",
        "a forked worker makes its own ledger, never its parent's engine",
        "queues/_common.py",
        r"if self\._made is None or self\._made\[0\] != pid:",
        "if self._made is None:",
        QUEUES,
    ),
    Mutant(
        "queue-claim-away-not-retried",
        "a task whose claim found the database away is tried again, not failed",
        "queues/_common.py",
        r"if guard\.outcome is None and isinstance\(error, LedgerUnavailableError\):",
        "if False:",
        (
            "tests/test_contract.py::test_a_queue_tries_a_claim_again_only_when_the_database_was_away",
        ),
    ),
    Mutant(
        "dramatiq-claim-error-plain",
        "a dramatiq claim failure stops the actor (a MiddlewareError), never lets it run",
        "queues/dramatiq.py",
        r"class ClaimError\(MiddlewareError\):",
        "class ClaimError(Exception):",
        (
            "tests/test_queues_dramatiq.py::test_a_missing_ledger_table_stops_the_message_and_names_the_fix",
        ),
    ),
    Mutant(
        "dramatiq-held-retry-plain",
        "a dramatiq message whose slot is held stops the actor, then comes back after the lease",
        "queues/dramatiq.py",
        r"class SlotHeldError\(dramatiq\.Retry, MiddlewareError\):",
        "class SlotHeldError(dramatiq.Retry):",
        (
            "tests/test_queues_dramatiq.py::test_a_slot_held_by_a_live_worker_does_not_run_the_actor",
        ),
    ),
    Mutant(
        "once-mark-gives-up-at-once",
        "a guard's mark waits for a database that went away after the block ran",
        "_once.py",
        r"return self\._ledger\.lease\.total_seconds\(\) / 2",
        "return 0.0",
        ("tests/test_contract.py::TestOnce::test_database_away_after_the_body_is_waited_out",),
    ),
)


def copy_tree(into: Path) -> Path:
    """A copy of what the tests need; its src/ is imported instead of the installed one."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in ("src", "tests"):
        shutil.copytree(ROOT / name, into / name, ignore=skip)
    shutil.copy2(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def pytest(
    copy: Path, python: str, marker: str | None, tests: list[str], stop: bool = True
) -> tuple[int, str]:
    args = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-x"] if stop else [])]
    if marker:
        args += ["-m", marker]
    env = {**os.environ, "PYTHONPATH": str(copy / "src")}
    done = subprocess.run(  # noqa: S603 (this venv's python, our own arguments)
        [*args, *tests], cwd=copy, env=env, capture_output=True, text=True, timeout=900
    )
    return done.returncode, done.stdout + done.stderr


def run_one(
    mutant: Mutant, copy: Path, python: str, marker: str | None, stop: bool = True
) -> tuple[str, str, float]:
    """Apply, test, restore: the verdict, the first test that failed, the seconds taken."""
    path = copy / "src" / "notifyonce" / mutant.file
    original = path.read_text()
    found = len(re.findall(mutant.pattern, original))
    if found != 1:
        return f"PATTERN NOT FOUND ({found} matches)", "", 0.0
    started = time.monotonic()
    try:
        path.write_text(re.sub(mutant.pattern, mutant.replacement, original))
        code, output = pytest(copy, python, marker, list(mutant.tests), stop)
    finally:
        path.write_text(original)
    took = time.monotonic() - started
    failed = re.search(r"^FAILED (\S+)", output, re.MULTILINE)
    by = failed.group(1).rsplit("/", 1)[-1] if failed else ""
    if code == 1 and not stop:
        counts = re.findall(r"(\d+) (failed|passed)", output.splitlines()[-1])
        return "caught", f"{by} ({', '.join(f'{n} {w}' for n, w in counts)})", took
    if code == 1:
        return "caught", by, took
    if code == 0:
        return "SURVIVED", by, took
    tail = output.strip().splitlines()[-3:]
    return f"ERROR (pytest exit {code}: {' / '.join(tail)})", by, took


def write_docs(rows: list[tuple[Mutant, str, str]], command: str) -> None:
    """Rewrite the table in docs/mutants.md: this run's rows, and for a mutant this run
    left out (``--only``) its row from the table as it was, marked with that run's date."""
    text = DOCS.read_text()
    head, _, rest = text.partition(BEGIN)
    old, _, tail = rest.partition(END)
    earlier = re.search(r"^Last run: `[^`]*`, (\d{4}-\d\d-\d\d)", old, re.MULTILINE)
    when = f" ({earlier.group(1)})" if earlier else ""
    kept = {
        match.group(1): match.group(0).rstrip()
        for match in re.finditer(r"^\| `([^`]+)` \|.*$", old, re.MULTILINE)
    }
    ran = {m.name: f"| `{m.name}` | {m.promise} | `{m.file}` | {r} | `{by}` |" for m, r, by in rows}
    lines = []
    results: dict[str, list[str]] = {}
    for mutant in MUTANTS:
        if mutant.name in ran:
            lines.append(ran[mutant.name])
        elif mutant.name in kept:
            cells = kept[mutant.name].split(" | ")
            # A row kept from an earlier run keeps that run's date (the first one it got).
            result = cells[3] if re.search(r" \(\d{4}-\d\d-\d\d\)", cells[3]) else cells[3] + when
            result = re.sub(r"( \(\d{4}-\d\d-\d\d\))(?: \(\d{4}-\d\d-\d\d\))+", r"\1", result)
            lines.append(" | ".join([*cells[:3], result, *cells[4:]]))
        else:
            continue
        results.setdefault(mutant.group, []).append(lines[-1].split(" | ")[3])
    caught = sum(r == "caught" for _, r, _ in rows)
    parts = ["| part of the library | mutants | caught | kill rate |", "|---|---:|---:|---:|"]
    for group, found in results.items():
        killed = sum(r.startswith("caught") for r in found)
        parts.append(f"| {group} | {len(found)} | {killed} | {killed / len(found):.0%} |")
    table = [
        f"Last run: `{command}`, {time.strftime('%Y-%m-%d')}: {caught} of {len(rows)} caught"
        + (
            "; a result followed by a date is from an earlier run on that date"
            if len(rows) < len(lines)
            else ""
        )
        + ".",
        "",
        *parts,
        "",
        "| mutant | the promise it breaks | file | result | first failing test |",
        "|---|---|---|---|---|",
        *lines,
    ]
    DOCS.write_text(f"{head}{BEGIN}\n" + "\n".join(table) + f"\n{END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only this mutant (repeatable)")
    parser.add_argument(
        "--group",
        action="append",
        help="run only the mutants of this part of the library, e.g. revisions (repeatable; "
        "--list shows the groups)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "-m", dest="marker", help="pytest marker expression, e.g. 'sqlite' for a quick run"
    )
    parser.add_argument("--write-docs", action="store_true", help="rewrite docs/mutants.md")
    parser.add_argument(
        "--every-failure",
        action="store_true",
        help="run each mutant's tests to the end (every database) instead of stopping at "
        "the first failure, and count the failures",
    )
    args = parser.parse_args()
    chosen = [
        m
        for m in MUTANTS
        if (not args.only or m.name in args.only) and (not args.group or m.group in args.group)
    ]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
    groups = set(args.group or ()) - {m.group for m in MUTANTS}
    if groups:
        parser.error(f"unknown groups: {', '.join(sorted(groups))}")
    if args.list:
        for m in chosen:
            print(f"{m.group:31} {m.name:38} {m.file:28} {m.promise}")
        return 0
    python = str(ROOT / ".venv" / "bin" / "python")
    if not os.path.exists(python):
        python = sys.executable
    rows: list[tuple[Mutant, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="notifyonce-mutants-") as tmp:
        copy = copy_tree(Path(tmp))
        # Unbroken, the same tests must pass: otherwise every mutant would look caught.
        tests = sorted({t for m in chosen for t in m.tests})
        code, output = pytest(copy, python, args.marker, tests)
        if code != 0:
            print(output[-3000:])
            print(f"the unbroken code fails its own tests (pytest exit {code}): no verdict")
            return 2
        for mutant in chosen:
            result, by, took = run_one(mutant, copy, python, args.marker, not args.every_failure)
            rows.append((mutant, result, by))
            print(f"{result:10} {mutant.name:36} {took:5.0f}s  {by}", flush=True)
    caught = sum(result == "caught" for _, result, _ in rows)
    print(f"\n{caught} of {len(rows)} mutants caught")
    for mutant, result, _ in rows:
        if result != "caught":
            print(f"  {result}: {mutant.name} ({mutant.file}: {mutant.pattern})")
    if args.write_docs:
        command = "python scripts/mutants.py" + (f" -m '{args.marker}'" if args.marker else "")
        command += "".join(f" --group '{g}'" for g in args.group or ())
        command += f" --only NAME ({len(args.only)} named)" if args.only else ""
        command += " --every-failure" if args.every_failure else ""
        write_docs(rows, command)
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
