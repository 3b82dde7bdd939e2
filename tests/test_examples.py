"""The example bots' --simulate runs: exit code and the summary lines they promise."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def simulate(bot: str, tmp_path: Path) -> str:
    """Run ``bot --simulate`` against a SQLite file in tmp_path; return its stdout."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'simulation.sqlite3'}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / bot / "bot.py"), "--simulate", "--database-url", url],
        env={**os.environ, "NOTIFYONCE_BOT_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def field(out: str, label: str) -> str:
    """The first value printed after ``label`` in a summary."""
    match = re.search(rf"{re.escape(label)}\s+(\S+)", out)
    assert match is not None, f"{label!r} not in:\n{out}"
    return match.group(1)


def test_trial_reminders_simulation_sends_each_reminder_once(tmp_path: Path) -> None:
    """Eight simulated hours with restarts and two workers: every reminder goes out once."""
    out = simulate("trial_reminders", tmp_path)
    assert "3 restarts while windows were open" in out
    due = field(out, "reminders due")
    assert due == field(out, "notifyonce sent")
    assert "duplicates: 0" in out.split("notifyonce sent", 1)[1].splitlines()[0]
    assert out.rstrip().endswith("every reminder went out once.")


def test_support_relay_simulation_never_loses_or_resends_a_reply(tmp_path: Path) -> None:
    """Re-reads, a restart and network failures: no reply is lost silently or sent again."""
    out = simulate("support_relay", tmp_path)
    assert "failed: 1 (offset kept)" in out
    assert "restarts before the offset was confirmed: 1" in out
    assert "7" == field(out, "delivered exactly once")
    assert "1" == field(out, "delivered twice")  # the answer lost after delivery
    assert "0" == field(out, "re-sent by a replay of a relayed update:")
    assert "given up after 3 replays: 1" in out
    assert "without an ERROR log: 0" in out
    assert out.rstrip().endswith("no reply lost silently; no relayed update sent again.")
