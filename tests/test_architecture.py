"""The package's layering, checked on the source (docs/architecture.md draws it).

- Only the senders' wing (and the public modules that re-export it) imports an HTTP or bot
  library, so ``import notifyonce`` and the ledger work without any of them.
- The three wings do not import one another, except where the architecture page says so.
- The shared vocabulary imports no wing and nothing of the hall (at run time: the observer
  names the hall's results in its annotations, for the type checker only).
- ``Ledger`` and ``AsyncLedger`` are twins: the same methods with the same signatures.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import notifyonce
from notifyonce import AsyncLedger, Ledger

PACKAGE = Path(notifyonce.__file__).parent
SENDER_LIBRARIES = {"httpx", "httpcore", "aiohttp", "aiogram", "telegram", "apprise"}
# The public modules that re-export the senders' wing; each checks for its extra up front.
SENDER_SHIMS = {"telegram", "webhook", "aiogram", "ptb", "apprise", "ratelimit", "testing"}
WINGS = ("_ledger", "_schedule", "_senders")
# _media and _buttons (what a Message carries) and _observe (what a run tells an observer;
# the senders report flood waits through it) are vocabulary too, where they exist.
VOCABULARY = (
    "_errors",
    "_outcome",
    "_keys",
    "_message",
    "_quiet",
    "_version",
    "_media",
    "_buttons",
    "_observe",
    "_drivers",
)
# The only imports from one wing into another, each with its reason.
CROSS_WING = {
    # the SQL rate store refuses a rate table named like the ledger's default table
    ("_senders", "_ledger.table"),
}
# The only imports of the vocabulary from the hall: for the type checker only (under
# ``if TYPE_CHECKING:``), never at run time.
TYPE_ONLY = {
    # the observer's hooks are annotated with the Report and Result the hall hands them
    ("_observe", "_results"),
}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append((".".join(parts), path))
    return out


def _imports_in(tree: ast.AST, path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the package uses absolute ones)"
            assert node.module is not None
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imports(path: Path) -> set[str]:
    """Every module the file imports, at any depth (lazy imports in functions count too)."""
    return _imports_in(ast.parse(path.read_text(), str(path)), path)


def _run_time_imports(path: Path) -> set[str]:
    """The same, without the imports under ``if TYPE_CHECKING:`` (the type checker's)."""
    tree = ast.parse(path.read_text(), str(path))
    guarded = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    ]
    for node in guarded:
        node.body = [ast.Pass()]
    return _imports_in(tree, path)


MODULES = _modules()


def _room(module: str) -> str:
    """``notifyonce._ledger.core`` -> ``_ledger``; ``notifyonce._notifier`` -> ``_notifier``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_only_the_senders_wing_imports_http_and_bot_libraries(module: str, path: Path) -> None:
    room = _room(module)
    if room == "_senders" or room in SENDER_SHIMS:
        return
    used = {name.split(".")[0] for name in _imports(path)} & SENDER_LIBRARIES
    assert not used, f"{module} imports {sorted(used)}: that belongs in notifyonce._senders"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_wings_and_vocabulary_keep_to_their_layer(module: str, path: Path) -> None:
    room = _room(module)
    if room not in WINGS and room not in VOCABULARY:
        return
    wrong = []
    run_time = _run_time_imports(path)
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "notifyonce" or len(parts) < 2:
            continue
        target = parts[1]
        if target == room or target in VOCABULARY:
            continue
        allowed = any(room == r and ".".join(parts[1:]).startswith(t) for r, t in CROSS_WING)
        allowed = allowed or (
            name not in run_time and any(room == r and target == t for r, t in TYPE_ONLY)
        )
        if not allowed:
            wrong.append(name)
    assert not wrong, f"{module} reaches outside its layer: {sorted(wrong)}"


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or isinstance(inspect.getattr_static(cls, name), property):
            continue
        if callable(member):
            out[name] = inspect.signature(member)
    return out


def _sync_spelling(signature: inspect.Signature) -> list[tuple[str, object, object, str]]:
    """Parameters as (name, kind, default, annotation) with the async types spelt sync."""

    def plain(annotation: object) -> str:
        return (
            str(annotation)
            .replace("AsyncConnection", "Connection")
            .replace("AsyncEngine", "Engine")
        )

    params = [
        (p.name, p.kind, p.default, plain(p.annotation)) for p in signature.parameters.values()
    ]
    return [*params, ("return", None, None, plain(signature.return_annotation))]


def test_ledger_and_async_ledger_are_twins() -> None:
    sync, async_ = _public_methods(Ledger), _public_methods(AsyncLedger)
    assert sorted(sync) == sorted(async_)
    for name, signature in sync.items():
        # same parameters, kinds, defaults and annotations (a Connection where the async
        # ledger takes an AsyncConnection)
        assert _sync_spelling(signature) == _sync_spelling(async_[name]), name
    properties = {
        n
        for n, _ in inspect.getmembers(Ledger)
        if isinstance(inspect.getattr_static(Ledger, n), property)
    }
    assert properties == {
        n
        for n, _ in inspect.getmembers(AsyncLedger)
        if isinstance(inspect.getattr_static(AsyncLedger, n), property)
    }


def _entry(path: Path) -> str:
    """How the page's tree names a module: ``_notifier.py`` at the top, ``core.py`` in a
    wing, ``telegram/`` for a module of a room inside a wing."""
    parts = path.relative_to(PACKAGE).parts
    if len(parts) <= 2:
        return parts[-1]
    return parts[1] + "/"


def test_the_architecture_page_names_every_private_module_and_no_other() -> None:
    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    tree = page.split("```", 2)[1]  # the first code block: the layout
    private = {
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0].startswith("_")
        and path.name != "__init__.py"
        and path.relative_to(PACKAGE).parts[0] != "__main__.py"
    }
    missing = sorted({_entry(p) for p in private} - set(re.findall(r"[\w]+\.py|[\w]+/", tree)))
    assert not missing, f"docs/architecture.md does not place {missing}"
    named = set(re.findall(r"\b_?\w+\.py\b", tree))
    existing = {p.name for p in PACKAGE.rglob("*.py")}
    assert not named - existing, (
        f"docs/architecture.md names modules that do not exist: {sorted(named - existing)}"
    )
