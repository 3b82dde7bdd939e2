"""``notifyonce broadcast``: output without a terminal and in one (tmux), exit codes, resume."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from notifyonce import BroadcastProgress, BroadcastReport, Ledger, Report
from notifyonce._campaign import cancel_statement
from notifyonce._cli import main
from notifyonce._cli.broadcast import render_bar, render_line, render_lines, summary
from notifyonce.testing import BotAPIServer, Reply

from ._databases import IN_CI, Backend

TOKEN = "12345:broadcast-secret-token"
TEXT = "secret-news-5c1e: a new tariff"


@pytest.fixture
def server() -> Iterator[BotAPIServer]:
    with BotAPIServer() as server:
        yield server


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite ledger (migrated), a file of 50 chat ids and a text file; token in the env."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", url)
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    assert 0 == main(["migrate"])
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 51)))
    (tmp_path / "text.txt").write_text(TEXT + "\n")
    return tmp_path


def command(workdir: Path, server: BotAPIServer, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "notifyonce",
        "broadcast",
        "--recipients-file",
        str(workdir / "chats.txt"),
        "--text-file",
        str(workdir / "text.txt"),
        "--action",
        "news",
        "--campaign",
        "c1",
        "--base-url",
        server.url,
        "--rate",
        "0",
        *extra,
    ]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_without_a_tty_prints_plain_lines_then_resumes(workdir: Path, server: BotAPIServer) -> None:
    """Piped: plain progress lines and a summary; a second run sends nothing and exits 0."""
    first = run(command(workdir, server))
    assert 0 == first.returncode, first.stderr
    assert "progress: 50/50 handled, sent 50" in first.stderr
    assert "\r" not in first.stderr
    assert "[#" not in first.stderr
    assert "broadcast news/c1 finished" in first.stdout
    assert "50 sent, 0 failed, 0 unknown, 0 already done" in first.stdout
    again = run(command(workdir, server))
    assert 0 == again.returncode, again.stderr
    assert "0 sent, 0 failed, 0 unknown, 50 already done" in again.stdout
    assert Counter({str(i): 1 for i in range(1, 51)}) == Counter(
        d.chat_id for d in server.deliveries
    )
    for output in (first.stdout, first.stderr, again.stdout, again.stderr):
        assert TOKEN not in output
        assert TEXT not in output


def test_unknown_outcome_is_listed_and_exits_1(workdir: Path, server: BotAPIServer) -> None:
    """A send whose answer is lost is recorded unknown, listed, never resent; exit code 1."""
    server.script("7", [Reply.drop_after_delivery()])
    first = run(command(workdir, server))
    assert 1 == first.returncode, first.stderr
    assert "1 chat of the campaign with an unknown outcome, all from this run" in first.stdout
    assert "\n  7\n" in first.stdout + "\n"
    assert "unknown news/7/c1 attempt=1" in first.stderr  # the library's warning, once
    again = run(command(workdir, server))
    assert 1 == again.returncode
    assert 1 == sum(d.chat_id == "7" for d in server.deliveries)


def test_recipients_from_sql_and_dry_run(workdir: Path, server: BotAPIServer) -> None:
    """--recipients-sql reads chat ids from the database; --dry-run sends nothing."""
    import sqlalchemy as sa

    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE users (chat_id INTEGER, active INTEGER)"))
        conn.execute(
            sa.text("INSERT INTO users VALUES (:c, :a)"),
            [{"c": i, "a": i % 2} for i in range(1, 11)],
        )
    engine.dispose()
    args = command(workdir, server)
    at = args.index("--recipients-file")
    args[at : at + 2] = ["--recipients-sql", "SELECT chat_id FROM users WHERE active = 1"]
    dry = run([*args, "--dry-run"])
    assert 0 == dry.returncode, dry.stderr
    assert "would send to 5 chats" in dry.stdout
    assert [] == server.deliveries
    real = run(args)
    assert 0 == real.returncode, real.stderr
    assert ["1", "3", "5", "7", "9"] == sorted(d.chat_id for d in server.deliveries)


def test_usage_errors_exit_2_without_leaking_the_token(
    workdir: Path, server: BotAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token, an empty text file, a missing file or a rejected token exit 2, token unsaid."""
    monkeypatch.delenv("NOTIFYONCE_BOT_TOKEN")
    no_token = run(command(workdir, server))
    assert (2, True) == (
        no_token.returncode,
        "no bot token: set $NOTIFYONCE_BOT_TOKEN" in no_token.stderr,
    )
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    (workdir / "empty.txt").write_text("\n")
    args = command(workdir, server)
    args[args.index(str(workdir / "text.txt"))] = str(workdir / "empty.txt")
    assert 2 == run(args).returncode
    missing = command(workdir, server)
    missing[missing.index(str(workdir / "chats.txt"))] = str(workdir / "nope.txt")
    assert 2 == run(missing).returncode
    with BotAPIServer(token="999:the-right-one") as strict:
        rejected = run(command(workdir, strict))
    assert 2 == rejected.returncode
    assert "the Bot API refused the token (401)" in rejected.stderr
    assert 0 == len(strict.deliveries) + sum(r.method == "sendMessage" for r in strict.requests)
    assert TOKEN not in rejected.stderr + rejected.stdout
    assert 2 == run([*command(workdir, server), "--token", TOKEN]).returncode


