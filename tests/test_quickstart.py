"""docs/quickstart.md runs as a reader runs it: its files saved, its commands typed, in an
empty folder, on SQLite first and then, as its last step says, on PostgreSQL.

test_doc_snippets.py runs every page's blocks in one process on tables it made; this one
takes the page at its word: each python block is saved under the name the page gives it,
``notifyonce migrate`` and ``python FILE.py`` run as commands, and the messages go to the
local Bot API server through ``NOTIFYONCE_BOT_API_URL`` (the page's "Try it without a
bot"). The PostgreSQL step applies the page's own table of URLs to the same files.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from notifyonce.testing import BotAPIServer

from ._databases import make_backend
from ._snippets import ROOT, parse_blocks

PAGE = ROOT / "docs" / "quickstart.md"
# Where the page names a block's file: "Save this as `send_once.py`", "(save it as
# `first_users.py`", or the block's own first line "# file: reminders.py".
SAVE_AS = re.compile(r"[Ss]ave\s+(?:this|it)\s+as\s+`(\w+\.py)`")
FILE_HEADER = re.compile(r"^# file: (\w+\.py)$")
PAGE_DATABASE = "app@db/app"  # the page's stand-in for the reader's PostgreSQL


def saved_files(text: str) -> dict[str, str]:
    """Each python block of the page that the page says to save, by the name it gives."""
    lines = text.splitlines()
    files: dict[str, str] = {}
    after = 0  # the line after the previous block: the page's words about the next one
    for block in parse_blocks(PAGE, text):
        header = FILE_HEADER.match(block.code.splitlines()[0])
        said = SAVE_AS.findall("\n".join(lines[after : block.line - 1]))
        name = header[1] if header else (said[-1] if said else None)
        if name is not None:
            files[name] = block.code + "\n"
        after = block.line + block.code.count("\n") + 1
    return files


def section(text: str, heading: str) -> str:
    """The page's text under ``## heading``, up to the next ``## ``."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def migrate_command(text: str) -> list[str]:
    """The page's ``notifyonce migrate ...`` command in ``text``, as arguments."""
    found = re.findall(r"^notifyonce migrate .*$", text, re.MULTILINE)
    assert 1 == len(found), f"one migrate command expected, found {found}"
    return shlex.split(found[0])


def url_table(text: str) -> list[tuple[str, str, str]]:
    """The rows ``| `file` | `old URL` | `new URL` |`` of the PostgreSQL step."""
    return re.findall(r"^\| `(\w+\.py)` \| `([^`]+)` \| `([^`]+)` \|$", text, re.MULTILINE)


def test_the_page_readers_find_the_files_commands_and_urls() -> None:
    """The quick start's files, its two migrate commands and its table of URLs are where
    this test reads them (a page rewritten so they are not fails here first)."""
    text = PAGE.read_text(encoding="utf-8")
    assert ["send_once.py", "reminders.py", "first_users.py", "job.py"] == list(saved_files(text))
    assert ["notifyonce", "migrate", "--database-url", "sqlite:///app.db"] == migrate_command(
        section(text, "Create the ledger table")
    )
    postgres = section(text, "Then PostgreSQL")
    assert f"postgresql://{PAGE_DATABASE}" == migrate_command(postgres)[-1]
    assert ["send_once.py", "first_users.py", "job.py"] == [f for f, _, _ in url_table(postgres)]


class Reader:
    """A reader at a terminal in an empty folder, with the local Bot API server."""

    def __init__(self, folder: Path, server: BotAPIServer) -> None:
        self.folder = folder
        self.server = server
        self.env = {**os.environ, "NOTIFYONCE_BOT_API_URL": server.url}

    def run(self, argv: list[str]) -> str:
        """Run ``argv`` as typed (``notifyonce ...`` or ``python FILE.py``); its output."""
        if argv[0] == "notifyonce":
            argv = [sys.executable, "-m", "notifyonce", *argv[1:]]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        done = subprocess.run(
            argv,
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert 0 == done.returncode, f"{shlex.join(argv)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def sent(self) -> int:
        return len(self.server.deliveries)

    def follow_the_page(self) -> None:
        """The page's runs: send_once.py twice, first_users.py, job.py twice."""
        before = self.sent()
        assert "Outcome.SENT" == self.run(["python", "send_once.py"]).strip()
        assert "Outcome.DUPLICATE" == self.run(["python", "send_once.py"]).strip()
        assert 1 == self.sent() - before
        self.run(["python", "first_users.py"])
        self.run(["python", "job.py"])
        assert 4 == self.sent() - before, "the job's first run sends the three reminders"
        self.run(["python", "job.py"])
        assert 4 == self.sent() - before, "its next run sends none"


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    """The page's files saved in an empty folder, and the server the page's code sends to."""
    for name, code in saved_files(PAGE.read_text(encoding="utf-8")).items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    with BotAPIServer() as server:
        yield Reader(tmp_path, server)


@pytest.mark.sqlite
@pytest.mark.slow
def test_the_quick_start_runs_as_written_on_sqlite(reader: Reader) -> None:
    """In an empty folder: the migrate command, then send_once.py sends once and says
    DUPLICATE the second time, and job.py sends the three trials' reminders, once."""
    text = PAGE.read_text(encoding="utf-8")
    reader.run(migrate_command(section(text, "Create the ledger table")))
    reader.follow_the_page()
    assert (reader.folder / "app.db").exists()


@pytest.fixture
def postgres_database(tmp_path: Path) -> Iterator[str]:
    """A new, empty PostgreSQL database for the page (the reader's own), dropped after:
    its ``user@host:port/name``, what the page's ``app@db/app`` stands for."""
    server = make_url(make_backend("postgres-psycopg", tmp_path).sync_url)
    name = f"nfo_quickstart_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        own = server.set(drivername="postgresql", database=name)
        yield own.render_as_string(hide_password=False).removeprefix("postgresql://")
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
@pytest.mark.slow
def test_its_postgresql_step_runs_as_written(reader: Reader, postgres_database: str) -> None:
    """After the SQLite run, the page's PostgreSQL step (its migrate command, its table of
    URLs applied to the same files) sends once on PostgreSQL too."""
    text = PAGE.read_text(encoding="utf-8")
    reader.run(migrate_command(section(text, "Create the ledger table")))
    reader.follow_the_page()
    postgres = section(text, "Then PostgreSQL")
    command = migrate_command(postgres)
    reader.run([part.replace(PAGE_DATABASE, postgres_database) for part in command])
    for name, old, new in url_table(postgres):
        path = reader.folder / name
        code = path.read_text(encoding="utf-8")
        assert 1 == code.count(old), f"{name} holds {old} once, as the page's table says"
        path.write_text(code.replace(old, new.replace(PAGE_DATABASE, postgres_database)))
    reader.follow_the_page()
