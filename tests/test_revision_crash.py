"""A campaign to 3,000 chats edited, then deleted, each run SIGKILLed halfway and resumed.

The campaign mixes the four kinds of message (text, photo, a copy of a post, an album of
two photos), one kind per chat. ``notifyonce campaign edit`` and ``campaign delete`` run
as processes with no mode given (a revision is at-least-once by default) against the
local Bot API server; the server's hook kills each at half of its requests, mid-request,
and the command is run again with no flags but where the database and the server are.
Telegram's own answers make a retry harmless ("message is not modified", "message to
delete not found"), so the server sees each message edited once and deleted once (an
album's every item), none twice, and no chat ends unknown; the same edit run a third
time sends nothing; and the messages older than Telegram's 48 hours are never tried.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import notifyonce
from notifyonce import Album, AsyncLedger, Broadcast, Copy, Message, Notifier, Photo
from notifyonce._cli import main
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, Request

from ._databases import Backend, backend_params, drop_table, make_backend

CHATS = 3_000
OLD = 120  # chats whose message is made three days old before the delete
SOURCES = str(Path(notifyonce.__file__).resolve().parents[1])
TOKEN = "12345:crash-revision"
ADMIN = 999_999
EDITS = frozenset({"editMessageText", "editMessageCaption", "editMessageReplyMarkup"})
DELETES = frozenset({"deleteMessage", "deleteMessages"})


@pytest.fixture(params=backend_params(["sqlite", "postgres-asyncpg", "mariadb"]))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def table(backend: Backend) -> object:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)
    for suffix in ("_file_ids", "_rate_limits", "_alembic_version"):
        drop_table(backend, name + suffix)


def _message(post: int) -> Callable[[object], Message]:
    """Chat n's message: text, photo, copy or album, by n modulo 4."""
    photo = Photo(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40, filename="p.jpg")
    other = Photo(b"\xff\xd8\xff\xe0" + bytes(range(255, -1, -1)) * 40, filename="q.jpg")
    kinds = [
        Message("Sale until Friday"),
        Message("Sale until Friday", media=photo),
        Message("", media=Copy(ADMIN, post)),
        Message("Sale until Friday", media=Album([photo, other])),
    ]
    return lambda chat: kinds[int(str(chat)) % 4]


async def _send(
    backend: Backend, table: str, server: BotAPIServer, chats: int = CHATS, text_only: bool = False
) -> None:
    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=table)
        async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
            notifier = Notifier(ledger, sender, concurrency=16)
            post = server.post(ADMIN, "Sale until Friday")
            message = (lambda chat: Message("Sale until Friday")) if text_only else _message(post)
            report = await Broadcast(notifier, "news", "c1", message, range(1, chats + 1)).run()
        assert chats == report.progress.sent
    finally:
        await engine.dispose()


def _command(backend: Backend, table: str, server: BotAPIServer, *what: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "notifyonce",
        "campaign",
        *what,
        "--action",
        "news",
        "--campaign",
        "c1",
        "--database-url",
        backend.async_url,
        "--table",
        table,
        "--base-url",
        server.url,
        "--rate",
        "0",
        "--lease",
        "2s",
    ]


