"""``notifyonce recipients``: counts, list, export, import and its undo, forget, opt-out,
on every database; what it prints is what the audience holds."""

from __future__ import annotations

import csv
import datetime as dt
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from notifyonce import Audience, AudienceRow, GoneReason, Ledger
from notifyonce._cli import main
from notifyonce._cli import recipients as command

from ._databases import Backend, drop_table

UTC = dt.timezone.utc


class Cli:
    """The command line on one database's ledger table, and the audience beside it."""

    def __init__(self, backend: Backend, table: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.NullPool)
        Ledger(self.engine, table_name=table).create_schema()  # the recipients table too
        self.audience = Audience(self.engine, table_name=f"{table}_recipients")
        self.common = ["--database-url", backend.sync_url, "--table", table]
        self.capsys = capsys

    def __call__(self, *argv: str) -> str:
        """Run ``notifyonce recipients ARGV...`` (exit 0 expected); its output."""
        self.capsys.readouterr()
        assert 0 == main(["recipients", *argv, *self.common])
        return self.capsys.readouterr().out

    def fails(self, *argv: str) -> tuple[int, str]:
        """Run a command that exits with an error; its code and error line."""
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(["recipients", *argv, *self.common])
        code = exited.value.code
        assert isinstance(code, int)
        return code, self.capsys.readouterr().err

    def everything(self) -> list[AudienceRow]:
        return self.audience.rows(limit=100_000)


@pytest.fixture
def cli(
    sync_backend: Backend, sync_table: str, capsys: pytest.CaptureFixture[str]
) -> Iterator[Cli]:
    made = Cli(sync_backend, sync_table, capsys)
    yield made
    made.engine.dispose()


def _file(tmp_path: Path, text: str, name: str = "ids.txt") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return str(path)


IDS = "# chats that left in the migration\n42\n\n-1001234567890\n  7  \n42\n@news_channel\n"


def test_import_then_counts_list_export_and_the_undo(cli: Cli, tmp_path: Path) -> None:
    """An import marks each chat id of its file gone once; counts, list and export say so;
    the undo it prints forgets exactly the import, not a chat learned gone before it."""
    cli.audience.mark_gone(99, GoneReason.BLOCKED, source="refusal", detail="[403] blocked")
    cli.audience.opt_out(7, "promo", how="button")
    out = cli("import", _file(tmp_path, IDS), "--reason", "chat_not_found")
    assert "marked 4 chats gone (chat_not_found, source import)" in out
    assert "(7 lines; 1 repeated id counted once)" in out
    undo = re.search(r"to undo it: notifyonce recipients (forget .*)$", out, re.M)
    assert undo is not None

    counts = cli("counts")
    assert [
        "gone, per reason         5",
        "  blocked                1",
        "  chat_not_found         4",
        "opted out, per category  1",
        "  promo                  1",
        "rows in all              6",
    ] == counts.splitlines()
    listed = cli("list", "--gone", "--reason", "chat_not_found").splitlines()
    assert ["-1001234567890", "42", "7", "@news_channel"] == [line.split()[0] for line in listed]
    assert all("gone: chat_not_found  import" in line for line in listed)
    assert re.search(r"^99 +gone: blocked +refusal +\S+ \S+ +\[403\] blocked$", cli("list"), re.M)
    assert re.search(r"^7 +opted out of promo +api +.* by button$", cli("list"), re.M)

    out = cli("export", "--output", str(tmp_path / "all.csv"))
    assert f"exported 6 rows to {tmp_path / 'all.csv'}\n" == out
    with open(tmp_path / "all.csv", newline="", encoding="utf-8") as file:
        exported = list(csv.DictReader(file))
    assert ["-1001234567890", "42", "7", "7", "99", "@news_channel"] == [
        r["recipient"] for r in exported
    ]
    assert {"recipient": "7", "kind": "opted_out", "reason": "button", "category": "promo"} == {
        k: exported[3][k] for k in ("recipient", "kind", "reason", "category")
    }
    assert "[403] blocked" == exported[4]["detail"]

    assert "forgot 4 gone recipients recorded by import, since " in cli(*undo.group(1).split())
    assert [("7", "promo"), ("99", None)] == [(r.recipient, r.category) for r in cli.everything()]


def test_a_bad_line_is_named_and_nothing_is_written(cli: Cli, tmp_path: Path) -> None:
    """A file with bad lines is refused whole: each bad line named with its number and
    problem, exit 2, and not one of its good chat ids written."""
    bad = "1\n2\n12a\n# fine\n0\n3\nabc def\n" + "".join(f"x{i}\n" for i in range(6))
    code, err = cli.fails("import", _file(tmp_path, bad), "--reason", "blocked")
    assert 2 == code
    assert "line 3 ('12a'): must be a chat id such as '12345'" in err
    assert "line 5 ('0'): " in err
    assert "line 7 ('abc def'): " in err
    assert "9 bad lines in all; nothing was written" in err
    not_utf8 = _file(tmp_path, "1\n", "latin.txt")
    Path(not_utf8).write_bytes(b"1\n2\ncaf\xe9\n")
    code, err = cli.fails("import", not_utf8, "--reason", "blocked")
    assert (2, True) == (code, "line 3 is not UTF-8 text; nothing was written" in err)
    assert [] == cli.everything()


