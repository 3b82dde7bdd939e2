"""The Celery example: worker processes on RabbitMQ share one ledger and one rate store.

The test starts two Celery workers (two processes each) itself, enqueues every batch twice
(as a scheduler firing twice would), and stops the workers at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from notifyonce.testing import BotAPIServer

from ._databases import IN_CI

if not IN_CI:  # in CI a missing dev dependency is a failure, not a skip
    pytest.importorskip("celery")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "celery_workers"
BROKER = os.environ.get("NOTIFYONCE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")

pytestmark = [pytest.mark.slow, pytest.mark.storm, pytest.mark.sqlite]


def _broker_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def server() -> Iterator[BotAPIServer]:
    """The local Bot API server, enforcing 30 deliveries a second."""
    with BotAPIServer(bot_per_second=30) as bot_api:
        yield bot_api


def test_celery_workers_send_each_reminder_once_within_the_limit(
    server: BotAPIServer, tmp_path: Path
) -> None:
    """300 reminders enqueued twice over four worker processes: each delivered once, never
    more than 30 in a second, at most 1 % of requests answered 429."""
    if not _broker_answers():
        message = "RabbitMQ is not listening on 127.0.0.1:5672 (make test starts it)"
        if IN_CI:
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    queue = f"nfo_t_{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "CELERY_BROKER_URL": BROKER,
        "NOTIFYONCE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'bot.sqlite3'}",
        "NOTIFYONCE_BOT_TOKEN": "777001:celery-secret",
        "NOTIFYONCE_BOT_API": server.url,
        "NOTIFYONCE_CELERY_QUEUE": queue,
        "PYTHONPATH": str(EXAMPLE),
    }
    for _ in range(2):
        subprocess.run(
            [sys.executable, "tasks.py", "300"], cwd=EXAMPLE, env=env, check=True, timeout=60
        )
    celery = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-Q", queue]
    options = ["--concurrency", "2", "--without-gossip", "--without-mingle"]
    log = (tmp_path / "workers.log").open("wb")
    workers = [
        subprocess.Popen(
            [*celery, *options, "-n", f"w{n}-{queue}@%h", "--loglevel", "WARNING"],
            cwd=EXAMPLE,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for n in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(server.deliveries) < 300 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # the duplicate batches run after the first ones; let them finish
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        log.close()
        from kombu import Connection

        with Connection(BROKER) as connection:
            connection.default_channel.queue_delete(queue)

    assert [0, 0] == [worker.returncode for worker in workers], (
        tmp_path / "workers.log"
    ).read_text()
    texts = sorted(d.text for d in server.deliveries)
    assert sorted(f"Your trial ends soon ({n})" for n in range(1, 301)) == texts
    floods = sum(1 for r in server.requests if r.reply.status == 429)
    assert floods <= len(server.requests) // 100
    assert server.busiest_window(1.0) <= 30
