"""Running the example bots and the repository's scripts from the tests: a file loaded as
a module, and a wait for what it does."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def load_module(name: str, path: Path) -> ModuleType:
    """``path`` imported as the module ``name`` (registered, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


async def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    """Wait until ``condition()`` holds, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
