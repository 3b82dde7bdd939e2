"""Private database and Redis servers that a test may stop and start.

The shared servers on the standard ports serve the whole suite, which runs in parallel:
a test that restarted one would fail its neighbours. A test that needs a server to go
away starts one of its own from the installed binaries, in a temporary directory on a
free port, restarts that one, and removes it at the end whatever happens.

Each server is a context manager with ``stop()``, ``start()`` and ``restart(down=...)``
(down for that many seconds). Where the binaries are missing the test skips with a
message, except in CI, where that fails the run.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests._databases import IN_CI

__all__ = [
    "PgBouncer",
    "PrivateMariaDB",
    "PrivatePostgres",
    "PrivateRedis",
    "free_port",
    "private_server",
]

_START_TIMEOUT = 60.0


def free_port() -> int:
    """A TCP port nobody listens on right now on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def _missing(what: str) -> None:
    message = f"{what} is not installed: install it to run the tests that restart a server"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _postgres_bin() -> Path | None:
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "pg_ctl").exists():
            return root
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


class _Server:
    """What every private server shares: a directory, a port, a log, stop and start."""

    name = "server"

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"nfo-{self.name}-"))
        self.log = self.dir / "server.log"
        self.restarts = 0
        self.process: subprocess.Popen[bytes] | None = None

    def _postgres_user(self) -> str | None:
        """``postgres``, owning the directory, when the tests run as root (PostgreSQL and
        PgBouncer refuse root); None otherwise."""
        if os.geteuid() != 0:
            return None
        owner = pwd.getpwnam("postgres")
        os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        return "postgres"

    def _spawn(self, command: list[str]) -> None:
        """Run ``command`` in the background, its output in the log, until the port answers."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        self._wait(up=True)

    def _terminate(self) -> None:
        """SIGTERM the spawned process (a clean shutdown, as a service restart does) and
        wait until the port is closed."""
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._wait(up=False)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def restart(self, down: float = 0.0) -> None:
        """Stop the server the way an administrator's restart does, stay down ``down``
        seconds, and start it again."""
        self.stop()
        time.sleep(down)
        self.start()
        self.restarts += 1

    def _wait(self, up: bool) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while _answers(self.port) != up:
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                raise RuntimeError(f"{self.name} on port {self.port} did not come up:\n{tail}")
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> _Server:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PrivatePostgres(_Server):
    """A PostgreSQL cluster of its own (``initdb`` + ``pg_ctl``), trust auth, database
    ``postgres``. Run as the ``postgres`` user when the tests run as root (the server
    refuses root)."""

    name = "postgres"

    def __init__(self) -> None:
        found = _postgres_bin()
        if found is None:
            _missing("PostgreSQL (initdb, pg_ctl)")
        self.bin: Path = found  # type: ignore[assignment]
        super().__init__()
        self.data = self.dir / "data"
        self.user = self._postgres_user()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=_START_TIMEOUT)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def async_url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self._wait(up=True)

    def stop(self) -> None:
        # "fast", as ``pg_ctlcluster ... restart -m fast``: every session is ended with
        # "terminating connection due to administrator command".
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        self._wait(up=False)


class PrivateMariaDB(_Server):
    """A MariaDB server of its own (``mariadb-install-db`` + ``mariadbd``), root without
    a password, database ``test``."""

    name = "mariadb"

    def __init__(self) -> None:
        install = shutil.which("mariadb-install-db")
        server = shutil.which("mariadbd") or (
            "/usr/sbin/mariadbd" if Path("/usr/sbin/mariadbd").exists() else None
        )
        if install is None or server is None:
            _missing("MariaDB (mariadb-install-db, mariadbd)")
        self.server: str = server  # type: ignore[assignment]
        super().__init__()
        self.data = self.dir / "data"
        subprocess.run(
            [
                str(install),
                "--no-defaults",
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *(["--user=root"] if os.geteuid() == 0 else []),
            ],
            check=True,
            capture_output=True,
            timeout=_START_TIMEOUT,
        )
        self._first = True

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/test"

    @property
    def async_url(self) -> str:
        return f"mysql+asyncmy://root@127.0.0.1:{self.port}/test"

    def start(self) -> None:
        command = [
            self.server,
            "--no-defaults",
            f"--datadir={self.data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.dir / 'mysqld.sock'}",
            f"--pid-file={self.dir / 'mysqld.pid'}",
            "--skip-log-bin",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-buffer-pool-size=64M",
            *(["--user=root"] if os.geteuid() == 0 else []),
        ]
        self._spawn(command)
        if self._first:
            self._first = False
            socket_path = str(self.dir / "mysqld.sock")
            subprocess.run(
                ["mariadb", f"--socket={socket_path}", "-uroot", "-e", "CREATE DATABASE test"],
                check=True,
                capture_output=True,
                timeout=_START_TIMEOUT,
            )

    def stop(self) -> None:
        self._terminate()


class PrivateRedis(_Server):
    """A Redis server of its own that keeps nothing on disk: a restart forgets every key."""

    name = "redis"

    def __init__(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            _missing("Redis (redis-server)")
        self.server: str = server  # type: ignore[assignment]
        super().__init__()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            self.server,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
        ]
        self._spawn(command)

    def stop(self) -> None:
        self._terminate()


class PgBouncer(_Server):
    """A PgBouncer of its own in transaction mode, in front of a PostgreSQL the tests
    already use (``upstream``, a URL such as ``NOTIFYONCE_TEST_POSTGRES_URL``).

    Transaction mode hands each transaction (each statement, outside one) to whichever
    server connection is free: nothing a client leaves on its server session (a named
    prepared statement, a session ``SET``) is there at its next transaction. Every client
    logs in as the upstream's user, trusted, as the local PostgreSQL trusts it. PgBouncer
    refuses to run as root: it switches to the ``postgres`` user (``-u``) when the tests
    run as root. Only the bouncer stops and starts: the upstream is left alone.
    """

    name = "pgbouncer"

    def __init__(self, upstream: str, pool_size: int = 20, max_client_conn: int = 200) -> None:
        found = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
        )
        if found is None:
            _missing("PgBouncer (pgbouncer)")
        self.binary: str = found  # type: ignore[assignment]
        super().__init__()
        target = make_url(upstream)
        self.database = target.database or "postgres"
        self.user = target.username or "postgres"
        self.run_as = self._postgres_user()
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        self.config = self.dir / "pgbouncer.ini"
        self.config.write_text(
            "[databases]\n"
            f"{self.database} = host={target.host or '127.0.0.1'} port={target.port or 5432} "
            f"dbname={self.database} user={self.user}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.dir}\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            f"max_client_conn = {max_client_conn}\n"
            # The drivers' startup parameters PgBouncer does not track itself.
            "ignore_startup_parameters = extra_float_digits,options\n"
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def async_url(self) -> str:
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        command = [self.binary, *(["-u", self.run_as] if self.run_as else []), str(self.config)]
        self._spawn(command)

    def stop(self) -> None:
        self._terminate()  # PgBouncer's immediate shutdown: its clients are disconnected


@contextlib.contextmanager
def private_server(kind: type[_Server]) -> Iterator[_Server]:
    """A started private server of ``kind``, removed at the end whatever happens."""
    with kind() as server:
        yield server
