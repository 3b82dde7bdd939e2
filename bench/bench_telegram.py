"""Benchmark TelegramSender against aiogram and plain httpx, on a local Bot-API-shaped server.

Run:  .venv/bin/python bench/bench_telegram.py [--sends 2000] [--concurrency 32] [--rounds 3]
          [--loop asyncio uvloop] [--json bench/results/telegram.json]

1. Rate limiting off, at 20 ms and at 0 ms of server latency: N sends to N chats at
   concurrency C, alternating in one process, best round of each side:

   - TelegramSender as constructed by default (its own client: httpx over aiohttp's pool);
   - TelegramSender given an ``httpx.AsyncClient`` (httpx's own transport, httpcore), pool
     sized to C: what a caller's client gets, and 0.1.0's default path;
   - TelegramSender over httpx-aiohttp's ``AiohttpTransport``, when that package is
     installed (a candidate the default transport was measured against);
   - aiogram 3: a ``Bot`` with an ``AiohttpSession`` pointed at the same server;
   - a plain httpx loop on one ``AsyncClient`` whose pool is sized to C.

   Reports msg/s, client CPU per message (``time.process_time``), the ratio to aiogram's
   msg/s and CPU, and the TCP connections the server saw. Goal: the default
   TelegramSender >= 0.9x aiogram's msg/s at 20 ms, CPU per message within 1.5x.
2. The default limiter: 300 sends to 300 private chats queued at once; the server's
   busiest 1 s window and the mean rate against Telegram's 30 msg/s.

Every round runs on asyncio's event loop, or on each loop of ``--loop`` in turn (uvloop:
the speed extra), side after side; each table names its loop, and its ratios are to
aiogram on the same loop.

``--json PATH`` also writes the figures there (``bench/plot_benchmarks.py`` draws them).

The server runs in its own process, so its CPU does not compete with the client for the
GIL. Everything is bounded: a few minutes in total.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import multiprocessing as mp
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import httpx

from notifyonce import Message
from notifyonce._loop import LoopChoice, choose_loop, run
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "123456:BENCH-token"

SendOne = Callable[[int], Awaitable[None]]


def serve(conn: Connection, latency: float = 0.0) -> None:
    """The server process (answering after ``latency`` seconds until told otherwise):
    answers 'url', 'stats', 'reset', ('latency', s) and 'stop'."""
    with BotAPIServer(latency=latency) as server:
        conn.send(server.url)
        while True:
            command = conn.recv()
            if command == "stats":
                conn.send(
                    {
                        "connections": server.connections_opened,
                        "deliveries": len(server.deliveries),
                        "busiest": server.busiest_window(1.0),
                        "times": [d.at for d in server.deliveries],
                    }
                )
            elif command == "reset":
                server.reset()
                server.connections_opened = 0
                conn.send(None)
            elif isinstance(command, tuple):
                server.latency = command[1]
                conn.send(None)
            else:
                conn.send(None)
                return


def server_url(parent: Connection, process: BaseProcess) -> str:
    """The server's URL, once its process has started (an error, not a hang, if it died)."""
    while not parent.poll(0.5):
        if not process.is_alive():
            raise RuntimeError(f"the Bot API server process died (exit code {process.exitcode})")
    url: str = parent.recv()
    return url


