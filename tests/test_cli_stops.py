"""``notifyonce broadcast`` stopped before its end: a few lines in the words of the cause.

A stop (a post that cannot be copied, a cancel from the console, a bot-wide flood wait,
the database gone) ends a campaign of a few hundred chats with at most five lines in all:
the last progress line, one line saying the run stops, and the summary, whose words name
the cause and the next step. Never one line per chat not tried.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from notifyonce import BroadcastProgress, BroadcastReport, Ledger, Report
from notifyonce._campaign import CAMPAIGN_ACTION, cancel_statement
from notifyonce._cli.broadcast import summary
from notifyonce.testing import BotAPIServer, Reply

from ._databases import MARKS, drop_table, make_backend
from ._proxy import FaultProxy
from .test_cli_broadcast import TEXT, command, copy_command, run, server, workdir

__all__ = ["server", "workdir"]  # the fixtures, shared with the other broadcast tests

CHATS = 300
ADMIN = 777


def campaign(
    workdir: Path, server: BotAPIServer, *extra: str, rate: str = "0", copy: str | None = None
) -> list[str]:
    """The broadcast of ``TEXT`` (or a copy of the post ``copy``) to 300 chats at ``rate``
    a second, showing no progress line but the last."""
    (workdir / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, CHATS + 1)))
    if copy is None:
        args = command(workdir, server, *extra, "--progress-every", "60")
    else:
        args = copy_command(workdir, server, copy, *extra, "--progress-every", "60")
    args[args.index("--rate") + 1] = rate
    return args


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return (done.stdout + done.stderr).splitlines()


def wait_for(server: BotAPIServer, deliveries: int) -> None:
    """Until the server has this many deliveries (bounded: 30 s)."""
    deadline = time.monotonic() + 30
    while len(server.deliveries) < deliveries:
        assert time.monotonic() < deadline, "the broadcast did not get going"
        time.sleep(0.05)


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def started(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_deleted_post_stops_in_a_few_lines_saying_no_slot_was_burnt(
    workdir: Path, server: BotAPIServer
) -> None:
    """A copy of a deleted post, to 300 chats: at most 5 lines; the summary names the post,
    says no chat's slot was used up and to fix the post and run again."""
    post = server.post(ADMIN, "gone")
    server.delete_message(ADMIN, post)
    done = run(campaign(workdir, server, copy=f"{ADMIN}:{post}"))
    assert 1 == done.returncode, done.stderr
    assert len(lines(done)) <= 5, done.stdout + done.stderr
    assert "broadcast news/c1 stopped: Telegram refused the message" in done.stdout
    assert f"{ADMIN}:{post}" in done.stdout
    assert "no chat's slot was used up" in done.stdout
    assert f"{CHATS - len(server.requests):,} not tried" in done.stdout
    assert "run again to retry" not in done.stdout
    (summary,) = done.stdout.splitlines()
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    told = numbers(summary)
    assert CHATS == told["tried and given back"] + told["not tried"], summary
    assert {**told, "handled": told["tried and given back"]} == numbers(last), last
    # The chats tried are given back (released, no attempt burnt); the rest have no slot.
    assert {"released": told["tried and given back"]} == ledger_counts()


