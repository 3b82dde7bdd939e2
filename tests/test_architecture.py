"""The package's layering, checked on the source (docs/architecture.md draws it).

- Only the senders' wing (and the public modules that re-export it) imports an HTTP or bot
  library, so ``import notifyonce`` and the ledger work without any of them; the bot
  helpers (``_bots``) import aiogram and python-telegram-bot too, and nothing but the
  public ``notifyonce.aiogram`` and ``notifyonce.ptb`` imports them.
- The four wings do not import one another, except where the architecture page says so.
- The shared vocabulary imports no wing and nothing of the hall (at run time: the observer
  names the hall's results in its annotations, for the type checker only).
- ``Ledger`` and ``AsyncLedger`` are twins: the same methods with the same signatures.
- The import graph has no cycle, lazy imports and the type checker's counted too, and
  inside the command line imports go one way (parser -> the commands -> common).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

import notifyonce
from notifyonce import AsyncLedger, Ledger

PACKAGE = Path(notifyonce.__file__).parent
SENDER_LIBRARIES = {"httpx", "httpcore", "aiohttp", "aiogram", "telegram", "apprise"}
# The public modules that re-export the senders' wing; each checks for its extra up front.
SENDER_SHIMS = {"telegram", "webhook", "aiogram", "ptb", "apprise", "ratelimit", "testing"}
WINGS = ("_ledger", "_schedule", "_senders", "_audience")
# The bot helpers: a leaf that records what a bot's updates say in the audience. It may
# import these bot libraries, the audience and the vocabulary; only these public modules
# import it.
BOT_HELPERS = "_bots"
BOT_LIBRARIES = {"aiogram", "telegram"}
BOT_HELPER_USERS = {"notifyonce.aiogram", "notifyonce.ptb"}
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
    # the recipients table uses the ledger's column types and is named after its table
    ("_audience", "_ledger.table"),
    # the ledger's create_schema() makes the recipients table beside its own
    ("_ledger", "_audience.table"),
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


def _type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block (its body is the type checker's)."""
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def _run_time_imports(path: Path) -> set[str]:
    """The same, without the imports under ``if TYPE_CHECKING:`` (the type checker's)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in [n for n in ast.walk(tree) if _type_checking(n)]:
        assert isinstance(node, ast.If)
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
    if room == BOT_HELPERS:
        used -= BOT_LIBRARIES
    assert not used, f"{module} imports {sorted(used)}: that belongs in notifyonce._senders"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_only_the_public_bot_modules_import_the_bot_helpers(module: str, path: Path) -> None:
    """The core never imports the bot helpers (they load a bot library): only
    ``notifyonce.aiogram`` and ``notifyonce.ptb`` re-export them."""
    if _room(module) == BOT_HELPERS or module in BOT_HELPER_USERS:
        return
    wrong = [n for n in _imports(path) if n.startswith(f"notifyonce.{BOT_HELPERS}")]
    assert not wrong, f"{module} imports the bot helpers: {sorted(wrong)}"


BOTS = [(m, p) for m, p in MODULES if _room(m) == BOT_HELPERS]


@pytest.mark.parametrize(("module", "path"), BOTS, ids=[m for m, _ in BOTS])
def test_the_bot_helpers_reach_only_the_audience_and_the_vocabulary(
    module: str, path: Path
) -> None:
    """The bot helpers write through the audience's public calls: no ledger, sender,
    schedule or hall; their shared rules import no bot library at all."""
    wrong = []
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] in SENDER_LIBRARIES and module.endswith(".rules"):
            wrong.append(name)
        if parts[0] != "notifyonce" or len(parts) < 2:
            continue
        if parts[1] not in (BOT_HELPERS, "_audience", *VOCABULARY):
            wrong.append(name)
    assert BOTS, "the bot helpers are where this test looks for them"
    assert not wrong, f"{module} reaches outside the bot helpers' reach: {sorted(wrong)}"


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


def _import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package it imports, at any depth:
    on load, in a function (lazily) or for the type checker.

    ``from notifyonce._cli import common`` names the module ``notifyonce._cli.common``;
    ``from notifyonce._cli.common import plural`` the module ``notifyonce._cli.common``.
    The packages above a module imported are left out: Python has started importing them
    already when a module inside them imports a sibling.
    """
    return {
        module: _package_modules(ast.walk(ast.parse(path.read_text(), str(path)))) - {module}
        for module, path in MODULES
    }


PACKAGE_MODULES = {module for module, _ in MODULES}


def _package_modules(nodes: Iterable[ast.stmt]) -> set[str]:
    """The modules of the package that these import statements load."""
    targets: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.module is not None
            named = {f"{node.module}.{alias.name}" for alias in node.names}
            targets.update(named & PACKAGE_MODULES)
            if named - PACKAGE_MODULES:  # names defined in node.module itself
                targets.add(node.module)
    return targets & PACKAGE_MODULES


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as its modules in order (the first one repeated at
    the end), or None when there is none."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done:
                found = visit(target)
                if found is not None:
                    return found
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found is not None:
                return found
    return None


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert ["a", "b", "c", "a"] == _cycle(graph)
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_the_packages_modules() -> None:
    """The package's imports form no circle, counting lazy imports and the type checker's:
    a circle hidden in a function or under ``if TYPE_CHECKING:`` still ties two modules
    into one (the parser imports its commands, the commands what they share, and nothing
    imports back)."""
    cycle = _cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The command line's layers, top down: each module imports only the layers below its own.
