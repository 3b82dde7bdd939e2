"""Every python block of README.md and docs/ runs, page by page, on SQLite and a local Bot API."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import notifyonce.migrations
import notifyonce.telegram
from notifyonce import AsyncLedger, Message, Notifier
from notifyonce.testing import BotAPIServer

from ._snippets import (
    PAGE_NAMES,
    PERIOD_END,
    ROOT,
    Block,
    SnippetError,
    iter_runnable,
    pages,
    parse_blocks,
    prepare,
    run_block,
    shell_blocks,
)
from .test_cli_serve import Lines, free_port, serve

TOKEN = "123456:TEST-token"
MODULE_HEADER = "# file: "  # a block whose first line names a module: importable as such


def page_id(page: Path) -> str:
    """The page's path from the repository root."""
    return str(page.relative_to(ROOT))


def module_blocks() -> dict[str, Block]:
    """The blocks that stand for a module of the reader's app (``# file: reminders.py``)."""
    found = {}
    for page in pages():
        for block in parse_blocks(page, page.read_text(encoding="utf-8")):
            first = block.code.splitlines()[0] if block.code else ""
            if first.startswith(MODULE_HEADER) and first.endswith(".py"):
                found[first[len(MODULE_HEADER) : -3]] = block
    return found


def create_app_tables(engine: sa.Engine) -> None:
    """The reader's database: the ledger table migrated, and a users table with trials."""
    notifyonce.migrations.upgrade(engine)
    users = sa.Table(
        "users",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("trial_ends_at", sa.DateTime(timezone=True), nullable=False),
    )
    users.create(engine)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(
            users.insert(),
            [
                {"id": 42 + i, "trial_ends_at": now + dt.timedelta(hours=h)}
                for i, h in enumerate((1, 3, 6))
            ],
        )


@pytest.fixture
def page_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dict[str, Any], asyncio.AbstractEventLoop, Path]]:
    """A namespace with the names the pages take as given, in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    server = BotAPIServer().start()
    base = notifyonce.telegram.TelegramSender

    class LocalTelegramSender(base):  # type: ignore[valid-type,misc]
        """A TelegramSender whose default server is the local one."""

        def __init__(self, token: str, **options: Any) -> None:
            options.setdefault("base_url", server.url)
            super().__init__(token, **options)

    monkeypatch.setattr(notifyonce.telegram, "TelegramSender", LocalTelegramSender)
    db = tmp_path / "app.db"
    loop = asyncio.new_event_loop()
    async_engine = create_async_engine(f"sqlite+aiosqlite:///{db}")
    engine = sa.create_engine(f"sqlite:///{db}")
    create_app_tables(engine)
    ledger = AsyncLedger(async_engine)
    sender = LocalTelegramSender(TOKEN)
    for name, block in module_blocks().items():
        module = types.ModuleType(name)
        module.__file__ = str(tmp_path / f"{name}.py")
        exec(compile(prepare(block.code, db), str(block.page), "exec"), module.__dict__)
        monkeypatch.setitem(sys.modules, name, module)
    namespace: dict[str, Any] = {
        "__name__": "__snippet__",
        "token": TOKEN,
        "async_engine": async_engine,
        "engine": engine,
        "ledger": ledger,
        "sender": sender,
        "notifier": Notifier(ledger, sender),
        "user_id": 42,
        "period_end": PERIOD_END,
        "message": Message("6 hours left"),
    }
    assert sorted(PAGE_NAMES) == sorted(k for k in namespace if not k.startswith("__"))
    try:
        yield namespace, loop, db
    finally:
        loop.run_until_complete(sender.aclose())
        for module_name in module_blocks():
            module_engine = getattr(sys.modules.get(module_name), "engine", None)
            if module_engine is not None:
                loop.run_until_complete(module_engine.dispose())
        loop.run_until_complete(async_engine.dispose())
        engine.dispose()
        loop.close()
        server.stop()


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_page_snippets_run(
    page: Path, page_env: tuple[dict[str, Any], asyncio.AbstractEventLoop, Path]
) -> None:
    """The page's python blocks run in order as written (norun blocks excepted)."""
    namespace, loop, db = page_env
    blocks = parse_blocks(page, page.read_text(encoding="utf-8"))
    for block in iter_runnable(blocks):
        run_block(block, namespace, loop, db)


