"""Where a message's CPU goes: a cProfile of ``broadcast --paid``, cut into the path's parts.

Run:  .venv/bin/python bench/profile_breakdown.py --messages 20000 \\
          --run before before.prof 0.88 --run after after.prof 0.60 [--json PATH]

Each PROFILE is one ``bench_broadcast.py --profile`` output. Every function's own time (never a
caller's cumulative time, so nothing is counted twice) goes to one part, by its module
(and, for the sender's module, by its name); a C function (a socket's ``send``,
``json``'s encoder) goes to the part of the caller that spent most in it. The parts'
shares are then scaled to CPU_MS, the CPU per message the OS counted for the same
tree without the profiler: cProfile costs more per call than per line of work, so the
shares are estimates that favour code with many small calls. cProfile's clock is the wall
clock, so the time the event loop spends blocked in ``epoll`` waiting for the next
answer or timer is left out: it is idle, not CPU (and it grows as the rest shrinks).
"""

from __future__ import annotations

import argparse
import pstats
from collections import defaultdict
from typing import Any

# (part, a fragment of the file path, function names or None for every function); the
# first match wins.
PARTS: list[tuple[str, str, frozenset[str] | None]] = [
    ("sender: payload and JSON", "telegram/sender.py", frozenset({"prepare", "_payload"})),
    ("sender: response parsing and classification", "telegram/sender.py", frozenset({"_classify"})),
    ("limiter", "telegram/sender.py", frozenset({"turn", "_held_turn", "_keep_turn"})),
    ("sender: payload and JSON", "telegram/payload.py", None),
    ("sender: payload and JSON", "telegram/markup.py", None),
    ("sender: payload and JSON", "telegram/chat.py", None),
    ("sender: payload and JSON", "/json/", None),
    ("sender: response parsing and classification", "telegram/classify.py", None),
    ("sender: response parsing and classification", "_senders/status.py", None),
    ("sender: the rest (retry plan, receipt)", "telegram/sender.py", None),
    ("sender: the rest (retry plan, receipt)", "_senders/retry.py", None),
    ("sender: the rest (retry plan, receipt)", "_message.py", None),
    ("transport (httpx, aiohttp)", "_senders/http.py", None),
    ("transport (httpx, aiohttp)", "_senders/transport.py", None),
    ("transport (httpx, aiohttp)", "aiohttp_transport.py", None),
    ("transport (httpx, aiohttp)", "/httpx/", None),
    ("transport (httpx, aiohttp)", "/httpcore/", None),
    ("transport (httpx, aiohttp)", "/aiohttp/", None),
    ("transport (httpx, aiohttp)", "/yarl/", None),
    ("transport (httpx, aiohttp)", "/multidict/", None),
    ("transport (httpx, aiohttp)", "/aiosignal/", None),
    ("limiter", "_senders/rate/", None),
    ("limiter", "telegram/ratelimit.py", None),
    ("ledger: claims and marks", "/_ledger/", None),
    ("ledger: claims and marks", "/_drivers/", None),
    ("ledger: claims and marks", "/sqlalchemy/", None),
    ("ledger: claims and marks", "/asyncpg/", None),
    ("ledger: claims and marks", "/psycopg", None),
    ("ledger: claims and marks", "/_audience/", None),
    ("pipeline: tasks, queues, recorder", "/_dispatch.py", None),
    ("pipeline: tasks, queues, recorder", "/_notifier.py", None),
    ("pipeline: tasks, queues, recorder", "/_keys.py", None),
    ("pipeline: tasks, queues, recorder", "/_outcome.py", None),
    ("pipeline: tasks, queues, recorder", "/_once.py", None),
    ("pipeline: tasks, queues, recorder", "asyncio/queues.py", None),
    ("pipeline: tasks, queues, recorder", "asyncio/locks.py", None),
    ("progress and observer", "/_progress", None),
    ("progress and observer", "/_observe.py", None),
    ("progress and observer", "/_broadcast.py", None),
    ("progress and observer", "/_campaign.py", None),
    ("progress and observer", "/logging/", None),
    ("start-up: imports, the CLI, the recipients file", "<frozen", None),
    ("start-up: imports, the CLI, the recipients file", "/_cli/", None),
    ("start-up: imports, the CLI, the recipients file", "/pydantic", None),
]
EVENT_LOOP = "event loop and the rest (asyncio's scheduling, contextvars)"
SYSCALLS = "system calls: socket writes and reads"
BUILTIN = "~"


def part_of(file: str, name: str) -> str | None:
    for part, fragment, names in PARTS:
        if fragment in file and (names is None or name in names):
            return part
    return None


def breakdown(path: str) -> dict[str, float]:
    """Seconds of own time per part."""
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    seconds: dict[str, float] = defaultdict(float)
    for (file, _, name), (_, _, own, _, callers) in stats.items():
        part = part_of(file, name)
        if file == BUILTIN and "select.epoll" in name:
            continue  # blocked waiting: idle time on cProfile's wall clock
        if file == BUILTIN and "_socket.socket" in name:
            part = SYSCALLS  # HTTP and database alike: their writes and reads
        if part is None and file == BUILTIN and callers:
            # A C function: the part of the caller that spent most in it.
            caller = max(callers, key=lambda c: callers[c][3])
            part = part_of(caller[0], caller[2])
        if part is None and name in ("compile", "<built-in method marshal.loads>", "exec"):
            part = "start-up: imports, the CLI, the recipients file"
        seconds[part or EVENT_LOOP] += own
    return seconds


def results(runs: list[tuple[str, str, float]], messages: int) -> dict[str, Any]:
    """The figures ``--json`` writes: each run's parts in µs per message, in one order."""
    figures = []
    for label, path, cpu_ms in runs:
        seconds = breakdown(path)
        total = sum(seconds.values())
        parts = {part: own / total * cpu_ms * 1000 for part, own in seconds.items()}
        figures.append({"label": label, "cpu_us": cpu_ms * 1000, "parts": parts})
    order = sorted(
        {part for run in figures for part in run["parts"]},
        key=lambda part: -max(run["parts"].get(part, 0.0) for run in figures),
    )
    for run in figures:
        run["parts"] = [{"part": part, "us": run["parts"].get(part, 0.0)} for part in order]
    return {"settings": {"messages": messages}, "runs": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run",
        nargs=3,
        action="append",
        required=True,
        metavar=("LABEL", "PROFILE", "CPU_MS"),
        help="a run: its label, its profile, its CPU per message unprofiled (repeat)",
    )
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    runs = [(label, path, float(cpu)) for label, path, cpu in args.run]
    figures = results(runs, args.messages)
    labels = [run["label"] for run in figures["runs"]]
    print(f"| part | {' | '.join(labels)} |\n|---|{'---|' * len(labels)}")
    for index, row in enumerate(figures["runs"][0]["parts"]):
        cells = [f"{run['parts'][index]['us']:.0f} µs" for run in figures["runs"]]
        print(f"| {row['part']} | {' | '.join(cells)} |")
    totals = [f"{run['cpu_us']:.0f} µs" for run in figures["runs"]]
    print(f"| all | {' | '.join(totals)} |")
    if args.json:
        from _results import write

        write(args.json, "breakdown", figures)


if __name__ == "__main__":
    main()
