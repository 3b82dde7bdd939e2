"""Benchmark `notifyonce broadcast --paid`: the command as a user runs it, on PostgreSQL.

Run:  eval "$(scripts/services.sh)" && .venv/bin/python bench/bench_broadcast.py \\
          [--chats 10000] [--latency 0.02] [--concurrency 64] [--rounds 2] [--rate 1000 0] \\
          [--loop asyncio uvloop]

Each round runs the command once per ``--rate`` (1000: ``--paid``'s own limit; 0: no
limiter, the same pipeline without pacing) in a child process, to ``--chats`` new chats
of a recipients file, against the local Bot API server of the tests in a process of its
own answering after ``--latency`` seconds, with the ledger on PostgreSQL (a table of its
own per run). It prints, per run: messages per second over the whole command (start-up
and summary included), over the sends alone (first to last delivery the server saw),
the command's CPU time per message, and the server's busiest second (which must stay at
or under the limit), and the event loop the command ran on.

``--loop asyncio uvloop`` runs each tree and rate once per event loop in every round, in
turn (``NOTIFYONCE_UVLOOP=0`` or ``1`` in the command's environment), and prints each
one's median and the ratio of uvloop's CPU per message to asyncio's. Without it the
command runs on the loop it chooses itself (uvloop when the speed extra is installed).

The physical limit is the limit itself: Telegram's paid lane allows 1,000 msg/s, and
the local server answers every request after ``--latency``; ``--rate 0`` shows how far
the pipeline is from it when nothing paces it.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_telegram import serve, server_url
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

TOKEN = "123456:BENCH-token"
ROOT = Path(__file__).resolve().parent.parent


def pg_url() -> str:
    url = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
    return make_url(url).render_as_string(False)


def rss_mb(pid: int) -> tuple[float, float] | None:
    """Process ``pid``'s resident memory and its peak so far, in MB; None once it is gone.

    The peak is the kernel's high-water mark of the process's own memory (``VmHWM``).
    ``wait4``'s ``ru_maxrss`` is not: a child started by vfork, as subprocess starts it,
    inherits the parent's high-water mark at exec.
    """
    found: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1]) / 1024
    except OSError:
        return None
    if len(found) < 2:
        return None
    return found["VmRSS"], found["VmHWM"]


def run_command(
    command: list[str], env: dict[str, str]
) -> tuple[int, str, str, float, float, list[float]]:
    """Run ``command``: (exit code, stdout, stderr, wall seconds, CPU seconds, resident
    memory sampled every second in MB with its peak last). The CPU is the OS's user +
    system time of this process alone (``wait4``), not of every child so far."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        samples: list[float] = []
        peak = sampled = 0.0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            # Memory once a second; the exit within 50 ms, so that the wall time is not
            # rounded up to the next sample.
            if time.perf_counter() - sampled >= 1.0:
                sampled = time.perf_counter()
                memory = rss_mb(child.pid)
                if memory is not None:
                    samples.append(memory[0])
                    peak = max(peak, memory[1])
            time.sleep(0.05)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        samples.append(peak)  # the peak up to the last second, which a sample may miss
        return (
            child.returncode,
            out.read(),
            err.read(),
            wall,
            usage.ru_utime + usage.ru_stime,
            samples,
        )


