"""Every door keeps the promise: each shipped way of running a side effect under a slot,
driven through the public contract (`notifyonce.testing.contract`) on SQLite and
PostgreSQL (the core doors on MariaDB too).

A door here is the few lines a user would write to plug their integration in: build one
task for the framework and run it as the framework would, in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from notifyonce import (
    Broadcast,
    CampaignRevision,
    Claim,
    Message,
    Notification,
    Notifier,
    NotifyOnceError,
    SlotStatus,
    ValidationError,
    ValidationTypeError,
    once,
    once_call,
)
from notifyonce._keys import make_key
from notifyonce.testing import FakeSender
from notifyonce.testing.contract import (
    ContractDatabase,
    Door,
    DoorContract,
    Task,
)

from ._databases import IN_CI, backend_params, make_backend

# A Notifier pauses while its database is away (a minute by default) before it gives up:
# the contract's faults do not come back, so its doors wait a few seconds.
PATIENCE = {"outage_patience": dt.timedelta(seconds=10)}


async def _settle_threads() -> None:
    """Give a driver's connect thread whose awaiting task was cancelled (aiosqlite's, on
    a file that cannot be opened) a moment to answer before ``asyncio.run`` closes the
    loop it answers to."""
    await asyncio.sleep(0.05)


# taskiq's, arq's and APScheduler's adapters try a claim again inside one delivery: one
# retry shows it, and halves the time of the scenarios where every try fails (a lock wait,
# a database away). Celery's and dramatiq's go back to their queue, and a slot held at
# least once needs three of theirs (the holder's lease outlasts two of the door's).
RETRIES = 1


def _cycle(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


# -- the doors ---------------------------------------------------------------------------


class OnceDoor(Door):
    """``with once(ledger, ...)`` on a sync ledger."""

    name = "once (sync)"

    def run(self, task: Task) -> None:
        options = {"mode": task.mode, "max_attempts": task.max_attempts}
        with once(task.ledger(), task.action, task.subject, task.cycle, **options) as guard:
            if guard:
                task.body(guard.claim)


class AsyncOnceDoor(Door):
    """``async with once(ledger, ...)`` on an AsyncLedger."""

    name = "once (async)"

    def run(self, task: Task) -> None:
        async def main() -> None:
            ledger = task.async_ledger()
            options = {"mode": task.mode, "max_attempts": task.max_attempts}
            async with once(ledger, task.action, task.subject, task.cycle, **options) as guard:
                if guard:
                    await task.abody(guard.claim)

        asyncio.run(main())


class OnceCallDoor(Door):
    """A plain function decorated with ``once_call``."""

    name = "once_call (sync)"

    def run(self, task: Task) -> None:
        @once_call(
            task.ledger(),
            task.action,
            key=lambda subject, cycle: (subject, cycle),
            mode=task.mode,
            max_attempts=task.max_attempts,
        )
        def effect(claim: Claim, subject: str, cycle: dt.datetime) -> None:
            task.body(claim)

        effect(task.subject, task.cycle)


class AsyncOnceCallDoor(Door):
    """A coroutine function decorated with ``once_call``."""

    name = "once_call (async)"

    def run(self, task: Task) -> None:
        async def main() -> None:
            @once_call(
                task.async_ledger(),
                task.action,
                key=lambda subject, cycle: (subject, cycle),
                mode=task.mode,
                max_attempts=task.max_attempts,
            )
            async def effect(claim: Claim, subject: str, cycle: dt.datetime) -> None:
                await task.abody(claim)

            await effect(task.subject, task.cycle)

        asyncio.run(main())


class SendOnceDoor(Door):
    """``Notifier.send_once``: the sender's send is the side effect."""

    name = "Notifier.send_once"

    def run(self, task: Task) -> None:
        async def main() -> None:
            notifier = Notifier(task.async_ledger(), task.sender(), mode=task.mode, **PATIENCE)
            try:
                await notifier.send_once(task.action, task.subject, task.cycle, task.message())
            finally:
                await _settle_threads()

        asyncio.run(main())


class SendManyDoor(Door):
    """``Notifier.send_many`` with one notification."""

    name = "Notifier.send_many"

    def run(self, task: Task) -> None:
        async def main() -> None:
            notifier = Notifier(task.async_ledger(), task.sender(), mode=task.mode, **PATIENCE)
            one = Notification(task.subject, task.cycle, task.message())
            try:
                await notifier.send_many(task.action, [one])
            finally:
                await _settle_threads()

        asyncio.run(main())