def test_render_bar_and_line() -> None:
    """The bar shows the share done, the counts, the rate and the ETA; unknown totals too."""
    progress = BroadcastProgress(sent=40, duplicate=10, total=100, rate=25.0)
    bar = render_bar(progress, width=10)
    assert bar.startswith("[#####-----]  50.0%  50/100  sent 40")
    assert bar.endswith("25/s  ETA 00:02")
    assert render_line(BroadcastProgress(sent=3)).endswith("0/s, ETA --:--")
    assert "ETA 1:00:00" in render_bar(BroadcastProgress(sent=1, total=3601, rate=1.0))
    assert "ETA >99:59:59" in render_bar(BroadcastProgress(sent=0, total=1, rate=5e-324))


SKIPS = {"opted out of promo": 10, "gone: blocked": 2990}


def test_the_skipped_chats_and_why_read_alike_in_the_progress_and_the_summary() -> None:
    """Chats skipped as gone or opted out are counted with their reasons, largest first,
    in the same words in the progress line, the bar and the summary."""
    said = "skipped 3,000 (gone: blocked 2,990, opted out of promo 10)"
    progress = BroadcastProgress(
        sent=7000, skipped=3000, skips=SKIPS, total=10_000, elapsed=2.0, finished=True
    )
    report = BroadcastReport("promo", "c1", progress, Report(skips=SKIPS))
    assert said in render_line(progress)
    assert said in render_bar(progress)
    assert said in "\n".join(render_lines(progress, 200))
    assert said in summary(report).splitlines()[0]
    assert "skipped" not in render_line(BroadcastProgress(sent=3))


def test_a_dry_run_counts_only_the_chats_it_would_send_to() -> None:
    """A dry run's summary tells the chats it would send to from those it skips."""
    skips = {**SKIPS, "dry run: would send": 44}
    progress = BroadcastProgress(skipped=3044, duplicate=6, skips=skips, finished=True)
    text = summary(BroadcastReport("promo", "c1", progress, Report(dry_run=True)), dry_run=True)
    assert (
        "dry run of promo/c1: would send to 44 chats; 6 already done; "
        "skipped 3,000 (gone: blocked 2,990, opted out of promo 10); "
        "nothing was sent or recorded"
    ) == text


def capture(tmux: list[str], session: str) -> str:
    """What the tmux pane shows now."""
    done = subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=False
    )
    return done.stdout


# The bar line of a 2,000-chat run mid-way. The rate and the ETA follow the machine's speed
# (a busy one sends slower, so the ETA may pass a minute): any value, but whole.
BAR = re.compile(
    r"^\[[#-]+\] +\d+\.\d%  [\d,]+/2,000  .*\d+/s  ETA (?:--:--|>?(?:\d+:)?\d\d:\d\d)$"
)


def drawn_bar(pane: str) -> bool:
    """Whether the pane shows the progress bar drawn whole (not mid-redraw)."""
    return any(BAR.search(line.rstrip()) for line in pane.splitlines())


@pytest.mark.parametrize("columns", [80, 160])
def test_progress_in_a_real_terminal_fits_its_width(
    workdir: Path, server: BotAPIServer, columns: int
) -> None:
    """In a terminal (tmux) of 80 or 160 columns the progress is redrawn in place, within
    the width, with the rate and the ETA whole; a warning goes above it on a line of its own.
    (A line wider than the terminal wraps, and each redraw then leaves a copy behind.)"""
    if shutil.which("tmux") is None:
        message = "tmux is not installed: apt-get install -y tmux"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    server.latency = 0.01
    server.script("300", [Reply.drop_after_delivery()])  # a warning, ~3 s in
    (workdir / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 2001)))
    session = f"nfo-{uuid.uuid4().hex[:8]}"
    args = command(workdir, server)
    args[args.index("--rate") + 1] = "100"  # about 20 s, so the pane is caught mid-run
    env = {k: os.environ[k] for k in ("NOTIFYONCE_DATABASE_URL", "NOTIFYONCE_BOT_TOKEN", "PATH")}
    shell = " ".join(f"{k}='{v}'" for k, v in env.items()) + " " + " ".join(args)
    tmux = ["tmux", "-L", session]
    size = ["-x", str(columns), "-y", "20"]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, *size, shell], check=True)
    try:
        # Waited for by what the pane shows, never by a time: the warning has come and the
        # progress is drawn whole. Then a few redraws more (they must not pile up), and the
        # pane read again until a capture catches no redraw half written.
        pane = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            time.sleep(0.5)
            pane = capture(tmux, session)
            if drawn_bar(pane) and "unknown news/300/" in pane:
                time.sleep(1.0)
                for _ in range(10):
                    pane = capture(tmux, session)
                    if drawn_bar(pane):
                        break
                    time.sleep(0.1)
                break
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
    lines = pane.splitlines()
    bars = [line for line in lines if "/2,000" in line]
    assert 1 == len(bars), pane  # redrawn in place: no copies left behind
    bar = bars[0].rstrip()
    assert BAR.search(bar), pane
    assert len(bar) <= columns
    below = lines[lines.index(bars[0]) + 1].rstrip()
    if columns >= 160:
        assert "already done" in bar, pane  # all on one line
    else:
        assert below.startswith("sent "), pane  # the counts, under the bar
        assert "already done" in below, pane
        assert len(below) <= columns
    assert "progress:" not in pane  # no plain lines on a terminal
    warning = next(i for i, line in enumerate(lines) if line.startswith("unknown news/300/c1"))
    assert warning < lines.index(bars[0]), pane  # the warning is above the progress


