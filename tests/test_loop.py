"""The command line's event loop: uvloop when installed (the speed extra), asyncio's when
opted out (``--no-uvloop``, ``NOTIFYONCE_UVLOOP=0``) or when uvloop cannot be imported."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from notifyonce._cli import main
from notifyonce._loop import ENV_UVLOOP, choose_loop, run
from notifyonce.testing import BotAPIServer

from ._optional import require

TOKEN = "12345:loop-secret-token"


class _MadeLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, told apart: what the stand-in uvloop below makes."""


@pytest.fixture
def fake_uvloop(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in ``uvloop`` module (whether or not the real one is installed)."""
    module = types.ModuleType("uvloop")
    module.new_event_loop = _MadeLoop  # type: ignore[attr-defined]
    module.__version__ = "9.9.9"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvloop", module)
    monkeypatch.delenv(ENV_UVLOOP, raising=False)
    return module


@pytest.fixture
def no_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import uvloop`` fails, as without the speed extra."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # None in sys.modules: ImportError
    monkeypatch.delenv(ENV_UVLOOP, raising=False)


def test_uvloop_is_chosen_when_it_can_be_imported(fake_uvloop: types.ModuleType) -> None:
    choice = choose_loop()
    assert ("uvloop", "9.9.9") == (choice.name, choice.version)
    assert fake_uvloop.new_event_loop is choice.factory
    assert "event loop: uvloop 9.9.9 (installed)" == choice.describe()


@pytest.mark.usefixtures("fake_uvloop")
def test_the_flag_opts_out() -> None:
    choice = choose_loop(use_uvloop=False)
    assert ("asyncio", None) == (choice.name, choice.factory)
    assert "event loop: asyncio (--no-uvloop)" == choice.describe()


@pytest.mark.usefixtures("fake_uvloop")
@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
def test_the_environment_opts_out(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_UVLOOP, value)
    choice = choose_loop()
    assert ("asyncio", None) == (choice.name, choice.factory)
    assert f"({ENV_UVLOOP}={value.strip().lower()})" in choice.describe()


@pytest.mark.usefixtures("fake_uvloop")
@pytest.mark.parametrize("value", ["1", "", "yes"])
def test_the_environment_saying_yes_keeps_uvloop(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_UVLOOP, value)
    assert "uvloop" == choose_loop().name


@pytest.mark.usefixtures("fake_uvloop")
def test_a_bad_value_in_the_environment_is_named() -> None:
    with pytest.raises(ValueError, match=r"NOTIFYONCE_UVLOOP must be 0 .* or 1 .*not 'fast'"):
        choose_loop(environ={ENV_UVLOOP: "fast"})


@pytest.mark.usefixtures("no_uvloop")
def test_asyncio_when_uvloop_cannot_be_imported() -> None:
    choice = choose_loop()
    assert ("asyncio", None) == (choice.name, choice.factory)
    assert "pip install 'notifyonce[speed]'" in choice.describe()


async def _loop_and_leftover() -> tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]:
    """The loop this runs on, and a task it leaves running."""
    left = asyncio.ensure_future(asyncio.sleep(3600))
    await asyncio.sleep(0)
    return asyncio.get_running_loop(), left


def test_run_uses_the_chosen_loop_and_closes_it(fake_uvloop: types.ModuleType) -> None:
    """The coroutine runs on a loop of the factory; once it returns, the tasks it left
    are cancelled and the loop closed (as asyncio.run does)."""
    loop, left = run(_loop_and_leftover(), choose_loop())
    assert isinstance(loop, _MadeLoop)
    assert loop.is_closed()
    assert left.cancelled()


def test_run_on_asyncio_when_opted_out(fake_uvloop: types.ModuleType) -> None:
    loop, left = run(_loop_and_leftover(), choose_loop(use_uvloop=False))
    assert not isinstance(loop, _MadeLoop)
    assert loop.is_closed()
    assert left.cancelled()


def test_run_on_the_real_uvloop() -> None:
    """With the speed extra installed, the coroutine runs on uvloop's own Loop, and no
    global policy is left behind."""
    uvloop = require("uvloop", "speed")
    choice = choose_loop(environ={})
    assert ("uvloop", uvloop.__version__) == (choice.name, choice.version)
    # Compared with the policy before: an older uvicorn (0.30, the lowest-versions legs)
    # run by another test of this process sets uvloop's policy globally itself.
    before = asyncio.get_event_loop_policy()
    loop, _ = run(_loop_and_leftover(), choice)
    assert isinstance(loop, uvloop.Loop)
    assert loop.is_closed()
    assert before is asyncio.get_event_loop_policy()  # no global policy set


# -- the command line ----------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_that_runs_a_loop_takes_the_flags() -> None:
    """broadcast, campaign's three and web take --no-uvloop and --verbose."""
    from notifyonce._cli.parser import _parser

    commands = _subcommands(_parser())
    campaign = _subcommands(commands["campaign"])
    for parser in [commands["broadcast"], commands["web"], *campaign.values()]:
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"--no-uvloop", "--verbose"} <= options, parser.prog


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A migrated SQLite ledger, a file of 30 chat ids and a text file; token in the env."""
    monkeypatch.setenv("NOTIFYONCE_DATABASE_URL", f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    monkeypatch.setenv("NOTIFYONCE_BOT_TOKEN", TOKEN)
    assert 0 == main(["migrate"])
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, 31)))
    (tmp_path / "text.txt").write_text("A new tariff\n")
    return tmp_path


def _broadcast(workdir: Path, *extra: str) -> list[str]:
    return [
        "broadcast",
        "--recipients-file",
        str(workdir / "chats.txt"),
        "--text-file",
        str(workdir / "text.txt"),
        "--action",
        "news",
        "--campaign",
        "c1",
        "--rate",
        "0",
        *extra,
    ]


@pytest.mark.usefixtures("fake_uvloop")
@pytest.mark.parametrize(
    ("extra", "env", "said"),
    [
        ([], None, "event loop: uvloop 9.9.9 (installed)"),
        (["--no-uvloop"], None, "event loop: asyncio (--no-uvloop)"),
        ([], "0", f"event loop: asyncio ({ENV_UVLOOP}=0)"),
    ],
)
def test_verbose_names_the_loop_once_at_the_start(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    env: str | None,
    said: str,
) -> None:
    if env is not None:
        monkeypatch.setenv(ENV_UVLOOP, env)
    assert 0 == main(_broadcast(workdir, "--dry-run", "--verbose", *extra))
    err = capsys.readouterr().err
    assert said == err.splitlines()[0]
    assert 1 == err.count("event loop:")


@pytest.mark.usefixtures("fake_uvloop")
def test_without_verbose_the_loop_is_not_said(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert 0 == main(_broadcast(workdir, "--dry-run"))
    assert "event loop" not in capsys.readouterr().err


@pytest.mark.usefixtures("fake_uvloop")
def test_a_bad_environment_value_is_a_usage_error(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 naming the variable, before anything runs (no coroutine left unawaited)."""
    monkeypatch.setenv(ENV_UVLOOP, "sometimes")
    with pytest.raises(SystemExit) as exited:
        main(_broadcast(workdir, "--dry-run"))
    assert 2 == exited.value.code
    assert f"{ENV_UVLOOP} must be 0" in capsys.readouterr().err