class BroadcastDoor(Door):
    """A ``Broadcast`` of one chat, the campaign id the slot's cycle."""

    name = "Broadcast"

    def run(self, task: Task) -> None:
        async def main() -> None:
            notifier = Notifier(task.async_ledger(), task.sender(), mode=task.mode, **PATIENCE)
            campaign = make_key(task.action, task.subject, task.cycle).cycle
            run = Broadcast(notifier, task.action, campaign, task.message(), [task.subject])
            try:
                await run.run()
            finally:
                await _settle_threads()

        asyncio.run(main())


_REVISION_NUMBERS = (
    "a revision numbers its slots from its own records (an edit's fingerprint picks "
    "<campaign>#edit-<n>), so a slot held or finished from outside is another revision "
    "to it, not this one: the scenario cannot be staged from outside"
)


class RevisionDoor(Door):
    """A campaign revision: the campaign sent first (by another sender), then its message
    edited (``kind`` "edit") or deleted ("delete"); the edit or delete is the side
    effect, its slot the revision's (``<campaign>#edit-2``, ``<campaign>#delete``)."""

    name = "CampaignRevision.edit"
    kind = "edit"
    campaign = "contract-campaign"
    exceptions: ClassVar[Mapping[str, str]] = {
        "held": _REVISION_NUMBERS,
        "finished": _REVISION_NUMBERS,
    }

    def slot(self, task: Task) -> tuple[str, str, str | dt.datetime]:
        revision = "edit-2" if self.kind == "edit" else "delete"  # edit-1: the original
        return task.action, task.subject, f"{self.campaign}#{revision}"

    def run(self, task: Task) -> None:
        async def main() -> None:
            ledger = task.async_ledger()
            # The campaign's own Notifier in the task's mode: its sweep of the action
            # settles the revision's expired claims too, in its mode.
            first = Notifier(ledger, FakeSender(), mode=task.mode, **PATIENCE)
            message = Message("the first text")
            try:
                await Broadcast(first, task.action, self.campaign, message, [task.subject]).run()
                notifier = Notifier(ledger, task.sender(), **PATIENCE)
                revision = CampaignRevision(notifier, task.action, self.campaign, mode=task.mode)
                if self.kind == "edit":
                    await revision.edit("the second text")
                else:
                    await revision.delete()
            finally:
                await _settle_threads()

        asyncio.run(main())


class DeleteDoor(RevisionDoor):
    """A campaign revision that deletes what the campaign sent."""

    name = "CampaignRevision.delete"
    kind = "delete"


class DramatiqDoor(Door):
    """An actor with ``once_action`` on dramatiq's stub broker and a real worker."""

    name = "dramatiq OnceMiddleware"

    def run(self, task: Task) -> None:
        import dramatiq
        from dramatiq.brokers.stub import StubBroker

        from notifyonce.queues.dramatiq import OnceMiddleware

        broker = StubBroker()
        broker.add_middleware(OnceMiddleware(task.ledger, mode=task.mode))

        @dramatiq.actor(
            broker=broker,
            actor_name=f"effect_{uuid.uuid4().hex[:8]}",
            once_action=task.action,
            once_key=lambda subject, cycle: (subject, _cycle(cycle)),
            max_retries=3,
            min_backoff=50,
            max_backoff=100,
        )
        def effect(subject: str, cycle: str) -> None:
            from notifyonce.queues.dramatiq import current_claim

            task.body(current_claim())

        worker = dramatiq.Worker(broker, worker_timeout=50)
        worker.start()
        try:
            effect.send(task.subject, task.cycle.isoformat())
            broker.join(effect.queue_name, timeout=80_000, fail_fast=False)
            worker.join()
        finally:
            worker.stop()
        for message in broker.dead_letters:
            error = getattr(message, "_exception", None)
            if error is not None:
                raise error