@given(
    sent=st.integers(0, 10**6),
    duplicate=st.integers(0, 10**6),
    extra=st.integers(0, 10**6),
    rate=st.one_of(st.just(5e-324), st.floats(0, 10**4, allow_nan=False)),
    width=st.integers(1, 80),
)
def test_bar_keeps_its_width_and_eta_follows_the_rate(
    sent: int, duplicate: int, extra: int, rate: float, width: int
) -> None:
    """For any counts the bar is exactly ``width`` wide, filled in proportion, with an ETA."""
    progress = BroadcastProgress(
        sent=sent, duplicate=duplicate, total=sent + duplicate + extra, rate=rate
    )
    line = render_bar(progress, width=width)
    inside = line[1 : line.index("]")] if progress.total else ""
    if progress.total:
        assert width == len(inside)
        assert int(width * progress.done / progress.total) == inside.count("#")
    assert extra == progress.remaining
    assert ("ETA --:--" in line) == (extra > 0 and rate == 0)


@given(
    sent=st.integers(0, 10**6),
    failed=st.integers(0, 10**6),
    unknown=st.integers(0, 10**6),
    retry=st.integers(0, 10**6),
    known_total=st.booleans(),
    rate=st.one_of(st.just(5e-324), st.floats(0, 10**5, allow_nan=False)),
    columns=st.integers(40, 300),
)
def test_the_terminal_lines_fit_any_width_and_keep_rate_and_eta_whole(
    sent: int, failed: int, unknown: int, retry: int, known_total: bool, rate: float, columns: int
) -> None:
    """At any width from 40 columns, every line fits, and the rate with the ETA and every
    count appear whole (never cut at the edge, as a too long line would be)."""
    done = sent + failed + unknown + retry
    progress = BroadcastProgress(
        sent=sent,
        failed=failed,
        unknown=unknown,
        retry=retry,
        total=done + 10 if known_total else None,
        rate=rate,
    )
    lines = render_lines(progress, columns)
    assert [] == [line for line in lines if len(line) > columns]
    text = "\n".join(lines)
    speed = render_line(progress).rsplit(", ", 2)
    assert f"{speed[1]}  {speed[2]}" in text  # "12/s  ETA 00:03"
    for count in (f"sent {sent:,}", f"failed {failed:,}", f"unknown {unknown:,}"):
        assert count in text
    if columns >= 160 and done < 10**5:
        assert 1 == len(lines)


def test_every_option_of_broadcast_has_help() -> None:
    """broadcast --help describes every option (--mode, --max-attempts and --parse-mode too)."""
    import argparse

    from notifyonce._cli.parser import _parser

    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    broadcast = commands.choices["broadcast"]
    bare = [
        action.option_strings[0]
        for action in broadcast._actions
        if action.option_strings and not action.help
    ]
    assert [] == bare


