"""The docs stay true to the code: docstrings in mkdocstrings' syntax, a complete reference."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "notifyonce"
API_PAGE = ROOT / "docs" / "reference" / "api.md"

# Sphinx roles render as literal text in mkdocstrings; "Example:" (singular) is read as an
# admonition whose ">>>" lines become nested block quotes and headings.
SPHINX_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj):`")
SINGULAR_EXAMPLE = re.compile(r"^\s*Example:\s*$", re.MULTILINE)
COMMENTED_DOCTEST = re.compile(r">>> #")
# Files whose docstrings are not converted yet (none).
PENDING: set[str] = set()

PUBLIC_MODULES = [
    "notifyonce",
    "notifyonce.telegram",
    "notifyonce.webhook",
    "notifyonce.aiogram",
    "notifyonce.ptb",
    "notifyonce.apprise",
    "notifyonce.testing",
    "notifyonce.migrations",
]


def docstring_problems(text: str) -> list[str]:
    """The lines of ``text`` that would render wrongly in the API reference."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern, what in (
            (SPHINX_ROLE, "Sphinx role"),
            (SINGULAR_EXAMPLE, "'Example:' section (write 'Examples:')"),
            (COMMENTED_DOCTEST, "commented doctest line (use a ```python block)"),
        ):
            if pattern.search(line):
                found.append(f"{number}: {what}: {line.strip()}")
    return found


def test_docstring_checker_finds_each_problem() -> None:
    """The checker reports a Sphinx role, a singular Example section and a commented doctest."""
    text = 'x\n    See :class:`Claim`.\n    Example:\n        >>> # claim = ...\n"""'
    assert 3 == len(docstring_problems(text))


@pytest.mark.parametrize(
    "path",
    sorted(p for p in SRC.rglob("*.py") if p.name not in PENDING),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_docstrings_use_mkdocstrings_syntax(path: Path) -> None:
    """No source file uses Sphinx roles, 'Example:' or commented doctests in its docstrings."""
    assert [] == docstring_problems(path.read_text(encoding="utf-8"))


def reference_blocks(page: str) -> dict[str, list[str]]:
    """The members listed under each ``::: module`` block of the reference page."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in page.splitlines():
        if line.startswith("::: "):
            current = blocks.setdefault(line[4:].strip(), [])
        elif current is not None and re.match(r"^ {8}- \w+$", line):
            current.append(line.strip()[2:])
        elif line.startswith("#"):
            current = None
    return blocks


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_reference_page_lists_every_public_name(module: str) -> None:
    """docs/reference/api.md documents every name in each public module's __all__."""
    blocks = reference_blocks(API_PAGE.read_text(encoding="utf-8"))
    exported = [n for n in importlib.import_module(module).__all__ if not n.startswith("__")]
    assert [] == [name for name in exported if name not in blocks.get(module, [])]


def test_reference_headings_start_their_own_block() -> None:
    """Each '## ' heading of the reference page follows a blank line (else it joins a list)."""
    lines = API_PAGE.read_text(encoding="utf-8").splitlines()
    assert [] == [
        lines[i] for i in range(1, len(lines)) if lines[i].startswith("#") and lines[i - 1]
    ]
