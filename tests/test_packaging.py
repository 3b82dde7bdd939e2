"""The release: the built wheel and sdist, installed into a fresh venv, run the README."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from notifyonce import __version__
from notifyonce.testing import BotAPIServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# The one string of the README's quick start that the test changes: the Bot API address.
README_SENDER = 'TelegramSender("123456:your-bot-token")'


@dataclass(frozen=True)
class Installed:
    dist: Path
    wheel: Path
    python: Path
    bin: Path


def _run(args: list[str | Path], *, timeout: float, cwd: Path | None = None) -> str:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # the installed wheel, not this checkout's src/
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert 0 == done.returncode, f"{args}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build sdist + wheel (the wheel from the sdist), then install it with its extras."""
    base = tmp_path_factory.mktemp("release")
    dist = base / "dist"
    _run([sys.executable, "-m", "build", "--outdir", dist, ROOT], timeout=240)
    (wheel,) = dist.glob("notifyonce-*.whl")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    _run([python, "-m", "pip", "install", "--quiet", f"{wheel}[telegram,sqlite]"], timeout=240)
    return Installed(dist, wheel, python, bin_dir)


def test_dists_pass_twine_check(installed: Installed) -> None:
    """twine check accepts the wheel and the sdist (metadata and README render)."""
    dists = sorted(installed.dist.iterdir())
    assert 2 == len(dists)
    out = _run([sys.executable, "-m", "twine", "check", "--strict", *dists], timeout=60)
    assert 2 == out.count("PASSED")


def test_wheel_holds_typing_marker_migrations_and_plugin(installed: Installed) -> None:
    """The wheel ships py.typed, every Alembic file, the pytest plugin and both entry points."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        info = f"notifyonce-{__version__}.dist-info"
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        metadata = wheel.read(f"{info}/METADATA").decode()
    expected = {
        "notifyonce/py.typed",
        "notifyonce/migrations/__init__.py",
        "notifyonce/migrations/env.py",
        "notifyonce/migrations/script.py.mako",
        "notifyonce/migrations/versions/0001_create_slots.py",
        "notifyonce/testing/_plugin.py",
    }
    assert expected <= names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "bench/"))]
    assert "notifyonce = notifyonce._cli:main" in entry_points
    assert "notifyonce = notifyonce.testing._plugin" in entry_points
    assert f"Version: {__version__}" in metadata
    assert "Typing :: Typed" in metadata
    assert "Provides-Extra: telegram" in metadata


def test_installed_command_line_prints_version(installed: Installed) -> None:
    """The console script of the installed wheel reports the single-sourced version."""
    assert (
        f"notifyonce {__version__}"
        == _run([installed.bin / "notifyonce", "--version"], timeout=60).strip()
    )


def test_readme_quick_start_runs_against_the_installed_wheel(
    installed: Installed, tmp_path: Path
) -> None:
    """The README's quick start sends once, then reports a duplicate on the second run."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert 1 == len(blocks)
    assert 1 == blocks[0].count(README_SENDER)
    with BotAPIServer() as server:
        script = tmp_path / "quickstart.py"
        script.write_text(
            blocks[0].replace(
                README_SENDER, f'TelegramSender("123456:your-bot-token", base_url="{server.url}")'
            ),
            encoding="utf-8",
        )
        first = _run([installed.python, script], cwd=tmp_path, timeout=60)
        second = _run([installed.python, script], cwd=tmp_path, timeout=60)
        deliveries = server.deliveries
    assert "Outcome.SENT" == first.strip()
    assert "Outcome.DUPLICATE" == second.strip()
    assert (tmp_path / "reminders.db").exists()
    assert [("42", "6 hours left")] == [(d.chat_id, d.text) for d in deliveries]


def test_the_version_says_whether_the_code_is_a_release() -> None:
    """``__version__`` is the newest release of CHANGELOG.md while its Unreleased section is
    empty; once Unreleased lists changes, it is a development version of the next one
    (``0.2.1.dev0``), so a build from the main branch never passes for the last release."""
    from packaging.version import Version

    text = (Path(__file__).parent.parent / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d{2}-\d{2}$", text, re.M)
    unreleased = text.split("## Unreleased", 1)[1].split("\n## ", 1)[0]
    newest, version = Version(releases[0]), Version(__version__)
    if re.search(r"^- ", unreleased, re.M):
        assert version.is_devrelease, f"Unreleased lists changes: {version} should be a .dev"
        assert version > newest
    else:
        assert newest == version