def test_forget_named_recipients_and_opt_out_then_in(cli: Cli) -> None:
    """forget drops every row of the recipients named (a group's negative id too);
    opt-out and opt-in change one category of one recipient."""
    cli.audience.mark_gone("-1001234567890", GoneReason.KICKED)
    cli.audience.mark_gone(42)
    assert "42 opted out of promo: no more promo to it\n" == cli("opt-out", "42", "promo")
    assert "-1001234567890 opted out of news" in cli("opt-out", "-1001234567890", "news")
    state = cli.audience.state(42)
    assert ("command line", "command line") == (
        state.opted_out["promo"].how,
        state.opted_out["promo"].source,
    )
    assert "42 opted back in to promo\n" == cli("opt-in", "42", "promo")
    assert "nothing changed" in cli("opt-in", "42", "promo")
    assert "forgot 2 rows (gone and opt-outs) of 1 recipient\n" == cli("forget", "-1001234567890")
    assert [("42", None)] == [(r.recipient, r.category) for r in cli.everything()]


def test_forget_by_source_and_time_leaves_the_rest(cli: Cli) -> None:
    """forget --source and --since remove the gone rows recorded so, and nothing else."""
    cli.audience.mark_gone_many([1, 2], "other", source="import")
    cli.audience.mark_gone(3, source="refusal")
    cli.audience.opt_out(1, "promo", source="import")
    assert "forgot 0 gone recipients recorded by import, since " in cli(
        "forget", "--source", "import", "--since", "2999-01-01T00:00:00+00:00"
    )
    assert "forgot 2 gone recipients recorded by import\n" == cli("forget", "--source", "import")
    assert [("1", "promo"), ("3", None)] == [(r.recipient, r.category) for r in cli.everything()]


