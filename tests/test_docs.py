"""The docs stay true to the code: docstrings in mkdocstrings' syntax, a complete reference."""

from __future__ import annotations

import functools
import importlib
import importlib.util
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
    "notifyonce.web",
    "notifyonce.queues.celery",
    "notifyonce.queues.taskiq",
    "notifyonce.queues.dramatiq",
    "notifyonce.queues.arq",
    "notifyonce.queues.apscheduler",
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


# -- what a page's code needs, the page says to install ---------------------------------------

# The public modules that need an extra, and the extra.
EXTRA_MODULES = {
    "notifyonce.telegram": "telegram",
    "notifyonce.webhook": "webhook",
    "notifyonce.aiogram": "aiogram",
    "notifyonce.ptb": "ptb",
    "notifyonce.apprise": "apprise",
    "notifyonce.otel": "otel",
    "notifyonce.web": "web",
    "notifyonce.queues.celery": "celery",
    "notifyonce.queues.taskiq": "taskiq",
    "notifyonce.queues.dramatiq": "dramatiq",
}
PIP_LINE = re.compile(r"pip install ([^\n`]+)")


@functools.cache
def _module_owners() -> dict[str, str]:
    """Every importable module of the installed distributions, and its distribution."""
    import importlib.metadata as md

    owners: dict[str, str] = {}
    for dist in md.distributions():
        for file in dist.files or []:
            if file.suffix == ".py" and ".." not in file.parts:
                parts = list(file.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                owners.setdefault(".".join(parts), dist.metadata["Name"])
    return owners


def _installs(lines: list[str]) -> tuple[set[str], set[str]]:
    """The distributions (with what they pull in) and notifyonce's extras that ``pip
    install`` lines install."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted: list[Requirement] = []
    for line in lines:
        for token in line.split("#")[0].split():
            token = token.strip("'\"")
            if token and not token.startswith("-"):
                wanted.append(Requirement(token))
    extras = {e for r in wanted if canonicalize_name(r.name) == "notifyonce" for e in r.extras}
    found: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            requires = md.requires(requirement.name) or []
        except md.PackageNotFoundError:
            continue  # not installed here: what it pulls in is unknown, itself is named
        for text in requires:
            needed = Requirement(text)
            asked = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in asked):
                wanted.append(needed)
    return found, extras


def page_imports_not_installed(page: Path) -> list[str]:
    """The imports of the page's runnable blocks that no ``pip install`` line above them
    (or the quick start's first one, which every page after it may take as done) installs."""
    import ast
    import sys

    from packaging.utils import canonicalize_name

    from ._snippets import parse_blocks

    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    given = PIP_LINE.findall(quickstart)[:1]
    owners = _module_owners()
    text = page.read_text(encoding="utf-8")
    files = {m[len("# file: ") : -3] for m in re.findall(r"^# file: \w+\.py$", text, re.M)}
    files |= {"reminders"}  # the quick start's module, which the guides import
    lines = text.splitlines()
    missing = []
    for block in parse_blocks(page, text):
        if block.norun is not None:
            continue
        above = "\n".join(lines[: block.line])
        installed, extras = _installs(given + PIP_LINE.findall(above))
        code = "\n".join(f"    {line}" for line in block.code.splitlines())
        for node in ast.walk(ast.parse(f"async def page():\n{code}\n")):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in files:
                    continue
                if top == "notifyonce":
                    parts = name.split(".")
                    extra = EXTRA_MODULES.get(".".join(parts[:3])) or EXTRA_MODULES.get(
                        ".".join(parts[:2])
                    )
                    if extra is not None and extra not in extras:
                        missing.append(f"{page.name}:{block.line}: {name} (extra {extra})")
                    continue
                owner = next(
                    (owners[m] for m in _prefixes(name) if m in owners), f"<{name} unknown>"
                )
                if canonicalize_name(owner) not in installed:
                    missing.append(f"{page.name}:{block.line}: {name} ({owner})")
    return missing


def _prefixes(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_page_says_to_install_what_its_code_imports(page: Path) -> None:
    """Every package a page's runnable code imports is installed by a `pip install` line
    above it on the page (or by the quick start's): no snippet needs an unnamed package."""
    assert [] == page_imports_not_installed(page)


def test_the_alembic_guide_shows_the_head_the_package_ships() -> None:
    """The `alembic heads` output on the Alembic guide names the latest shipped revision."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", "notifyonce:migrations")
    head = ScriptDirectory.from_config(config).get_current_head()
    page = (ROOT / "docs" / "guides" / "alembic.md").read_text(encoding="utf-8")
    shown = re.findall(r"^(notifyonce_\d+) \(notifyonce\) \(head\)$", page, re.M)
    assert [head] == shown


def test_the_command_line_guide_lists_every_command() -> None:
    """Each subcommand of `notifyonce` has a row in the command line guide's table."""
    import argparse

    from notifyonce._cli.parser import _parser

    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    page = (ROOT / "docs" / "guides" / "cli.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `notifyonce ([\w-]+)", page, re.M))
    assert [] == sorted(set(commands.choices) - rows)


# -- the pictures: each drawn from the code, and checked against it --------------------------

MERMAID = re.compile(r"^```mermaid\n(.*?)^```$", re.M | re.S)
STATE_EDGE = re.compile(r"^(\[\*\]|\w+) --> (\[\*\]|\w+)\s*:\s*(.+)$")
COMPOSITE = re.compile(r'^state (?:"[^"]*" as )?(\w+) \{$')


def mermaid_blocks(page: Path) -> list[str]:
    """The text of each ```mermaid block of ``page``."""
    return MERMAID.findall(page.read_text(encoding="utf-8"))


def state_diagram_moves(diagram: str) -> set[tuple[object, object, str]]:
    """Every ``(source, target, call)`` a Mermaid state diagram draws.

    ``[*]`` is "no row" (None); an arrow from a composite state leaves each state drawn
    inside it; a label names one call per line (``<br>``), the call first.
    """
    from notifyonce import SlotStatus

    inside: dict[str, set[str]] = {}
    open_states: list[str] = []
    arrows: list[tuple[str, str, str]] = []
    for line in (raw.strip() for raw in diagram.splitlines()):
        if found := COMPOSITE.match(line):
            open_states.append(found[1])
            inside[found[1]] = set()
        elif line == "}":
            open_states.pop()
        elif found := STATE_EDGE.match(line):
            source, target, label = found.groups()
            for state in open_states:
                inside[state] |= {source, target} - {"[*]"}
            arrows.append((source, target, label))

    def statuses(name: str) -> list[SlotStatus | None]:
        if name == "[*]":
            return [None]
        return [SlotStatus(n) for n in sorted(inside.get(name, {name}))]

    drawn: set[tuple[object, object, str]] = set()
    for source, target, label in arrows:
        for part in re.split(r"<br\s*/?>", label):
            call = re.match(r"\w+", part.strip())
            assert call is not None, f"an arrow's label names no call: {label!r}"
            for before in statuses(source):
                for after in statuses(target):
                    drawn.add((before, after, call[0]))
    return drawn


def test_state_diagram_reader_expands_composites_and_lines() -> None:
    """The reader takes [*] as no row, a composite's arrow as one from each state inside it,
    and one call per line of a label."""
    from notifyonce import SlotStatus

    diagram = (
        'state "a row" as row {\n  [*] --> claimed: claim\n'
        "  claimed --> sent: mark_sent<br>sweep (odd)\n}\nrow --> [*]: purge\n"
    )
    claimed, sent = SlotStatus.CLAIMED, SlotStatus.SENT
    expected = {
        (None, claimed, "claim"),
        (claimed, sent, "mark_sent"),
        (claimed, sent, "sweep"),
        (claimed, None, "purge"),
        (sent, None, "purge"),
    }
    assert expected == state_diagram_moves(diagram)


def test_the_slot_diagram_draws_every_move_of_the_ledger() -> None:
    """docs/concepts/slots.md draws exactly the moves of transitions.TRANSITIONS, which
    tests/test_ledger_model.py holds to what the ledger does: a move added to the code and
    not drawn fails here."""
    from notifyonce._ledger.transitions import moves

    [diagram] = [
        d for d in mermaid_blocks(ROOT / "docs" / "concepts" / "slots.md") if "stateDiagram" in d
    ]
    drawn = state_diagram_moves(diagram)
    assert [] == sorted(moves() - drawn, key=str), "moves of the ledger the diagram lacks"
    assert [] == sorted(drawn - moves(), key=str), "arrows of the diagram the ledger never makes"


def test_the_trial_timeline_picture_is_what_notifyonce_check_draws() -> None:
    """docs/assets/trial-timeline.svg is what `notifyonce check reminders:TRIAL --svg` draws
    for the quick start's reminders.py (regenerate: python scripts/draw_timeline.py)."""
    spec = importlib.util.spec_from_file_location(
        "_draw_timeline", ROOT / "scripts/draw_timeline.py"
    )
    assert spec is not None
    assert spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.draw() == script.PICTURE.read_text(encoding="utf-8")


def test_the_pipeline_diagram_follows_the_pipeline() -> None:
    """The sequence diagram of docs/concepts/delivery.md has a worker's steps in the order
    Run._deliver takes them, and the pipeline's own figures (its backlog, how long an
    outcome waits for others, claim statements at once on each database, settling time)."""
    import inspect

    from notifyonce import _dispatch
    from notifyonce._ledger.dialects import MySQL, PostgreSQL, SQLite

    page = ROOT / "docs" / "concepts" / "delivery.md"
    [diagram] = [d for d in mermaid_blocks(page) if "sequenceDiagram" in d]
    steps = {
        "turn": "self.turn(",
        "claim": "self.writer.claim(",
        "send": "self._send(",
        "outcome": "self.writer.put(",
    }
    code = inspect.getsource(_dispatch.Run._deliver)
    drawn = [m for m in re.findall(r"^\s*W->>\w+: (\w+)", diagram, re.M) if m in steps]
    assert sorted(steps, key=lambda step: code.index(steps[step])) == drawn
    flat = " ".join(re.sub(r"<br\s*/?>", " ", diagram).split())
    lanes = {1: "one", 2: "two", 3: "three"}
    assert [1, 1] == [MySQL.claim_lanes, SQLite.claim_lanes]  # the diagram names PostgreSQL's
    expected = [
        f"waits while {_dispatch._RECORD_BACKLOG} outcomes are unwritten",
        f"within {round(_dispatch._RECORD_LINGER * 1000)} ms",
        f"{lanes[PostgreSQL.claim_lanes]} at a time on PostgreSQL",
    ]
    assert expected == [text for text in expected if text in flat]
    assert f"for up to {_dispatch._SETTLE_TIMEOUT:.0f} s" in page.read_text(encoding="utf-8")
