"""The example bots' --simulate runs: exit code and the summary lines they promise."""

from __future__ import annotations

import os
import re
import sqlite3
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


def run_bot(bot: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run an example bot with ``args``; no token from the environment."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / bot / "bot.py"), *args],
        env={**os.environ, "NOTIFYONCE_BOT_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("bot", ["trial_reminders", "support_relay"])
def test_simulation_leaves_the_databases_own_tables_alone(bot: str, tmp_path: Path) -> None:
    """Pointed at a database with a users table, a simulation neither reads nor changes it."""
    db = tmp_path / "app.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("CREATE TABLE support_topics (thread_id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE notifyonce_slots (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO users VALUES (1, 'a real user')")
    done = run_bot(bot, "--simulate", "--database-url", f"sqlite+aiosqlite:///{db}")
    assert 0 == done.returncode, done.stdout + done.stderr
    with sqlite3.connect(db) as conn:
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
        rows = conn.execute("SELECT * FROM users").fetchall()
    assert ["notifyonce_slots", "support_topics", "users"] == tables
    assert [(1, "a real user")] == rows


@pytest.mark.parametrize(
    ("bot", "table"),
    [("trial_reminders", "notifyonce_demo_users"), ("support_relay", "notifyonce_relay_topics")],
)
def test_simulation_refuses_a_database_that_has_its_tables(
    bot: str, table: str, tmp_path: Path
) -> None:
    """A database that already has a table of the simulation's is refused, untouched."""
    db = tmp_path / "app.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)")
        conn.execute(f"INSERT INTO {table} VALUES (5)")
    done = run_bot(bot, "--simulate", "--database-url", f"sqlite+aiosqlite:///{db}")
    assert 2 == done.returncode
    assert f"already has {table}" in done.stderr
    with sqlite3.connect(db) as conn:
        assert [(5,)] == conn.execute(f"SELECT * FROM {table}").fetchall()


@pytest.mark.parametrize("bot", ["trial_reminders", "support_relay"])
def test_every_option_has_help_text(bot: str) -> None:
    """--help explains every option: none is listed bare."""
    done = run_bot(bot, "--help")
    assert 0 == done.returncode
    options = re.findall(r"^  (--[\w-]+)(.*)$", done.stdout, re.MULTILINE)
    bare = [name for name, rest in options if not rest.strip() or rest.strip().isupper()]
    # An option whose help did not fit on its line continues on the next, indented line.
    bare = [name for name in bare if not re.search(rf"{name}[^\n]*\n {{20,}}\S", done.stdout)]
    assert [] == bare
