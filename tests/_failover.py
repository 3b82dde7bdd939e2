"""A private PostgreSQL primary with a streaming standby, for the failover tests.

A failover is not a restart: the primary dies at once (SIGKILL, every backend with it,
as a host that loses its power), and a standby made from it (``pg_basebackup``) is
promoted (``pg_ctl promote``). What the new primary has is what reached the standby
before the old one died: everything, when the standby is synchronous and the commit
waited for it; the last commits may be missing when it is asynchronous.

`ReplicatedPostgres` makes both on free ports in temporary directories (never the shared
server), gives the URLs a client uses (one naming both hosts, so that it finds whichever
is the primary now), and removes both at the end whatever happens. The Redis
counterpart, `SentinelRedis`, is a private master, a replica and one sentinel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests._private_servers import PrivatePostgres, PrivateRedis, _answers, _missing, free_port

__all__ = ["ReplicatedPostgres", "ReplicationLink", "SentinelRedis", "kill_tree"]

_TIMEOUT = 60.0
#: The standby's name, as ``synchronous_standby_names`` names it.
STANDBY_NAME = "standby1"


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its children at once, as a host losing its power: no backend
    outlives its postmaster to answer one more statement."""
    victims = [pid, *_children(pid)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


class ReplicationLink:
    """The network between the standby and the primary: a TCP relay on 127.0.0.1.

    `hold` keeps what the primary sends (its WAL) from reaching the standby, as a slow or
    congested link does, while the standby's replies still go through; `cut` closes every
    connection and throws away what was held, as the primary's death does to what was
    still on the wire. Runs its own event loop in a thread.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.flowing = asyncio.Event()  # cleared while the link holds
        self.flowing.set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> ReplicationLink:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(_TIMEOUT)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(_TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_TIMEOUT)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._close_all()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()  # no FIN after the data: what was held is gone
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_w}

        async def pipe(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, holds: bool
        ) -> None:
            with contextlib.suppress(Exception):
                while data := await source.read(65536):
                    if holds:
                        await self.flowing.wait()  # kept while it holds: the standby lags
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, up_w, False), pipe(up_r, writer, True))

    def hold(self) -> None:
        """From now on the standby receives nothing more from the primary."""
        self._loop.call_soon_threadsafe(self.flowing.clear)

    def cut(self) -> None:
        """Close every connection; what was held never reaches the standby."""
        asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(_TIMEOUT)

    async def _cut(self) -> None:
        self._close_all()
        self.flowing.set()


class _Node(PrivatePostgres):
    """One server of the pair: `PrivatePostgres` with settings of its own."""

    name = "pg-node"

    def __init__(self, settings: dict[str, str], *, standby_of: _Node | None = None) -> None:
        self.settings = settings
        if standby_of is None:
            super().__init__()
            return
        # A standby: the primary's data copied while it runs, not a fresh initdb.
        from tests._private_servers import _postgres_bin, _Server

        found = _postgres_bin()
        if found is None:
            _missing("PostgreSQL (initdb, pg_ctl, pg_basebackup)")
        self.bin = found  # type: ignore[assignment]
        _Server.__init__(self)
        self.data = self.dir / "data"
        self.user = self._postgres_user()
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(standby_of.port),
            "-U",
            "postgres",
            "-D",
            str(self.data),
            "-X",
            "stream",
            "-R",  # standby.signal, and primary_conninfo in postgresql.auto.conf
            "--no-sync",
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        for name, value in self.settings.items():
            options += f" -c {name}={value}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self._wait(up=True)

    def pid(self) -> int | None:
        """The postmaster's process id, or None when it is not running."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: no shutdown, no last WAL sent."""
        pid = self.pid()
        if pid is not None:
            kill_tree(pid)
        self._wait(up=False)
        with contextlib.suppress(OSError):
            (self.data / "postmaster.pid").unlink()

    def stop(self) -> None:
        if self.pid() is None or not _answers(self.port):
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self._wait(up=False)

    def psql(self, sql: str) -> str:
        """Run ``sql`` with psql on this server; its output, unaligned, tuples only."""
        command = [
            str(self.bin / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-At",
            "-c",
            sql,
        ]
        done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=_TIMEOUT)
        return done.stdout.strip()


class ReplicatedPostgres:
    """A private primary and a streaming standby of it.

    ``synchronous``: the primary names the standby in ``synchronous_standby_names``, so a
    commit that asks for it (``synchronous_commit`` on or stronger) waits until the
    standby has it. The server's own default is ``local``: only the transactions that ask
    wait (the ledger's claims, with its option on); the rest commit as on one server.
    Asynchronous: nothing waits for the standby.

    After `fail_over` the standby is the primary, with no standby of its own (and no
    ``synchronous_standby_names``: a commit that asked would wait for ever).
    """

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        primary = {"wal_level": "replica", "max_wal_senders": "5", "synchronous_commit": "local"}
        if synchronous:
            primary["synchronous_standby_names"] = f"'{STANDBY_NAME}'"
        self.primary = _Node(primary)
        self.standby: _Node | None = None
        self.link: ReplicationLink | None = None
        self.failed_over = False

    def __enter__(self) -> ReplicatedPostgres:
        try:
            self.primary.start()
            standby = _Node({"synchronous_standby_names": "''"}, standby_of=self.primary)
            self.standby = standby
            self.link = ReplicationLink(self.primary.port).__enter__()
            # Through the link, under the name the primary knows the standby by.
            with (standby.data / "postgresql.auto.conf").open("a") as conf:
                conf.write(
                    f"primary_conninfo = 'host=127.0.0.1 port={self.link.port} "
                    f"user=postgres application_name={STANDBY_NAME}'\n"
                )
            standby.start()
            self.wait_streaming()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.link is not None:
            with contextlib.suppress(Exception):
                self.link.__exit__()
            self.link = None
        for node in (self.primary, self.standby):
            if node is None:
                continue
            with contextlib.suppress(Exception):
                node.stop()
            with contextlib.suppress(Exception):
                pid = node.pid()
                if pid is not None:
                    kill_tree(pid)
            shutil.rmtree(node.dir, ignore_errors=True)

    def wait_streaming(self) -> None:
        """Until the primary sees its standby streaming (and, synchronous, as ``sync``)."""
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + _TIMEOUT
        sql = (
            f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY_NAME}'"
        )
        while self.primary.psql(sql) != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not start streaming ({want})")
            time.sleep(0.1)

    def hosts(self) -> str:
        """``host=...&host=...`` naming the primary first, then the standby."""
        assert self.standby is not None
        return f"host=127.0.0.1:{self.primary.port}&host=127.0.0.1:{self.standby.port}"

    @property
    def async_url(self) -> str:
        """asyncpg, both hosts, only a server that takes writes."""
        return f"postgresql+asyncpg://postgres@/postgres?{self.hosts()}&target_session_attrs=read-write"

    @property
    def url(self) -> str:
        """psycopg, both hosts, only a server that takes writes."""
        return f"postgresql+psycopg://postgres@/postgres?{self.hosts()}&target_session_attrs=read-write"

    def fail_over(self) -> None:
        """Kill the primary (SIGKILL), cut its link to the standby and promote the
        standby; returns once it takes writes."""
        assert self.standby is not None
        assert self.link is not None
        self.primary.kill()
        self.link.cut()  # what the standby had not received is gone with the primary
        self.standby._run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")
        deadline = time.monotonic() + _TIMEOUT
        while self.standby.psql("SELECT pg_is_in_recovery()") != "f":
            if time.monotonic() > deadline:
                raise RuntimeError("the standby was not promoted")
            time.sleep(0.1)
        self.failed_over = True