def test_a_console_cancel_stops_in_a_few_lines_naming_the_flag(
    workdir: Path, server: BotAPIServer
) -> None:
    """A cancel from the console while 300 chats are sent at 50/s: at most 5 lines; the
    summary says cancelled from the console, the counts, and --resume-cancelled; the
    admin chat's message ends with the same line, and its counts are the progress line's."""
    process = started(campaign(workdir, server, "--progress-chat", str(ADMIN), rate="50"))
    wait_for(server, 20)
    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        with engine.begin() as conn:
            now = dt.datetime.now(dt.timezone.utc)
            conn.execute(cancel_statement(Ledger(engine).table, "news", "c1", now, cancel=True))
    finally:
        engine.dispose()
    done = finish(process)
    sent = sum(d.chat_id != str(ADMIN) for d in server.deliveries)
    assert 1 == done.returncode, done.stderr
    assert len(lines(done)) <= 5, done.stdout + done.stderr
    (summary,) = done.stdout.splitlines()
    assert summary.startswith(
        f"broadcast news/c1 cancelled from the console at {now:%Y-%m-%d %H:%M}"
    ), summary
    assert summary.endswith(
        f": {sent:,} sent, {CHATS - sent:,} not tried; resume with --resume-cancelled"
    )
    (shown,) = [d.message_id for d in server.deliveries if d.chat_id == str(ADMIN)]
    final = server.message_text(ADMIN, shown) or ""
    assert final.startswith(f"Broadcast news/c1: stopped, {sent:,} of 300 handled"), final
    assert f"sent {sent:,} · failed 0 · unknown 0 · " in final
    assert summary == final.splitlines()[-1]
    assert TEXT not in done.stdout + done.stderr


def numbers(line: str) -> dict[str, int]:
    """The counts of a line, by their words: ``"68 sent, 232 not tried"`` and ``"sent 68
    not tried 232"`` both read ``{"sent": 68, "not tried": 232}``; ``"68/300 handled"``
    reads ``{"handled": 68}``."""
    words = r"sent|failed|unknown|already done|tried and given back|given back|not tried"
    words += r"|held by another run|handled"
    found = {
        w: int(n.replace(",", ""))
        for n, w in re.findall(rf"(\d[\d,]*)(?:/[\d,]+)? ({words})\b", line)
    }
    found.update(
        {w: int(n.replace(",", "")) for w, n in re.findall(rf"\b({words}) ([\d,]+)", line)}
    )
    return found


def ledger_counts() -> dict[str, int]:
    """``notifyonce stats --json``: the slots of the action ``news`` per status."""
    done = run([sys.executable, "-m", "notifyonce", "stats", "--json"])
    assert 0 == done.returncode, done.stderr
    counts: dict[str, int] = json.loads(done.stdout)["actions"]["news"]
    return counts


def test_a_cancelled_runs_last_progress_line_log_summary_and_stats_tell_one_story(
    workdir: Path, server: BotAPIServer
) -> None:
    """A cancel from the console mid-run: the last progress line shows no rate and no ETA
    and the summary's counts (sent, not tried), no line says "retry" or "given back" for
    chats never tried, and the sent count is the ledger's (`notifyonce stats`)."""
    process = started(campaign(workdir, server, rate="50"))
    wait_for(server, 20)
    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        with engine.begin() as conn:
            now = dt.datetime.now(dt.timezone.utc)
            conn.execute(cancel_statement(Ledger(engine).table, "news", "c1", now, cancel=True))
    finally:
        engine.dispose()
    done = finish(process)
    assert 1 == done.returncode, done.stderr
    (summary,) = done.stdout.splitlines()
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    assert ("/s" in last, "ETA" in last) == (False, False), last
    sent = len(server.deliveries)
    told = numbers(summary)
    assert {"sent": sent, "not tried": CHATS - sent} == told, summary
    assert {**told, "handled": sent} == numbers(last), last
    assert [] == [line for line in lines(done) if "retry" in line or "given back" in line]
    assert {"sent": sent} == ledger_counts()
    shown = console(dt.datetime.now(dt.timezone.utc))
    assert ("cancelled", sent, CHATS) == (shown.state, shown.counts["sent"].value, shown.total)


def test_a_bot_wide_flood_wait_stops_in_a_few_lines_saying_when_to_run_again(
    workdir: Path, server: BotAPIServer
) -> None:
    """Chats 1 and 2 answered 429 for a minute: at most 5 lines; the summary says the bot
    waits out a flood and when to run again."""
    server.script("1", [Reply.flood(60)])
    server.script("2", [Reply.flood(60)])
    done = run(campaign(workdir, server, rate="500"))
    assert 1 == done.returncode, done.stderr
    assert len(lines(done)) <= 5, done.stdout + done.stderr
    assert "broadcast news/c1 stopped: Telegram asked the whole bot to wait" in done.stdout
    assert "not tried; run the same command again after " in done.stdout, done.stdout


