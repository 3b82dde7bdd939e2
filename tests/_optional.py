"""Optional dependencies of a test module: skipped locally when missing, a failure in CI."""

from __future__ import annotations

import importlib
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
