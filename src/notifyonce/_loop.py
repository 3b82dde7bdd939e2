"""The event loop a command runs on: uvloop when it is installed (the ``speed`` extra) and
not opted out, else asyncio's own.

The command line's commands that run a loop (``broadcast``, ``campaign``, ``web``) choose
it here: ``--no-uvloop`` on the command line, or ``NOTIFYONCE_UVLOOP=0`` in the
environment (for a program or a scheduler that runs the command), keeps asyncio's loop.
uvloop is imported only when it is chosen, and never installed as a global policy: the
loop is made for the one run (``asyncio.Runner(loop_factory=...)`` on Python 3.11 and
later, a copy of ``asyncio.run``'s steps on 3.10), so nothing else in the process changes.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ENV_UVLOOP", "LoopChoice", "choose_loop", "run"]

#: ``0`` keeps asyncio's loop with uvloop installed; ``1`` (or unset) takes uvloop when it is.
ENV_UVLOOP = "NOTIFYONCE_UVLOOP"
_OFF = {"0", "false", "no", "off"}
_ON = {"", "1", "true", "yes", "on"}

T = TypeVar("T")


@dataclass(frozen=True)
class LoopChoice:
    """Which loop a run gets: ``name`` is ``"uvloop"`` or ``"asyncio"``, ``why`` says why
    (for ``--verbose``), ``factory`` makes the loop (None: asyncio's default)."""

    name: str
    why: str
    version: str = ""  # uvloop's
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None

    def describe(self) -> str:
        """One line for ``--verbose``: ``event loop: uvloop 0.21.0 (installed)``, or
        ``event loop: asyncio (--no-uvloop)``."""
        version = f" {self.version}" if self.version else ""
        return f"event loop: {self.name}{version} ({self.why})"


def choose_loop(use_uvloop: bool = True, environ: Mapping[str, str] | None = None) -> LoopChoice:
    """uvloop unless ``use_uvloop`` is false (``--no-uvloop``), ``NOTIFYONCE_UVLOOP`` says
    ``0``, or uvloop cannot be imported; asyncio's loop otherwise.

    Raises:
        ValueError: ``NOTIFYONCE_UVLOOP`` is neither 0 nor 1 (nor false/true, no/yes,
            off/on); the message names the variable and its value.
    """
    if not use_uvloop:
        return LoopChoice("asyncio", "--no-uvloop")
    value = (os.environ if environ is None else environ).get(ENV_UVLOOP, "").strip().lower()
    if value in _OFF:
        return LoopChoice("asyncio", f"{ENV_UVLOOP}={value}")
    if value not in _ON:
        raise ValueError(
            f"{ENV_UVLOOP} must be 0 (asyncio's loop) or 1 (uvloop when installed), not {value!r}"
        )
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return LoopChoice("asyncio", "uvloop is not installed: pip install 'notifyonce[speed]'")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    version = str(getattr(uvloop, "__version__", ""))
    return LoopChoice("uvloop", "installed", version, factory)


def run(main: Coroutine[Any, Any, T], choice: LoopChoice | None = None) -> T:
    """Run ``main`` to its end on a new loop of ``choice`` (default: `choose_loop()`), as
    ``asyncio.run`` does: the loop is closed after the tasks left are cancelled and the
    async generators and the default executor shut down."""
    factory = (choose_loop() if choice is None else choice).factory
    if factory is None:
        return asyncio.run(main)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    return _run_310(main, factory)  # pragma: no cover - Python 3.10 (the matrix's legs)


def _run_310(
    main: Coroutine[Any, Any, T], factory: Callable[[], asyncio.AbstractEventLoop]
) -> T:  # pragma: no cover - Python 3.10 (the matrix's legs)
    """``asyncio.run`` of Python 3.10 on a loop from ``factory`` (3.10's has no factory,
    and no ``asyncio.Runner``): the same steps, with no global policy set."""
    if asyncio._get_running_loop() is not None:
        main.close()
        raise RuntimeError("run() cannot be called from a running event loop")
    loop = factory()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:  # pragma: no cover - 3.10
    """Cancel the tasks ``main`` left and wait for them, reporting their errors to the
    loop's handler, as ``asyncio.run`` does."""
    left = asyncio.all_tasks(loop)
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    for task in left:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during run() shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )
