"""The test matrix: the core suites on every Python the classifiers claim, each with the
lowest version pyproject.toml declares for every dependency and extra, and with the
newest releases.

``make test`` runs the whole suite on one Python with the newest dependencies, then this
(``make matrix``), which skips the newest leg of the Python it runs on (the whole suite
just covered it). Everything is read from pyproject.toml, so a dependency, an extra or a
classifier added there is covered without touching this file:

- the Pythons: the ``Programming Language :: Python :: 3.X`` classifiers (checked against
  ``requires-python``, whose lower bound must be the oldest one claimed);
- the lowest versions: the lower bound of every requirement in ``dependencies`` and in
  every extra except the tools extra, pinned with ``==`` in a generated constraints file
  (markers are evaluated for each Python; a requirement without a lower bound is an error);
- the core test files and the test tools (taken, at their newest, from the tools extra):
  ``[tool.notifyonce.matrix]``.

Each leg gets its own venv under ``.matrix/`` (made with uv, from PyPI only) and runs the
core files with pytest, but the tests marked storm. With ``full-legs`` set, only those
legs run every core test; the others run the ones ``partial-markers`` selects (the tests
that depend on the Python rather than on a database server's driver, whose lowest and
newest releases the full legs and the whole suite cover). A Python the machine lacks is skipped
with a message, except under ``CI=true``, where a claimed Python that is missing fails
the run.

Usage (from the project root, with the dev venv's Python)::

    python scripts/matrix.py                  # every leg
    python scripts/matrix.py --leg 3.12-lowest --leg 3.12-newest
    python scripts/matrix.py --list           # the legs and the constraints, no runs
    python scripts/matrix.py -- -x -k claim   # pytest options after --
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev venv on Python 3.10 has tomli (through mypy)
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

ROOT = Path(__file__).resolve().parent.parent
MATRIX_DIR = ROOT / ".matrix"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CLASSIFIER = re.compile(r"^Programming Language :: Python :: (3\.\d+)$")
LOWER_BOUND_OPERATORS = {">=", "==", "~=", "==="}
PRINTING = threading.Lock()


@dataclass(frozen=True)
class Config:
    name: str
    pythons: list[str]
    requirements: list[Requirement]  # dependencies and every extra but the tools extra
    extras: list[str]
    tools: list[str]
    core: list[str]
    workers: int = 1  # pytest-xdist processes per leg
    # Legs that run every core test; the others run those the marker expression selects
    # (what depends on the Python, not on a database server's driver): see pyproject.toml.
    full: tuple[str, ...] = ()
    partial: str = ""

    def markers(self, leg: Leg) -> str:
        """The ``-m`` expression of ``leg``'s pytest run."""
        if not self.full or leg.name in self.full or not self.partial:
            return "not storm"
        return f"not storm and ({self.partial})"


@dataclass(frozen=True)
class Leg:
    python: str  # "3.12"
    lowest: bool

    @property
    def name(self) -> str:
        return f"{self.python}-{'lowest' if self.lowest else 'newest'}"


@dataclass
class Result:
    leg: Leg
    interpreter: str = "-"
    setup: float = 0.0
    tests: float = 0.0
    outcome: str = "not run"


def log(message: str) -> None:
    print(f"matrix: {message}", flush=True)