CLI_LAYERS = (
    ("notifyonce._cli",),  # re-exports main
    ("notifyonce._cli.parser",),
    (
        "notifyonce._cli.ledger",
        "notifyonce._cli.broadcast",
        "notifyonce._cli.campaign",
        "notifyonce._cli.recipients",
        "notifyonce._cli.serve",
        "notifyonce._cli.web",
    ),
    ("notifyonce._cli.personal",),  # the broadcast's options of a personalised campaign
    ("notifyonce._cli.common",),
)
CLI = [(m, p) for m, p in MODULES if _room(m) == "_cli"]


@pytest.mark.parametrize(("module", "path"), CLI, ids=[m for m, _ in CLI])
def test_the_command_lines_imports_go_one_way(module: str, path: Path) -> None:
    """parser -> the commands -> common, lazy imports too: a command never reaches back
    into the parser or into another command, and common into none of them."""
    level = next(i for i, layer in enumerate(CLI_LAYERS) if module in layer)
    below = {m for layer in CLI_LAYERS[level + 1 :] for m in layer}
    cli = {m for layer in CLI_LAYERS for m in layer}
    assert {m for m, _ in CLI} == cli, "CLI_LAYERS places every module of the command line"
    imported = _package_modules(ast.walk(ast.parse(path.read_text(), str(path))))
    wrong = (imported & cli) - below - {module}
    assert not wrong, f"{module} imports {sorted(wrong)}: the command line imports go one way"


# Asking which database an engine is on: SQLAlchemy's dialect or driver name compared, a
# URL's backend read, a database's name compared as a string.
_WHICH_DATABASE = re.compile(
    r"\bdialect\.name\b"
    r"|\.driver\s*(?:==|!=|\bin\b|\bnot in\b)"
    r"|get_backend_name\("
    r"""|(?:==|!=)\s*["'](?:postgresql|postgres|mysql|mariadb|sqlite)["']"""
    r"""|\bin\s*[(\[{]\s*["'](?:postgresql|postgres|mysql|mariadb|sqlite)["']"""
)


def _asks_which_database(source: str) -> list[str]:
    """The lines of ``source`` that ask which database they run on (comments left out)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        code = line.split("#", 1)[0]
        if _WHICH_DATABASE.search(code):
            found.append(f"{number}: {line.strip()}")
    return found


def test_the_database_question_finder_finds_each_way_of_asking() -> None:
    asking = [
        'if engine.dialect.name == "sqlite":',
        'if conn.dialect.driver == "asyncpg":',
        "backend = url.get_backend_name()",
        'if name in ("mysql", "mariadb"):',
        'return value if kind != "postgresql" else value',
    ]
    assert len(asking) == len(_asks_which_database("\n".join(asking)))
    fine = [
        'sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"))',
        "key = (*shape, sa_dialect.driver, sa_dialect.paramstyle)",
        "if driver.row_locks:  # dialect.name is the driver's question",
    ]
    assert [] == _asks_which_database("\n".join(fine))


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_only_the_drivers_ask_which_database_they_run_on(module: str, path: Path) -> None:
    """Everything else asks its engine's driver what it needs to know (a capability, an
    expression, an error's meaning): adding a database is then a driver, not a hunt for
    every comparison of dialect names."""
    if _room(module) == "_drivers":
        return
    found = _asks_which_database(path.read_text())
    assert not found, f"{module} asks which database it runs on: {found}"


def test_a_broadcast_holds_no_copy_of_its_notifier() -> None:
    """A broadcast runs through the Notifier it was given: no Notifier is made or copied
    for it (a copy shared the original's sweep state without its owner knowing)."""
    import asyncio
    import gc

    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import Broadcast, Message, Notifier, Receipt
    from notifyonce.testing import FakeSender

    def notifiers() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, Notifier))

    during: list[int] = []

    class Counting(FakeSender):
        async def send(self, recipient: str, message: Message) -> Receipt:
            during.append(notifiers())
            return await super().send(recipient, message)

    async def main() -> tuple[int, int]:
        engine = create_async_engine("sqlite+aiosqlite://")
        try:
            ledger = AsyncLedger(engine)
            await ledger.create_schema()
            notifier = Notifier(ledger, Counting())
            before = notifiers()
            broadcast = Broadcast(notifier, "news", "2026-12", Message("hello"), range(1, 41))
            report = await broadcast.run()
            return before, report.report.counts["sent"]
        finally:
            await engine.dispose()

    before, sent = asyncio.run(main())
    assert 40 == sent
    assert 1 == before
    assert {1} == set(during)