def test_a_token_with_a_trailing_newline_is_named_as_such(
    workdir: Path, server: BotAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token read from a file with its newline exits 2 saying so, without showing it."""
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN + "\n")
    done = run(command(workdir, server))
    assert 2 == done.returncode
    assert "$NOTIFYONCE_BOT_TOKEN: the token has a space or a line break" in done.stderr
    assert TOKEN not in done.stderr + done.stdout
    assert [] == server.deliveries


def test_a_missing_table_of_the_users_query_gets_no_migrate_hint(
    workdir: Path, server: BotAPIServer
) -> None:
    """--recipients-sql on a table that does not exist: exit 3, and no advice to migrate
    (the ledger is there; the query's table is the user's own)."""
    args = command(workdir, server)
    at = args.index("--recipients-file")
    args[at : at + 2] = ["--recipients-sql", "SELECT chat_id FROM no_such_users"]
    done = run(args)
    assert 3 == done.returncode
    assert "no_such_users" in done.stderr
    assert "migrate" not in done.stderr


def test_a_database_without_the_ledger_says_to_run_migrate(
    sync_backend: Backend,
    server: BotAPIServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broadcast on a database whose ledger tables were never made (a fresh SQLite
    file; a table name never migrated) exits 3 saying to run `notifyonce migrate`, and
    sends nothing (it said only that the cancel request could not be read)."""
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    (tmp_path / "chats.txt").write_text("1\n2\n")
    (tmp_path / "text.txt").write_text(TEXT)
    args = [
        *("broadcast", "--database-url", sync_backend.sync_url),
        *("--table", sync_backend.unique_table(), "--action", "news", "--campaign", "c1"),
        *("--recipients-file", str(tmp_path / "chats.txt")),
        *("--text-file", str(tmp_path / "text.txt"), "--base-url", server.url),
    ]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert 3 == exited.value.code
    assert "run `notifyonce migrate` first" in capsys.readouterr().err
    assert [] == server.requests


def test_a_changed_text_is_refused_unless_allowed(workdir: Path, server: BotAPIServer) -> None:
    """Resuming a campaign with another text exits 2 and sends nothing; with
    --allow-changed-message the chats not handled yet get the new text."""
    chats = workdir / "chats.txt"
    chats.write_text("1\n2\n")
    assert 0 == run(command(workdir, server)).returncode
    chats.write_text("1\n2\n3\n")
    (workdir / "text.txt").write_text("secret-news-5c1e: a cheaper tariff\n")
    refused = run(command(workdir, server))
    assert 2 == refused.returncode
    assert "differs from the message campaign news/c1 started with" in refused.stderr
    assert "cheaper" not in refused.stderr + refused.stdout
    assert 2 == len(server.deliveries)
    allowed = run([*command(workdir, server), "--allow-changed-message"])
    assert 0 == allowed.returncode, allowed.stderr
    assert [("3", "secret-news-5c1e: a cheaper tariff")] == [
        (d.chat_id, d.text) for d in server.deliveries[2:]
    ]


def test_a_campaign_cancelled_from_the_console_resumes_only_when_told(
    workdir: Path, server: BotAPIServer
) -> None:
    """After a cancel request a run (and a dry run) exits 2 naming the campaign and the
    flag, sending nothing; --resume-cancelled withdraws it and sends the rest."""
    chats = workdir / "chats.txt"
    chats.write_text("1\n2\n")
    assert 0 == run(command(workdir, server)).returncode
    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    try:
        table = Ledger(engine).table
        with engine.begin() as conn:
            now = dt.datetime.now(dt.timezone.utc)
            conn.execute(cancel_statement(table, "news", "c1", now, cancel=True))
    finally:
        engine.dispose()
    chats.write_text("1\n2\n3\n")
    for extra in ((), ("--dry-run",)):
        refused = run(command(workdir, server, *extra))
        assert 2 == refused.returncode
        assert "campaign news/c1 was cancelled from the console at" in refused.stderr
        assert refused.stderr.rstrip().endswith(
            "To send to the chats not handled yet, run it again with --resume-cancelled"
        ), refused.stderr
        assert "resume_cancelled=True" not in refused.stderr
    assert 2 == len(server.deliveries)
    resumed = run(command(workdir, server, "--resume-cancelled"))
    assert 0 == resumed.returncode, resumed.stderr
    assert ["3"] == [d.chat_id for d in server.deliveries[2:]]
    assert 0 == run(command(workdir, server)).returncode  # the request is gone


def test_the_summary_of_a_run_cancelled_from_the_console() -> None:
    """The summary is one line: cancelled from the console, the counts, and the flag."""
    note = "cancelled from the console at 2026-12-01 12:00:00 UTC"
    progress = BroadcastProgress(sent=184, retry=1816, elapsed=1.0, finished=True)
    report = BroadcastReport(
        "news",
        "c1",
        progress,
        Report(stopped=note),
        cancelled=True,
        cause="cancelled",
        not_tried=1816,
    )
    assert (
        f"broadcast news/c1 {note}: 184 sent, 1,816 not tried; resume with --resume-cancelled"
    ) == summary(report)


def test_the_summary_tells_this_runs_unknown_from_the_campaigns() -> None:
    """After a resume, "0 unknown" of this run is followed by the campaign's one unknown
    chat, said to be an earlier run's (it read as a contradiction)."""
    progress = BroadcastProgress(sent=3, duplicate=47, elapsed=1.0, finished=True)
    report = BroadcastReport("news", "c1", progress, Report(), unknown=["7"])
    lines = summary(report).splitlines()
    assert "0 unknown" in lines[0]
    assert (
        "1 chat of the campaign with an unknown outcome (0 from this run, 1 from earlier "
        "runs) (the send may or may not have arrived; they are not sent again):"
    ) == lines[1]
    assert "  7" == lines[2]


def test_the_bot_api_url_comes_from_the_environment(
    workdir: Path, server: BotAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --base-url the command sends to $NOTIFYONCE_BOT_API_URL when it is set."""
    monkeypatch.setenv("NOTIFYONCE_BOT_API_URL", server.url)
    args = command(workdir, server)
    at = args.index("--base-url")
    del args[at : at + 2]
    assert 0 == run(args).returncode
    assert 50 == len(server.deliveries)


def test_the_broadcast_guide_shows_what_a_terminal_of_160_and_80_columns_shows() -> None:
    """The two progress samples of the broadcast guide are render_lines' output, to the
    character, at 160 and at 80 columns."""
    page = (Path(__file__).parent.parent / "docs" / "guides" / "broadcast.md").read_text()
    samples = [block for block in page.split("```text\n")[1:] if "4,580/10,000" in block]
    shown = [block.split("```", 1)[0].splitlines() for block in samples]
    progress = BroadcastProgress(sent=4560, failed=12, duplicate=8, total=10_000, rate=31.0)
    assert [render_lines(progress, 160), render_lines(progress, 80)] == shown


def test_a_bad_line_stops_the_broadcast_before_any_send(
    workdir: Path, server: BotAPIServer
) -> None:
    """Every line is checked by the sender's own rule before the first send: a chat id
    Telegram would refuse is named with its line number, by the dry run and the real run
    alike, and nothing is sent or claimed (the broadcast used to stop there midway)."""
    import sqlalchemy as sa

    lines = [str(i) for i in range(1, 1001)]
    lines.insert(204, "bob")  # line 205
    (workdir / "chats.txt").write_text("\n".join(lines) + "\n")
    for extra in (("--dry-run",), ()):
        done = run(command(workdir, server, *extra))
        assert 2 == done.returncode, done.stderr
        assert "line 205 ('bob')" in done.stderr, done.stderr
        assert TOKEN not in done.stderr + done.stdout
        assert TEXT not in done.stderr + done.stdout
    assert [] == server.deliveries
    engine = sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"])
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT count(*) FROM notifyonce_slots WHERE action = 'news'"))
        assert 0 == rows.scalar_one()
    engine.dispose()


def test_a_bot_wide_flood_wait_stops_the_broadcast_and_says_how_to_resume(
    workdir: Path, server: BotAPIServer
) -> None:
    """Chats 1 and 2 of 1,000 answered 429 for a minute make the flood bot-wide: the
    broadcast stops at once instead of waiting it out, exits 1 and says why; nothing is
    sent twice."""
    (workdir / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 1001)))
    server.script("1", [Reply.flood(60)])
    server.script("2", [Reply.flood(60)])
    args = command(workdir, server)
    args[args.index("--rate") + 1] = "500"
    done = run(args)
    assert 1 == done.returncode, done.stderr
    assert (
        "broadcast news/c1 stopped: Telegram asked the whole bot to wait (rate limit: the "
        "bot's flood wait ends in"
    ) in done.stdout, done.stdout
    assert "; run the same command again after " in done.stdout
    delivered = [d.chat_id for d in server.deliveries]
    assert len(delivered) == len(set(delivered)) < 1000


def test_a_text_telegram_refuses_for_every_chat_stops_the_broadcast_burning_nothing(
    workdir: Path, server: BotAPIServer
) -> None:
    """Every chat answered 400 can't parse entities: the broadcast stops after three with
    none failed, exits 1 and says why; the fixed text, allowed as a change, reaches all 50
    once."""
    server.script(None, [Reply.error(400, "Bad Request: can't parse entities: x")] * 50)
    first = run(command(workdir, server, "--concurrency", "2"))
    assert 1 == first.returncode, first.stderr
    assert (
        "broadcast news/c1 stopped: Telegram refused the message (3 sends were refused for "
        "their message"
    ) in first.stdout, first.stdout
    assert ": 0 sent, " in first.stdout
    assert " failed" not in first.stdout
    assert "no chat's slot was used up" in first.stdout
    assert TEXT not in first.stdout + first.stderr
    server.reset()
    (workdir / "text.txt").write_text(TEXT + "!\n")
    again = run(command(workdir, server, "--allow-changed-message"))
    assert 0 == again.returncode, again.stderr
    assert Counter({str(i): 1 for i in range(1, 51)}) == Counter(
        d.chat_id for d in server.deliveries
    )


# -- campaigns as bot owners run them: --copy-from a post ----------------------------

ADMIN = 777


def copy_command(workdir: Path, server: BotAPIServer, source: str, *extra: str) -> list[str]:
    args = command(workdir, server, "--copy-from", source, *extra)
    at = args.index("--text-file")
    del args[at : at + 2]
    return args


def test_copy_from_copies_the_post_to_every_chat_once(workdir: Path, server: BotAPIServer) -> None:
    """--copy-from CHAT:MESSAGE_ID copies the admin's post to the 50 chats; a second run
    sends nothing."""
    post = server.post(ADMIN, "secret-post-91ab")
    first = run(copy_command(workdir, server, f"{ADMIN}:{post}"))
    assert 0 == first.returncode, first.stderr
    again = run(copy_command(workdir, server, f"{ADMIN}:{post}"))
    assert 0 == again.returncode, again.stderr
    assert "50 already done" in again.stdout
    assert {"copyMessage"} == {d.method for d in server.deliveries}
    assert Counter({str(i): 1 for i in range(1, 51)}) == Counter(
        d.chat_id for d in server.deliveries
    )
    assert "secret-post-91ab" not in first.stdout + first.stderr


CHANNEL = -1001234567890


def test_copy_from_a_channel_post_spelt_with_its_negative_id(
    workdir: Path, server: BotAPIServer
) -> None:
    """--copy-from -1001234567890:42, as a channel's post is written, copies it to every
    chat (argparse refused it: "expected one argument")."""
    post = server.post(CHANNEL, "secret-post-5d0e")
    done = run(copy_command(workdir, server, f"{CHANNEL}:{post}"))
    assert 0 == done.returncode, done.stderr
    assert 50 == len(server.deliveries)
    assert {(CHANNEL, post)} == {
        (d.params["from_chat_id"], d.params["message_id"]) for d in server.deliveries
    }


def test_a_post_that_cannot_be_copied_is_named_in_the_stop(
    workdir: Path, server: BotAPIServer
) -> None:
    """A deleted channel post stops the broadcast with a line naming the post,
    -1001234567890:<id>, beside Telegram's reason."""
    post = server.post(CHANNEL, "gone")
    server.delete_message(CHANNEL, post)
    done = run(copy_command(workdir, server, f"{CHANNEL}:{post}"))
    assert 1 == done.returncode, done.stderr
    (stopped,) = [line for line in done.stdout.splitlines() if " stopped: " in line]
    assert "message to copy not found" in stopped
    assert f"{CHANNEL}:{post}" in stopped


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["broadcast", "--copy-from", f"{CHANNEL}:42"], "copy_from", f"{CHANNEL}:42"),
        (["broadcast", "--progress-chat", str(CHANNEL)], "progress_chat", str(CHANNEL)),
        (["requeue", "--status", "unknown", "--subject", str(CHANNEL)], "subjects", [str(CHANNEL)]),
    ],
    ids=["copy-from", "progress-chat", "subject"],
)
def test_every_option_taking_a_chat_id_takes_a_negative_one(
    argv: list[str], dest: str, value: object
) -> None:
    """A group's or a channel's id (negative, alone or as CHAT:MESSAGE_ID) is read as the
    option's value, not as another option."""
    from notifyonce._cli.parser import _parser

    required = ["--action", "news"] + (
        ["--campaign", "c1", "--recipients-file", "chats.txt"] if argv[0] == "broadcast" else []
    )
    args = _parser().parse_args([*argv, *required])
    assert value == getattr(args, dest)


