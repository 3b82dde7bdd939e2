"""The declared versions are the tested ones: the matrix's lowest-version generator, and
the README and docs listing exactly what pyproject.toml claims."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ._examples import load_module

ROOT = Path(__file__).resolve().parent.parent


matrix = load_module("_notifyonce_matrix", ROOT / "scripts/matrix.py")


def _pyproject(tmp_path: Path, dependencies: str, extras: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        f"""
[project]
name = "demo"
requires-python = ">=3.10"
classifiers = [
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.10",
]
dependencies = [{dependencies}]

[project.optional-dependencies]
{extras}
dev = ["demo[a]", "pytest>=8"]

[tool.notifyonce.matrix]
core = ["tests/test_supported_versions.py"]
tools = ["pytest"]
tools-extra = "dev"
""",
        encoding="utf-8",
    )
    return path


def test_lowest_pins_each_lower_bound_and_evaluates_markers(tmp_path: Path) -> None:
    """Every requirement is pinned to its lower bound on the Pythons its marker admits;
    a package in two extras gets the higher bound; the tools extra is left out."""
    path = _pyproject(
        tmp_path,
        '"SQLAlchemy[asyncio]>=2.0.47", "tomli>=1.1; python_version < \'3.11\'"',
        'a = ["httpx>=0.27", "Sniffio>=1.3,<2"]\nb = ["httpx>=0.28.1"]',
    )
    config = matrix.read_config(path)
    assert ["3.10", "3.11"] == config.pythons
    assert ["a", "b"] == config.extras
    assert ["pytest>=8"] == config.tools
    expected = {"httpx": "0.28.1", "sniffio": "1.3", "sqlalchemy": "2.0.47"}
    assert {**expected, "tomli": "1.1"} == matrix.lowest_constraints(config, "3.10.13")
    assert expected == matrix.lowest_constraints(config, "3.11.7")


def test_a_dependency_without_lower_bound_is_refused(tmp_path: Path) -> None:
    """A requirement the matrix cannot pin to a lowest version stops the run, named."""
    config = matrix.read_config(_pyproject(tmp_path, '"alembic"', 'a = ["httpx>=0.27"]'))
    with pytest.raises(SystemExit, match="alembic declares no lower bound"):
        matrix.lowest_constraints(config, "3.10.13")


def test_requires_python_older_than_the_classifiers_is_refused(tmp_path: Path) -> None:
    """requires-python admitting a Python no classifier claims (so none is tested) stops it."""
    path = _pyproject(tmp_path, '"alembic>=1.13"', 'a = ["httpx>=0.27"]')
    path.write_text(path.read_text().replace(">=3.10", ">=3.9"), encoding="utf-8")
    with pytest.raises(SystemExit, match="older than the oldest classifier"):
        matrix.read_config(path)


def _docs_table() -> dict[str, tuple[str, str]]:
    """The quick start's table: package -> (needed by, lowest supported)."""
    text = (ROOT / "docs/quickstart.md").read_text(encoding="utf-8")
    section = text.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \|$", section, re.MULTILINE)
    return {name: (needed, lowest) for name, needed, lowest in rows[1:]}  # after the header


def test_docs_list_every_dependency_at_its_declared_lower_bound() -> None:
    """The quick start's table has exactly pyproject's dependencies, extras and bounds."""
    config = matrix.read_config(ROOT / "pyproject.toml")
    pyproject = matrix.tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed: dict[str, list[str]] = {}
    for requirement in pyproject["project"]["dependencies"]:
        needed[matrix.Requirement(requirement).name] = ["always"]
    for extra in config.extras:
        for requirement in pyproject["project"]["optional-dependencies"][extra]:
            needed.setdefault(matrix.Requirement(requirement).name, []).append(f"`{extra}`")
    lowest = matrix.lowest_constraints(config, f"{config.pythons[0]}.0")
    expected = {
        name: (", ".join(extras), lowest[matrix.canonicalize_name(name)])
        for name, extras in needed.items()
    }
    assert expected == _docs_table()


def test_readme_and_docs_name_exactly_the_claimed_pythons() -> None:
    """README and docs name the Pythons the classifiers claim (and the matrix runs)."""
    pythons = matrix.read_config(ROOT / "pyproject.toml").pythons
    listed = ", ".join(pythons[:-1]) + f" and {pythons[-1]}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = (ROOT / "docs/quickstart.md").read_text(encoding="utf-8")
    assert f"Python {listed};" in readme
    assert f"CPython {listed}." in quickstart


def test_full_legs_run_every_core_test_the_others_what_their_markers_select(
    tmp_path: Path,
) -> None:
    """With full-legs, those legs run every core test but the storms; the other legs add
    the partial markers; a leg that is not one, or full legs without markers, stop it."""
    path = _pyproject(tmp_path, '"alembic>=1.13"', 'a = ["httpx>=0.27"]')
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text + 'full-legs = ["3.10-lowest"]\npartial-markers = "not postgres"\n', encoding="utf-8"
    )
    config = matrix.read_config(path)
    assert "not storm" == config.markers(matrix.Leg("3.10", lowest=True))
    assert "not storm and (not postgres)" == config.markers(matrix.Leg("3.11", lowest=True))
    assert "not storm and (not postgres)" == config.markers(matrix.Leg("3.10", lowest=False))
    path.write_text(text + 'full-legs = ["3.9-lowest"]\npartial-markers = "x"\n', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"full-legs \['3.9-lowest'\] are not legs"):
        matrix.read_config(path)
    path.write_text(text + 'full-legs = ["3.10-lowest"]\n', encoding="utf-8")
    with pytest.raises(SystemExit, match="partial-markers must be a pytest -m expression"):
        matrix.read_config(path)
    path.write_text(text, encoding="utf-8")  # neither: every leg runs every core test
    assert "not storm" == matrix.read_config(path).markers(matrix.Leg("3.11", lowest=True))
