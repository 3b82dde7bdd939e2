"""A benchmark's results as JSON, with the run's date and machine: what the plots are made of.

Each benchmark that takes ``--json PATH`` writes there the figures it printed, under
``benchmark`` (its name), ``date`` (UTC, when it finished), ``machine`` (this host) and
``command`` (how it was run). ``bench/plot_benchmarks.py`` reads these files from
``bench/results/`` and draws the plots of docs/benchmarks.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import notifyonce


def machine() -> str:
    """This host as a plot's caption says it: CPUs, their model, the load, the system."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = " " + " ".join(line.split(":", 1)[1].split()).replace("(R)", "")
                break
    except OSError:
        pass
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    system = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
    return f"{os.cpu_count()} CPUs{model}{load}; {system}"


def write(path: str, benchmark: str, figures: dict[str, Any]) -> None:
    """Write ``figures`` to ``path`` as the results of ``benchmark``, dated and placed."""
    record = {
        "benchmark": benchmark,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "notifyonce": notifyonce.__version__,
        "command": " ".join(["python", *sys.argv]),
        **figures,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {target}")
