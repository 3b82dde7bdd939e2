"""One side's sends in a process of their own, for the OS to count its CPU per message.

Run (a local Bot API server first, e.g. ``notifyonce serve-test-api --latency 0.02``):

    /usr/bin/time -f '%U %S' .venv/bin/python bench/bench_send_cpu.py SIDE \\
        --url http://127.0.0.1:PORT [--sends 10000] [--concurrency 64] [--loop uvloop]

SIDE is one of:

- ``notifyonce``: ``TelegramSender(allow_paid_broadcast=True)`` as ``broadcast --paid``
  makes it (its own client, the paid lane's limiter at 1,000 msg/s, each send inside its
  recipient's turn);
- ``notifyonce-nolimit``: the same sender with ``rate_limit=None``;
- ``aiogram``: aiogram 3's ``Bot.send_message`` on an ``AiohttpSession``;
- ``aiohttp``: a bare POST loop on one ``aiohttp.ClientSession`` (JSON encoded with
  ``json.dumps``, the answer's ``ok`` read): the floor any Python sender pays;
- ``aiohttp-paced``: the same loop paced as the paid lane is, 1,000 sends a second, each
  sleeping until the start booked for it (the next free millisecond): the floor of a
  sender that keeps a rate, which wakes its event loop for every send where the unpaced
  loop handles many answers a wake-up.

``--sends`` messages to as many chats, ``--concurrency`` workers taking the next chat from
one counter. The process's user + system CPU, divided by ``--sends``, is the side's CPU per
message (interpreter start-up and imports included: compare sides at the same
``--sends``). It also prints the OS's count for the sends alone (``getrusage``, after 50
warm-up sends), their wall time and the event loop they ran on: asyncio's, or uvloop's with
``--loop uvloop`` (the speed extra; uvloop's own import is then counted in the process's
CPU, not in the sends').
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable

TOKEN = "123456:BENCH-token"
TEXT = "The new tariff starts on Monday."
PAID_LANE_PER_SECOND = 1_000  # what RateLimit() allows a bot with paid broadcasts on


async def notifyonce_side(url: str, concurrency: int, limited: bool) -> tuple[Callable, Callable]:
    from notifyonce import Message
    from notifyonce.telegram import RateLimit, TelegramSender

    sender = TelegramSender(
        TOKEN,
        base_url=url,
        allow_paid_broadcast=True,
        rate_limit=RateLimit() if limited else None,
    )
    message = Message(TEXT)

    async def send(n: int) -> None:
        async with sender.turn(str(n)):
            await sender.send(str(n), message)

    return send, sender.aclose


async def aiogram_side(url: str, concurrency: int) -> tuple[Callable, Callable]:
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    session = AiohttpSession(api=TelegramAPIServer.from_base(url), limit=concurrency)
    bot = Bot(TOKEN, session=session)

    async def send(n: int) -> None:
        await bot.send_message(n, TEXT, allow_paid_broadcast=True)

    return send, bot.session.close


async def aiohttp_side(url: str, concurrency: int) -> tuple[Callable, Callable]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    endpoint = f"{url}/bot{TOKEN}/sendMessage"
    headers = {"content-type": "application/json"}

    async def send(n: int) -> None:
        body = json.dumps({"chat_id": n, "text": TEXT, "allow_paid_broadcast": True})
        async with session.post(endpoint, data=body, headers=headers) as answer:
            assert json.loads(await answer.read())["ok"]

    return send, session.close


async def paced_aiohttp_side(url: str, concurrency: int) -> tuple[Callable, Callable]:
    send_unpaced, close = await aiohttp_side(url, concurrency)
    loop = asyncio.get_running_loop()
    interval = 1 / PAID_LANE_PER_SECOND
    booked = [0.0]  # the start the last send was given

    async def send(n: int) -> None:
        now = loop.time()
        start = booked[0] = max(now, booked[0] + interval)
        if start > now:
            await asyncio.sleep(start - now)
        await send_unpaced(n)

    return send, close


async def main(side: str, url: str, sends: int, concurrency: int, out: str | None) -> None:
    make: dict[str, Callable[[], Awaitable[tuple[Callable, Callable]]]] = {
        "notifyonce": lambda: notifyonce_side(url, concurrency, True),
        "notifyonce-nolimit": lambda: notifyonce_side(url, concurrency, False),
        "aiogram": lambda: aiogram_side(url, concurrency),
        "aiohttp": lambda: aiohttp_side(url, concurrency),
        "aiohttp-paced": lambda: paced_aiohttp_side(url, concurrency),
    }
    send, close = await make[side]()
    numbers = iter(range(1_000_000, 1_000_000 + sends))

    async def worker() -> None:
        for n in numbers:
            await send(n)

    await asyncio.gather(*(send(n) for n in range(1, 51)))  # warm: connections, imports
    start, cpu = time.perf_counter(), _cpu()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, used = time.perf_counter() - start, _cpu() - cpu
    await close()
    loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]  # as it ran
    print(
        f"{side} on {loop}: {sends} sends in {wall:.2f} s ({sends / wall:,.0f} msg/s), "
        f"{used / sends * 1e6:.0f} us CPU per message during the sends"
    )
    if out:
        import _results

        figures = {
            "side": side,
            "loop": loop,
            "settings": {"sends": sends, "concurrency": concurrency},
            "msg_per_s": sends / wall,
            "cpu_us_per_msg": used / sends * 1e6,
        }
        _results.write(out, "send-cpu", figures)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the OS's user + system time
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "side", choices=["notifyonce", "notifyonce-nolimit", "aiogram", "aiohttp", "aiohttp-paced"]
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--sends", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the event loop the sends run on (default: asyncio's)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    work = main(args.side, args.url, args.sends, args.concurrency, args.json)
    if args.loop == "uvloop":
        # uvloop's own runner (a new uvloop loop for this run, no global policy), not
        # notifyonce._loop: the aiogram and aiohttp sides import nothing of notifyonce.
        import uvloop

        uvloop.run(work)
    else:
        asyncio.run(work)