@pytest.mark.parametrize(
    "name", [pytest.param("postgres-asyncpg", marks=MARKS["postgres-asyncpg"])]
)
def test_the_database_gone_stops_in_a_few_lines_saying_to_run_again_when_it_is_back(
    workdir: Path, server: BotAPIServer, tmp_path: Path, name: str
) -> None:
    """The ledger's PostgreSQL stops answering mid-campaign (its connections cut) and does
    not come back within --database-patience: at most 5 lines (the pause among them),
    exit 3; the summary says the database failed and to run again once it is back, and
    that run sends each chat once."""
    backend = make_backend(name, tmp_path)
    table = backend.unique_table()
    url = sa.make_url(backend.async_url)
    engine = sa.create_engine(backend.sync_url)
    Ledger(engine, table_name=table).create_schema()
    engine.dispose()
    proxy = FaultProxy(url.host or "127.0.0.1", url.port or 0).__enter__()
    try:
        through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        process = started(
            campaign(
                workdir,
                server,
                "--database-url",
                through,
                "--table",
                table,
                "--database-patience",
                "2",
                rate="50",
            )
        )
        wait_for(server, 20)
    finally:
        proxy.__exit__(None, None, None)
    try:
        done = finish(process)
        assert 3 == done.returncode, done.stderr
        assert len(lines(done)) <= 5, done.stdout + done.stderr
        assert "broadcast news/c1 stopped: the database failed" in done.stdout, done.stdout
        assert "run the same command again once the database is back" in done.stdout
        assert 1 == done.stderr.count("the database is away"), done.stderr
        direct = url.render_as_string(False)
        again = run(campaign(workdir, server, "--database-url", direct, "--table", table))
        assert len(server.deliveries) == len({d.chat_id for d in server.deliveries})
        assert again.returncode in (0, 1), again.stderr
    finally:
        drop_table(backend, table)


def campaign_rows(workdir: Path) -> list[tuple[object, ...]]:
    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT action, subject, cycle, cycle_at FROM notifyonce_slots")
            return [tuple(row) for row in conn.execute(query)]
    finally:
        engine.dispose()


def test_a_bad_recipients_file_leaves_no_campaign_row(workdir: Path, server: BotAPIServer) -> None:
    """A recipients file with a bad line is refused (exit 2) before any row is written:
    no campaign sits in the console as one of zeros."""
    (workdir / "chats.txt").write_text("1\n2\nnot a chat id\n")
    done = run(command(workdir, server))
    assert 2 == done.returncode, done.stderr
    assert "line 3" in done.stderr
    assert [] == campaign_rows(workdir)
    assert [] == server.requests


def test_a_bad_recipients_file_is_told_before_the_bot_api_is_asked_anything(
    workdir: Path, server: BotAPIServer
) -> None:
    """The recipients file is read and checked before the token's getMe: a bad line is
    refused (exit 2) with no request to the Bot API at all."""
    (workdir / "chats.txt").write_text("1\n2\nnot a chat id\n")
    done = run(command(workdir, server))
    assert (2, []) == (done.returncode, server.calls), done.stderr


@pytest.mark.parametrize("made", [False, True], ids=["no-file", "empty-database"])
def test_a_broadcast_before_migrate_says_to_migrate_and_makes_no_file(
    tmp_path: Path, server: BotAPIServer, monkeypatch: pytest.MonkeyPatch, made: bool
) -> None:
    """`broadcast` on a SQLite ledger never migrated: exit 3 with one line saying to run
    `notifyonce migrate` (not that a cancel request could not be read), nothing asked of
    the Bot API, and no database file left behind where there was none."""
    database = tmp_path / "never.sqlite3"
    if made:
        sa.create_engine(f"sqlite:///{database}").dispose()
        database.write_bytes(b"")
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", "12345:never-migrated")
    (tmp_path / "chats.txt").write_text("1\n2\n")
    (tmp_path / "text.txt").write_text("Hello\n")
    done = run(command(tmp_path, server))
    (line,) = done.stderr.splitlines()
    assert 3 == done.returncode, done.stderr
    assert "run `notifyonce migrate` first" in line, line
    assert "cancel request" not in line
    assert (made, []) == (database.exists(), server.calls)


