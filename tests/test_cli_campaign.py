"""``notifyonce campaign edit|delete|follow-up``: after the send, on each database.

Refusals come before any request or claim: bad files and options, a campaign that sent
nothing or is still running, messages past Telegram's 48 hours (counted and said).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce import DeliveryMode
from notifyonce._cli import main
from notifyonce._cli.campaign import FOLLOW_UP_MODE, delivery_mode
from notifyonce.testing import BotAPIServer, Reply

from ._databases import Backend

TOKEN = "12345:campaign-secret-token"
CHATS = 20


@pytest.fixture
def server() -> Iterator[BotAPIServer]:
    with BotAPIServer() as server:
        yield server


@pytest.fixture
def sent(
    sync_backend: Backend,
    sync_table: str,
    tmp_path: Path,
    server: BotAPIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> list[str]:
    """A migrated ledger and campaign news/c1 sent to 20 chats; the options every command
    shares (database, table, server)."""
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    db = ["--database-url", sync_backend.sync_url, "--table", sync_table]
    assert 0 == main(["migrate", *db])
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, CHATS + 1)))
    (tmp_path / "text.txt").write_text("Sale until Friday\n")
    shared = [*db, "--base-url", server.url, "--rate", "0"]
    broadcast = ["broadcast", "--recipients-file", str(tmp_path / "chats.txt")]
    broadcast += ["--text-file", str(tmp_path / "text.txt"), "--action", "news"]
    assert 0 == main([*broadcast, "--campaign", "c1", *shared])
    return shared


def campaign(what: str, shared: list[str], *extra: str, name: str = "c1") -> list[str]:
    return ["campaign", what, "--action", "news", "--campaign", name, *shared, *extra]


def test_edit_then_delete_each_message_once(
    sent: list[str], server: BotAPIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edit changes each of the 20 messages once; run again it sends nothing; a delete
    then removes each once."""
    new = tmp_path / "new.txt"
    new.write_text("Sale until Sunday\n")
    assert 0 == main(campaign("edit", sent, "--text-file", str(new)))
    before = len(server.requests)
    assert 0 == main(campaign("edit", sent, "--text-file", str(new)))
    again = len(server.requests) - before
    assert 0 == main(campaign("delete", sent))
    out = capsys.readouterr().out
    edits = [c for c in server.changes if c.method == "editMessageText"]
    deletes = [c for c in server.changes if c.method == "deleteMessage"]
    assert (CHATS, CHATS, 0) == (len({c.chat_id for c in edits}), len(edits), again)
    assert CHATS == len({(c.chat_id, c.message_id) for c in deletes}) == len(deletes)
    assert "news/c1#edit-2: done 20," in out
    assert "news/c1#edit-2: done 0, failed 0, unknown 0, already done 20" in out
    assert "news/c1#delete: done 20," in out