def run_once(
    url: str,
    ask: object,
    chats: int,
    concurrency: int,
    rate: float,
    workdir: Path,
    profile: Path | None = None,
    src: Path = ROOT / "src",
    loop: str | None = None,
) -> dict[str, Any]:
    """One command to ``chats`` new chats, on ``loop`` (None: the one the command
    chooses); its figures, with the loop it ran on."""
    recipients = workdir / "recipients.txt"
    recipients.write_text("".join(f"{1_000_000 + n}\n" for n in range(chats)))
    message = workdir / "text.txt"
    message.write_text("The new tariff starts on Monday.")
    table = f"bench_bc_{uuid.uuid4().hex[:8]}"
    # With --profile, the command runs under cProfile (its CPU figure then includes the
    # profiler's own cost; read the profile for shares, not the rate).
    profiled = [] if profile is None else ["-m", "cProfile", "-o", str(profile)]
    command = [
        sys.executable,
        *profiled,
        "-m",
        "notifyonce",
        "broadcast",
        "--database-url",
        pg_url(),
        "--table",
        table,
        "--recipients-file",
        str(recipients),
        "--text-file",
        str(message),
        "--action",
        "news",
        "--campaign",
        table,
        "--base-url",
        url,
        "--paid",
        "--concurrency",
        str(concurrency),
        "--rate",
        str(rate),
        "--progress-every",
        "3600",
    ]
    # A tree with the loop's chooser says which loop it runs on; one without it always
    # runs on asyncio's (and knows no --verbose).
    if (src / "notifyonce" / "_loop.py").is_file():
        command.append("--verbose")
    # The tree's src first; what PYTHONPATH the bench was given (a site with uvloop) after.
    path = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "NOTIFYONCE_BOT_TOKEN": TOKEN, "PYTHONPATH": path}
    if loop is not None:
        env["NOTIFYONCE_UVLOOP"] = "1" if loop == "uvloop" else "0"
    assert callable(ask)
    ask("reset")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "notifyonce",
            "migrate",
            "--database-url",
            pg_url(),
            "--table",
            table,
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    code, stdout, stderr, wall, used, memory = run_command(command, env)
    if code != 0:
        raise RuntimeError(f"broadcast exited {code}: {stderr[-2000:]}")
    said = re.search(r"^event loop: (\w+)", stderr, re.MULTILINE)
    ran = said.group(1) if said else "asyncio"
    if loop is not None and ran != loop:
        why = said.group(0) if said else f"{src} has no loop chooser"
        raise RuntimeError(f"asked for {loop}, the command ran on {ran} ({why})")
    seen = ask("stats")
    assert isinstance(seen, dict)
    assert seen["deliveries"] == chats, (seen["deliveries"], stdout[-500:])
    times = sorted(seen["times"])
    sending = times[-1] - times[0]
    engine = create_engine(make_url(pg_url()).set(drivername="postgresql+psycopg"))
    with engine.begin() as conn:
        names = conn.execute(
            text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"), {"p": f"{table}%"}
        ).scalars()
        for name in list(names):
            conn.execute(text(f'DROP TABLE "{name}"'))
    engine.dispose()
    return {
        "overall": chats / wall,
        "sending": (chats - 1) / sending if sending > 0 else float("inf"),
        "cpu_ms": used / chats * 1000,
        "busiest": float(seen["busiest"]),
        "wall": wall,
        "peak_mb": memory[-1],
        # Resident memory at a tenth, half and nine tenths of the run: flat, or growing.
        "rss_mb": [memory[int((len(memory) - 1) * q)] for q in (0.1, 0.5, 0.9)],
        "loop": ran,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, nargs="+", default=[1000.0, 0.0])
    parser.add_argument(
        "--profile",
        type=Path,
        help="write each run's cProfile output to this folder (rate-<rate>-<round>.prof)",
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="run the command from this source tree (repeat to compare trees in turn, "
        "e.g. before=/tmp/old/src after=src); by default this checkout's src",
    )
    parser.add_argument(
        "--loop",
        nargs="+",
        choices=["asyncio", "uvloop"],
        default=[None],
        help="run each tree and rate on these event loops in turn, e.g. --loop asyncio "
        "uvloop (default: the loop the command chooses, uvloop when installed)",
    )
    args = parser.parse_args()
    if "uvloop" in args.loop and importlib.util.find_spec("uvloop") is None:
        parser.error("--loop uvloop: uvloop is not installed (pip install 'notifyonce[speed]')")
    trees = [tuple(item.split("=", 1)) for item in args.src] or [("", str(ROOT / "src"))]
    cpu: dict[tuple[str, str], list[float]] = {}
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(child, args.latency))
    process.start()
    url = server_url(parent, process)

    def ask(command: object) -> object:
        parent.send(command)
        return parent.recv()

    try:
        with tempfile.TemporaryDirectory() as tmp:
            for round_ in range(args.rounds):
                for (name, src), rate, loop in itertools.product(trees, args.rate, args.loop):
                    on = "" if loop is None else f"{loop}-"
                    profile = (
                        None
                        if args.profile is None
                        else args.profile / f"{name}{on}rate-{rate:g}-{round_ + 1}.prof"
                    )
                    f = run_once(
                        url,
                        ask,
                        args.chats,
                        args.concurrency,
                        rate,
                        Path(tmp),
                        profile,
                        Path(src),
                        loop,
                    )
                    key = (f"{name} --rate {rate:g}".strip(), f["loop"])
                    cpu.setdefault(key, []).append(f["cpu_ms"])
                    print(
                        f"round {round_ + 1}, {key[0]} on {f['loop']}: "
                        f"{f['overall']:,.0f} msg/s overall, "
                        f"{f['sending']:,.0f} msg/s sending, {f['cpu_ms']:.2f} ms CPU per "
                        f"message, busiest second {f['busiest']:.0f}, {f['wall']:.0f} s in "
                        f"all, peak memory {f['peak_mb']:.0f} MB (at a tenth, half, nine "
                        f"tenths of the run: {', '.join(f'{m:.0f}' for m in f['rss_mb'])})",
                        flush=True,
                    )
        medians = {key: statistics.median(figures) for key, figures in cpu.items()}
        for (label, loop), figures in cpu.items():
            print(
                f"{label} on {loop}: median {medians[label, loop]:.3f} ms CPU per message "
                f"(range {min(figures):.3f}-{max(figures):.3f}, {len(figures)} runs)"
            )
        for label, loop in medians:
            if loop == "uvloop" and (label, "asyncio") in medians:
                ratio = medians[label, "uvloop"] / medians[label, "asyncio"]
                print(f"{label}: uvloop / asyncio CPU per message {ratio:.2f}x (medians)")
    finally:
        ask("stop")
        process.join(10)


if __name__ == "__main__":
    main()