class CeleryDoor(Door):
    """A Celery task made with ``once_task`` on a real worker thread (memory broker).

    One worker serves every run of a test process, each run's task registered on its app
    as it comes (the consumer's strategies updated, as a worker does at start): a worker
    started and stopped per run spends 4 s of its stop waiting out the consumer's 2 s
    poll, twice, which made the Celery door a quarter of the whole contract's time. A
    child process (the killed scenario) starts a worker of its own.
    """

    name = "Celery once_task"

    def __init__(self) -> None:
        self._app: Any = None
        self._worker: Any = None
        self._running: contextlib.AbstractContextManager[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}  # a spawned child starts its own worker

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def _started(self) -> tuple[Any, Any]:
        if self._app is None:
            from celery import Celery
            from celery.contrib.testing.worker import start_worker

            queue = f"contract_{uuid.uuid4().hex[:8]}"
            app = Celery(queue, broker="memory://", backend="cache+memory://", set_as_current=False)
            app.conf.task_default_queue = queue
            app.conf.broker_transport_options = {"polling_interval": 0.01}
            running = start_worker(
                app, pool="solo", perform_ping_check=False, queues=[queue], shutdown_timeout=30
            )
            self._worker = running.__enter__()
            self._app, self._running = app, running
        return self._app, self._worker

    def close(self) -> None:
        """Stop this process's worker, if one runs."""
        if self._running is not None:
            running, self._running, self._app, self._worker = self._running, None, None, None
            running.__exit__(None, None, None)

    def run(self, task: Task) -> None:
        from notifyonce.queues.celery import once_task

        app, worker = self._started()

        @once_task(
            app,
            task.ledger,
            task.action,
            key=lambda subject, cycle: (subject, _cycle(cycle)),
            mode=task.mode,
            max_attempts=task.max_attempts,
            max_retries=3,
            name=f"{app.main}.effect_{uuid.uuid4().hex[:8]}",
        )
        def effect(claim: Claim, subject: str, cycle: str) -> None:
            task.body(claim)

        worker.consumer.update_strategies()  # the running worker learns the new task
        effect.delay(task.subject, task.cycle.isoformat()).get(timeout=80, interval=0.02)


class TaskiqDoor(Door):
    """A taskiq task made with ``once_task`` on taskiq's in-memory broker."""

    name = "taskiq once_task"

    def run(self, task: Task) -> None:
        from taskiq import InMemoryBroker

        from notifyonce.queues.taskiq import once_task

        async def main() -> None:
            broker = InMemoryBroker()

            @once_task(
                broker,
                task.async_ledger,
                task.action,
                key=lambda subject, cycle: (subject, _cycle(cycle)),
                mode=task.mode,
                max_attempts=task.max_attempts,
                max_retries=RETRIES,
                task_name=f"effect_{uuid.uuid4().hex[:8]}",
            )
            async def effect(claim: Claim, subject: str, cycle: str) -> None:
                await task.abody(claim)

            await broker.startup()
            try:
                sent = await effect.kiq(task.subject, task.cycle.isoformat())
                result = await sent.wait_result(timeout=80)
            finally:
                await broker.shutdown()
            if result.is_err and result.error is not None:
                raise result.error

        asyncio.run(main())


class ArqDoor(Door):
    """An arq job made with ``once_job``, run as arq's worker runs a job."""

    name = "arq once_job"

    def run(self, task: Task) -> None:
        from notifyonce.queues.arq import once_job

        @once_job(
            task.async_ledger,
            task.action,
            key=lambda subject, cycle: (subject, _cycle(cycle)),
            mode=task.mode,
            max_attempts=task.max_attempts,
            max_retries=RETRIES,
        )
        async def effect(claim: Claim, ctx: dict[str, Any], subject: str, cycle: str) -> None:
            await task.abody(claim)

        async def main() -> None:
            try:
                await effect({"job_try": 1}, task.subject, task.cycle.isoformat())
            finally:
                await _settle_threads()

        asyncio.run(main())


class APSchedulerDoor(Door):
    """A job made with the APScheduler adapter's ``once_job``, run as a scheduler runs
    it (its run time is the task's cycle)."""

    name = "APScheduler once_job"

    def run(self, task: Task) -> None:
        from notifyonce.queues.apscheduler import once_job

        @once_job(
            task.ledger,
            task.action,
            period=dt.timedelta(days=1),
            subject=task.subject,
            mode=task.mode,
            max_attempts=task.max_attempts,
            max_retries=RETRIES,
            clock=lambda: task.cycle,
        )
        def effect(claim: Claim) -> None:
            task.body(claim)

        effect()


# -- the databases ----------------------------------------------------------------------


class _Restartable:
    """A private PostgreSQL of the test module's own, for the outage scenario."""

    def __init__(self, server: Any) -> None:
        self.server = server
        async_url = server.url  # psycopg for async too (see ContractDatabase)
        self.database = ContractDatabase(server.url, async_url)

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server.start()


@pytest.fixture(scope="module")
def contract_restartable() -> Iterator[_Restartable]:
    from ._private_servers import PrivatePostgres

    with PrivatePostgres() as server:
        yield _Restartable(server)


@pytest.fixture(params=backend_params(["sqlite", "postgres-psycopg"]))
def contract_database(request: pytest.FixtureRequest, tmp_path: Path) -> ContractDatabase:
    backend = make_backend(request.param, tmp_path)
    return ContractDatabase(backend.sync_url, backend.async_url)