def read_config(pyproject: Path) -> Config:
    """Everything the matrix needs from pyproject.toml; exits naming what is wrong."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    name = canonicalize_name(project["name"])
    section = data.get("tool", {}).get("notifyonce", {}).get("matrix", {})
    missing = [key for key in ("core", "tools", "tools-extra") if key not in section]
    if missing:
        sys.exit(f"pyproject.toml: [tool.notifyonce.matrix] lacks {', '.join(missing)}")

    pythons = sorted(
        (m.group(1) for c in project.get("classifiers", []) if (m := CLASSIFIER.match(c))),
        key=Version,
    )
    if not pythons:
        sys.exit("pyproject.toml: no 'Programming Language :: Python :: 3.X' classifier")
    requires = SpecifierSet(project.get("requires-python", ""))
    outside = [p for p in pythons if Version(p) not in requires]
    if outside:
        sys.exit(f"pyproject.toml: classifiers claim {outside}, requires-python is {requires}")
    floors = [Version(s.version) for s in requires if s.operator == ">="]
    if floors and max(floors) != Version(pythons[0]):
        sys.exit(
            f"pyproject.toml: requires-python {requires} admits Pythons older than the oldest "
            f"classifier ({pythons[0]}), which would be declared but never tested"
        )

    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    tools_extra = section["tools-extra"]
    # Extras whose lower bounds are not tested yet: installed by the dev extra only, never
    # by a leg (none today; the task queues' extras were, until their bounds were tested).
    untested = set(section.get("untested-extras", []))
    extras = [extra for extra in optional if extra != tools_extra and extra not in untested]
    texts = list(project.get("dependencies", []))
    for extra in extras:
        texts += optional[extra]
    requirements = [r for r in map(Requirement, texts) if canonicalize_name(r.name) != name]

    by_name = {canonicalize_name(Requirement(t).name): t for t in optional.get(tools_extra, [])}
    unknown = [t for t in section["tools"] if canonicalize_name(t) not in by_name]
    if unknown:
        sys.exit(f"pyproject.toml: matrix tools {unknown} are not in the {tools_extra!r} extra")
    tools = [by_name[canonicalize_name(t)] for t in section["tools"]]

    core = list(section["core"])
    absent = [path for path in core if not (ROOT / path).is_file()]
    if absent:
        sys.exit(f"pyproject.toml: matrix core files {absent} do not exist")
    workers = section.get("workers", 1)
    if not isinstance(workers, int) or workers < 1:
        sys.exit(
            f"pyproject.toml: [tool.notifyonce.matrix] workers must be an int >= 1, got {workers!r}"
        )
    full = section.get("full-legs", [])
    partial = section.get("partial-markers", "")
    if not isinstance(full, list) or not all(isinstance(leg, str) for leg in full):
        sys.exit(f"pyproject.toml: [tool.notifyonce.matrix] full-legs must be a list, got {full!r}")
    if not isinstance(partial, str) or (full and not partial):
        sys.exit(
            "pyproject.toml: [tool.notifyonce.matrix] partial-markers must be a pytest -m "
            f"expression when full-legs is set, got {partial!r}"
        )
    known = {Leg(p, lowest).name for p in pythons for lowest in (True, False)}
    stray = sorted(set(full) - known)
    if stray:
        sys.exit(f"pyproject.toml: matrix full-legs {stray} are not legs; known: {sorted(known)}")
    return Config(name, pythons, requirements, extras, tools, core, workers, tuple(full), partial)


def lowest_constraints(config: Config, python_full_version: str) -> dict[str, str]:
    """``name -> version``: the lower bound of each requirement that applies to that Python.

    A package required twice (two extras) gets the higher of its lower bounds: the lowest
    version that satisfies both declarations.
    """
    major_minor = ".".join(python_full_version.split(".")[:2])
    # Only the Python differs between the legs; the rest of the marker environment
    # (platform, implementation) is this machine's, as it is for the interpreters.
    environment = {"python_version": major_minor, "python_full_version": python_full_version}
    lowest: dict[str, Version] = {}
    for requirement in config.requirements:
        marker: Marker | None = requirement.marker
        if marker is not None and not marker.evaluate(environment):
            continue
        bounds = [
            Version(s.version) for s in requirement.specifier if s.operator in LOWER_BOUND_OPERATORS
        ]
        if not bounds:
            sys.exit(
                f"pyproject.toml: {requirement} declares no lower bound; "
                "every dependency and extra needs one (the lowest version that passes)"
            )
        name = canonicalize_name(requirement.name)
        lowest[name] = max([*bounds, lowest.get(name, bounds[0])])
    return {name: str(version) for name, version in sorted(lowest.items())}


def find_python(version: str) -> Path | None:
    """``python3.X`` on PATH, else the newest pyenv build of 3.X; checked by running it."""
    candidates: list[Path] = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(Path(on_path))
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    builds = [
        p for p in pyenv.glob(f"{version}.*/bin/python") if p.parent.parent.name[-1].isdigit()
    ]
    candidates += sorted(builds, key=lambda p: Version(p.parent.parent.name), reverse=True)
    for candidate in candidates:
        if python_version(candidate).startswith(f"{version}."):
            return candidate
    return None


def python_version(python: Path) -> str:
    """The full version of an interpreter ("3.12.1"), or "" when it does not run."""
    try:
        done = subprocess.run(  # noqa: S603 - an interpreter we found, no shell
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        sys.exit("uv is not installed: `make matrix` installs it into .venv")
    return found


class LegError(Exception):
    """A leg could not be set up; the message says which step."""


def run(args: list[str], output: IO[str] | None) -> None:
    """Run a setup command (uv) from the project root; raise LegError when it fails."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}  # PyPI only: no Python downloads
    done = subprocess.run(  # noqa: S603 - our argv, no shell
        args, cwd=ROOT, env=env, stdout=output, stderr=output and subprocess.STDOUT, check=False
    )
    if done.returncode != 0:
        raise LegError(f"`{' '.join(args[1:3])} ...` exited with {done.returncode}")


