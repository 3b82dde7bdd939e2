"""The promise every door keeps: one set of scenarios for any code that runs a side effect
under a slot.

notifyonce has many doors: ``Notifier.send_once`` and ``send_many``, ``once`` and
``once_call``, each queue adapter, each framework helper, and the ones users write for
their own queue or framework. Each must run its side effect **only while holding its
slot**, and fail closed: a slot held elsewhere, a ledger missing, unreachable or failing
means the body does not run, and the error says why.

This module writes that promise down once. An integration plugs in by giving one thing,
a way to run one task through it (a `Door`); `DoorContract` is a pytest test class whose
tests drive that door through every scenario and count the side effects from outside the
process that ran them (each run of the body appends a line to a file):

- ``held``: another worker holds the slot under a live lease. The body does not run now;
  at most once, not later either; at least once, once, after the holder's lease ended.
- ``missing_table``: the ledger table does not exist. The body does not run; the error
  says to run the migration.
- ``unreachable``: the database does not answer. The body does not run; the error names
  where it looked (the URL, its password hidden).
- ``timeout``: the claim's statement waits past its time limit (the table locked by
  another session). The body does not run; an error says so.
- ``mid_claim``: the claim's statement fails after it ran (a connection lost). The body
  does not run; an error says so.
- ``killed``: the process is SIGKILLed inside the body. At most once the slot ends
  ``unknown`` and the body never runs again; at least once it runs once more, ``sent``.
- ``outage``: the database goes away for a few seconds right after the body ran (a
  private server the test may restart, from a ``contract_restartable`` fixture). The door
  waits for it and records the slot ``sent``; nothing runs twice.
- ``finished``: the task comes again after its slot ended ``sent``, ``failed`` or
  ``unknown``. The body does not run and the door is done at once (no wait of a lease).

A door that cannot pass a scenario by its framework's nature says so in
`Door.exceptions`, with the reason: the contract then checks that scenario's opposite is
documented rather than skipping it silently (the test reports the reason as an expected
failure). See the guide *Writing your own integration*.

Examples:
    A door around ``notifyonce.once`` (what a queue adapter's task does)::

        class OnceDoor(Door):
            name = "once"

            def run(self, task: Task) -> None:
                with once(task.ledger(), task.action, task.subject, task.cycle,
                          mode=task.mode, max_attempts=task.max_attempts) as guard:
                    if guard:
                        task.body(guard.claim)


        class TestOnceDoor(DoorContract):
            door = OnceDoor()
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import datetime as dt
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from notifyonce._drivers import faults
from notifyonce._errors import ValidationError, ValidationTypeError
from notifyonce._ledger.claim import Claim
from notifyonce._ledger.ledger import AsyncLedger, Ledger
from notifyonce._ledger.table import SlotStatus
from notifyonce._message import Message, Receipt
from notifyonce._outcome import DeliveryMode

if TYPE_CHECKING:
    import pytest

if TYPE_CHECKING:
    pass

__all__ = [
    "SCENARIOS",
    "ContractDatabase",
    "ContractSender",
    "Door",
    "DoorContract",
    "Restartable",
    "Task",
]

#: Every scenario's name, as `Door.exceptions` keys them.
SCENARIOS = (
    "held",
    "missing_table",
    "unreachable",
    "timeout",
    "mid_claim",
    "killed",
    "outage",
    "finished",
)

# How long one run of a door may take before the contract says it hangs: far more than
# any scenario needs (a lease is 2 s here), far less than a lease of the ``finished``
# scenario (an hour), so a door that waits a lease on a finished slot is caught.
_RUN_LIMIT = 90.0
# How long the ``outage`` scenario's database stays away.
_OUTAGE_SECONDS = 2.0
# A killed body's lease: only waited out before the task comes again, so it is short.
_KILLED_LEASE = 1.0
# The ``timeout`` scenario's lock wait: a claim gives up after it (MariaDB waits at least
# a second, its setting being whole seconds).
_TIMEOUT_SECONDS = 0.5


# The ``outage`` scenario's switch, by the effects file of its task: what its body calls.
_OUTAGES: dict[str, Callable[[], None]] = {}


class Restartable(Protocol):
    """A database the ``outage`` scenario may take away: a private server of the test's
    own, never a shared one. Give it as a ``contract_restartable`` fixture.

    Attributes:
        database: Its URLs.
    """

    database: ContractDatabase

    def stop(self) -> None:
        """Stop the server now (as an administrator's restart does)."""

    def start(self) -> None:
        """Start it again and return once it answers."""


@dataclass(frozen=True)
class ContractDatabase:
    """The database the contract runs on: one URL for sync code, one for async code.

    Attributes:
        url: A sync SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg://...``,
            ``mysql+pymysql://...``).
        async_url: The same database for an async engine (``sqlite+aiosqlite:///...``,
            ``postgresql+psycopg://...``, ``mysql+asyncmy://...``). Prefer psycopg to
            asyncpg here: the ``mid_claim`` fault is injected at SQLAlchemy's cursor,
            which asyncpg's direct claim path does not pass through.
    """

    url: str
    async_url: str

    def __post_init__(self) -> None:
        for name in ("url", "async_url"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValidationTypeError(name, "must be a non-empty SQLAlchemy URL string")
            make_url(value)  # raises naming the URL's problem

    def unreachable(self) -> ContractDatabase:
        """The same URLs pointing where no database answers."""
        token = uuid.uuid4().hex[:8]
        return ContractDatabase(
            faults.unreachable_url(self.url, token), faults.unreachable_url(self.async_url, token)
        )


def _inject_mid_claim(engine: sa.Engine, table: str, fired: Path) -> None:
    def after(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: Any) -> None:
        head = statement.lstrip().upper()
        if table in statement and head.startswith(("INSERT", "UPDATE", "WITH")):
            with fired.open("a", encoding="utf-8") as note:
                note.write("fired\n")
            raise sa.exc.OperationalError(
                statement[:60], None, RuntimeError("injected fault: lost mid-claim")
            )

    sa.event.listen(engine, "after_cursor_execute", after)


@dataclass(frozen=True)
class Task:
    """One task the contract runs through a door: its slot, its body and its ledger.

    A door builds what its framework needs from this (a message, a job, a notification)
    and, holding the slot, calls `body` (or `abody`, or sends through `sender`): each run
    of the body is counted. Everything here can cross a process boundary (the ``killed``
    scenario runs the door in a child process).

    Attributes:
        action: The slot's action.
        subject: The slot's subject.
        cycle: The slot's cycle: an aware datetime (``cycle.isoformat()`` crosses a
            queue's JSON; a scheduler's run time can be it).
        mode: The delivery mode the door must use.
        max_attempts: At least once: attempts in all.
        database: Where the ledger is.
        table_name: The ledger table (a missing one in ``missing_table``).
        lease: The ledger's lease, in seconds.
        busy_timeout: How long a statement waits for a lock, in seconds.
        effects: The file each run of the body appends a line to.
        plan: What the body does after it noted its run: ``"ok"`` returns, ``"kill"``
            SIGKILLs its own process, ``"outage"`` takes the database away (for a few
            seconds, from a thread) and returns.
        fault: ``"mid_claim"``: the ledger's engines fail each claim after it ran;
            ``"timeout"``: their statements give up after ``busy_timeout``.
    """

    action: str
    subject: str
    cycle: dt.datetime
    mode: DeliveryMode
    database: ContractDatabase
    table_name: str
    effects: str
    max_attempts: int = 3
    lease: float = 2.0
    busy_timeout: float = 30.0
    plan: str = "ok"
    fault: str | None = None

    def _ledger_options(self) -> dict[str, Any]:
        return {
            "table_name": self.table_name,
            "lease": dt.timedelta(seconds=self.lease),
            "busy_timeout": dt.timedelta(seconds=self.busy_timeout),
            "retries": 1,
        }

    def _fault_file(self) -> Path:
        return Path(self.effects + ".faults")

    def ledger(self) -> Ledger:
        """A new sync [`Ledger`][notifyonce.Ledger] on the task's database and table (its
        engine holds no pooled connection, so nothing needs closing)."""
        engine = sa.create_engine(self.database.url, poolclass=sa.pool.NullPool)
        self._faults(engine)
        return Ledger(engine, **self._ledger_options())

    def _faults(self, engine: sa.Engine) -> None:
        if self.fault == "mid_claim":
            _inject_mid_claim(engine, self.table_name, self._fault_file())
        elif self.fault == "timeout":
            faults.bound_statements(engine, self.busy_timeout)

    def async_ledger(self) -> AsyncLedger:
        """A new [`AsyncLedger`][notifyonce.AsyncLedger] on the task's database and table,
        usable from any event loop (its engine pools no connection)."""
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.database.async_url, poolclass=sa.pool.NullPool)
        self._faults(engine.sync_engine)
        return AsyncLedger(engine, **self._ledger_options())

    def body(self, claim: Claim | None = None) -> None:
        """The side effect: call it once the door holds the slot."""
        token = 0 if claim is None else claim.token
        line = f"{self.subject}\t{token}\t{time.time():.6f}\t{os.getpid()}\n"
        # One write with O_APPEND: lines of processes writing at once never interleave.
        fd = os.open(self.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if self.plan == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.plan == "outage":
            _OUTAGES[self.effects]()

    async def abody(self, claim: Claim | None = None) -> None:
        """`body` for async code."""
        self.body(claim)

    def sender(self) -> ContractSender:
        """A [`Sender`][notifyonce.Sender] whose every send is a run of the body."""
        return ContractSender(self)

    def message(self) -> Message:
        """A message for doors that send one."""
        return Message("contract")


class ContractSender:
    """A sender for the contract's tasks: each send, edit or delete runs the task's body,
    once (it edits and deletes as `TelegramSender` does, for campaign revisions)."""

    def __init__(self, task: Task) -> None:
        self.task = task

    async def send(self, recipient: str, message: Message) -> Receipt:
        await self.task.abody()
        return Receipt(recipient, message_id=1)

    async def edit_message(self, recipient: str | int, message_id: int, **options: Any) -> bool:
        await self.task.abody()
        return True

    async def delete_messages(self, recipient: str | int, message_ids: Any, **options: Any) -> None:
        await self.task.abody()

    def check_edit(self, text: str | None, **options: Any) -> None:
        """Every edit is one Telegram would take."""


class Door(abc.ABC):
    """A way a side effect runs under a slot, as the contract sees it.

    Subclass it at module level (the ``killed`` scenario runs it in a child process, which
    imports it by name) and give `run`.

    Attributes:
        name: What the door is called in the contract's messages.
        exceptions: Scenarios this door cannot pass by its framework's nature, each with
            the reason (documented where the door is). The contract marks them expected
            failures with that reason; they are not skipped silently.
    """

    name: ClassVar[str] = ""
    exceptions: ClassVar[Mapping[str, str]] = {}

    def slot(self, task: Task) -> tuple[str, str, str | dt.datetime]:
        """The slot ``(action, subject, cycle)`` the door claims for ``task``: the task's
        own, unless the door derives another (a campaign revision's cycle is
        ``<campaign>#edit-2``). The contract holds, finishes and reads this one."""
        return task.action, task.subject, task.cycle

    @abc.abstractmethod
    def run(self, task: Task) -> None:
        """Run ``task`` through the door in this process, as its framework delivers a task
        once, and return when the door is done with it (its own retries included).

        Raise the error the door reported (a failed message's exception, a task's error),
        so the contract can read why the body did not run.
        """


def _door_child(door: Door, task: Task) -> None:  # pragma: no cover - in a child process
    door.run(task)


@dataclass
class _Stage:
    """What the contract made for one test: its scratch directory, table and counters."""

    database: ContractDatabase
    directory: Path
    table: str
    effects: Path = field(init=False)

    def __post_init__(self) -> None:
        self.effects = self.directory / f"effects-{uuid.uuid4().hex[:8]}.txt"

    def task(self, mode: DeliveryMode, **changes: Any) -> Task:
        base = Task(
            action="contract",
            subject=uuid.uuid4().hex[:12],
            cycle=dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc),
            mode=mode,
            database=self.database,
            table_name=self.table,
            effects=str(self.effects),
        )
        return dataclasses.replace(base, **changes)

    def runs(self) -> list[float]:
        """When the body ran, one time per run, read from the file."""
        if not self.effects.exists():
            return []
        lines = self.effects.read_text(encoding="utf-8").splitlines()
        return [float(line.split("\t")[2]) for line in lines if line]


def _run(door: Door, task: Task, *, expect_error: bool = False) -> BaseException | None:
    """Run the door on a thread with a time limit; what it raised (an unexpected error is
    raised again, with the door's name)."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            door.run(task)
        except BaseException as exc:  # reported to the test below
            raised.append(exc)

    thread = threading.Thread(target=target, name=f"contract-{door.name}", daemon=True)
    thread.start()
    thread.join(_RUN_LIMIT)
    if thread.is_alive():
        raise AssertionError(
            f"{door.name}: the door did not finish within {_RUN_LIMIT:.0f} s (a retry loop "
            "or a sleep inside the worker?)"
        )
    error = raised[0] if raised else None
    if error is not None and not expect_error:
        raise AssertionError(f"{door.name}: the door raised {error!r}") from error
    return error


def _chain(error: BaseException | None) -> str:
    """The text of an error and of every error it was raised from."""
    parts: list[str] = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return " <- ".join(parts)


def _wait_past(moment: dt.datetime, ledger: Ledger) -> None:
    """Sleep until the ledger's clock is past ``moment`` (a lease's end)."""
    for _ in range(600):
        if ledger.now() > moment:
            return
        time.sleep(0.05)
    raise AssertionError(f"the ledger's clock did not pass {moment}")  # pragma: no cover


def _check_door(door: object) -> Door:
    if not isinstance(door, Door):
        raise ValidationTypeError(
            "door",
            "DoorContract needs `door = SomeDoor()`, an instance of a notifyonce.testing."
            f"contract.Door subclass with run(task); got {type(door).__name__}",
        )
    if not door.name:
        raise ValidationError("door.name", "must name the door (a non-empty str)")
    unknown = sorted(set(door.exceptions) - set(SCENARIOS))
    if unknown:
        raise ValidationError(
            "door.exceptions", f"names no scenario: {unknown}; scenarios: {list(SCENARIOS)}"
        )
    for scenario, reason in door.exceptions.items():
        if not isinstance(reason, str) or not reason.strip():
            raise ValidationError(f"door.exceptions[{scenario!r}]", "must give the reason")
    return door


AMO, ALO = DeliveryMode.AT_MOST_ONCE, DeliveryMode.AT_LEAST_ONCE


class DoorContract:
    """The scenarios, as a pytest test class: subclass it, set `door`, and give a
    ``contract_database`` fixture (a `ContractDatabase`), in your own test module.

    Each test creates its own ledger table and drops it after. Tests of a scenario the
    door names in `Door.exceptions` are expected failures with the door's reason.

    Attributes:
        door: The door under test, a `Door` instance.
        modes: The delivery modes the door supports (both by default).
        holder_lease: The ``held`` scenario's holder keeps the slot this long, in
            seconds: longer than one run of the door takes, its start included (a
            queue's worker, say), and at least once shorter than the door's retries
            reach. 8 s by default; a door that runs in the test's own process in a few
            milliseconds can take 2 s and make the scenario four times as quick.

    Examples:
        ```python
        import pytest
        from notifyonce.testing.contract import ContractDatabase, DoorContract

        @pytest.fixture
        def contract_database(tmp_path):
            path = tmp_path / "ledger.sqlite3"
            return ContractDatabase(f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}")

        class TestMyQueue(DoorContract):
            door = MyQueueDoor()
        ```
    """

    door: ClassVar[Door]
    modes: ClassVar[tuple[DeliveryMode, ...]] = (AMO, ALO)
    holder_lease: ClassVar[float] = 8.0

    # -- the stage ------------------------------------------------------------------

    @staticmethod
    def _pytest() -> Any:
        import pytest

        return pytest

    @contextlib.contextmanager
    def _stage(
        self, contract_database: ContractDatabase, tmp_path: Path, scenario: str
    ) -> Iterator[_Stage]:
        pytest = self._pytest()
        door = _check_door(getattr(type(self), "door", None))
        reason = door.exceptions.get(scenario)
        if reason is not None:
            pytest.xfail(f"{door.name} cannot pass '{scenario}': {reason}")
        table = f"nfo_contract_{uuid.uuid4().hex[:10]}"
        engine = sa.create_engine(contract_database.url, poolclass=sa.pool.NullPool)
        ledger = Ledger(engine, table_name=table)
        if scenario not in ("missing_table", "unreachable"):
            ledger.create_schema()
        try:
            yield _Stage(contract_database, tmp_path, table)
        finally:
            faults.drop_tables(engine, table)
            engine.dispose()

    def _door(self) -> Door:
        return _check_door(getattr(type(self), "door", None))

    def _mode(self, mode: DeliveryMode) -> None:
        if mode not in self.modes:
            self._pytest().skip(f"{self._door().name} does not offer {mode.value}")

    @staticmethod
    def _ledger(stage: _Stage, task: Task) -> Ledger:
        return Ledger(
            sa.create_engine(stage.database.url, poolclass=sa.pool.NullPool),
            table_name=stage.table,
            lease=dt.timedelta(seconds=task.lease),
        )

    # -- held -----------------------------------------------------------------------

    def _held(
        self, contract_database: ContractDatabase, tmp_path: Path, mode: DeliveryMode
    ) -> None:
        self._mode(mode)
        door = self._door()
        with self._stage(contract_database, tmp_path, "held") as stage:
            task = stage.task(mode)
            ledger = self._ledger(stage, task)
            # The holder's lease outlasts the door's start and a few of its retries (one
            # lease and a second apart): the door meets the slot held, however slow.
            lease = dt.timedelta(seconds=self.holder_lease)
            holder = ledger.claim_slot(*door.slot(task), lease=lease)
            assert holder is not None
            _run(door, task)
            early = [t for t in stage.runs() if t < holder.lease_until.timestamp()]
            assert [] == early, f"{door.name}: the body ran while another worker held the slot"
            if mode is AMO:
                assert ledger.now() < holder.lease_until, (
                    f"{door.name}: one run of the door outlasted the holder's lease of "
                    f"{self.holder_lease:g} s, so it never met the slot held"
                )
            # The holder's lease ends (its worker died): the task comes again.
            _wait_past(holder.lease_until, ledger)
            _run(door, task)
            _run(door, task)
            expected = 1 if mode is ALO else 0
            assert expected == len(stage.runs()), (
                f"{door.name} ({mode.value}): the body ran {len(stage.runs())} times after the "
                f"holder's lease ended, expected {expected}"
            )
            if mode is ALO:
                assert not ledger.mark_sent(holder), (
                    f"{door.name}: the holder could still mark the slot after it was taken over"
                )

    def test_held_slot_at_most_once(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """At most once, a slot another worker holds never runs the body here."""
        self._held(contract_database, tmp_path, AMO)

    def test_held_slot_at_least_once(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """At least once, a held slot runs the body once, only after the holder's lease."""
        self._held(contract_database, tmp_path, ALO)

    # -- an unusable ledger -----------------------------------------------------------

    def _fails_closed(
        self,
        contract_database: ContractDatabase,
        tmp_path: Path,
        scenario: str,
        mode: DeliveryMode,
        expected_text: Callable[[Task], list[str]],
        **changes: Any,
    ) -> None:
        self._mode(mode)
        door = self._door()
        with self._stage(contract_database, tmp_path, scenario) as stage:
            task = stage.task(mode, **changes)
            if scenario == "missing_table":
                task = dataclasses.replace(task, table_name=f"{stage.table}_missing")
            if scenario == "unreachable":
                task = dataclasses.replace(task, database=contract_database.unreachable())
            lock = (
                faults.hold_write_lock(contract_database.url, stage.table)
                if scenario == "timeout"
                else None
            )
            try:
                error = _run(door, task, expect_error=True)
            finally:
                if lock is not None:
                    lock()
            assert [] == stage.runs(), f"{door.name}: the body ran although {scenario}"
            assert error is not None, (
                f"{door.name}: {scenario} ran nothing and raised nothing: the error must say why"
            )
            said = _chain(error)
            wanted = expected_text(task)
            assert any(text in said for text in wanted), (
                f"{door.name}: the error on {scenario} should name one of {wanted}; it said: "
                f"{said[:500]}"
            )
            if scenario == "mid_claim":
                assert Path(task.effects + ".faults").exists(), (
                    f"{door.name}: the mid-claim fault never fired (a claim path outside "
                    "SQLAlchemy's cursor, such as asyncpg's, cannot be faulted here)"
                )

    def test_missing_table_fails_closed(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """Without the ledger table the body never runs and the error says to migrate."""
        for mode in self.modes:
            self._fails_closed(
                contract_database, tmp_path, "missing_table", mode, lambda t: ["migrat"]
            )

    def test_unreachable_database_fails_closed(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """A database that does not answer runs no body; the error names where it looked."""

        def where(task: Task) -> list[str]:
            return faults.where(task.database.url)

        for mode in self.modes:
            self._fails_closed(contract_database, tmp_path, "unreachable", mode, where)

    def test_claim_timing_out_fails_closed(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """A claim that waits past its lock timeout (the table locked elsewhere) runs no
        body and raises."""
        texts = ["lock", "timeout", "Lock", "locked", "database error", "canceling statement"]
        for mode in self.modes:
            self._fails_closed(
                contract_database,
                tmp_path,
                "timeout",
                mode,
                lambda t: texts,
                busy_timeout=_TIMEOUT_SECONDS,
                fault="timeout",
            )

    def test_error_mid_claim_fails_closed(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """A claim whose statement fails after it ran (a connection lost mid-claim) runs
        no body and raises."""
        for mode in self.modes:
            self._fails_closed(
                contract_database,
                tmp_path,
                "mid_claim",
                mode,
                lambda t: ["injected fault", "database"],
                fault="mid_claim",
            )

    # -- killed ---------------------------------------------------------------------

    def _killed(
        self, contract_database: ContractDatabase, tmp_path: Path, mode: DeliveryMode
    ) -> None:
        self._mode(mode)
        door = self._door()
        if sys.platform == "win32":  # pragma: no cover
            self._pytest().skip("SIGKILL needs a POSIX system")
        with self._stage(contract_database, tmp_path, "killed") as stage:
            task = stage.task(mode)
            context = multiprocessing.get_context("spawn")
            child = context.Process(
                target=_door_child,
                args=(door, dataclasses.replace(task, plan="kill", lease=_KILLED_LEASE)),
            )
            child.start()
            child.join(_RUN_LIMIT)
            if child.is_alive():  # pragma: no cover - a door that hangs
                child.kill()
                child.join()
                raise AssertionError(f"{door.name}: the killed run did not end")
            assert -signal.SIGKILL == child.exitcode, (
                f"{door.name}: the child ended with {child.exitcode}, not killed in the body "
                "(did the door run the body?)"
            )
            assert 1 == len(stage.runs())
            ledger = self._ledger(stage, task)
            record = ledger.get(*door.slot(task))
            assert record is not None
            assert record.status is SlotStatus.CLAIMED, (
                f"{door.name}: the body ran without a claim committed first ({record})"
            )
            _wait_past(record.lease_until, ledger)
            _run(door, task)
            _run(door, task)
            ledger.sweep(mode, actions=[task.action])
            final = ledger.get(*door.slot(task))
            assert final is not None
            if mode is AMO:
                assert 1 == len(stage.runs()), f"{door.name}: at most once ran a killed body again"
                assert SlotStatus.UNKNOWN is final.status
            else:
                assert 2 == len(stage.runs()), (
                    f"{door.name}: at least once ran a killed body {len(stage.runs()) - 1} "
                    "more times, expected once"
                )
                assert SlotStatus.SENT is final.status

    def test_killed_mid_body_at_most_once(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """At most once, a body whose process was SIGKILLed ends unknown, never run again."""
        self._killed(contract_database, tmp_path, AMO)

    def test_killed_mid_body_at_least_once(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """At least once, a body whose process was SIGKILLed runs once more and ends sent."""
        self._killed(contract_database, tmp_path, ALO)

    # -- outage ---------------------------------------------------------------------

    def test_database_away_after_the_body_is_waited_out(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> None:
        """The database goes away for a few seconds right after the body ran: the door
        waits for it and records the slot sent; the body ran once, and a redelivery does
        not run it again (both modes)."""
        pytest = self._pytest()
        try:
            server: Restartable = request.getfixturevalue("contract_restartable")
        except pytest.FixtureLookupError:
            pytest.skip(
                "the outage scenario needs a `contract_restartable` fixture: a private "
                "database server the test may stop and start (never a shared one)"
            )
        door = self._door()
        with self._stage(server.database, tmp_path, "outage") as stage:
            for mode in self.modes:
                task = stage.task(mode, lease=20.0)
                back: list[threading.Thread] = []

                def away(server: Restartable = server, back: list[threading.Thread] = back) -> None:
                    server.stop()

                    def later() -> None:
                        time.sleep(_OUTAGE_SECONDS)
                        server.start()

                    thread = threading.Thread(target=later, name="contract-outage", daemon=True)
                    thread.start()
                    back.append(thread)

                _OUTAGES[task.effects] = away
                try:
                    _run(door, dataclasses.replace(task, plan="outage"))
                finally:
                    del _OUTAGES[task.effects]
                    for thread in back:
                        thread.join(_RUN_LIMIT)
                assert 1 == len(stage.runs()), (
                    f"{door.name} ({mode.value}): the body ran {len(stage.runs())} times "
                    "around an outage, expected once"
                )
                _run(door, task)
                assert 1 == len(stage.runs()), f"{door.name}: a redelivery ran the body again"
                record = self._ledger(stage, task).get(*door.slot(task))
                assert record is not None
                assert SlotStatus.SENT is record.status, (
                    f"{door.name} ({mode.value}): the slot ended {record.status.value} after "
                    "the database came back, not sent"
                )
                stage.effects.unlink()

    # -- finished -------------------------------------------------------------------

    def test_finished_slot_is_done_at_once(
        self, contract_database: ContractDatabase, tmp_path: Path
    ) -> None:
        """A task redelivered after its slot finished (sent, failed, unknown) runs no body
        and is done without waiting (its lease is an hour: a door that waits one hangs)."""
        door = self._door()
        with self._stage(contract_database, tmp_path, "finished") as stage:
            for mode in self.modes:
                for status in (SlotStatus.SENT, SlotStatus.FAILED, SlotStatus.UNKNOWN):
                    task = stage.task(mode, lease=3600.0)
                    ledger = self._ledger(stage, task)
                    claim = ledger.claim_slot(*door.slot(task))
                    assert claim is not None
                    if status is SlotStatus.SENT:
                        assert ledger.mark_sent(claim)
                    elif status is SlotStatus.FAILED:
                        assert ledger.mark_failed(claim, "refused")
                    else:
                        assert ledger.mark_unknown(claim, "lost")
                    _run(door, task)
                    assert [] == stage.runs(), (
                        f"{door.name} ({mode.value}): a {status.value} slot ran its body"
                    )
                    after = ledger.get(*door.slot(task))
                    assert after is not None
                    assert status is after.status