@pytest.fixture
def served_web(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``uvicorn.run`` recorded instead of serving."""
    uvicorn = require("uvicorn", "web")
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: calls.append(options))
    return calls


@pytest.mark.usefixtures("fake_uvloop")
@pytest.mark.parametrize(("extra", "loop"), [([], "uvloop"), (["--no-uvloop"], "asyncio")])
def test_web_tells_uvicorn_the_loop(
    workdir: Path, served_web: list[dict[str, Any]], extra: list[str], loop: str
) -> None:
    """uvicorn's "auto" would take uvloop whatever the flag says: web names the loop."""
    assert 0 == main(["web", "--port", "18999", *extra])
    assert [loop] == [call["loop"] for call in served_web]


# The command in a process of its own, telling on stderr the class of the loop the
# broadcast actually runs on (not only the one --verbose says was chosen).
_TELLING = """
import asyncio, sys
from notifyonce._cli import broadcast, main
inner = broadcast._run_interruptibly
async def telling(run):
    loop = type(asyncio.get_running_loop())
    print(f"running on {loop.__module__}.{loop.__qualname__}", file=sys.stderr)
    return await inner(run)
broadcast._run_interruptibly = telling
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("chosen", "running"), [("uvloop", "uvloop."), ("asyncio", "asyncio.")])
def test_a_broadcast_on_each_loop_sends_every_chat_once(
    workdir: Path, chosen: str, running: str
) -> None:
    """End to end, against the local Bot API server: the broadcast runs on the loop
    --verbose names, and every chat gets the message once."""
    if chosen == "uvloop":
        require("uvloop", "speed")
    flags = ["--verbose"] + (["--no-uvloop"] if chosen == "asyncio" else [])
    with BotAPIServer() as server:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _TELLING,
                *_broadcast(workdir, "--base-url", server.url, *flags),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        chats = sorted(int(d.chat_id) for d in server.deliveries)
    assert 0 == done.returncode, done.stderr
    said, ran = done.stderr.splitlines()[:2]
    assert said.startswith(f"event loop: {chosen}")
    assert ran.startswith(f"running on {running}"), ran
    assert "30 sent, 0 failed, 0 unknown" in done.stdout
    assert list(range(1, 31)) == chats
