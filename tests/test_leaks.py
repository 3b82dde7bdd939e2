"""The suite's check for connections a test left open (``tests/_leaks.py``)."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Iterator

import pytest

from ._leaks import left_open


@pytest.fixture
def listener() -> Iterator[tuple[str, int]]:
    """A socket listening on 127.0.0.1 (connections wait in its backlog, never accepted)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()


def connect(address: tuple[str, int], close: bool) -> asyncio.StreamWriter:
    """Connect in a loop of its own, closing the connection or not, and close the loop."""

    async def main() -> asyncio.StreamWriter:
        _, writer = await asyncio.open_connection(*address)
        if close:
            writer.close()
            await writer.wait_closed()
        return writer

    return asyncio.run(main())


def test_a_connection_left_open_is_found_once_its_loop_closes(
    listener: tuple[str, int],
) -> None:
    """Found once, and shut, so that neither it nor its writer has anything to warn about
    when the garbage collector takes them (warnings fail the suite) in some later test."""
    writer = connect(listener, close=False)
    assert [writer.transport] == left_open()
    assert [] == left_open()
    del writer
    gc.collect()  # a ResourceWarning here would fail this test


def test_a_closed_connection_is_not_reported(listener: tuple[str, int]) -> None:
    writer = connect(listener, close=True)
    assert writer.transport.is_closing()
    assert [] == left_open()