async def run_workers(count: int, concurrency: int, send_one: SendOne) -> tuple[float, float]:
    """Send ``count`` messages with ``concurrency`` workers; (wall seconds, CPU seconds)."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            await send_one(queue.get_nowait())

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - wall, time.process_time() - cpu


def chat(n: int) -> str:
    return str(1_000_000 + n)


def sized(concurrency: int) -> httpx.Limits:
    return httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=60
    )


@contextlib.asynccontextmanager
async def sender_side(
    url: str, concurrency: int, client: httpx.AsyncClient | None = None
) -> AsyncIterator[SendOne]:
    options = {} if client is None else {"client": client}
    async with TelegramSender(TOKEN, base_url=url, rate_limit=None, **options) as sender:  # type: ignore[arg-type]

        async def send_one(n: int) -> None:
            await sender.send(chat(n), Message("6 hours left"))

        yield send_one
    if client is not None:
        await client.aclose()


@contextlib.asynccontextmanager
async def httpx_client_side(url: str, concurrency: int) -> AsyncIterator[SendOne]:
    client = httpx.AsyncClient(limits=sized(concurrency))
    async with sender_side(url, concurrency, client) as send_one:
        yield send_one


@contextlib.asynccontextmanager
async def httpx_aiohttp_side(url: str, concurrency: int) -> AsyncIterator[SendOne]:
    import aiohttp
    from httpx_aiohttp import AiohttpTransport

    transport = AiohttpTransport(
        limits=sized(concurrency),
        client=lambda: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)),
    )
    async with sender_side(url, concurrency, httpx.AsyncClient(transport=transport)) as send_one:
        yield send_one


@contextlib.asynccontextmanager
async def aiogram_side(url: str, concurrency: int) -> AsyncIterator[SendOne]:
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    session = AiohttpSession(api=TelegramAPIServer.from_base(url), limit=concurrency)
    bot = Bot(TOKEN, session=session)
    try:

        async def send_one(n: int) -> None:
            await bot.send_message(int(chat(n)), "6 hours left")

        yield send_one
    finally:
        await bot.session.close()


@contextlib.asynccontextmanager
async def httpx_side(url: str, concurrency: int) -> AsyncIterator[SendOne]:
    endpoint = f"{url}/bot{TOKEN}/sendMessage"
    async with httpx.AsyncClient(limits=sized(concurrency), timeout=30) as client:

        async def send_one(n: int) -> None:
            response = await client.post(
                endpoint, json={"chat_id": int(chat(n)), "text": "6 hours left"}
            )
            assert response.json()["ok"]

        yield send_one


Side = Callable[[str, int], contextlib.AbstractAsyncContextManager[SendOne]]


async def measure(side: Side, url: str, count: int, concurrency: int) -> tuple[float, float]:
    """One round of one side: a warm-up, then ``count`` timed sends."""
    async with side(url, concurrency) as send_one:
        await run_workers(50, concurrency, send_one)
        return await run_workers(count, concurrency, send_one)


async def bench_limiter(url: str, count: int) -> float:
    async with TelegramSender(TOKEN, base_url=url, rate_limit=RateLimit()) as sender:
        start = time.perf_counter()
        await asyncio.gather(*(sender.send(chat(n), Message("x")) for n in range(count)))
        return time.perf_counter() - start


def sides() -> list[tuple[str, Side]]:
    found: list[tuple[str, Side]] = [
        ("TelegramSender", lambda url, c: sender_side(url, c)),
        ("TelegramSender, httpx client", httpx_client_side),
    ]
    try:
        import httpx_aiohttp  # noqa: F401
    except ImportError:
        pass
    else:
        found.append(("TelegramSender, httpx-aiohttp", httpx_aiohttp_side))
    return [*found, ("aiogram", aiogram_side), ("httpx, pool sized", httpx_side)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.020, 0.0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limited-sends", type=int, default=300)
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    parser.add_argument(
        "--loop",
        nargs="+",
        choices=["asyncio", "uvloop"],
        default=["asyncio"],
        help="the event loops to measure on, in turn (default: asyncio)",
    )
    args = parser.parse_args()
    loops: dict[str, LoopChoice] = {}
    for name in args.loop:
        loops[name] = choose_loop(use_uvloop=name == "uvloop", environ={})
        if loops[name].name != name:
            parser.error(f"--loop {name}: {loops[name].why}")
    runs: list[dict[str, object]] = []

    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(child,))
    process.start()
    url = server_url(parent, process)

    def ask(command: object) -> dict[str, object]:
        parent.send(command)
        result: dict[str, object] = parent.recv()
        return result

    for latency in args.latency:
        ask(("latency", latency))
        bests: dict[str, dict[str, tuple[float, float, object]]] = {name: {} for name in loops}
        for _ in range(args.rounds):
            for (name, side), loop in itertools.product(sides(), loops):  # every side in turn
                ask("reset")
                work = measure(side, url, args.sends, args.concurrency)
                wall, cpu = run(work, loops[loop])
                seen = ask("stats")
                assert seen["deliveries"] == args.sends + 50, (name, seen["deliveries"])
                rate, cpu_ms = args.sends / wall, cpu * 1000 / args.sends
                best = bests[loop]
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu_ms, seen["connections"])
        for loop, best in bests.items():
            print(
                f"\n{args.sends} sends to {args.sends} chats, concurrency {args.concurrency}, "
                f"server latency {latency * 1000:.0f} ms, rate limiting off, "
                f"best of {args.rounds} alternating rounds, on {loop}"
            )
            print(
                f"{'client':<32}{'msg/s':>8}{'x aiogram':>11}{'CPU ms/msg':>12}"
                f"{'x aiogram':>11}{'TCP conns':>11}"
            )
            rate_a, cpu_a, _ = best["aiogram"]
            runs.append(
                {
                    "latency_ms": latency * 1000,
                    "loop": loop,
                    "sides": [
                        {"name": n, "msg_per_s": r, "cpu_ms_per_msg": c, "connections": k}
                        for n, (r, c, k) in best.items()
                    ],
                }
            )
            for name, (rate, cpu_ms, conns) in best.items():
                print(
                    f"{name:<32}{rate:>8.0f}{rate / rate_a:>10.2f}x{cpu_ms:>12.2f}"
                    f"{cpu_ms / cpu_a:>10.2f}x{conns:>11}"
                )

    ask(("latency", 0.020))
    ask("reset")
    first = loops[args.loop[0]]
    wall = run(bench_limiter(url, args.limited_sends), first)
    seen = ask("stats")
    times = sorted(seen["times"])  # type: ignore[call-overload]
    mean = (len(times) - 1) / (times[-1] - times[0])
    print(
        f"\ndefault RateLimit, {args.limited_sends} sends to {args.limited_sends} private chats: "
        f"busiest 1 s window {seen['busiest']} (cap 30), mean {mean:.1f} msg/s, "
        f"{wall:.1f} s in total, on {first.name}"
    )

    parent.send("stop")
    parent.recv()
    process.join(10)
    if args.json:
        from _results import write

        write(args.json, "telegram", results(args, runs, seen["busiest"], mean))


def results(
    args: argparse.Namespace, runs: list[dict[str, object]], busiest: object, mean: float
) -> dict[str, object]:
    """What ``--json`` writes: the best round of each side at each latency, the limiter's."""
    return {
        "settings": {"sends": args.sends, "concurrency": args.concurrency, "rounds": args.rounds},
        "latencies": runs,
        "limiter": {"sends": args.limited_sends, "busiest_1s": busiest, "mean": mean},
    }


if __name__ == "__main__":
    main()
