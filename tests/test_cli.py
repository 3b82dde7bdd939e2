"""The notifyonce command line: exit codes, output, and what it does to the ledger."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce import Ledger, SlotStatus
from notifyonce._cli import main
from notifyonce._cli.common import parse_duration

from ._databases import Backend

UTC = dt.timezone.utc

SCHEDULES = """
from datetime import timedelta as td
from notifyonce import Schedule, Window
TRIAL = Schedule(
    [Window("trial_6h", opens_before=td(hours=6.5), closes_before=td(hours=5)),
     Window("trial_1h", opens_before=td(hours=1.2), closes_before=td(hours=0.4))],
    period=td(minutes=5),
)
def tight():
    return Schedule([Window("t6", opens_before=td(hours=6), closes_before=td(hours=6))],
                    period=td(minutes=5))
NOT_A_SCHEDULE = 42
def broken():
    raise RuntimeError("the user's code failed")
"""


@pytest.fixture
def schedules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cli_schedules.py").write_text(SCHEDULES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cli_schedules"


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.sqlite3'}"
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", url)
    return url


def test_check_valid_schedule_draws_it(schedules: str, capsys: pytest.CaptureFixture[str]) -> None:
    """check prints the timeline of a valid schedule and exits 0."""
    assert 0 == main(["check", f"{schedules}:TRIAL"])
    out = capsys.readouterr().out
    assert "trial_6h" in out
    assert out.rstrip().endswith(f"{schedules}:TRIAL: valid")


def test_check_svg_draws_the_timeline_in_a_file(
    schedules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check --svg writes the timeline as an SVG picture too, naming every window."""
    picture = tmp_path / "trial.svg"
    assert 0 == main(["check", f"{schedules}:TRIAL", "--svg", str(picture)])
    svg = picture.read_text(encoding="utf-8")
    assert svg.startswith("<svg ")
    assert ["trial_6h", "trial_1h"] == [a for a in ("trial_6h", "trial_1h") if a in svg]
    assert f"drew the timeline in {picture}" in capsys.readouterr().out


