"""A TCP proxy on 127.0.0.1 that cuts a connection at a chosen moment.

The tests put it between a driver and its database server to make the faults a network
makes: an answer that never comes back although the server did the work. It runs its own
event loop in a thread, so sync and async drivers can both go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from types import TracebackType

from typing_extensions import Self


@dataclass
class _Trap:
    """Cut the connection instead of passing on the server's answer that holds ``answer``,
    or the first answer after one client sent packets holding each of ``requests``, in
    that order (``seen``: how many of them each connection has sent so far)."""

    answer: bytes | None
    requests: tuple[bytes, ...]
    seen: dict[int, int]

    def armed(self, connection: int) -> bool:
        return bool(self.requests) and self.seen.get(connection, 0) == len(self.requests)


class FaultProxy:
    """Forwards 127.0.0.1:<port> to a server, and cuts connections when told.

    Args:
        host: The server's host.
        port: The server's port.

    Examples:
        ``with FaultProxy("127.0.0.1", 5432) as proxy:`` then connect to ``proxy.port``
        and call ``proxy.drop_answer(containing=b"INSERT 0 ")`` before the statement.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.target_port = host, port
        self.port = 0
        self.cut = 0  # connections cut so far
        self._trap: _Trap | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._next_id = 0
        self._handlers: set[asyncio.Task[None]] = set()

    def drop_answer(
        self, *, containing: bytes | None = None, after: tuple[bytes, ...] = ()
    ) -> None:
        """Cut the next connection whose server answer holds ``containing``, or whose
        client sends packets holding each of ``after`` in turn (then the answer to the last
        one is not passed on: the server did the work, the client never hears of it).

        Once: the trap is spent on the first connection it cuts.
        """
        with self._lock:
            self._trap = _Trap(containing, after, {})

    def __enter__(self) -> Self:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._forward(client_r, client_w)
        finally:
            self._handlers.discard(task)
            client_w.transport.abort()

    async def _forward(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        self._next_id += 1
        me = self._next_id
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            return
        cut = asyncio.Event()

        async def upstream() -> None:
            while not cut.is_set():
                data = await client_r.read(65536)
                if not data:
                    break
                with self._lock:
                    trap = self._trap
                    if trap is not None and trap.requests and not trap.armed(me):
                        step = trap.seen.get(me, 0)
                        if trap.requests[step] in data:
                            trap.seen[me] = step + 1
                server_w.write(data)
                await server_w.drain()
            server_w.close()

        async def downstream() -> None:
            while not cut.is_set():
                data = await server_r.read(65536)
                if not data:
                    break
                with self._lock:
                    trap = self._trap
                    hit = trap is not None and (
                        trap.armed(me) or (trap.answer is not None and trap.answer in data)
                    )
                    if hit:
                        self._trap = None
                        self.cut += 1
                if hit:
                    cut.set()
                    break
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            for writer in (client_w, server_w):
                with contextlib.suppress(Exception):
                    writer.transport.abort()
