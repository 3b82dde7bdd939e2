"""Draw the quick start's schedule as docs/assets/trial-timeline.svg, with `notifyonce check`.

Usage (from the project root, with the dev venv's Python)::

    .venv/bin/python scripts/draw_timeline.py

It saves the quick start's ``reminders.py`` (the block of docs/quickstart.md that starts
with ``# file: reminders.py``) in a temporary directory and runs there what a user of the
quick start would::

    notifyonce check reminders:TRIAL --svg docs/assets/trial-timeline.svg

``tests/test_docs.py`` draws it the same way and fails while the picture in docs/ differs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "docs" / "quickstart.md"
PICTURE = ROOT / "docs" / "assets" / "trial-timeline.svg"
BLOCK = re.compile(r"^```python\n(# file: reminders\.py\n.*?)^```$", re.M | re.S)


def reminders_module() -> str:
    """The quick start's ``reminders.py``, as the page shows it."""
    found = BLOCK.findall(QUICKSTART.read_text(encoding="utf-8"))
    if len(found) != 1:
        raise SystemExit(f"{QUICKSTART}: expected one '# file: reminders.py' block")
    return str(found[0])


def draw() -> str:
    """The SVG that ``notifyonce check reminders:TRIAL --svg`` draws for the quick start."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "reminders.py").write_text(reminders_module(), encoding="utf-8")
        out = Path(folder) / "trial-timeline.svg"
        subprocess.run(  # noqa: S603 - this venv's python, our own arguments, no shell
            [sys.executable, "-m", "notifyonce", "check", "reminders:TRIAL", "--svg", str(out)],
            cwd=folder,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return out.read_text(encoding="utf-8")


def main() -> int:
    PICTURE.parent.mkdir(exist_ok=True)
    PICTURE.write_text(draw(), encoding="utf-8")
    print(f"wrote {PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