def test_a_deleted_post_stops_the_broadcast_with_no_chat_failed(
    workdir: Path, server: BotAPIServer
) -> None:
    """The post was deleted: the broadcast stops at the first refusal, exits 1, says why,
    and records no chat as failed."""
    post = server.post(ADMIN, "gone")
    server.delete_message(ADMIN, post)
    done = run(copy_command(workdir, server, f"{ADMIN}:{post}"))
    assert 1 == done.returncode, done.stderr
    assert (
        "broadcast news/c1 stopped: Telegram refused the message (Bad Request: message to copy"
    ) in done.stdout
    assert " failed" not in done.stdout
    assert len(server.requests) <= 16  # at most the sends under way (--concurrency 16)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("0:5", "--copy-from: from_chat_id must not be 0"),
        ("777:0", "--copy-from: message_id must be a positive message id"),
        ("777", "--copy-from: expected CHAT:MESSAGE_ID"),
        ("777:x", "--copy-from: the message id must be a number"),
    ],
)
def test_a_malformed_copy_from_is_a_usage_error_before_anything_is_claimed(
    workdir: Path,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
    source: str,
    problem: str,
) -> None:
    """A copy from chat 0 or of message 0 exits 2 naming the field; nothing is sent."""
    args = copy_command(workdir, server, source)[3:]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert 2 == exited.value.code
    assert problem in capsys.readouterr().err
    assert [] == server.requests


