"""A worker host cut off from the database past its lease: its late marks are refused.

The test makes a network namespace of its own (``ip netns``), a veth pair with addresses
of its own (10.251.N.0/30), and a private PostgreSQL listening on the host's end and on
127.0.0.1; only those and loopback are ever a target. Worker A runs inside the namespace
(``ip netns exec``): it claims slots of two actions with a short lease, then loses the
network (the host's end of the veth set down: nothing passes, the connection stays
open) while it writes their outcomes, its statement stuck in TCP retransmits. Past the
lease, on the host, the slots of one action are swept (at-most-once: ``unknown``) and
those of the other taken over by worker B (``take_expired``) and marked sent. The
network heals; A's statement arrives late and every one of its marks is refused by the
fencing token: A is told (False for each), and the rows keep B's outcome and the
sweep's.

Skipped where the test may not make namespaces (not root, no CAP_NET_ADMIN, no ``ip``).
(``tc netem`` would drop packets on a link that stays up, but the kernel here may lack
it; a link that is down drops them as surely.)
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import notifyonce
from notifyonce import AsyncLedger, DeliveryMode, SlotStatus

from ._failover import _Node

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.postgres]

SOURCES = str(Path(notifyonce.__file__).resolve().parents[1])
LEASE = 2.0
HALF = 10  # slots per action
CYCLE = "2026-12"

WORKER_A = """
import asyncio, datetime as dt, json, sys
from sqlalchemy.ext.asyncio import create_async_engine
from notifyonce import AsyncLedger, SlotStatus

async def main(url, table, lease, half):
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    try:
        ledger = AsyncLedger(engine, table_name=table, lease=dt.timedelta(seconds=lease))
        keys = [(k, "2026-12") for k in range(half)]
        claims = await ledger.claim_many("swept", keys) + await ledger.claim_many("taken", keys)
        print(json.dumps({"claimed": len(claims)}), flush=True)
        sys.stdin.readline()  # the network is cut now: write the outcomes anyway
        landed = await asyncio.wait_for(
            ledger.mark_many([(c, SlotStatus.SENT, None) for c in claims]), 120
        )
        print(json.dumps({"landed": landed}), flush=True)
    finally:
        await engine.dispose()

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
"""


def _run(*command: str) -> None:
    subprocess.run(list(command), check=True, capture_output=True, timeout=30)


class Namespace:
    """A network namespace joined to this host by a veth pair on 10.251.N.0/30."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            pytest.skip("making a network namespace needs root and ip")
        tag = f"{os.getpid() % 10000}{random.randrange(100, 1000)}"
        self.name, self.host_if, self.inner_if = f"nfo{tag}", f"vh{tag}", f"vn{tag}"
        taken = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        net = random.choice([n for n in range(1, 250) if f"10.251.{n}." not in taken])
        self.host_ip, self.inner_ip = f"10.251.{net}.1", f"10.251.{net}.2"
        self.made = False

    def __enter__(self) -> Namespace:
        inner = ("ip", "netns", "exec", self.name, "ip")
        try:
            _run("ip", "netns", "add", self.name)
            self.made = True
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.inner_if)
            _run("ip", "link", "set", self.inner_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            _run(*inner, "addr", "add", f"{self.inner_ip}/30", "dev", self.inner_if)
            _run(*inner, "link", "set", self.inner_if, "up")
            _run(*inner, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as exc:
            self.close()
            pytest.skip(f"cannot make a network namespace here: {exc.stderr!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            self.made = False
        # The host's end goes with its peer; make sure of it.
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)

    def cut(self) -> None:
        """The host's end of the link goes down: nothing passes either way (the other end
        loses its carrier), while both ends keep their addresses and connections."""
        _run("ip", "link", "set", self.host_if, "down")

    def heal(self) -> None:
        """The link is up again: the connections' retransmissions get through."""
        subprocess.run(["ip", "link", "set", self.host_if, "up"], capture_output=True, timeout=30)


@pytest.fixture
def network() -> Iterator[tuple[Namespace, _Node]]:
    """A namespace and a private PostgreSQL reachable from it (and from 127.0.0.1)."""
    with Namespace() as namespace:
        node = _Node({"listen_addresses": f"'127.0.0.1,{namespace.host_ip}'"})
        try:
            with (node.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {namespace.inner_ip}/32 trust\n")
            node.start()
            yield namespace, node
        finally:
            node.close()


def test_a_host_cut_off_past_its_lease_has_every_late_mark_refused(
    network: tuple[Namespace, _Node],
) -> None:
    """Worker A (in its namespace) claims 20 slots, loses the network while marking them
    sent, and is heard again after its lease: 10 were swept unknown, 10 taken over and
    marked sent by worker B; A's late marks are all refused and A is told so."""
    namespace, node = network
    table = "partition"
    local = f"postgresql+asyncpg://postgres@127.0.0.1:{node.port}/postgres"
    asyncio.run(_create(local, table))
    remote = f"postgresql+asyncpg://postgres@{namespace.host_ip}:{node.port}/postgres"
    worker = subprocess.Popen(
        [
            *("ip", "netns", "exec", namespace.name, sys.executable, "-c", WORKER_A),
            *(remote, table, str(LEASE), str(HALF)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SOURCES},
    )
    healed = False
    try:
        assert worker.stdout is not None
        assert worker.stdin is not None
        assert {"claimed": 2 * HALF} == json.loads(worker.stdout.readline() or "{}")
        namespace.cut()
        worker.stdin.write("mark\n")
        worker.stdin.flush()
        taken_over, swept = asyncio.run(_after_the_lease(local, table))
        namespace.heal()
        healed = True
        out, err = worker.communicate(timeout=180)
    finally:
        if not healed:
            namespace.heal()
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    statuses = asyncio.run(_statuses(local, table))
    print(f"partition: A's marks {out.strip()}; B took over {taken_over}; swept {swept}")

    assert {"landed": [False] * (2 * HALF)} == json.loads(out.strip().splitlines()[-1]), err
    assert (HALF, HALF) == (taken_over, swept)
    assert Counter({"sent": HALF, "unknown": HALF}) == statuses


async def _create(url: str, table: str) -> None:
    engine = create_async_engine(url)
    try:
        await AsyncLedger(engine, table_name=table).create_schema()
    finally:
        await engine.dispose()


async def _after_the_lease(url: str, table: str) -> tuple[int, int]:
    """On the host, once A's leases have expired on the server's clock: sweep the slots
    of "swept" (at-most-once), take over and mark sent those of "taken" (worker B)."""
    engine = create_async_engine(url)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        t = ledger.table
        expired = 0
        deadline = time.monotonic() + 60
        while expired < 2 * HALF and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            async with engine.connect() as conn:
                query = sa.select(sa.func.count()).where(
                    t.c.status == "claimed", t.c.lease_until < sa.func.now()
                )
                expired = (await conn.execute(query)).scalar_one()
        swept = await ledger.sweep(DeliveryMode.AT_MOST_ONCE, actions=["swept"])
        keys = [(k, CYCLE) for k in range(HALF)]
        claims = await ledger.claim_many("taken", keys, take_expired=True)
        landed = await ledger.mark_many([(c, SlotStatus.SENT, None) for c in claims])
        assert [True] * len(claims) == landed
        return len(claims), len(swept.unknown)
    finally:
        await engine.dispose()


async def _statuses(url: str, table: str) -> Counter[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text(f"SELECT status FROM {table}"))
            return Counter(status for (status,) in rows)
    finally:
        await engine.dispose()