def test_a_delete_past_48_hours_is_refused_with_counts_then_done_as_possible(
    sent: list[str],
    sync_backend: Backend,
    sync_table: str,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Five of twenty messages three days old: the delete says so and refuses before any
    request (exit 2); --what-is-possible deletes the fifteen others, never the five."""
    engine = sa.create_engine(sync_backend.sync_url)
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3)
    chats = ["1", "2", "3", "4", "5"]
    try:
        with engine.begin() as conn:
            table = sa.table(sync_table, sa.column("subject"), sa.column("sent_at"))
            conn.execute(sa.update(table).where(table.c.subject.in_(chats)).values(sent_at=old))
    finally:
        engine.dispose()
    requests = len(server.requests)
    with pytest.raises(SystemExit) as refused:
        main(campaign("delete", sent))
    err = capsys.readouterr().err
    tried = len(server.requests) - requests
    assert 0 == main(campaign("delete", sent, "--what-is-possible"))
    assert (2, 0) == (refused.value.code, tried)
    assert "5 of the 20 messages of campaign news/c1 were sent more than 48 hours ago" in err
    assert "--what-is-possible deletes the other 15" in err
    assert set() == set(chats) & {c.chat_id for c in server.changes}
    assert 15 == len(server.changes)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("edit", "--text-file", "LONG"), "--text-file: the text is 5000 characters"),
        (("edit", "--caption-file", "CAPTION"), "--caption-file: the text is 2000 characters"),
        (("edit", "--buttons-file", "BAD"), "--buttons-file: not JSON"),
        (("edit", "--buttons-file", "NOACTION"), "--buttons-file"),
        (("edit",), "edit needs --text-file, --caption-file or --buttons-file"),
        (("edit", "--text-file", "MISSING"), "--text-file: cannot read it"),
        (("edit", "--text-file", "OK", "--campaign", "nope"), "has no sent message"),
        (("delete", "--campaign", "nope"), "has no sent message"),
        (("follow-up", "--only", "failed", "--to-campaign", "c2", "--text-file", "OK"), "no chat"),
    ],
)
def test_bad_input_is_refused_before_any_request_or_claim(
    sent: list[str],
    server: BotAPIServer,
    tmp_path: Path,
    sync_backend: Backend,
    sync_table: str,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    problem: str,
) -> None:
    """A text or caption over Telegram's limit, a keyboard that is not JSON or has a
    button without an action, nothing to edit, an unreadable file, a campaign that sent
    nothing, a follow-up to nobody: exit 2 naming the problem, no request, no row
    written."""
    files = {
        "LONG": "x" * 5000,
        "CAPTION": "x" * 2000,
        "BAD": "[[{",
        "NOACTION": '[[{"text": "Open"}]]',
        "OK": "fine",
    }
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    given = [str(tmp_path / a) if a in (*files, "MISSING") else a for a in args]
    rows, requests = _rows(sync_backend, sync_table), len(server.requests)
    with pytest.raises(SystemExit) as refused:
        main(["campaign", given[0], "--action", "news", "--campaign", "c1", *sent, *given[1:]])
    assert 2 == refused.value.code
    assert problem in capsys.readouterr().err
    assert (rows, requests) == (_rows(sync_backend, sync_table), len(server.requests))


def test_a_delete_without_action_and_an_edit_of_a_running_campaign_are_refused(
    sent: list[str],
    server: BotAPIServer,
    tmp_path: Path,
    sync_backend: Backend,
    sync_table: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No --action: argparse's usage error; a campaign with a chat claimed right now: the
    edit says it is still running; neither makes a request."""
    (tmp_path / "t.txt").write_text("new")
    requests = len(server.requests)
    with pytest.raises(SystemExit) as no_action:
        main(["campaign", "delete", "--campaign", "c1", *sent])
    engine = sa.create_engine(sync_backend.sync_url)
    try:
        from notifyonce import Ledger

        assert Ledger(engine, table_name=sync_table).claim_slot("news", 99, "c1") is not None
    finally:
        engine.dispose()
    with pytest.raises(SystemExit) as running:
        main(campaign("edit", sent, "--text-file", str(tmp_path / "t.txt")))
    err = capsys.readouterr().err
    assert (2, 2) == (no_action.value.code, running.value.code)
    assert "the following arguments are required: --action" in err
    assert "is still running (1 chats are claimed right now)" in err
    assert requests == len(server.requests)


def test_a_follow_up_goes_to_the_chats_with_that_outcome_once(
    sent: list[str], server: BotAPIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reminder to the chats that got the first message: each once, and again nothing;
    without --mode it starts by saying it is at-most-once and why, with --mode it does
    not."""
    (tmp_path / "reminder.txt").write_text("Two days left")
    follow = ("--only", "sent", "--to-campaign", "c1-reminder")
    follow += ("--text-file", str(tmp_path / "reminder.txt"))
    assert 0 == main(campaign("follow-up", sent, *follow))
    first = capsys.readouterr().err
    assert 0 == main(campaign("follow-up", sent, *follow, "--mode", "at-most-once"))
    second = capsys.readouterr().err
    reminders = [d.chat_id for d in server.deliveries if d.text == "Two days left"]
    assert sorted(str(i) for i in range(1, CHATS + 1)) == sorted(reminders)
    assert first.startswith(FOLLOW_UP_MODE + "\n")
    assert FOLLOW_UP_MODE not in second


@pytest.mark.parametrize(
    ("command", "given", "expected"),
    [
        ("edit", None, DeliveryMode.AT_LEAST_ONCE),
        ("delete", None, DeliveryMode.AT_LEAST_ONCE),
        ("follow-up", None, DeliveryMode.AT_MOST_ONCE),
        ("edit", "at-most-once", DeliveryMode.AT_MOST_ONCE),
        ("delete", "at-most-once", DeliveryMode.AT_MOST_ONCE),
        ("follow-up", "at-least-once", DeliveryMode.AT_LEAST_ONCE),
    ],
)
def test_revisions_default_to_at_least_once_and_a_follow_up_to_at_most_once(
    command: str, given: str | None, expected: DeliveryMode
) -> None:
    """edit and delete are at-least-once without --mode (a retry is harmless), a
    follow-up at-most-once (a retry is a second message); --mode overrides either."""
    args = argparse.Namespace(campaign_command=command, mode=given)
    assert expected == delivery_mode(args)


def _rows(backend: Backend, table: str) -> int:
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def test_an_edit_shows_its_progress_in_the_admin_chat(
    sent: list[str], server: BotAPIServer, tmp_path: Path
) -> None:
    """--progress-chat: one message in the admin's chat, ending with the revision's
    summary; the admin chat's message is not among the campaign's edits."""
    (tmp_path / "new.txt").write_text("Sale until Sunday")
    edit = campaign("edit", sent, "--text-file", str(tmp_path / "new.txt"))
    assert 0 == main([*edit, "--progress-chat", "999"])
    posted = [d for d in server.deliveries if d.chat_id == "999"]
    assert 1 == len(posted)
    text = server.message_text(999, posted[0].message_id) or ""
    assert text.startswith("Broadcast news/c1#edit-2: finished, 20 of 20 handled"), text


def test_an_edit_resumed_while_a_killed_runs_leases_live_counts_those_chats_held(
    sent: list[str], server: BotAPIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edit killed (SIGKILL) with its requests under way, run again at once: the chats
    the killed run still holds are counted "held by another run", not "already done",
    the summary says to run again after the lease (exit 1), and the count is the ledger's
    live claims (`notifyonce stats`)."""
    new = tmp_path / "new.txt"
    new.write_text("Sale until Sunday\n")
    server.script(None, [Reply.ok(delay=30.0)] * CHATS)  # the killed run's edits hang
    edit = campaign("edit", sent, "--text-file", str(new), "--concurrency", "4")
    killed = subprocess.Popen([sys.executable, "-m", "notifyonce", *edit], text=True)
    try:
        deadline = time.monotonic() + 60
        while sum(r.method == "editMessageText" for r in server.requests) < 4:
            assert time.monotonic() < deadline, "the edit did not get going"
            time.sleep(0.05)
    finally:
        killed.kill()
        killed.wait(timeout=30)
    server.reset()  # the scripts and requests; the messages sent stay
    assert 1 == main(edit)
    out = capsys.readouterr().out
    assert 0 == main(["stats", "--json", *sent[:4]])
    held = json.loads(capsys.readouterr().out)["live_claims"]
    assert 4 <= held < CHATS
    assert (
        f"news/c1#edit-2: done {CHATS - held}, failed 0, unknown 0, already done 0, "
        f"held by another run {held}, given back 0\n"
        f"{held} chats are still claimed by another run (or a crashed one whose lease has "
        "not expired): run again after the lease to settle them\n"
    ) == out