def test_buttons_file_puts_the_keyboard_under_every_message(
    workdir: Path, server: BotAPIServer
) -> None:
    """--buttons-file's rows of URL and callback buttons go out with every message."""
    rows = [
        [{"text": "Shop", "url": "https://example.com/shop"}],
        [{"text": "Later", "callback_data": "later"}, {"text": "Stop", "callback_data": "stop"}],
    ]
    (workdir / "buttons.json").write_text(json.dumps(rows))
    done = run(command(workdir, server, "--buttons-file", str(workdir / "buttons.json")))
    assert 0 == done.returncode, done.stderr
    assert 50 == len(server.deliveries)
    assert all({"inline_keyboard": rows} == d.params["reply_markup"] for d in server.deliveries)


def test_buttons_file_takes_every_kind_of_button_telegram_gives_bots(
    workdir: Path, server: BotAPIServer
) -> None:
    """A --buttons-file with a web_app, a login_url, the switch_inline_query kinds and a
    copy_text button reaches the Bot API as the JSON written, under every message."""
    rows = [
        [{"text": "App", "web_app": {"url": "https://example.com/app"}}],
        [{"text": "Log in", "login_url": {"url": "https://example.com/login"}}],
        [
            {"text": "Share", "switch_inline_query": "tariff"},
            {"text": "Here", "switch_inline_query_current_chat": ""},
        ],
        [{"text": "Pick", "switch_inline_query_chosen_chat": {"allow_group_chats": True}}],
        [{"text": "Copy", "copy_text": {"text": "PROMO-2026"}}],
    ]
    (workdir / "chats.txt").write_text("1\n2\n3\n")
    (workdir / "buttons.json").write_text(json.dumps(rows))
    done = run(command(workdir, server, "--buttons-file", str(workdir / "buttons.json")))
    assert 0 == done.returncode, done.stderr
    assert 3 * [{"inline_keyboard": rows}] == [d.params["reply_markup"] for d in server.deliveries]


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        (
            [[{"text": "Shop", "url": "https://e.x"}], [{"text": "Bare"}]],
            "row 2, column 1: has no action",
        ),
        (
            [[{"text": "A", "url": "https://e.x"}, {"url": "https://e.x"}]],
            "row 1, column 2: has no text",
        ),
        ([[{"text": "A", "url": "ftp://e.x"}]], "row 1, column 1: the url must start"),
        ([[{"text": "A", "callback_data": "x" * 65}]], "row 1, column 1: callback_data must be"),
        ([[{"text": "A", "url": "https://e.x", "callback_data": "a"}]], "has 2 actions"),
        ([[{"text": "Pay", "pay": True}]], "row 1, column 1: pay: a Pay button goes only first"),
        ([[{"text": "A", "web_app": {"url": "http://e.x"}}]], "web_app: url must be an https"),
        ([[{"text": "A", "copy_text": {"text": "c" * 257}}]], "copy_text: text must be 1-256"),
        ([], "has no rows"),
        ({"rows": []}, "only 'inline_keyboard'"),
    ],
)
def test_a_bad_button_is_named_by_row_and_column_before_anything_is_claimed(
    workdir: Path,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
    rows: object,
    problem: str,
) -> None:
    """A button without an action, with two, a pay button under a plain message, a web_app
    that is not https, a copy_text too long (and the like) exits 2 naming its row and
    column; nothing is claimed or sent."""
    (workdir / "buttons.json").write_text(json.dumps(rows))
    args = command(workdir, server, "--buttons-file", str(workdir / "buttons.json"))[3:]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert 2 == exited.value.code
    err = capsys.readouterr().err
    assert "--buttons-file: " in err
    assert problem in err
    assert [] == server.requests
    assert 0 == main(["stats"])
    assert "news" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2026-12-24T10:00", "has no UTC offset"),
        ("Christmas", "not an ISO 8601 time"),
    ],
)
def test_at_needs_an_iso_time_with_its_offset(
    workdir: Path,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
    value: str,
    problem: str,
) -> None:
    """--at without a UTC offset, or not a time, exits 2 naming --at; nothing is sent."""
    with pytest.raises(SystemExit) as exited:
        main(command(workdir, server, "--at", value)[3:])
    assert 2 == exited.value.code
    err = capsys.readouterr().err
    assert "--at" in err
    assert problem in err
    assert [] == server.requests