def test_list_pages_by_the_key_it_prints(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    """A full page ends with the --after that reads the next one; paging so reads every
    row once, an opt-out row's key included."""
    cli.audience.mark_gone_many([1, 2, 3], "blocked")
    cli.audience.opt_out(2, "news")
    cli.audience.opt_out(2, "promo")
    seen: list[str] = []
    after: list[str] = []
    for _ in range(10):
        capsys.readouterr()
        assert 0 == main(["recipients", "list", "--limit", "2", *after, *cli.common])
        out, err = capsys.readouterr()
        seen += [" | ".join(re.split(r" {2,}", line)[:3]) for line in out.splitlines()]
        hint = re.search(r"more rows follow: add (.*)$", err)
        if hint is None:
            break
        after = hint.group(1).split()
    assert [
        "1 | gone: blocked | import",
        "2 | gone: blocked | import",
        "2 | opted out of news | api",
        "2 | opted out of promo | api",
        "3 | gone: blocked | import",
    ] == seen


def test_export_reads_a_page_at_a_time(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """export asks for EXPORT_PAGE rows at a time along the key, never for all of them,
    and writes each row once."""
    monkeypatch.setattr(command, "EXPORT_PAGE", 3)
    cli.audience.mark_gone_many(range(10), "blocked")
    cli.audience.opt_out(4, "promo")
    asked: list[tuple[int, str | None]] = []
    rows = Audience.rows

    def spy(self: Audience, **kwargs: object) -> list[AudienceRow]:
        after = kwargs["after"]
        asked.append((kwargs["limit"], None if after is None else after.recipient))  # type: ignore[arg-type, union-attr]
        return rows(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Audience, "rows", spy)
    out = cli("export", "--gone", "--output", str(tmp_path / "gone.csv"))
    assert f"exported 10 gone rows to {tmp_path / 'gone.csv'}\n" == out
    assert [(3, None), (3, "2"), (3, "5"), (3, "8")] == asked
    lines = (tmp_path / "gone.csv").read_text().splitlines()
    assert "recipient,kind,reason,category,source,since,detail" == lines[0]
    assert [str(i) for i in range(10)] == [line.split(",")[0] for line in lines[1:]]


def test_usage_errors_exit_2_and_write_nothing(cli: Cli, tmp_path: Path) -> None:
    """Contradictory or missing options, an unknown reason, an empty file: exit 2."""
    ids = _file(tmp_path, "1\n")
    cases = [
        (("forget",), "forget: name RECIPIENTs, or the gone ones"),
        (("forget", "1", "--source", "import"), "not both"),
        (("list", "--opted-out", "--reason", "blocked"), "only gone recipients have a reason"),
        (("list", "--gone", "--category", "promo"), "only opt-outs have a category"),
        (("list", "--after-category", "promo"), "--after-category: needs --after"),
        (("list", "--limit", "0"), "must be at least 1"),
        (("import", ids, "--reason", "left"), "invalid choice: 'left'"),
        (("import", ids, "--reason", "blocked", "--source", "x" * 33), "source"),
        (("import", _file(tmp_path, "# none\n\n", "e.txt"), "--reason", "blocked"), "no chat id"),
        (("import", str(tmp_path / "missing.txt"), "--reason", "blocked"), "cannot read it"),
        (("opt-out", "42", " "), "category"),
    ]
    for argv, said in cases:
        code, err = cli.fails(*argv)
        assert (2, True) == (code, said in err), (argv, err)
    assert [] == cli.everything()


def test_a_database_without_the_recipients_table_says_to_migrate(
    sync_backend: Backend, sync_table: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every subcommand on a ledger table without the recipients table beside it exits 3
    and says to run `notifyonce migrate`; stats still counts the slots and says so too."""
    engine = sa.create_engine(sync_backend.sync_url, poolclass=sa.pool.NullPool)
    Ledger(engine, table_name=sync_table).create_schema()
    drop_table(sync_backend, f"{sync_table}_recipients")
    engine.dispose()
    common = ["--database-url", sync_backend.sync_url, "--table", sync_table]
    for argv in (
        ["counts"],
        ["list"],
        ["export", "--output", str(tmp_path / "x.csv")],
        ["import", _file(tmp_path, "1\n"), "--reason", "blocked"],
        ["forget", "--source", "import"],
        ["opt-out", "1", "promo"],
    ):
        with pytest.raises(SystemExit) as exited:
            main(["recipients", *argv, *common])
        err = capsys.readouterr().err
        assert 3 == exited.value.code, argv
        assert err.rstrip().endswith("run `notifyonce migrate` first?"), err
        assert f"{sync_table}_recipients" in err
    assert not (tmp_path / "x.csv").exists()
    assert 0 == main(["stats", *common])
    said = "audience: no recipients table beside the ledger (run `notifyonce migrate`)"
    assert said in capsys.readouterr().out
    assert 0 == main(["stats", "--json", *common])
    assert '"audience": null' in capsys.readouterr().out


def test_an_import_of_100000_chat_ids_is_one_command(cli: Cli, tmp_path: Path) -> None:
    """100,000 chat ids are marked gone by one command, each once, within a minute."""
    ids = _file(tmp_path, "".join(f"{-1000000000000 - i}\n" for i in range(100_000)))
    started = time.monotonic()
    out = cli("import", ids, "--reason", "deactivated")
    seconds = time.monotonic() - started
    assert "marked 100,000 chats gone (deactivated, source import)" in out
    assert {"deactivated": 100_000} == cli.audience.counts().gone
    assert seconds < 60, f"{seconds:.1f} s"


@pytest.mark.mariadb
def test_a_deep_page_reads_only_its_own_rows_on_mariadb(tmp_path: Path) -> None:
    """The page after the 19,000th of 20,000 gone chats reads about a page of the key,
    not the 19,000 entries before it: an export's pages cost the same however deep."""
    from ._databases import make_backend

    backend = make_backend("mariadb", tmp_path)
    table = backend.unique_table()
    # One connection, so the session's handler counters are the listing's own.
    engine = sa.create_engine(backend.sync_url, poolclass=sa.pool.StaticPool)
    try:
        audience = Audience(engine, table_name=f"{table}_recipients")
        audience.create_schema()
        audience.mark_gone_many((f"{i:05d}" for i in range(20_000)), "blocked")
        after = audience.rows(gone=True, limit=19_000)[-1]
        with engine.connect() as conn:
            conn.exec_driver_sql("FLUSH STATUS")
        page = audience.rows(gone=True, after=after, limit=100)
        with engine.connect() as conn:
            read = dict(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'").all())
    finally:
        engine.dispose()
        drop_table(backend, table)
    assert ["19000", "19099"] == [page[0].recipient, page[-1].recipient]
    assert int(read["Handler_read_next"]) + int(read["Handler_read_rnd_next"]) < 300, read


def test_the_csv_columns_are_the_header_and_the_json_lines_keys() -> None:
    """Each row's cells come in the header's order, under the names --json prints."""
    row = AudienceRow("42", None, "blocked", "refusal", dt.datetime(2026, 12, 1, tzinfo=UTC), "x")
    assert command._CSV_HEADER == list(command._as_dict(row))


def test_an_export_reads_its_pages_on_one_connection(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages of an export share one connection: a connection each cost MariaDB's TLS
    handshake per page, half of a million-row export's time."""
    monkeypatch.setattr(command, "EXPORT_PAGE", 3)
    cli.audience.mark_gone_many(range(10), "blocked")
    connects: list[object] = []
    made = command.sync_engine

    def watched(args: object, **options: object) -> sa.Engine:
        engine = made(args, **options)  # type: ignore[arg-type]
        sa.event.listen(engine, "connect", lambda *_: connects.append(1))
        return engine

    monkeypatch.setattr(command, "sync_engine", watched)
    assert "exported 10 rows" in cli("export", "--output", str(tmp_path / "all.csv"))
    assert 1 == len(connects)