def test_bad_buttons_leave_no_campaign_row(workdir: Path, server: BotAPIServer) -> None:
    """A bad --buttons-file is refused (exit 2) before any row is written."""
    (workdir / "buttons.json").write_text('[[{"text": "x"}]]')
    done = run(command(workdir, server, "--buttons-file", str(workdir / "buttons.json")))
    assert 2 == done.returncode, done.stderr
    assert [] == campaign_rows(workdir)


def test_a_run_killed_while_waiting_for_at_leaves_a_scheduled_row_and_no_slot(
    workdir: Path, server: BotAPIServer
) -> None:
    """Killed while it waits for --at: the campaign's row is there with cycle_at the
    scheduled start (the console shows it scheduled), and no chat has a slot."""
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).replace(microsecond=0)
    process = started(command(workdir, server, "--at", at.isoformat()))
    deadline = time.monotonic() + 30
    while not campaign_rows(workdir):
        assert time.monotonic() < deadline, "no row while waiting"
        assert process.poll() is None, "ended while it should wait"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    finish(process)
    ((action, subject, cycle, cycle_at),) = campaign_rows(workdir)
    assert (CAMPAIGN_ACTION, "news", "c1") == (action, subject, cycle)
    assert at.replace(tzinfo=None) == dt.datetime.fromisoformat(str(cycle_at)).replace(tzinfo=None)
    assert [] == server.requests


def test_a_second_scheduler_that_finds_every_chat_handled_exits_0_saying_so(
    workdir: Path, server: BotAPIServer
) -> None:
    """Two cron hosts start the same campaign: the second finds every chat sent or being
    sent by the first and exits 0 with one line saying so (nothing to alert about)."""
    (workdir / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 9)))
    answers = threading.Event()  # held until the second run is over, however slow it is
    server.script(None, [Reply.ok(until=answers)] * 8)
    first = started(command(workdir, server))
    try:
        wait_for(server, 8)  # delivered, unanswered: every chat is the first's
        second = run(command(workdir, server))
    finally:
        answers.set()
    assert 0 == finish(first).returncode
    assert 0 == second.returncode, second.stdout + second.stderr
    assert (
        "every chat was handled by another run of news/c1 (0 already done, 8 held by "
        "another run, which is still sending them): nothing to do here\n"
    ) == second.stdout
    assert 8 == len(server.deliveries)


def test_an_interrupted_run_says_so_in_one_line_with_its_unknown_chats_listed() -> None:
    """Ctrl-C: one line (interrupted, the counts, run again to resume), then the chats the
    cut-short sends left unknown."""
    progress = BroadcastProgress(sent=40, unknown=2, retry=258, total=300, finished=True)
    report = BroadcastReport(
        "news",
        "c1",
        progress,
        Report(),
        unknown=["7", "9"],
        cancelled=True,
        cause="interrupted",
        not_tried=258,
    )
    assert [
        "broadcast news/c1 interrupted: 40 sent, 2 unknown, 258 not tried; run the same "
        "command again to resume",
        "2 chats of the campaign with an unknown outcome, all from this run (the send may "
        "or may not have arrived; they are not sent again):",
        "  7",
        "  9",
    ] == summary(report).splitlines()


def console(now: dt.datetime) -> Any:
    """What the operator console shows of news/c1 at ``now`` (its `CampaignProgress`)."""
    from notifyonce.web import _queries as queries

    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return queries.campaign_progress(conn, Ledger(engine).table, "news", "c1", now)
    finally:
        engine.dispose()