PAST = "2020-01-01T00:00Z"


@pytest.mark.parametrize("extra", [[], ["--dry-run"]], ids=["send", "dry-run"])
def test_at_a_time_past_is_a_usage_error(
    workdir: Path,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
) -> None:
    """--at a time already past exits 2 naming --at, the time and --at-or-now; nothing
    is claimed or sent (it started at once, as if the time were a typo's to ignore)."""
    with pytest.raises(SystemExit) as exited:
        main(command(workdir, server, "--at", PAST, *extra)[3:])
    assert 2 == exited.value.code
    err = capsys.readouterr().err
    assert "--at: 2020-01-01T00:00:00+00:00 is past" in err
    assert "--at-or-now" in err
    assert [] == server.requests
    assert 0 == main(["stats"])
    assert "news" not in capsys.readouterr().out


def test_at_or_now_starts_a_time_past_at_once_and_says_so(
    workdir: Path, server: BotAPIServer
) -> None:
    """--at a time past with --at-or-now sends at once, each chat once, and says so in
    one line."""
    done = run(command(workdir, server, "--at", PAST, "--at-or-now"))
    assert 0 == done.returncode, done.stderr
    said = [line for line in done.stderr.splitlines() if "2020-01-01" in line]
    assert ["--at 2020-01-01T00:00:00+00:00 has passed: starting now"] == said
    assert 50 == len({d.chat_id for d in server.deliveries}) == len(server.deliveries)


def test_at_a_time_to_come_waits_for_it_and_says_so(workdir: Path, server: BotAPIServer) -> None:
    """--at a few seconds ahead (with --at-or-now, which changes nothing then) says what
    it waits for in one line and sends once the time has come."""
    at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=8)
    done = run(command(workdir, server, "--at", at.isoformat(), "--at-or-now"))
    assert 0 == done.returncode, done.stderr
    assert f"waiting until {at.isoformat()} to start" in done.stderr.splitlines()
    assert "has passed" not in done.stderr
    assert 50 == len(server.deliveries)


