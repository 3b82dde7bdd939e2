"""Where the paid lane's sends bunch: as they leave, or at the server? By pool size.

Run:  .venv/bin/python bench/bench_pool_bunching.py [--connections 32 64] [--rounds 2] \\
          [--sends 15000] [--concurrency 64] [--latency 0.02]

``TelegramSender(allow_paid_broadcast=True)`` (the paid lane's limiter, 1,000 msg/s) sends
``--sends`` messages to as many chats, ``--concurrency`` workers each taking its chat's
turn and sending inside it, as a ``Notifier`` does, against the tests' Bot API server in a
process of its own answering after ``--latency`` seconds. For each ``--connections`` (the
sender's pool) in turn, every round prints the busiest second twice: by the moment each
send passed its turn's check (right before its request is made: the client's own
departure) and by the server's stamp of each delivery (what the server counted); where in
the run that second began, and the connections the server saw opened (more than the pool
means connections were dropped and opened again).

A busiest second over 1,000 by the server's stamps, under it by the departures, puts the
bunching after the send left: in the request's way to the server, or in the server's
reading of it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from collections.abc import Awaitable, Callable, Iterable

import httpx
from bench_telegram import serve, server_url

from notifyonce import Message
from notifyonce._senders.rate.stores import Grant
from notifyonce.telegram import RateLimit, TelegramSender


def busiest(times: Iterable[float], seconds: float = 1.0) -> tuple[int, float]:
    """The most events in any window ``[t, t + seconds)``, and its ``t`` from the first."""
    ordered = sorted(times)
    best, start, at = 0, 0, 0.0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= seconds:
            start += 1
        if end - start + 1 > best:
            best, at = end - start + 1, ordered[start] - ordered[0]
    return best, at


async def one_run(url: str, connections: int, sends: int, concurrency: int) -> list[float]:
    """Send; the moments the sends passed their turn's check (``time.monotonic``)."""
    passed: list[float] = []
    check: Callable[[TelegramSender, Grant], Awaitable[bool]] = TelegramSender._keep_turn

    async def noted(self: TelegramSender, grant: Grant) -> bool:
        ok = await check(self, grant)
        if ok:
            passed.append(time.monotonic())
        return ok

    TelegramSender._keep_turn = noted  # type: ignore[method-assign]
    try:
        limits = httpx.Limits(
            max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=60
        )
        sender = TelegramSender(
            "123456:BENCH-token",
            base_url=url,
            allow_paid_broadcast=True,
            rate_limit=RateLimit(),
            limits=limits,
        )
        message = Message("The new tariff starts on Monday.")
        chats = iter(range(1_000_000, 1_000_000 + sends))

        async def worker() -> None:
            for chat in chats:
                async with sender.turn(str(chat)):
                    await sender.send(str(chat), message)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await sender.aclose()
    finally:
        TelegramSender._keep_turn = check  # type: ignore[method-assign]
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sends", type=int, default=15_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args()
    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(child, args.latency))
    process.start()
    try:
        url = server_url(parent, process)
        for round_ in range(1, args.rounds + 1):
            for connections in args.connections:
                parent.send("reset")
                parent.recv()
                passed = asyncio.run(one_run(url, connections, args.sends, args.concurrency))
                parent.send("stats")
                seen = parent.recv()
                left, left_at = busiest(passed)
                stamped, stamped_at = busiest(seen["times"])
                print(
                    f"round {round_}, {connections} connections: busiest second {left} as the "
                    f"sends left (at +{left_at:.1f} s), {stamped} by the server's stamps (at "
                    f"+{stamped_at:.1f} s); {seen['deliveries']} delivered, "
                    f"{seen['connections']} connections opened"
                )
    finally:
        parent.send("stop")
        parent.recv()
        process.join()


if __name__ == "__main__":
    main()
