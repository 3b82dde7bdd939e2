"""Optional dependencies of a test module: skipped locally when missing, a failure in CI."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import subprocess
import sys
import tempfile
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
    site = config.cache.mkdir("sites") / requirement.replace("==", "-")
    if not (site / module / "__init__.py").exists():
        # Installed beside the final directory and renamed into place whole: two test
        # workers asking at once each install their own, and the first rename wins, so no
        # worker sees a half-installed site.
        staging = Path(tempfile.mkdtemp(prefix=f"{site.name}-", dir=site.parent))
        command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(staging)]
        done = subprocess.run([*command, requirement], capture_output=True, text=True, timeout=300)
        if (staging / module / "__init__.py").exists():
            with contextlib.suppress(OSError):  # another worker's rename came first
                staging.rename(site)
        shutil.rmtree(staging, ignore_errors=True)
        if not (site / module / "__init__.py").exists():
            message = f"could not install {requirement} into {site}: {done.stderr[-500:]}"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    return site
