"""``notifyonce broadcast``: output without a terminal and in one (tmux), exit codes, resume."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notifyonce import BroadcastProgress
from notifyonce._cli import main
from notifyonce._cli_broadcast import render_bar, render_line
from notifyonce.testing import BotAPIServer, Reply

from ._databases import IN_CI

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
    assert "1 chats of the campaign have an unknown outcome" in first.stdout
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


def test_progress_bar_and_eta_in_a_real_terminal(workdir: Path, server: BotAPIServer) -> None:
    """In a terminal (tmux), the command draws a bar with a rate and an ETA while it runs."""
    if shutil.which("tmux") is None:
        message = "tmux is not installed: apt-get install -y tmux"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    server.latency = 0.01
    server.script("300", [Reply.drop_after_delivery()])  # a warning under the bar, ~3 s in
    (workdir / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 2001)))
    session = f"nfo-{uuid.uuid4().hex[:8]}"
    args = command(workdir, server)
    args[args.index("--rate") + 1] = "100"  # about 20 s, so the pane is caught mid-run
    env = {k: os.environ[k] for k in ("NOTIFYONCE_DATABASE_URL", "NOTIFYONCE_BOT_TOKEN", "PATH")}
    shell = " ".join(f"{k}='{v}'" for k, v in env.items()) + " " + " ".join(args)
    shell += f"; echo exit=$? > {workdir / 'rc'}"
    tmux = ["tmux", "-L", session]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", "200", "-y", "20", shell], check=True
    )
    try:
        pane = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.5)
            pane = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", session],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            if "ETA 00:" in pane and "/2,000" in pane and "unknown news/300/" in pane:
                break
        bar = next((line for line in pane.splitlines() if "/2,000" in line), "")
        assert bar.startswith(("[#", "[-")), pane
        assert "/s  ETA 00:" in bar, pane
        assert "progress:" not in pane  # no plain lines on a terminal
        # The warning is printed above the bar, on a line of its own.
        assert any(line.startswith("unknown news/300/c1") for line in pane.splitlines()), pane
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)


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
