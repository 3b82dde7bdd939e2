"""Optional dependencies of a test module: skipped locally when missing, a failure in CI."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ._databases import IN_CI


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` (installed by the ``extra`` extra), or skip the calling module.

    Under ``CI=true`` a missing module fails the run instead: CI installs every extra, so
    a skip there would hide tests that never ran.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (pip install 'notifyonce[{extra}]')"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message, allow_module_level=True)


def site_of(config: pytest.Config, requirement: str, module: str) -> Path:
    """A site directory holding ``requirement`` (pinned, ``name==version``) and its
    dependencies, installed once into pytest's cache, for worker processes to put first on
    their path: for a queue whose pins conflict with the dev environment's (arq's
    redis<6) or with another major version of itself (APScheduler 3 and 4). Skipped
    locally (failed in CI) when it cannot be installed."""
    if config.cache is None:
        pytest.skip("pytest's cache is off (-p no:cacheprovider)")
    site = config.cache.mkdir(f"site-{requirement.replace('==', '-')}")
    marker = site / module / "__init__.py"
    if not marker.exists():
        command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(site)]
        done = subprocess.run([*command, requirement], capture_output=True, text=True, timeout=300)
        if not marker.exists():
            message = f"could not install {requirement} into {site}: {done.stderr[-500:]}"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    return site