def test_at_or_now_without_at_is_a_usage_error(
    workdir: Path, server: BotAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """--at-or-now alone exits 2 saying it needs --at; nothing is sent."""
    with pytest.raises(SystemExit) as exited:
        main(command(workdir, server, "--at-or-now")[3:])
    assert 2 == exited.value.code
    assert "--at-or-now: needs --at" in capsys.readouterr().err
    assert [] == server.requests


def test_progress_chat_shows_one_message_ending_with_the_summary(
    workdir: Path, server: BotAPIServer
) -> None:
    """--progress-chat posts the progress once to the admin chat, edits it in place, and
    leaves the summary there."""
    done = run(command(workdir, server, "--progress-chat", str(ADMIN)))
    assert 0 == done.returncode, done.stderr
    to_admin = [r for r in server.requests if r.chat_id == str(ADMIN)]
    assert "sendMessage" == to_admin[0].method
    assert {"editMessageText"} >= {r.method for r in to_admin[1:]}
    (posted,) = [d for d in server.deliveries if d.chat_id == str(ADMIN)]
    text = server.message_text(ADMIN, posted.message_id)
    assert text is not None
    assert text.startswith("Broadcast news/c1: finished, 50 of 50 handled")


def test_skipped_chats_are_counted_alike_by_the_summary_the_admin_chat_and_stats(
    workdir: Path, server: BotAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chats imported as gone and one opted out are skipped with no claim and no request;
    the summary, the last progress line and the admin chat's message give the same skipped
    count and reasons; stats shows the ledger's slots and the audience, the chat refused as
    blocked during the run included; a second run skips that one too."""
    (workdir / "gone.txt").write_text("# left before the campaign\n1\n2\n3\n4\n5\n")
    assert 0 == main(["recipients", "import", str(workdir / "gone.txt"), "--reason", "blocked"])
    assert 0 == main(["recipients", "opt-out", "6", "news"])
    server.script("7", [Reply.blocked()])
    said = "skipped 6 (gone: blocked 5, opted out of news 1)"

    first = run(command(workdir, server, "--progress-chat", str(ADMIN)))
    assert 0 == first.returncode, first.stderr
    summary_line = first.stdout.splitlines()[0]
    assert summary_line.endswith(
        f"43 sent, 1 failed, 0 unknown, 0 already done, 0 given back, {said}"
    )
    last_progress = [line for line in first.stderr.splitlines() if line.startswith("progress:")][-1]
    handled = f"progress: 50/50 handled, sent 43  failed 1  unknown 0  already done 0  {said}, "
    assert handled == last_progress[: len(handled)]
    (posted,) = [d for d in server.deliveries if d.chat_id == str(ADMIN)]
    shown = server.message_text(ADMIN, posted.message_id)
    assert shown is not None
    assert said in shown.splitlines()
    assert "sent 43 · failed 1 · unknown 0" in shown
    asked = {r.chat_id for r in server.requests if r.method == "sendMessage"}
    assert set() == asked & {str(i) for i in range(1, 7)}

    ledger = Ledger(sa.create_engine(os.environ["NOTIFYONCE_DATABASE_URL"]))
    try:
        assert [None] * 6 == [ledger.get("news", chat, "c1") for chat in range(1, 7)]
    finally:
        ledger.engine.dispose()
    capsys.readouterr()
    assert 0 == main(["stats"])
    stats = capsys.readouterr().out
    assert re.search(r"^news +0 +43 +1 +0 +0$", stats, re.M), stats
    assert "audience: gone 6 (blocked 6); opted out 1 (news 1)" in stats
    assert 0 == main(["stats", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert {"gone": {"blocked": 6}, "opted_out": {"news": 1}} == data["audience"]

    again = run(command(workdir, server))
    assert 0 == again.returncode, again.stderr
    # Chat 7, learned gone by its refusal, is skipped too now (before its slot is read).
    assert again.stdout.splitlines()[0].endswith(
        "0 sent, 0 failed, 0 unknown, 43 already done, 0 given back, "
        "skipped 7 (gone: blocked 6, opted out of news 1)"
    )


def test_a_cap_holds_back_the_third_campaign_of_its_category(
    workdir: Path, server: BotAPIServer
) -> None:
    """--cap promo=2/7d with --category promo: three campaigns to the same 50 chats send
    two each; the third skips every chat as capped and says so in its summary."""
    outputs = []
    for campaign in ("c1", "c2", "c3"):
        args = command(workdir, server, "--category", "promo", "--cap", "promo=2/7d")
        args[args.index("c1")] = campaign
        done = run(args)
        assert 0 == done.returncode, done.stderr
        outputs.append(done.stdout)
    assert Counter({str(i): 2 for i in range(1, 51)}) == Counter(
        d.chat_id for d in server.deliveries
    )
    assert "skipped 50 (capped 50)" in outputs[2]


@pytest.mark.parametrize("cap", ["promo", "promo=0/7d", "promo=2/0s", "promo=two/7d", "=2/7d"])
def test_a_bad_cap_is_a_usage_error(workdir: Path, server: BotAPIServer, cap: str) -> None:
    """A --cap that is not CATEGORY=N/DURATION, or with N below 1 or an empty window, exits
    2 naming the option, before anything is sent."""
    done = run(command(workdir, server, "--cap", cap))
    assert 2 == done.returncode
    assert "--cap" in done.stderr
    assert [] == server.deliveries