def test_norun_line_skips_exactly_the_next_block() -> None:
    """A norun line skips the block right after it, with its reason, and no other block."""
    text = "\n".join(
        [
            "<!-- norun: needs a Django project -->",
            "",
            "```python",
            "import django",
            "```",
            "```python",
            "x = 1",
            "```",
        ]
    )
    blocks = parse_blocks(Path("page.md"), text)
    assert ["needs a Django project", None] == [b.norun for b in blocks]
    assert ["x = 1"] == [b.code for b in iter_runnable(blocks)]


@pytest.mark.parametrize(
    "line", ["<!-- norun: -->", "<!-- norun -->", "<!-- norun needs django -->"]
)
def test_norun_line_without_reason_is_refused(line: str) -> None:
    """A norun line with no reason, or misspelt, is an error rather than a silent run."""
    with pytest.raises(SnippetError, match="norun"):
        parse_blocks(Path("page.md"), f"{line}\n```python\nx = 1\n```\n")


def test_blocks_of_other_languages_are_ignored() -> None:
    """Only ```python blocks are collected; console, ini and text blocks are not run."""
    text = "```console\n$ make demo\n```\n```python\nx = 1\n```\n```ini\n[a]\n```\n"
    assert ["x = 1"] == [b.code for b in parse_blocks(Path("page.md"), text)]


def test_a_failing_block_names_its_page_and_line(
    page_env: tuple[dict[str, Any], asyncio.AbstractEventLoop, Path],
) -> None:
    """A block that raises points the traceback at the markdown file and line."""
    namespace, loop, db = page_env
    block = Block(Path("docs/page.md"), 7, "x = 1\nraise KeyError('boom')", None)
    with pytest.raises(KeyError) as info:
        run_block(block, namespace, loop, db)
    frame = info.traceback[-1]
    assert ("docs/page.md", 7) == (str(frame.path), frame.lineno)


def test_top_level_await_runs_on_the_page_loop(
    page_env: tuple[dict[str, Any], asyncio.AbstractEventLoop, Path],
) -> None:
    """A block with top-level await runs, and sends through the local Bot API server."""
    namespace, loop, db = page_env
    code = (
        "await ledger.create_schema()\n"
        'outcome = await notifier.send_once("a", user_id, period_end, message)'
    )
    run_block(Block(Path("p.md"), 1, code, None), namespace, loop, db)
    assert "sent" == namespace["outcome"].value


def guide_test_file(tmp_path: Path, *, with_config: bool) -> Path:
    """docs/guides/testing.md as a user would save it: its blocks and its pyproject.toml."""
    page = ROOT / "docs" / "guides" / "testing.md"
    text = page.read_text(encoding="utf-8")
    code = "\n\n".join(block.code for block in iter_runnable(parse_blocks(page, text)))
    (tmp_path / "test_guide.py").write_text(code, encoding="utf-8")
    toml = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "pyproject.toml").write_text(toml if with_config else "", encoding="utf-8")
    return tmp_path


def run_pytest(folder: Path) -> subprocess.CompletedProcess[str]:
    """Run pytest in ``folder`` the way the reader would (plugins from entry points)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_guide.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_testing_guide_passes_as_a_test_file(tmp_path: Path) -> None:
    """The testing guide's tests, saved as one file with its pyproject.toml, all pass."""
    result = run_pytest(guide_test_file(tmp_path, with_config=True))
    assert "4 passed" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
