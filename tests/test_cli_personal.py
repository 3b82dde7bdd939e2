"""``notifyonce broadcast`` of a personalised campaign: a CSV of rows, a template, a text
per language, the recipient's own hour; every option checked before anything is sent."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from notifyonce._cli import main
from notifyonce.testing import BotAPIServer

TOKEN = "12345:personal-secret-token"
ROWS = (
    "chat_id,first_name,language,tz\n"
    "1,Ann,en,Europe/Berlin\n"
    "2,<b>Bob</b>,ru,Europe/Moscow\n"
    "3,Bob_the_*,pt-BR,America/Sao_Paulo\n"
    "4,,,\n"
)


@pytest.fixture
def server() -> Iterator[BotAPIServer]:
    with BotAPIServer() as server:
        yield server


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite ledger (migrated), a CSV of four rows, a text per language; the token set."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", url)
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    assert 0 == main(["migrate"])
    (tmp_path / "people.csv").write_text(ROWS)
    (tmp_path / "news.html").write_text("<b>Hello</b>, ${first_name}!\n")
    (tmp_path / "news.ru.html").write_text("<b>Привет</b>, ${first_name}!\n")
    return tmp_path


def command(workdir: Path, server: BotAPIServer, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "notifyonce",
        "broadcast",
        "--recipients-file",
        str(workdir / "people.csv"),
        "--text-file",
        str(workdir / "news.html"),
        "--parse-mode",
        "HTML",
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


def texts(server: BotAPIServer) -> dict[str, str | None]:
    return {str(d.chat_id): d.text for d in server.deliveries}


def test_a_csv_campaign_in_two_languages_fills_each_row_in(
    workdir: Path, server: BotAPIServer
) -> None:
    """Each chat gets its language's text with its own name, markup in a name as text."""
    ru = f"ru={workdir / 'news.ru.html'}"
    done = run(
        command(
            workdir, server, "--template", "--text-file-for", ru, "--default", "first_name=friend"
        )
    )
    assert 0 == done.returncode, done.stderr
    expected = {
        "1": "<b>Hello</b>, Ann!",
        "2": "<b>Привет</b>, &lt;b&gt;Bob&lt;/b&gt;!",
        "3": "<b>Hello</b>, Bob_the_*!",
        "4": "<b>Hello</b>, friend!",
    }
    assert expected == texts(server)
    for output in (done.stdout, done.stderr):
        assert "Ann" not in output
        assert TOKEN not in output


def test_a_row_without_a_field_is_refused_before_anything_is_sent(
    workdir: Path, server: BotAPIServer
) -> None:
    """Without --default, the row with an empty first_name is named; exit 2, nothing sent."""
    done = run(command(workdir, server, "--template"))
    assert 2 == done.returncode, done.stderr
    assert "line 5 ('4,,,'): recipient has no field 'first_name'" in done.stderr
    assert [] == server.deliveries


def test_without_template_a_dollar_is_sent_as_written(workdir: Path, server: BotAPIServer) -> None:
    """The same text without --template goes out with its ${first_name} as written."""
    done = run(command(workdir, server))
    assert 0 == done.returncode, done.stderr
    assert {"<b>Hello</b>, ${first_name}!"} == set(texts(server).values())


def test_a_markdown_v2_template_is_not_refused_for_its_placeholders(
    workdir: Path, server: BotAPIServer
) -> None:
    """${first_name} in a MarkdownV2 text is a placeholder, not an unescaped { or _."""
    (workdir / "news.md").write_text("*Hi* ${first_name}\\!\n")
    args = command(workdir, server, "--template", "--default", "first_name=you")
    args[args.index("--text-file") + 1] = str(workdir / "news.md")
    args[args.index("--parse-mode") + 1] = "MarkdownV2"
    done = run(args)
    assert 0 == done.returncode, done.stderr
    assert "*Hi* Bob\\_the\\_\\*\\!" == texts(server)["3"]


def test_each_languages_buttons_go_with_its_text(workdir: Path, server: BotAPIServer) -> None:
    """--buttons-file-for ru gives the ru rows their own buttons; the others the default."""
    (workdir / "b.json").write_text(json.dumps([[{"text": "Open", "url": "https://x.test"}]]))
    (workdir / "b.ru.json").write_text(
        json.dumps([[{"text": "Открыть", "url": "https://x.test/ru"}]])
    )
    done = run(
        command(
            workdir,
            server,
            "--buttons-file",
            str(workdir / "b.json"),
            "--buttons-file-for",
            f"ru={workdir / 'b.ru.json'}",
        )
    )
    assert 0 == done.returncode, done.stderr
    buttons = {
        d.chat_id: _keyboard(d.params["reply_markup"])["inline_keyboard"][0][0]["text"]
        for d in server.deliveries
    }
    assert {"1": "Open", "2": "Открыть", "3": "Open", "4": "Open"} == buttons


def _keyboard(markup: object) -> dict[str, list[list[dict[str, str]]]]:
    return json.loads(markup) if isinstance(markup, str) else markup  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--text-file-for", "ru"], "--text-file-for: expected KEY=VALUE"),
        (["--default", "x=1"], "--default: needs --template"),
        (["--default-tz", "Europe/Berlin"], "--default-tz: needs --at-local"),
        (["--at-local", "10:00", "--default-tz", "Mars/Base"], "--default-tz: 'Mars/Base'"),
        (["--caption-file-for", "ru=x.txt"], "--caption-file-for: needs media"),
    ],
)
def test_bad_options_are_usage_errors_before_anything(
    workdir: Path, server: BotAPIServer, extra: list[str], said: str
) -> None:
    """Each bad option of a personalised campaign exits 2 naming itself; nothing is sent."""
    done = run(command(workdir, server, *extra))
    assert 2 == done.returncode
    assert said in done.stderr
    assert [] == server.deliveries


def test_a_copied_post_gets_each_languages_caption(workdir: Path, server: BotAPIServer) -> None:
    """--copy-from with --caption-file-for ru: ru rows get the ru caption, filled in."""
    post = server.post(999, "The winter sale starts now")
    (workdir / "caption.txt").write_text("For you, $first_name\n")
    (workdir / "caption.ru.txt").write_text("Для вас, $first_name\n")
    args = command(
        workdir,
        server,
        "--copy-from",
        f"999:{post}",
        "--caption-file",
        str(workdir / "caption.txt"),
        "--caption-file-for",
        f"ru={workdir / 'caption.ru.txt'}",
        "--template",
        "--default",
        "first_name=friend",
    )
    at = args.index("--text-file")
    del args[at : at + 2]
    at = args.index("--parse-mode")
    del args[at : at + 2]
    done = run(args)
    assert 0 == done.returncode, done.stderr
    captions = {d.chat_id: d.params.get("caption") for d in server.deliveries if d.chat_id != "999"}
    expected = {"1": "For you, Ann", "2": "Для вас, <b>Bob</b>", "3": "For you, Bob_the_*"}
    assert {**expected, "4": "For you, friend"} == captions