def set_up(
    config: Config, leg: Leg, python: Path, full_version: str, output: IO[str] | None
) -> Path:
    """A venv for the leg with notifyonce (editable, every extra) and the test tools."""
    venv = MATRIX_DIR / leg.name
    venv_python = venv / "bin" / "python"
    if python_version(venv_python) != full_version:
        run(
            [uv(), "venv", "--quiet", "--no-python-downloads", "--python", str(python), str(venv)],
            output,
        )
    install = [uv(), "pip", "install", "--quiet", "--python", str(venv_python)]
    extras = ",".join(config.extras)
    install += ["-e", f".[{extras}]", *config.tools]
    if leg.lowest:
        pins = lowest_constraints(config, full_version)
        constraints = venv / "constraints.txt"
        constraints.write_text(
            "# Generated by scripts/matrix.py from pyproject.toml's lower bounds\n"
            + "".join(f"{name}=={version}\n" for name, version in pins.items()),
            encoding="utf-8",
        )
        log(f"{leg.name}: " + " ".join(f"{n}=={v}" for n, v in pins.items()))
        run([*install, "--constraint", str(constraints)], output)
        check_installed(venv_python, pins)
    else:
        run([*install, "--upgrade"], output)
    return venv_python


def check_installed(venv_python: Path, pins: dict[str, str]) -> None:
    """Fail the leg unless every pinned package is installed at exactly its lower bound."""
    listing = subprocess.run(  # noqa: S603 - our argv, no shell
        [uv(), "pip", "list", "--python", str(venv_python), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed: dict[str, str] = {
        canonicalize_name(p["name"]): p["version"] for p in json.loads(listing.stdout)
    }
    wrong = [
        f"{name} {installed.get(name, 'missing')} (wanted {version})"
        for name, version in pins.items()
        if Version(installed.get(name, "0")) != Version(version)
    ]
    if wrong:
        raise LegError("not installed at the lowest version: " + ", ".join(wrong))


def run_leg(config: Config, leg: Leg, pytest_args: list[str], quiet: bool) -> Result:
    """Set up and run one leg; with ``quiet`` its output goes to .matrix/LEG.log and is
    printed in one piece when the leg ends (legs running side by side)."""
    if not quiet:
        return _run_leg(config, leg, pytest_args, None)
    MATRIX_DIR.mkdir(exist_ok=True)
    log_path = MATRIX_DIR / f"{leg.name}.log"
    with log_path.open("w", encoding="utf-8") as output:
        result = _run_leg(config, leg, pytest_args, output)
    with PRINTING:
        log(f"{leg.name}: output follows")
        print(log_path.read_text(encoding="utf-8"), end="", flush=True)
    return result


def _run_leg(config: Config, leg: Leg, pytest_args: list[str], output: IO[str] | None) -> Result:
    result = Result(leg)
    python = find_python(leg.python)
    if python is None:
        looked = f"python{leg.python} on PATH and pyenv's versions/{leg.python}.*"
        if IN_CI:
            result.outcome = "FAILED: missing"
            log(f"{leg.name}: CI=true and Python {leg.python} (claimed) not found ({looked})")
        else:
            result.outcome = "skipped"
            log(f"{leg.name}: skipped, Python {leg.python} not found ({looked})")
        return result
    full_version = python_version(python)
    result.interpreter = full_version
    log(f"{leg.name}: setting up .matrix/{leg.name} with {python} ({full_version})")
    started = time.monotonic()
    try:
        venv_python = set_up(config, leg, python, full_version, output)
    except LegError as exc:
        result.setup = time.monotonic() - started
        result.outcome = f"FAILED: setup ({exc})"
        log(f"{leg.name}: {result.outcome}")
        return result
    result.setup = time.monotonic() - started
    markers = config.markers(leg)
    log(
        f"{leg.name}: pytest on {len(config.core)} core files (-m {markers!r}), "
        f"{config.workers} process(es)"
    )
    started = time.monotonic()
    args = [*config.core, *pytest_args]
    parallel = ["-n", str(config.workers)] if config.workers > 1 else []
    done = subprocess.run(  # noqa: S603 - our argv, no shell
        # the storms (worker processes killed again and again) run in the whole suite
        [
            str(venv_python),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-m",
            markers,
            *parallel,
            *args,
        ],
        cwd=ROOT,
        stdout=output,
        stderr=output and subprocess.STDOUT,
        check=False,
    )
    result.tests = time.monotonic() - started
    result.outcome = "passed" if done.returncode == 0 else f"FAILED: pytest exit {done.returncode}"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leg", action="append", help="run only this leg (e.g. 3.12-lowest)")
    parser.add_argument("--list", action="store_true", help="print legs and constraints only")
    parser.add_argument("--jobs", type=int, default=1, help="legs run side by side (default 1)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    config = read_config(ROOT / "pyproject.toml")

    # The newest dependencies on this Python are the whole suite's job (`make pytest`).
    this_python = "{}.{}".format(*sys.version_info[:2])
    legs = [Leg(p, lowest=True) for p in config.pythons]
    legs += [Leg(p, lowest=False) for p in config.pythons if args.leg or p != this_python]
    if args.leg:
        unknown = set(args.leg) - {leg.name for leg in legs}
        if unknown:
            sys.exit(f"unknown legs {sorted(unknown)}; known: {[leg.name for leg in legs]}")
        legs = [leg for leg in legs if leg.name in args.leg]

    if args.list:
        for leg in legs:
            python = find_python(leg.python)
            where = f"{python} ({python_version(python)})" if python else "not found"
            print(f"{leg.name}: {where}, -m {config.markers(leg)!r}")
        for claimed in config.pythons:
            pins = lowest_constraints(config, f"{claimed}.0")
            print(f"lowest on {claimed}: " + " ".join(f"{n}=={v}" for n, v in pins.items()))
        print("core: " + " ".join(config.core))
        return 0

    # The full legs take longest: started first, the short ones fill in beside them.
    legs.sort(key=lambda leg: leg.name not in config.full)
    quiet = args.jobs > 1
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda leg: run_leg(config, leg, args.pytest_args, quiet), legs))
    log("leg            python    setup    tests   outcome")
    for r in results:
        log(f"{r.leg.name:<14} {r.interpreter:<8} {r.setup:6.0f}s {r.tests:7.0f}s   {r.outcome}")
    failed = [r.leg.name for r in results if r.outcome.startswith("FAILED")]
    if failed:
        log(f"failed: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