def test_testing_guide_needs_its_asyncio_mode(tmp_path: Path) -> None:
    """Without the page's asyncio_mode line the same tests do not pass (the line matters)."""
    result = run_pytest(guide_test_file(tmp_path, with_config=False))
    assert 0 != result.returncode


def test_the_broadcast_guide_commands_run_as_written_against_the_test_server(
    tmp_path: Path,
) -> None:
    """The bash blocks of the broadcast guide's command-line section (migrate, a text to
    the users query, a photo, an album, a copy of a channel post put on the server with
    POST /post) run as written, in order, against `notifyonce serve-test-api`; only the
    database URL is a SQLite file's, and the pictures are the reader's own files."""
    page = ROOT / "docs" / "guides" / "broadcast.md"
    blocks = shell_blocks(page.read_text(encoding="utf-8"), "## From the command line")
    db = tmp_path / "app.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    create_app_tables(engine)  # the quick start's users: 42, 43 and 44
    engine.dispose()
    for name in ("tariff.png", "front.jpg", "back.jpg", "tour.mp4"):
        (tmp_path / name).write_bytes(name.encode() * 100)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "notifyonce"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m notifyonce "$@"\n')
    shim.chmod(0o755)
    script = "set -eu\n" + "\n".join(blocks).replace("postgresql://app@db/app", f"sqlite:///{db}")
    port = free_port()
    with serve(port) as server:
        try:
            Lines(server.stdout).until("Ctrl-C stops it")
            url = f"http://127.0.0.1:{port}"
            env = {
                **os.environ,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": str(ROOT / "src"),
                "NOTIFYONCE_BOT_API_URL": url,
            }
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            with urllib.request.urlopen(f"{url}/received", timeout=5) as answer:
                received = json.loads(answer.read())["result"]
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(10)
    assert 0 == done.returncode, done.stdout + done.stderr
    assert 4 <= len(blocks)
    copies = [
        (d["chat_id"], d["text"]) for d in received["deliveries"] if d["method"] == "copyMessage"
    ]
    assert [("42", "Our new tariff is out"), ("43", "Our new tariff is out")] == sorted(copies)
    assert {"sendMessage", "sendPhoto", "sendMediaGroup", "copyMessage"} == {
        d["method"] for d in received["deliveries"]
    }
    assert all(r["delivered"] for r in received["requests"])


def test_the_broadcast_guides_personal_campaign_command_runs_as_written(
    tmp_path: Path,
) -> None:
    """The command-line block of *Speaking to each recipient* (a CSV file, a template in
    two languages, 10:00 local) runs as written against the test server, as a dry run (its
    hours are a day's): every row passes the checks, and each would be sent."""
    page = ROOT / "docs" / "guides" / "broadcast.md"
    blocks = shell_blocks(page.read_text(encoding="utf-8"), "### Speaking to each recipient")
    assert 1 == len(blocks)
    script = "set -eu\n" + blocks[0].replace("--at-local 10:00", "--at-local 10:00 --dry-run")
    assert "--dry-run" in script
    db = tmp_path / "app.db"
    with BotAPIServer() as server:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "NOTIFYONCE_DATABASE_URL": f"sqlite:///{db}",
            "NOTIFYONCE_BOT_TOKEN": "12345:guide",
            "NOTIFYONCE_BOT_API_URL": server.url,
        }
        migrate = [sys.executable, "-m", "notifyonce", "migrate"]
        subprocess.run(migrate, env=env, check=True, capture_output=True, timeout=120)
        shim = tmp_path / "bin" / "notifyonce"
        shim.parent.mkdir()
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m notifyonce "$@"\n')
        shim.chmod(0o755)
        env["PATH"] = f"{shim.parent}{os.pathsep}{os.environ['PATH']}"
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        sent = server.deliveries
    assert 0 == done.returncode, done.stdout + done.stderr
    assert "would send 3" in done.stdout + done.stderr, done.stdout + done.stderr
    assert [] == sent
