"""The distribution's headless Chromium for the browser tests, driven by Playwright
(pointed at /usr/bin/chromium; Playwright's own browser download is never used). Locally a
missing Chromium skips with how to install it; under CI=true it fails."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ._databases import IN_CI
from ._optional import require

CHROMIUM = "/usr/bin/chromium"


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright ``Browser``), closed on the way out."""
    sync_api = require("playwright.sync_api", "dev")
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        message = f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
