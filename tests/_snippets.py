"""Run the python code blocks of README.md and docs/ as tests, one page at a time (docs/index.md).

Each page's python blocks run in order in one namespace (a page is one program told in
fragments), with top-level ``await`` allowed, in a fresh temporary directory. A block
preceded by a line ``<!-- norun: reason -->`` is skipped; the reason is required.

Before the first block, the namespace holds the names the pages take as given (see
``PAGE_NAMES`` and docs/index.md): a SQLite database in the temporary directory and a
local Bot-API-shaped server that every ``TelegramSender`` talks to. Database URLs written
for PostgreSQL in the pages are replaced by that SQLite database (``URL_STANDINS``).
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NORUN = re.compile(r"^<!--\s*norun:\s*(?P<reason>.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`]*)$")

# The URLs the pages use for "your database", and what stands in for them in the tests.
URL_STANDINS = {
    "postgresql+asyncpg://app@db/app": "sqlite+aiosqlite:///{db}",
    "postgresql+psycopg://app@db/app": "sqlite:///{db}",
}

# The names a page may use without defining them (documented in docs/index.md).
PAGE_NAMES = [
    "token", "async_engine", "engine", "ledger", "sender", "notifier", "user_id", "period_end",
    "message",
]  # fmt: skip


class SnippetError(ValueError):
    """A page's markup breaks the snippet convention (say, a norun line without a reason)."""


@dataclass(frozen=True)
class Block:
    """One python code block of a page."""

    page: Path
    line: int  # of the first code line, 1-based
    code: str
    norun: str | None  # the reason, for a block that is not run


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse_blocks(page: Path, text: str) -> list[Block]:
    """The python blocks of a markdown text, each with its norun reason if it has one."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if match["info"].strip() == "python":
            width = len(match["indent"])
            code = "\n".join(line[width:] for line in lines[index + 1 : end])
            blocks.append(Block(page, index + 2, code, _norun_reason(page, lines, index)))
        index = end + 1
    return blocks


def shell_blocks(text: str, heading: str) -> list[str]:
    """The ```bash blocks of a page's section: from the line ``heading`` to the next
    heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next(
        (
            n
            for n in range(start, len(lines))
            if lines[n].startswith("#") and len(lines[n]) - len(lines[n].lstrip("#")) <= level
        ),
        len(lines),
    )
    blocks: list[str] = []
    index = start
    while index < end:
        match = FENCE.match(lines[index])
        close = index + 1
        if match:
            while close < len(lines) and lines[close].strip() != "```":
                close += 1
            if match["info"].strip() == "bash":
                blocks.append("\n".join(lines[index + 1 : close]))
            close += 1
        index = close
    return blocks


def _norun_reason(page: Path, lines: list[str], fence: int) -> str | None:
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    if before < 0:
        return None
    match = NORUN.match(lines[before].strip())
    if match is None:
        if "norun" in lines[before]:
            raise SnippetError(f"{page}:{before + 1}: write <!-- norun: reason -->")
        return None
    if not match["reason"]:
        raise SnippetError(f"{page}:{before + 1}: a norun line needs its reason")
    return match["reason"]


def iter_runnable(blocks: list[Block]) -> Iterator[Block]:
    """The blocks that run, in page order."""
    return (block for block in blocks if block.norun is None)


def prepare(code: str, db: Path) -> str:
    """The block's code with the database URLs of the pages pointed at ``db``."""
    for url, standin in URL_STANDINS.items():
        code = code.replace(url, standin.format(db=db))
    return code


def run_block(
    block: Block, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop, db: Path
) -> None:
    """Run one block in ``namespace``; top-level ``await`` runs on ``loop``."""
    # Leading newlines keep the tracebacks' line numbers those of the markdown file.
    source = "\n" * (block.line - 1) + prepare(block.code, db)
    code = compile(
        source, str(block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)


PERIOD_END = dt.datetime(2026, 12, 31, 18, 0, tzinfo=dt.timezone.utc)