def _kill_halfway_and_rerun(
    args: list[str], methods: frozenset[str], half: int, hooks: list[Callable[[Request], None]]
) -> subprocess.CompletedProcess[str]:
    """Run the command, SIGKILL it from the server's hook while its request number
    ``half`` of ``methods`` is in flight, wait out the leases, run it again without
    ``--lease`` (the default lease: a busy machine needs no longer than 2 s for a send
    that would otherwise start with its lease nearly out)."""
    env = {"NOTIFYONCE_BOT_TOKEN": TOKEN, "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCES}
    first: list[subprocess.Popen[bytes]] = []
    seen = [0]
    killed: list[float] = []

    def hook(request: Request) -> None:
        if request.method not in methods:
            return
        seen[0] += 1
        if seen[0] >= half and not killed and first:
            os.kill(first[0].pid, signal.SIGKILL)
            killed.append(request.at)

    hooks[:] = [hook]
    first.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    deadline = time.monotonic() + 120
    while first[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    first[0].communicate(timeout=30)
    hooks[:] = []
    assert killed, "the command ended (or timed out) before it was killed"
    assert -signal.SIGKILL == first[0].returncode
    time.sleep(2.5)  # the killed run's leases expire; the next run sweeps them
    at = args.index("--lease")
    again = args[:at] + args[at + 2 :]
    return subprocess.run(again, env=env, capture_output=True, text=True, timeout=300)


def _age(backend: Backend, table: str, server: BotAPIServer) -> set[str]:
    """Make the messages of OLD chats three days old, in the ledger and on the server."""
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3)
    chats = [str(n) for n in range(1, OLD + 1)]
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.begin() as conn:
            t = sa.table(table, sa.column("subject"), sa.column("cycle"), sa.column("sent_at"))
            query = sa.update(t).where(t.c.cycle == "c1", t.c.subject.in_(chats))
            conn.execute(query.values(sent_at=old))
    finally:
        engine.dispose()
    for d in server.deliveries:
        if d.chat_id in chats:
            server.set_message_date(d.chat_id, d.message_id, old.timestamp())
    return set(chats)


def _statuses(backend: Backend, table: str, cycle: str) -> Counter[str]:
    """How many of the revision's chats end in each status."""
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.connect() as conn:
            t = sa.table(table, sa.column("action"), sa.column("cycle"), sa.column("status"))
            query = sa.select(t.c.status).where(t.c.action == "news", t.c.cycle == cycle)
            return Counter(str(status) for status in conn.execute(query).scalars())
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("mode", "unknown"), [((), 0), (("--mode", "at-most-once"), 1)], ids=["default", "amo"]
)
def test_an_edit_killed_halfway_and_run_again_with_no_flags_leaves_no_chat_unknown(
    backend: Backend, table: str, mode: tuple[str, ...], unknown: int
) -> None:
    """200 text messages: an edit run with no mode, SIGKILLed at its 100th request and
    run again, ends with every chat edited once and none unknown; with --mode
    at-most-once the chat whose edit was in flight at the kill stays unknown."""
    chats = 200
    assert 0 == main(["migrate", "--database-url", backend.sync_url, "--table", table])
    hooks: list[Callable[[Request], None]] = []

    def on_request(request: Request) -> None:
        for hook in hooks:
            hook(request)

    with BotAPIServer(latency=0.002, on_request=on_request) as server:
        asyncio.run(_send(backend, table, server, chats, text_only=True))
        sent = {(d.chat_id, d.message_id) for d in server.deliveries if d.chat_id != str(ADMIN)}
        new = Path(os.environ.get("TMPDIR", "/tmp")) / f"{table}-new.txt"
        new.write_text("Sale until Sunday\n")
        edit = _command(backend, table, server, "edit", "--text-file", str(new), *mode)
        second = _kill_halfway_and_rerun(edit, EDITS, chats // 2, hooks)
        edited = Counter((c.chat_id, c.message_id) for c in server.changes)
    new.unlink()
    statuses = _statuses(backend, table, "c1#edit-2")
    assert (1 if unknown else 0) == second.returncode, second.stderr
    assert chats == statuses.total()
    if unknown:
        assert statuses["unknown"] >= 1, statuses
        assert chats == statuses["sent"] + statuses["unknown"], statuses
    else:
        assert Counter({"sent": chats}) == statuses
        assert sent == set(edited), "every message edited"
    assert {1} == set(edited.values()), "none twice"


@pytest.mark.slow
@pytest.mark.storm
def test_edit_and_delete_killed_halfway_touch_each_message_once(
    backend: Backend, table: str
) -> None:
    """3,000 chats of four kinds: the edit and the delete, each killed halfway and re-run,
    edit every message once and delete every message (each album item) younger than 48
    hours once; none twice; a third edit run sends nothing; the old ones are not tried."""
    assert 0 == main(["migrate", "--database-url", backend.sync_url, "--table", table])
    hooks: list[Callable[[Request], None]] = []

    def on_request(request: Request) -> None:
        for hook in hooks:
            hook(request)

    with BotAPIServer(latency=0.002, on_request=on_request) as server:
        asyncio.run(_send(backend, table, server))
        messages = {(d.chat_id, d.message_id) for d in server.deliveries if d.chat_id != str(ADMIN)}
        assert CHATS + CHATS // 4 == len(messages), "an album is two messages"
        new = Path(os.environ.get("TMPDIR", "/tmp")) / f"{table}-new.txt"
        new.write_text("Sale until Sunday\n")
        edit = _command(backend, table, server, "edit", "--text-file", str(new))
        second = _kill_halfway_and_rerun(edit, EDITS, CHATS // 2, hooks)
        edit_statuses = _statuses(backend, table, "c1#edit-2")
        edited = Counter((c.chat_id, c.message_id) for c in server.changes)
        requests = len(server.requests)
        third = subprocess.run(
            edit,
            env={"NOTIFYONCE_BOT_TOKEN": TOKEN, "PYTHONPATH": SOURCES, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        third_requests = len(server.requests) - requests
        old = _age(backend, table, server)
        delete = _command(backend, table, server, "delete", "--what-is-possible")
        after = _kill_halfway_and_rerun(delete, DELETES, (CHATS - OLD) // 2, hooks)
        delete_statuses = _statuses(backend, table, "c1#delete")
        changes = server.changes
        tried = [r for r in server.requests if r.method in DELETES]
    new.unlink()

    firsts = {}  # each chat's first message: the one a caption or text edit changes
    for chat, mid in sorted(messages, key=lambda m: m[1]):
        firsts.setdefault(chat, mid)
    assert (0, 0, 0) == (second.returncode, third.returncode, after.returncode), (
        second.stderr + third.stderr + after.stderr
    )
    assert Counter({"sent": CHATS}) == edit_statuses, "no chat unknown"
    assert set(firsts.items()) == set(edited), "every message edited"
    assert {1} == set(edited.values()), "each once"
    assert 0 == third_requests, "the same edit again sends nothing"
    assert "already done 3,000" in third.stdout
    deleted = Counter((c.chat_id, c.message_id) for c in changes if c.method in DELETES)
    young = {m for m in messages if m[0] not in old}
    assert Counter({"sent": CHATS - OLD}) == delete_statuses, "no chat unknown"
    assert young == set(deleted), "every young message deleted, each album item too"
    assert {1} == set(deleted.values()), "each once"
    assert set() == {r.chat_id for r in tried} & old, "the old ones were never tried"
    print(
        f"edited {len(edited)} messages once each over a killed run and its re-run; "
        f"deleted {len(deleted)} once each; {len(tried)} delete requests; "
        f"{len(old)} old chats untried"
    )