def console_state(now: dt.datetime) -> str:
    """The operator console's state of news/c1 at ``now``, read from the ledger."""
    return str(console(now).state)


def test_a_sigkilled_run_is_stalled_and_its_resume_counts_the_held_chats_as_stats_does(
    workdir: Path, server: BotAPIServer
) -> None:
    """A run SIGKILLed with sends under way: the console says running while it sends and
    stalled (no run sending) once its heartbeat is past, though its leases live on; run
    again at once, its summary counts the chats the dead run holds as held by another run,
    and every count agrees with `notifyonce stats` (sent, live claims)."""
    for chat in ("5", "6", "7"):
        server.script(chat, [Reply.ok(delay=30.0)])  # answers the killed run never reads
    process = started(campaign(workdir, server, rate="50"))
    wait_for(server, 40)
    now = dt.datetime.now(dt.timezone.utc)
    assert "running" == console_state(now)
    process.kill()
    process.communicate(timeout=30)
    assert "stalled" == console_state(now + dt.timedelta(seconds=31))
    before = ledger_counts()
    done = run(campaign(workdir, server))
    assert 1 == done.returncode, done.stdout + done.stderr
    summary, held_line = done.stdout.splitlines()
    told = numbers(summary)
    after = json.loads(run([sys.executable, "-m", "notifyonce", "stats", "--json"]).stdout)
    held = after["live_claims"]
    assert 3 <= held == told["held by another run"] == before["claimed"], summary
    assert held_line.startswith(f"{held} chats are still claimed by another run")
    assert CHATS == told["sent"] + told["already done"] + held, summary
    assert after["actions"]["news"]["sent"] == before.get("sent", 0) + told["sent"]
    assert told["already done"] == before.get("sent", 0), summary
    shown = console(dt.datetime.now(dt.timezone.utc))
    assert (after["actions"]["news"]["sent"], held) == (
        shown.counts["sent"].value,
        shown.counts["claimed"].value,
    )


def test_a_local_time_run_interrupted_between_zones_tells_one_story_with_stats(
    workdir: Path, server: BotAPIServer
) -> None:
    """--at-local with one zone's hour come and another's 11 hours away: while the rest
    wait, the progress line says when the next batch is due and gives no ETA; stopped
    (SIGINT) then, the last progress line and the summary count the sent and the not
    tried alike, and the sent are the ledger's (`notifyonce stats`)."""
    now = dt.datetime.now(dt.timezone.utc)
    local = (now - dt.timedelta(minutes=30)).strftime("%H:%M")  # UTC's passed: due at once
    rows = "".join(f"{i},UTC\n" for i in range(1, 21))
    rows += "".join(f"{i},Etc/GMT-12\n" for i in range(21, 51))  # UTC+12: hours away
    (workdir / "people.csv").write_text("chat_id,tz\n" + rows)
    args = command(workdir, server, "--at-local", local, "--progress-every", "0.3")
    args[args.index("--recipients-file") + 1] = str(workdir / "people.csv")
    args += ["--at", (now - dt.timedelta(hours=1)).isoformat(), "--at-or-now"]
    process = started(args)
    wait_for(server, 20)
    time.sleep(3.0)  # progress lines while the other zone waits
    process.send_signal(signal.SIGINT)
    done = finish(process)
    assert 130 == done.returncode, done.stdout + done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    waiting = [line for line in progress[:-1] if "waiting for their hour 30" in line]
    assert waiting, done.stderr
    assert "next batch due " in waiting[-1], waiting[-1]
    assert "ETA" not in waiting[-1], waiting[-1]
    summary = done.stdout.splitlines()[0]
    told = numbers(summary)
    assert {"sent": 20, "not tried": 30} == told, summary
    assert {**told, "handled": 20} == numbers(progress[-1]), progress[-1]
    assert {"sent": 20} == ledger_counts()