class _OnMariaDB:
    """The doors that carry the most traffic run on MariaDB too (its claim is a statement
    of its own, and its lock waits and errors differ)."""

    @pytest.fixture(params=backend_params(["sqlite", "postgres-psycopg", "mariadb"]))
    def contract_database(self, request: pytest.FixtureRequest, tmp_path: Path) -> ContractDatabase:
        backend = make_backend(request.param, tmp_path)
        return ContractDatabase(backend.sync_url, backend.async_url)


def _queue(module: str) -> None:
    if not IN_CI:  # in CI a missing dev dependency is a failure, not a skip
        pytest.importorskip(module)


# The doors that run in the test's own process take milliseconds a run (a broadcast's
# Notifier tens of them): a held slot's holder need not outlast a worker's start, and the
# held scenarios wait out 2 s of its lease, not the default 8 (the queues' keep those:
# their first run spans a worker's start and, at least once, their retries).
IN_PROCESS = 2.0


class TestOnce(_OnMariaDB, DoorContract):
    door = OnceDoor()
    holder_lease = IN_PROCESS


class TestAsyncOnce(_OnMariaDB, DoorContract):
    door = AsyncOnceDoor()
    holder_lease = IN_PROCESS


class TestOnceCall(DoorContract):
    door = OnceCallDoor()
    holder_lease = IN_PROCESS


class TestAsyncOnceCall(DoorContract):
    door = AsyncOnceCallDoor()
    holder_lease = IN_PROCESS


class TestSendOnce(DoorContract):
    door = SendOnceDoor()
    holder_lease = IN_PROCESS


class TestSendMany(_OnMariaDB, DoorContract):
    door = SendManyDoor()
    holder_lease = IN_PROCESS


class TestBroadcast(_OnMariaDB, DoorContract):
    door = BroadcastDoor()
    holder_lease = IN_PROCESS


class TestRevisionEdit(DoorContract):
    door = RevisionDoor()


class TestRevisionDelete(DoorContract):
    door = DeleteDoor()


class TestDramatiq(_OnMariaDB, DoorContract):
    door = DramatiqDoor()

    @pytest.fixture(autouse=True)
    def _needs(self) -> None:
        _queue("dramatiq")


class TestCelery(DoorContract):
    door = CeleryDoor()

    @pytest.fixture(autouse=True)
    def _needs(self) -> None:
        _queue("celery")

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _worker(cls) -> Iterator[None]:
        yield
        cls.door.close()


class TestTaskiq(DoorContract):
    door = TaskiqDoor()

    @pytest.fixture(autouse=True)
    def _needs(self) -> None:
        _queue("taskiq")


class TestArq(DoorContract):
    """arq's worker awaits the job's coroutine with its ``ctx``: the wrapper imports
    nothing from arq, so this runs without it (the storms run arq itself)."""

    door = ArqDoor()


class TestAPScheduler(DoorContract):
    door = APSchedulerDoor()

    @pytest.fixture(autouse=True)
    def _needs(self) -> None:
        _queue("apscheduler")


# -- the contract itself: it catches a door that fails open, and says what is missing --


class FailOpenDoor(Door):
    """A deliberately broken guard: it runs the body when the claim raised, as dramatiq
    ran an actor after its middleware's exception."""

    name = "fail-open guard"

    def run(self, task: Task) -> None:
        try:
            with once(task.ledger(), task.action, task.subject, task.cycle, mode=task.mode) as g:
                if g:
                    task.body(g.claim)
        except NotifyOnceError:
            task.body()


class HeldIgnoringDoor(Door):
    """A deliberately broken guard: a slot held by another worker runs the body anyway,
    as a swallowed ``Retry`` did."""

    name = "held-ignoring guard"

    def run(self, task: Task) -> None:
        with once(task.ledger(), task.action, task.subject, task.cycle, mode=task.mode) as g:
            if g or g.skipped is SlotStatus.CLAIMED:
                task.body(g.claim)


class _FailOpenContract(DoorContract):
    door = FailOpenDoor()


class _HeldIgnoringContract(DoorContract):
    door = HeldIgnoringDoor()


@pytest.mark.sqlite
def test_a_door_that_runs_the_body_when_the_claim_raised_fails_the_contract(
    tmp_path: Path,
) -> None:
    """A guard that runs its body after a failed claim fails the missing-table and the
    unreachable scenarios, saying the body ran."""
    database = make_backend("sqlite", tmp_path)
    contract = ContractDatabase(database.sync_url, database.async_url)
    with pytest.raises(AssertionError, match="the body ran although missing_table"):
        _FailOpenContract().test_missing_table_fails_closed(contract, tmp_path)
    with pytest.raises(AssertionError, match="the body ran although unreachable"):
        _FailOpenContract().test_unreachable_database_fails_closed(contract, tmp_path)