class SentinelRedis:
    """A private Redis master, a replica of it and one sentinel watching them.

    The sentinel (``redis-server --sentinel``: the ``redis-sentinel`` program is the same
    binary) names the group ``SERVICE`` and declares the master down after
    ``down_after_ms`` without an answer; with one sentinel a quorum of one decides.
    `kill_master` SIGKILLs the master; the sentinel then promotes the replica.
    """

    SERVICE = "notifyonce"

    def __init__(self, down_after_ms: int = 1000) -> None:
        server = shutil.which("redis-server")
        if server is None:
            _missing("Redis (redis-server)")
        self.server: str = server  # type: ignore[assignment]
        self.down_after_ms = down_after_ms
        self.master = PrivateRedis()
        self.replica = PrivateRedis()
        self.sentinel_port = free_port()
        self.sentinel: subprocess.Popen[bytes] | None = None
        self.config = self.master.dir / "sentinel.conf"

    def __enter__(self) -> SentinelRedis:
        try:
            self.master.start()
            self.replica.start()
            self._cli(self.replica.port, "REPLICAOF", "127.0.0.1", str(self.master.port))
            self.config.write_text(
                f"port {self.sentinel_port}\n"
                "bind 127.0.0.1\n"
                f"dir {self.master.dir}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master.port} 1\n"
                f"sentinel down-after-milliseconds {self.SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.SERVICE} 10000\n"
                f"sentinel parallel-syncs {self.SERVICE} 1\n"
            )
            with (self.master.dir / "sentinel.log").open("ab") as log:
                self.sentinel = subprocess.Popen(
                    [self.server, str(self.config), "--sentinel"], stdout=log, stderr=log
                )
            deadline = time.monotonic() + _TIMEOUT
            while not _answers(self.sentinel_port) or "slave0:" not in self._cli(
                self.master.port, "INFO", "replication"
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica or the sentinel did not come up")
                time.sleep(0.1)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cli(self, port: int, *args: str) -> str:
        done = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
        )
        return done.stdout

    def master_port(self) -> int:
        """The master's port as the sentinel names it now."""
        out = self._cli(self.sentinel_port, "SENTINEL", "get-master-addr-by-name", self.SERVICE)
        return int(out.split()[1])

    def kill_master(self) -> None:
        """SIGKILL the master: no shutdown, the sentinel must notice and promote."""
        process = self.master.process
        if process is not None:
            process.kill()
            process.wait()
            self.master.process = None

    def wait_promoted(self) -> int:
        """Until the sentinel names the replica the master; its port."""
        deadline = time.monotonic() + _TIMEOUT
        while self.master_port() != self.replica.port:
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel did not promote the replica")
            time.sleep(0.1)
        return self.replica.port

    def close(self) -> None:
        if self.sentinel is not None:
            self.sentinel.kill()
            self.sentinel.wait()
            self.sentinel = None
        for server in (self.replica, self.master):
            server.close()
