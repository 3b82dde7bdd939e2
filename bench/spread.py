"""Run a benchmark several times in turn and report each of its ratios as a median with
the range of the runs, so that "0.9x" says how far it moves from one run to the next.

    python bench/spread.py claims --runs 5
    python bench/spread.py telegram --runs 5 -- --sends 1000 --latency 0.02
    python bench/spread.py sender --runs 5 -- --sends 10000
    python bench/spread.py sender --runs 5 -- --sends 10000 --loop uvloop
    python bench/spread.py claims --runs 5 --json claims-spread.json

Each run is the benchmark's own script, started afresh with ``--json`` into a scratch
file; what follows ``--`` is handed to it. ``sender`` runs ``bench_send_cpu.py`` once per
side (a bare aiohttp loop, aiogram, the sender without a limiter and with the paid lane's),
in an order that turns by one each run, against one local Bot-API-shaped server at 0 ms
that this script starts. A ratio is worked out within each run (both sides measured in
that run, on the same machine at the same moment), then the runs' ratios are summarised:
a slow machine moves both sides, a noisy one moves the range.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import _results

HERE = Path(__file__).resolve().parent

# One run of a benchmark: (its arguments, a scratch folder, the run's number) -> its ratios.
Run = Callable[[Sequence[str], Path, int], dict[str, float]]


def _run_json(script: str, args: Sequence[str], out: Path) -> dict[str, Any]:
    """Run ``bench/<script>`` with ``args`` and ``--json out``; what it wrote there."""
    command = [sys.executable, str(HERE / script), *args, "--json", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    record: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return record


def _claims(record: dict[str, Any]) -> dict[str, float]:
    """AsyncLedger against raw asyncpg, per case, from one run's medians."""
    rate = {case["label"]: case["rate"] for case in record["cases"]}
    raw_bulk = max(rate["raw unnest, chunks of 500"], rate["raw unnest, chunks of 10,000"])
    return {
        "claim_slot, sequential / raw": rate["AsyncLedger.claim_slot, sequential"]
        / rate["raw, held connection, sequential"],
        "claim_slot, 16 workers / raw": rate["AsyncLedger.claim_slot, 16 workers"]
        / rate["raw, 16 held connections"],
        "claim_many / raw unnest (the faster chunking)": rate[
            "AsyncLedger.claim_many, default chunks"
        ]
        / raw_bulk,
    }


def _telegram(record: dict[str, Any]) -> dict[str, float]:
    """TelegramSender against aiogram at each server latency: rate and CPU per message."""
    ratios: dict[str, float] = {}
    for latency in record["latencies"]:
        sides = {side["name"]: side for side in latency["sides"]}
        ours, theirs = sides["TelegramSender"], sides["aiogram"]
        at = f"at {latency['latency_ms']} ms"
        ratios[f"msg/s / aiogram's, {at}"] = ours["msg_per_s"] / theirs["msg_per_s"]
        ratios[f"CPU per message / aiogram's, {at}"] = (
            ours["cpu_ms_per_msg"] / theirs["cpu_ms_per_msg"]
        )
    return ratios


def _script_run(
    script: str,
    ratios: Callable[[dict[str, Any]], dict[str, float]],
    args: Sequence[str],
    scratch: Path,
    number: int,
) -> dict[str, float]:
    """A run of a benchmark that measures every side itself: its ratios."""
    return ratios(_run_json(script, args, scratch / f"run{number}.json"))


#: ``sender``'s sides, as ``bench_send_cpu.py`` names them; the first is the floor, the
#: second the floor of a paced sender (the same loop at the paid lane's 1,000 a second).
SENDER_SIDES = ("aiohttp", "aiohttp-paced", "aiogram", "notifyonce-nolimit", "notifyonce")


def _sender(cpu: dict[str, float]) -> dict[str, float]:
    """Each side's CPU per message during its sends over the bare aiohttp loop's."""
    floor = cpu["aiohttp"]
    return {
        "aiogram / bare aiohttp loop": cpu["aiogram"] / floor,
        "TelegramSender, no limiter / bare aiohttp loop": cpu["notifyonce-nolimit"] / floor,
        "TelegramSender, paid lane's limiter / bare aiohttp loop": cpu["notifyonce"] / floor,
        "bare aiohttp loop paced at 1,000/s / bare aiohttp loop": cpu["aiohttp-paced"] / floor,
        "TelegramSender, paid lane's limiter / bare aiohttp loop paced alike": (
            cpu["notifyonce"] / cpu["aiohttp-paced"]
        ),
    }


