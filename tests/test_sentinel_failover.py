"""The shared rate store's Redis fails over under four workers: the cap holds.

A private Redis master, a replica of it and one sentinel (tests/_failover.py). Four
worker processes (tests/_rate_worker.py) send through one bot's budget, each reaching
Redis through redis-py's Sentinel client (``Sentinel([...]).master_for(name)``: the
master the sentinel names now). Part of the way in, the master is SIGKILLed; the
sentinel sees it down after a second and promotes the replica; the workers wait (each
sender's ``outage_patience``), ask the sentinel again and go on against the new master.
The local Bot API server counts the deliveries as Telegram would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from notifyonce.testing import BotAPIServer

from ._failover import SentinelRedis

pytestmark = [pytest.mark.failover, pytest.mark.slow, pytest.mark.storm]

WORKER = Path(__file__).with_name("_rate_worker.py")
PER_WORKER = 150
CAP = 30


def test_four_workers_keep_the_cap_through_a_sentinel_failover_of_their_rate_store() -> None:
    """The master killed with 40 % sent: the sentinel promotes the replica, every message
    is delivered once, no worker fails, the server never sees more than the bot's cap in
    a second and answers 429 to at most 1 % of the requests (figures printed)."""
    with (
        SentinelRedis() as redis_group,
        BotAPIServer(bot_per_second=CAP, flood_retry_after=1) as api,
    ):
        start_at = time.time() + 4.0
        config = {
            "store": "redis-sentinel",
            "sentinels": [["127.0.0.1", redis_group.sentinel_port]],
            "service": SentinelRedis.SERVICE,
            "prefix": f"nfo_t_{uuid.uuid4().hex[:12]}:",
            "server": api.url,
            "count": PER_WORKER,
            "start_at": start_at,
            "budget": 120.0,
        }
        processes = [
            subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps({**config, "worker": worker})],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for worker in range(4)
        ]
        outputs: list[tuple[str, str]] = [("", "")] * 4

        def collect(n: int) -> None:
            outputs[n] = processes[n].communicate(timeout=240)

        readers = [threading.Thread(target=collect, args=(n,)) for n in range(4)]
        for reader in readers:
            reader.start()
        killed_at = -1
        try:
            deadline = time.monotonic() + 120
            while len(api.deliveries) < 0.4 * 4 * PER_WORKER and time.monotonic() < deadline:
                time.sleep(0.05)
            killed_at = len(api.deliveries)
            redis_group.kill_master()
            promoted = redis_group.wait_promoted()
        finally:
            for reader in readers:
                reader.join(260)
            for process in processes:
                if process.poll() is None:
                    process.kill()
        deliveries = api.deliveries
        busiest = api.busiest_window(1.0)
        requests = len(api.requests)
        floods = sum(1 for r in api.requests if r.reply.status == 429)

    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    errs = [err for _, err in outputs]
    print(
        f"sentinel failover at {killed_at} sent; busiest second {busiest}; "
        f"429s {floods} of {requests}"
    )
    print("\n".join(line for err in errs for line in err.splitlines() if "rate store" in line))
    assert redis_group.replica.port == promoted
    assert [[]] * 4 == [report["errors"] for report in reports]
    texts = sorted(d.text for d in deliveries)
    assert sorted(f"w{w}-m{n}" for w in range(4) for n in range(PER_WORKER)) == texts
    assert busiest <= CAP
    assert floods <= requests // 100
    for err in errs:
        assert err.count("is away") == err.count("is back") <= 1, err[-2000:]
        assert "Traceback" not in err, err[-2000:]