def test_check_svg_to_a_folder_that_does_not_exist_is_a_usage_error(
    schedules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A picture that cannot be written exits 2 and says why."""
    with pytest.raises(SystemExit) as info:
        main(["check", f"{schedules}:TRIAL", "--svg", str(tmp_path / "no" / "t.svg")])
    assert 2 == info.value.code
    assert "cannot write" in capsys.readouterr().err


def test_check_invalid_schedule_lists_problems(
    schedules: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """check exits 1 and prints every problem of an invalid schedule (built by a function)."""
    assert 1 == main(["check", f"{schedules}:tight"])
    assert "window 't6'" in capsys.readouterr().out


@pytest.mark.parametrize(
    "target",
    ["no_such_module:X", "cli_schedules:missing", "nocolon", "cli_schedules:NOT_A_SCHEDULE"],
)
def test_check_bad_target_is_a_usage_error(
    schedules: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unimportable module, a missing attribute or a non-Schedule exits 2."""
    with pytest.raises(SystemExit) as info:
        main(["check", target])
    assert 2 == info.value.code
    assert "notifyonce: error:" in capsys.readouterr().err


def test_migrate_then_stats_sweep_and_purge(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """migrate creates the table; stats, sweep and purge see and change the ledger."""
    assert 0 == main(["migrate"])
    engine = sa.create_engine(db_url.replace("+aiosqlite", ""))
    now = dt.datetime.now(UTC)
    an_hour_ago = now - dt.timedelta(hours=1)  # so the claims' leases have run out
    ledger = Ledger(engine, lease=dt.timedelta(seconds=1), clock=lambda: an_hour_ago)
    old_cycle = now - dt.timedelta(days=40)
    done = ledger.claim_slot("trial_6h", 1, old_cycle)
    assert done is not None
    ledger.mark_sent(done)
    assert ledger.claim_slot("trial_6h", 2, now + dt.timedelta(hours=1)) is not None
    engine.dispose()
    capsys.readouterr()

    assert 0 == main(["stats", "--json"])
    stats = capsys.readouterr().out
    assert '"sent": 1' in stats
    assert '"claimed": 1' in stats

    assert 0 == main(["sweep", "--mode", "at-most-once"])  # the claim's lease ran out
    assert "1 now unknown" in capsys.readouterr().out
    assert 0 == main(["purge", "--older-than", "30d"])
    assert "deleted 1 slot whose" in capsys.readouterr().out

    check = Ledger(sa.create_engine(db_url.replace("+aiosqlite", "")))
    assert check.get("trial_6h", 1, old_cycle) is None
    record = check.get("trial_6h", 2, now + dt.timedelta(hours=1))
    assert record is not None
    assert SlotStatus.UNKNOWN == record.status
    check.engine.dispose()


def test_unreachable_database_exits_3_without_password(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable database exits 3 and the message never shows the password."""
    with pytest.raises(SystemExit) as info:
        main(["stats", "--database-url", "postgresql://app:hunter2@127.0.0.1:1/app"])
    assert 3 == info.value.code
    assert "hunter2" not in capsys.readouterr().err


@pytest.mark.parametrize("url", ["", "not a url"])
def test_bad_or_missing_url_exits_2(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing or malformed database URL is a usage error."""
    monkeypatch.delenv("NOTIFYONCE_DATABASE_URL", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["stats", "--database-url", url])
    assert 2 == info.value.code
    assert "database URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "said", "status"),
    [
        ("at-least-once", "0 now unknown, 1 released", SlotStatus.RELEASED),
        ("at-most-once", "1 now unknown, 0 released", SlotStatus.UNKNOWN),
    ],
    ids=["at-least-once", "at-most-once"],
)
def test_sweep_follows_the_mode_given(
    db_url: str, mode: str, said: str, status: SlotStatus, capsys: pytest.CaptureFixture[str]
) -> None:
    """sweep --mode at-least-once releases an expired claim; at-most-once makes it unknown."""
    assert 0 == main(["migrate"])
    engine = sa.create_engine(db_url.replace("+aiosqlite", ""))
    an_hour_ago = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    ledger = Ledger(engine, lease=dt.timedelta(seconds=1), clock=lambda: an_hour_ago)
    assert ledger.claim_slot("trial_6h", 1, "cycle-1") is not None
    capsys.readouterr()
    assert 0 == main(["sweep", "--mode", mode, "--max-attempts", "3"])
    assert f"expired leases: {said}" in capsys.readouterr().out
    record = Ledger(engine).get("trial_6h", 1, "cycle-1")
    engine.dispose()
    assert record is not None
    assert status == record.status


def test_sweep_with_a_campaign_settles_only_that_campaigns_claims(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """sweep --campaign ID settles the expired claims of that campaign (its slots' cycle)
    and leaves another campaign's of the same action claimed, for its own run to settle
    in its own mode."""
    assert 0 == main(["migrate"])
    engine = sa.create_engine(db_url.replace("+aiosqlite", ""))
    an_hour_ago = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    ledger = Ledger(engine, lease=dt.timedelta(seconds=1), clock=lambda: an_hour_ago)
    for campaign in ("2026-12-tariff", "2026-12-tariff-edit"):
        assert ledger.claim_slot("news", 1, campaign) is not None
    capsys.readouterr()
    args = ["sweep", "--mode", "at-least-once", "--campaign", "2026-12-tariff"]
    assert 0 == main(args)
    assert "expired leases: 0 now unknown, 1 released" in capsys.readouterr().out
    records = Ledger(engine)
    swept = records.get("news", 1, "2026-12-tariff")
    left = records.get("news", 1, "2026-12-tariff-edit")
    engine.dispose()
    assert swept is not None
    assert left is not None
    assert (SlotStatus.RELEASED, SlotStatus.CLAIMED) == (swept.status, left.status)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("1h30m", 5400), ("30d", 2592000), ("2w", 1209600)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    """Durations in the units people write."""
    assert dt.timedelta(seconds=seconds) == parse_duration(text)


@pytest.mark.parametrize(
    "text", ["", "30", "d", "1x", "0s", "-5m", "1h 30", "1M", "1mo", "12H", "7D", "2W", "30S"]
)
def test_parse_duration_rejects_nonsense(text: str) -> None:
    """Anything else is a ValidationError naming the duration."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_python_m_notifyonce_runs() -> None:
    """`python -m notifyonce --version` works (the console script calls the same main)."""
    done = subprocess.run(
        [sys.executable, "-m", "notifyonce", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert 0 == done.returncode
    assert done.stdout.startswith("notifyonce ")


def test_stats_into_a_reader_that_left_ends_without_a_traceback(db_url: str) -> None:
    """`notifyonce stats | head -3` with the reader gone before the output is written:
    exit 141 (a shell's for SIGPIPE) and nothing on stderr, no BrokenPipeError traceback."""
    assert 0 == main(["migrate"])
    process = subprocess.Popen(
        [sys.executable, "-m", "notifyonce", "stats"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader leaves before the command prints anything
    _, err = process.communicate(timeout=60)
    assert (141, "") == (process.returncode, err.decode())


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["check", "cli_schedules:broken"], 2),
        (["migrate", "--revision", "bogus"], 2),
        (["purge", "--older-than", "100000000d"], 2),
        (["sweep", "--action", ""], 2),
        (["stats", "--table", "no_such_table"], 3),
        (["migrate", "--database-url", "postgresql://app:hunter2@127.0.0.1:1/app"], 3),
    ],
)
def test_failures_keep_their_exit_codes(
    schedules: str, db_url: str, argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing user function, bad revision or duration: 2; a database failure: 3; never 1."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert code == info.value.code
    err = capsys.readouterr().err
    assert err.startswith(("notifyonce: error:", "usage:"))
    assert "hunter2" not in err


@pytest.mark.parametrize("text", ["1M", "3mo", "1h1M"])
def test_a_month_is_refused_not_read_as_minutes(text: str) -> None:
    """'1M' meant one minute in 0.1.0; months have no fixed length, so it is refused and the
    message says what to write instead."""
    with pytest.raises(ValueError, match="months have no fixed length; write days") as info:
        parse_duration(text)
    assert "duration" == info.value.field  # type: ignore[attr-defined]


def test_upper_case_units_are_refused_naming_the_units() -> None:
    """Units are case-sensitive: '12H' is refused with the list of units, not guessed."""
    with pytest.raises(ValueError, match="units are lower-case"):
        parse_duration("12H")


def test_purge_help_lists_the_duration_formats(capsys: pytest.CaptureFixture[str]) -> None:
    """purge --help shows the duration formats and that there are no months."""
    with pytest.raises(SystemExit):
        main(["purge", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "30s, 15m, 12h, 7d, 2w" in out
    assert "no months" in out


def test_purge_with_a_month_exits_2_with_the_advice(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """purge --older-than 1M is a usage error that says how to write a month."""
    with pytest.raises(SystemExit) as info:
        main(["purge", "--older-than", "1M"])
    assert 2 == info.value.code
    assert "write days (30d)" in capsys.readouterr().err


def test_list_and_requeue_unknown_slots(
    sync_backend: Backend, sync_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """list shows the unknown slots; requeue --dry-run changes nothing; requeue releases
    exactly them, so the next claim sends them again (on every database)."""
    engine = sa.create_engine(sync_backend.sync_url, poolclass=sa.pool.NullPool)
    ledger = Ledger(engine, table_name=sync_table)
    ledger.create_schema()
    cycle = dt.datetime(2026, 12, 1, 18, tzinfo=UTC)
    for subject, status in ((1, "unknown"), (2, "unknown"), (3, "sent"), (4, "failed")):
        claim = ledger.claim_slot("trial_6h", subject, cycle)
        assert claim is not None
        if status == "unknown":
            ledger.mark_unknown(claim, "read timeout")
        elif status == "failed":
            ledger.mark_failed(claim, "[401] Unauthorized")
        else:
            ledger.mark_sent(claim)
    common = ["--database-url", sync_backend.sync_url, "--table", sync_table]
    capsys.readouterr()

    assert 0 == main(["list", "--status", "unknown", *common])
    listed = capsys.readouterr().out
    assert 2 == listed.count("trial_6h/")
    assert "read timeout" in listed

    assert 0 == main(
        ["requeue", "--action", "trial_6h", "--status", "unknown", "--dry-run", *common]
    )
    assert "would requeue 2 unknown slots" in capsys.readouterr().out
    assert SlotStatus.UNKNOWN == ledger.get("trial_6h", 1, cycle).status  # type: ignore[union-attr]

    argv = ["requeue", "--action", "trial_6h", "--status", "unknown", "--since", "1h", *common]
    assert 0 == main(argv)
    assert "requeued 2 unknown slots" in capsys.readouterr().out
    won = [s for s in (1, 2, 3, 4) if ledger.claim_slot("trial_6h", s, cycle) is not None]
    assert [1, 2] == won
    engine.dispose()