@pytest.mark.sqlite
def test_a_door_that_ignores_a_held_slot_fails_the_contract(tmp_path: Path) -> None:
    """A guard that runs its body while another worker holds the slot fails the held
    scenario in both modes."""
    database = make_backend("sqlite", tmp_path)
    contract = ContractDatabase(database.sync_url, database.async_url)
    for scenario in ("test_held_slot_at_most_once", "test_held_slot_at_least_once"):
        with pytest.raises(AssertionError, match="while another worker held the slot"):
            getattr(_HeldIgnoringContract(), scenario)(contract, tmp_path)


class _NoDoorContract(DoorContract):
    pass


class _UnknownScenarioDoor(OnceDoor):
    exceptions: ClassVar[Mapping[str, str]] = {"restarted": "no such scenario"}


class _ReasonlessDoor(OnceDoor):
    exceptions: ClassVar[Mapping[str, str]] = {"killed": " "}


class _ExceptedDoor(OnceDoor):
    exceptions: ClassVar[Mapping[str, str]] = {
        "killed": "its worker cannot be killed apart from the test runner"
    }


@pytest.mark.sqlite
def test_an_integration_plugged_in_wrongly_is_told_what_is_missing(tmp_path: Path) -> None:
    """No door, a door excepting a scenario that does not exist or without a reason, and
    a door class without ``run`` each get an error naming what is missing."""
    database = make_backend("sqlite", tmp_path)
    contract = ContractDatabase(database.sync_url, database.async_url)
    with pytest.raises(ValidationTypeError) as raised:
        _NoDoorContract().test_missing_table_fails_closed(contract, tmp_path)
    assert "door" == raised.value.field
    assert "run(task)" in str(raised.value)

    class Unknown(DoorContract):
        door = _UnknownScenarioDoor()

    with pytest.raises(ValidationError) as raised_scenario:
        Unknown().test_missing_table_fails_closed(contract, tmp_path)
    assert "door.exceptions" == raised_scenario.value.field
    assert "restarted" in str(raised_scenario.value)

    class Reasonless(DoorContract):
        door = _ReasonlessDoor()

    with pytest.raises(ValidationError) as raised_reason:
        Reasonless().test_missing_table_fails_closed(contract, tmp_path)
    assert "door.exceptions['killed']" == raised_reason.value.field

    class NoRun(Door):
        name = "no run"

    with pytest.raises(TypeError, match="run"):
        NoRun()  # type: ignore[abstract]
    with pytest.raises(ValidationTypeError) as raised_url:
        ContractDatabase("", "sqlite+aiosqlite://")
    assert "url" == raised_url.value.field


@pytest.mark.sqlite
def test_a_scenario_a_door_cannot_pass_is_an_expected_failure_with_its_reason(
    tmp_path: Path,
) -> None:
    """A scenario the door names in ``exceptions`` is reported as an expected failure
    carrying the door's reason, not skipped silently."""
    database = make_backend("sqlite", tmp_path)
    contract = ContractDatabase(database.sync_url, database.async_url)

    class Excepted(DoorContract):
        door = _ExceptedDoor()

    with pytest.raises(pytest.xfail.Exception, match="cannot be killed apart"):
        Excepted().test_killed_mid_body_at_most_once(contract, tmp_path)


@pytest.mark.sqlite
def test_a_queue_tries_a_claim_again_only_when_the_database_was_away(tmp_path: Path) -> None:
    """The queue adapters' shared decision: a claim that found the database away (the
    body never ran) is tried again after a short delay; a missing table or a finished
    slot is not."""
    import sqlalchemy as sa

    from notifyonce import Ledger, LedgerError, LedgerUnavailableError
    from notifyonce.queues._common import CLAIM_RETRY_SECONDS, retry_delay

    ledger = Ledger(sa.create_engine(f"sqlite:///{tmp_path / 'l.sqlite3'}"))
    ledger.create_schema()
    failed = once(ledger, "a", 1, "c")  # never entered: its claim "raised"
    away = LedgerUnavailableError("database unavailable")
    assert CLAIM_RETRY_SECONDS == retry_delay(failed, 60.0, away)
    assert retry_delay(failed, 60.0, LedgerError("no such table")) is None
    with once(ledger, "a", 1, "c") as done:
        pass
    with once(ledger, "a", 1, "c") as again:
        assert not again
    assert retry_delay(again, 60.0, away) is None, "a finished slot is done, whatever else"
    assert done.outcome is not None
    ledger.engine.dispose()
