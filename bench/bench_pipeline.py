"""Benchmark the dispatch pipeline of send_many against 0.1.0's batch pipeline, in one run.

Run:  NOTIFYONCE_TEST_POSTGRES_URL=postgresql://root@127.0.0.1:5432/test \\
      .venv/bin/python bench/bench_pipeline.py [--notifications 5000] [--rounds 3]

0.1.0's Notifier is loaded from the git history (``git show 0.1.0's commit``) into this
process, so both pipelines run on the same ledger code, database and sender:

1. FakeSender (no latency), N notifications, PostgreSQL with asyncpg: notifications/s.
2. TelegramSender against the local Bot API server (20 ms latency, its own process),
   limiter off, 2,000 notifications: notifications/s.
3. The default limiter (30 msg/s), 300 notifications: claims per second and database
   round trips (statements executed) per message.
4. Memory: 100,000 notifications streamed through FakeSender with default options, the
   growth of traced Python memory (tracemalloc peak).

Each figure is the best of ``--rounds`` alternating rounds; the ratio new/old is printed.

With ``--observer`` it measures instead what observing a run costs, on the FakeSender side:
the pipeline without an observer, with a do-nothing ``Observer``, and with ``Telemetry``
on the OpenTelemetry SDK (metrics to an in-memory reader, spans made and dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench_telegram import serve, server_url  # the Bot API server process, shared with the others
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import notifyonce
from notifyonce import AsyncLedger, Message, Notification, Notifier, Observer, Outcome, Receipt
from notifyonce.telegram import TelegramSender
from notifyonce.testing import FakeSender

TOKEN = "123456:BENCH-token"
OLD_COMMIT = "eea3420"  # the last commit of 0.1.0's pipeline


# The private modules 0.1.0's Notifier imports that have moved since.
MOVED = {
    "_table": "_ledger.table",
    "_claim": "_ledger.claim",
    "_ledger": "_ledger.ledger",
    "_ledger_records": "_ledger.records",
    "_schedule": "_schedule.schedule",
    "_window": "_schedule.window",
}


def load_old_notifier() -> Any:
    """0.1.0's Notifier class, imported from the git history as notifyonce._notifier_010."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:src/notifyonce/_notifier.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for old, new in MOVED.items():  # its private imports, where those modules live now
        source = re.sub(rf"from \.{old} import", f"from .{new} import", source)
    path = Path(notifyonce.__file__).parent / "_notifier_010.py"
    path.write_text(source)
    try:
        spec = importlib.util.spec_from_file_location("notifyonce._notifier_010", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        path.unlink()
    return module


def pg_url() -> str:
    url = os.environ.get("NOTIFYONCE_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
    return make_url(url).set(drivername="postgresql+asyncpg").render_as_string(False)


async def with_ledger(engine: AsyncEngine, body: Callable[[AsyncLedger], Any]) -> Any:
    table = f"bench_{uuid.uuid4().hex[:8]}"
    ledger = AsyncLedger(engine, table_name=table)
    await ledger.create_schema()
    try:
        return await body(ledger)
    finally:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE {table}")


def work(count: int, old: Any, new: bool) -> list[Any]:
    kind = Notification if new else old.Notification
    return [kind(n, "2026-12", Message(f"reminder {n}"), str(2_000_000 + n)) for n in range(count)]


async def rate(
    engine: AsyncEngine, make_sender: Any, notifier_class: Any, items: list[Any]
) -> float:
    async def body(ledger: AsyncLedger) -> float:
        async with make_sender() as sender:
            notifier = notifier_class(ledger, sender)
            start = time.perf_counter()
            report = await notifier.send_many("bench", items)
            elapsed = time.perf_counter() - start
        assert len(items) == report.counts[Outcome.SENT], report
        return len(items) / elapsed

    return float(await with_ledger(engine, body))


class NullSender:
    """Delivers instantly and remembers nothing (FakeSender keeps every message)."""

    async def send(self, recipient: str, message: Message) -> Receipt:
        return Receipt(recipient, 1)


class _FakeContext:
    async def __aenter__(self) -> FakeSender:
        return FakeSender()

    async def __aexit__(self, *exc: object) -> None:
        return None


def statements(engine: AsyncEngine) -> list[int]:
    counter = [0]

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def count(*args: Any) -> None:
        counter[0] += 1

    return counter


async def limited(engine: AsyncEngine, server: str, notifier_class: Any, items: list[Any]) -> str:
    counter = statements(engine)

    async def body(ledger: AsyncLedger) -> str:
        async with TelegramSender(TOKEN, base_url=server) as sender:
            counter[0] = 0
            start = time.perf_counter()
            report = await notifier_class(ledger, sender).send_many("bench", items)
            elapsed = time.perf_counter() - start
        assert len(items) == report.counts[Outcome.SENT], report
        per = counter[0] / len(items)
        return f"{len(items) / elapsed:.1f} msg/s, {per:.2f} statements per message"

    return str(await with_ledger(engine, body))


async def memory(engine: AsyncEngine, notifier_class: Any, kind: Any, count: int) -> float:
    async def stream() -> AsyncIterator[Any]:
        for n in range(count):
            yield kind(n, "2026-12", Message("m"))

    async def body(ledger: AsyncLedger) -> float:
        notifier = notifier_class(ledger, NullSender(), concurrency=64)
        tracemalloc.start()
        try:
            await notifier.send_many("bench", stream())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return peak / 2**20

    return float(await with_ledger(engine, body))


def telemetry(*, traced: bool) -> Observer:
    """Telemetry on the OpenTelemetry SDK: what a production setup pays, minus exporting.

    ``traced=False``: metrics only (a no-op tracer provider).
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    from notifyonce.otel import Telemetry

    return Telemetry(
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        tracer_provider=TracerProvider() if traced else NoOpTracerProvider(),
    )


async def observed(args: argparse.Namespace) -> None:
    """The FakeSender side with and without an observer, in a rotating order (the first
    side of a round is favoured): the best rate of each, and the least CPU time of this
    process per notification (the database runs elsewhere, so this is the pipeline's own
    work, and moves less with the machine's load than the rate)."""
    engine = create_async_engine(pg_url(), pool_size=20)
    sides: list[tuple[str, Any]] = [
        ("no observer", Notifier),
        ("Observer()", functools.partial(Notifier, observer=Observer())),
        ("Telemetry, metrics", functools.partial(Notifier, observer=telemetry(traced=False))),
        ("Telemetry", functools.partial(Notifier, observer=telemetry(traced=True))),
    ]

    async def measure(notifier_class: Any, items: list[Any]) -> tuple[float, float]:
        async def body(ledger: AsyncLedger) -> tuple[float, float]:
            notifier = notifier_class(ledger, FakeSender())
            start, cpu = time.perf_counter(), time.process_time()
            report = await notifier.send_many("bench", items)
            elapsed, used = time.perf_counter() - start, time.process_time() - cpu
            assert len(items) == report.counts[Outcome.SENT], report
            return len(items) / elapsed, used / len(items) * 1e6

        figures: tuple[float, float] = await with_ledger(engine, body)
        return figures

    try:
        rates: dict[str, float] = {}
        cpus: dict[str, float] = {}
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            for label, cls in sides[shift:] + sides[:shift]:
                r, cpu = await measure(cls, work(args.notifications, None, True))
                rates[label] = max(rates.get(label, 0.0), r)
                cpus[label] = min(cpus.get(label, float("inf")), cpu)
        base, base_cpu = rates["no observer"], cpus["no observer"]
        for label, _ in sides:
            print(
                f"fake sender, {label:18}: {rates[label]:,.0f}/s, ratio {rates[label] / base:.2f}x;"
                f" CPU {cpus[label]:.0f} us per notification, ratio {cpus[label] / base_cpu:.2f}x"
            )
    finally:
        await engine.dispose()


async def main(args: argparse.Namespace, server: str) -> None:
    old = load_old_notifier()
    engine = create_async_engine(pg_url(), pool_size=20)
    try:
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for label, cls, new in (("new", Notifier, True), ("0.1.0", old.Notifier, False)):
                items = work(args.notifications, old, new)
                r = await rate(engine, _FakeContext, cls, items)
                best[f"fake {label}"] = max(best.get(f"fake {label}", 0.0), r)

                def bot() -> TelegramSender:
                    return TelegramSender(TOKEN, base_url=server, rate_limit=None)

                r = await rate(engine, bot, cls, work(2000, old, new))
                best[f"bot {label}"] = max(best.get(f"bot {label}", 0.0), r)
        for what in ("fake", "bot"):
            ratio = best[f"{what} new"] / best[f"{what} 0.1.0"]
            print(
                f"{what:4} sender: new {best[f'{what} new']:,.0f}/s, "
                f"0.1.0 {best[f'{what} 0.1.0']:,.0f}/s, ratio {ratio:.2f}x"
            )
        for label, cls, new in (("new", Notifier, True), ("0.1.0", old.Notifier, False)):
            figures = await limited(engine, server, cls, work(300, old, new))
            print(f"30 msg/s limiter, {label}: {figures}")
        for label, cls, kind in (
            ("new", Notifier, Notification),
            ("0.1.0", old.Notifier, old.Notification),
        ):
            peak = await memory(engine, cls, kind, args.stream)
            print(f"stream of {args.stream:,}, {label}: traced memory peak {peak:,.1f} MiB")
    finally:
        await engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--notifications", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stream", type=int, default=100_000)
    parser.add_argument("--observer", action="store_true", help="measure observing a run")
    arguments = parser.parse_args()
    if arguments.observer:
        asyncio.run(observed(arguments))
        sys.exit(0)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=serve, args=(child, 0.02), daemon=True)
    process.start()
    address = server_url(parent, process)
    try:
        asyncio.run(main(arguments, address))
    finally:
        parent.send("stop")
        process.join(10)
