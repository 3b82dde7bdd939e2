"""Benchmark TelegramSender against a plain httpx loop, on a local Bot-API-shaped server.

Run:  .venv/bin/python bench/bench_telegram.py [--sends 2000] [--concurrency 32]

1. Rate limiting off: N sends at concurrency C with TelegramSender, with a plain httpx
   loop on one AsyncClient whose pool is sized to C, and with httpx's default limits.
   Reports msg/s, the ratio to the sized httpx loop (goal >= 0.8x), client CPU per
   message and the TCP connections the server saw.
2. The default limiter: 300 sends to 300 private chats queued at once; the server's
   busiest 1 s window and the mean rate against Telegram's 30 msg/s.

The server runs in its own process (20 ms simulated latency), so its CPU does not compete
with the client for the GIL. Everything is bounded: under a minute in total.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection

import httpx

from notifyonce import Message
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer

TOKEN = "123456:BENCH-token"


def serve(conn: Connection, latency: float) -> None:
    """The server process: answers 'url', 'stats', 'reset' and 'stop' over a pipe."""
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
            else:
                conn.send(None)
                return


async def run_workers(
    count: int, concurrency: int, send_one: Callable[[int], Awaitable[None]]
) -> tuple[float, float]:
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


async def bench_sender(url: str, count: int, concurrency: int) -> tuple[float, float]:
    sender = TelegramSender(
        TOKEN,
        base_url=url,
        rate_limit=None,
        limits=httpx.Limits(
            max_connections=concurrency,
            max_keepalive_connections=concurrency,
            keepalive_expiry=60,
        ),
    )
    async with sender:
        await run_workers(50, concurrency, lambda n: sender.send(chat(n), Message("warm-up")))
        return await run_workers(
            count, concurrency, lambda n: sender.send(chat(n), Message("6 hours left"))
        )


async def bench_httpx(
    url: str, count: int, concurrency: int, limits: httpx.Limits
) -> tuple[float, float]:
    endpoint = f"{url}/bot{TOKEN}/sendMessage"
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def send_one(n: int) -> None:
            response = await client.post(
                endpoint, json={"chat_id": int(chat(n)), "text": "6 hours left"}
            )
            assert response.json()["ok"]

        await run_workers(50, concurrency, send_one)
        return await run_workers(count, concurrency, send_one)


async def bench_limiter(url: str, count: int) -> float:
    async with TelegramSender(TOKEN, base_url=url, rate_limit=RateLimit()) as sender:
        start = time.perf_counter()
        await asyncio.gather(*(sender.send(chat(n), Message("x")) for n in range(count)))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--limited-sends", type=int, default=300)
    args = parser.parse_args()

    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(child, args.latency))
    process.start()
    url = parent.recv()

    def stats() -> dict[str, object]:
        parent.send("stats")
        result: dict[str, object] = parent.recv()
        return result

    def reset() -> None:
        parent.send("reset")
        parent.recv()

    sized = httpx.Limits(
        max_connections=args.concurrency,
        max_keepalive_connections=args.concurrency,
        keepalive_expiry=60,
    )
    variants: list[tuple[str, Callable[[], Awaitable[tuple[float, float]]]]] = [
        ("TelegramSender", lambda: bench_sender(url, args.sends, args.concurrency)),
        ("httpx, pool sized", lambda: bench_httpx(url, args.sends, args.concurrency, sized)),
        (
            "httpx, default limits",
            lambda: bench_httpx(url, args.sends, args.concurrency, httpx.Limits()),
        ),
    ]
    print(
        f"{args.sends} sends, concurrency {args.concurrency}, server latency "
        f"{args.latency * 1000:.0f} ms, rate limiting off"
    )
    print(f"{'client':<24}{'msg/s':>8}{'CPU ms/msg':>12}{'TCP conns':>11}")
    rates: dict[str, float] = {}
    for name, run in variants:
        reset()
        wall, cpu = asyncio.run(run())
        seen = stats()
        rates[name] = args.sends / wall
        print(
            f"{name:<24}{rates[name]:>8.0f}{cpu * 1000 / args.sends:>12.2f}"
            f"{seen['connections']:>11}"
        )
    ratio = rates["TelegramSender"] / rates["httpx, pool sized"]
    print(f"ratio TelegramSender / httpx (pool sized): {ratio:.2f}x (goal >= 0.8x)")

    reset()
    wall = asyncio.run(bench_limiter(url, args.limited_sends))
    seen = stats()
    times = sorted(seen["times"])  # type: ignore[call-overload]
    mean = (len(times) - 1) / (times[-1] - times[0])
    print(
        f"\ndefault RateLimit, {args.limited_sends} sends to {args.limited_sends} private chats: "
        f"busiest 1 s window {seen['busiest']} (cap 30), mean {mean:.1f} msg/s, "
        f"{wall:.1f} s in total"
    )

    parent.send("stop")
    parent.recv()
    process.join(10)


if __name__ == "__main__":
    main()