def sides_in_turn(sides: Sequence[str], number: int) -> list[str]:
    """``sides`` turned by ``number - 1`` places: run after run, each side goes first once
    and no side always follows the same one."""
    shift = (number - 1) % len(sides)
    return [*sides[shift:], *sides[:shift]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def _bot_api_server() -> Iterator[list[str]]:
    """A local Bot-API-shaped server at 0 ms (its lines thrown away), until the block ends;
    the arguments that point a side at it."""
    port = _free_port()
    command = [sys.executable, "-m", "notifyonce", "serve-test-api", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the test server on port {port} did not start")
            time.sleep(0.1)
        yield ["--url", f"http://127.0.0.1:{port}"]
    finally:
        server.terminate()
        server.wait(10)


def _sender_run(args: Sequence[str], scratch: Path, number: int) -> dict[str, float]:
    """A run of ``bench_send_cpu.py`` for each side, in this run's turn: their ratios."""
    cpu: dict[str, float] = {}
    for side in sides_in_turn(SENDER_SIDES, number):
        out = scratch / f"run{number}-{side}.json"
        cpu[side] = _run_json("bench_send_cpu.py", [side, *args], out)["cpu_us_per_msg"]
    return _sender(cpu)


def _no_setup() -> AbstractContextManager[list[str]]:
    return contextlib.nullcontext([])


@dataclass(frozen=True)
class Benchmark:
    """How one run goes, and what the runs need around them (arguments it adds)."""

    run: Run
    setup: Callable[[], AbstractContextManager[list[str]]] = _no_setup


BENCHMARKS: dict[str, Benchmark] = {
    "claims": Benchmark(partial(_script_run, "bench_claims.py", _claims)),
    "telegram": Benchmark(partial(_script_run, "bench_telegram.py", _telegram)),
    "sender": Benchmark(_sender_run, _bot_api_server),
}


def summarise(runs: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Each ratio's median over the runs, its range and every run's value, in run order."""
    if not runs:
        raise ValueError("runs: no run to summarise")
    names = list(runs[0])
    for number, run in enumerate(runs[1:], start=2):
        if list(run) != names:
            raise ValueError(f"runs: run {number} gave ratios {list(run)}, run 1 gave {names}")
    return {
        name: {
            "median": statistics.median(run[name] for run in runs),
            "low": min(run[name] for run in runs),
            "high": max(run[name] for run in runs),
            "runs": [run[name] for run in runs],
        }
        for name in names
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", choices=sorted(BENCHMARKS))
    parser.add_argument("--runs", type=int, default=5, help="runs in turn (at least 2)")
    parser.add_argument("--json", metavar="PATH", help="also write the summary to PATH")
    parser.epilog = "Arguments after -- go to the benchmark's own script."
    given = list(sys.argv[1:] if argv is None else argv)
    split = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:split])
    args.rest = given[split + 1 :]
    if args.runs < 2:
        parser.error("--runs: a spread needs at least 2 runs")
    benchmark = BENCHMARKS[args.benchmark]
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as scratch, benchmark.setup() as added:
        for number in range(1, args.runs + 1):
            started = time.monotonic()
            runs.append(benchmark.run([*added, *args.rest], Path(scratch), number))
            took = time.monotonic() - started
            shown = ", ".join(f"{value:.2f}x" for value in runs[-1].values())
            print(f"run {number}/{args.runs} ({took:.0f} s): {shown}", flush=True)
    summary = summarise(runs)
    width = max(len(name) for name in summary)
    print(f"\n{args.benchmark}: {args.runs} runs in turn, median (range of runs)")
    for name, figures in summary.items():
        print(
            f"  {name:<{width}}  {figures['median']:.2f}x "
            f"({figures['low']:.2f}-{figures['high']:.2f})"
        )
    if args.json:
        _results.write(args.json, f"{args.benchmark}-spread", {"ratios": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
