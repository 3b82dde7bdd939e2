"""A broadcast to 10,000 chats SIGKILLed halfway, then run again: each chat gets it once.

The broadcasting process is ``notifyonce broadcast`` itself, sending through TelegramSender
to the local Bot-API-shaped server on 127.0.0.1. At most once: the sends in flight at the
kill are recorded ``unknown`` once their lease expires, listed by the second run, and never
sent again; every other chat gets the message exactly once. A photo broadcast also uploads
the photo exactly once across both runs: the first run keeps Telegram's file_id in the
ledger's database, and the second sends by it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

import notifyonce
from notifyonce._cli import main
from notifyonce._dispatch import _RECORD_BACKLOG
from notifyonce.testing import BotAPIServer, Delivery, Request, Upload

from ._databases import Backend, drop_table, make_backend

CHATS = 10_000
# The processes run the notifyonce under test (this checkout's), not one installed elsewhere.
SOURCES = str(Path(notifyonce.__file__).resolve().parents[1])
TOKEN = "12345:crash-broadcast"

pytestmark = [pytest.mark.slow, pytest.mark.storm]


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres-asyncpg", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


@pytest.fixture
def table(backend: Backend) -> object:
    name = backend.unique_table()
    yield name
    drop_table(backend, name)


#: Sends, as the server records them (edits of the progress message are not sends).
SENDS = frozenset({"sendMessage", "sendPhoto", "copyMessage", "sendMediaGroup"})
#: The admin chat of the campaigns that show their progress (no recipient has its id).
ADMIN = 999_999
#: The sends in flight at most (the command's default --concurrency).
CONCURRENCY = 16


@dataclass
class _Runs:
    """What the server saw of a killed run and its re-run, and the ledger's verdict."""

    chats: int
    before: Counter[str]  # delivering send requests per chat when the first run was killed
    killed_at: float  # server time of the send the kill landed in
    requests: list[Request]
    deliveries: list[Delivery]
    uploads: list[Upload]
    second: subprocess.CompletedProcess[str]
    sent: set[str]
    unknown: set[str]
    server: BotAPIServer  # stopped; what it holds can still be read

    def delivered(self, requests: list[Request] | None = None) -> Counter[str]:
        """Send requests that delivered, per recipient chat (an album is one)."""
        return Counter(
            str(r.chat_id)
            for r in (self.requests if requests is None else requests)
            if r.method in SENDS and r.reply.delivers and r.chat_id != str(ADMIN)
        )


def _cli(backend: Backend, table: str, *content: str) -> _Command:
    """``notifyonce broadcast`` with ``content`` (--text-file, --photo, --copy-from...)."""

    def command(server: str, chats: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "notifyonce",
            "broadcast",
            "--database-url",
            backend.async_url,
            "--table",
            table,
            "--recipients-file",
            str(chats),
            *content,
            "--action",
            "news",
            "--campaign",
            "crash-1",
            "--base-url",
            server,
            "--rate",
            "0",
            "--lease",
            "2s",
        ]

    return command


_Command = Callable[[str, Path], list[str]]


def _with_a_long_lease(args: list[str]) -> list[str]:
    """The re-run's command, without the killed run's 2 s lease (kept short so that the test
    waits little for it to expire). On a busy machine a claim can wait longer than that for
    its send to start, and one whose lease is nearly out by then is given back, not sent:
    the re-run would leave it to a third."""
    if "--lease" in args:
        at = args.index("--lease")
        return args[:at] + args[at + 2 :]  # the command's default lease
    config = json.loads(args[-1])  # the crash worker's
    return [*args[:-1], json.dumps({**config, "lease": 60})]


def _kill_halfway_and_rerun(
    backend: Backend,
    table: str,
    tmp_path: Path,
    command: _Command,
    *,
    chats: int = CHATS,
    progress: bool = False,
    on_server: Callable[[BotAPIServer], object] | None = None,
) -> _Runs:
    """Run the broadcast, SIGKILL it from the server's hook while its send to the chat of
    half the campaign is in flight (and, with ``progress``, once it has posted its progress
    message), wait out the leases, re-run."""
    assert 0 == main(["migrate", "--database-url", backend.sync_url, "--table", table])
    recipients = tmp_path / "chats.txt"
    recipients.write_text("".join(f"{i}\n" for i in range(1, chats + 1)))
    first: list[subprocess.Popen[bytes]] = []
    seen = {"sends": 0, "posted": 0}
    killed: list[float] = []

    def hook(request: Request) -> None:
        """The server's thread, the answer held: the moment the send is in flight."""
        if request.chat_id == str(ADMIN):
            seen["posted"] += request.method == "sendMessage"
            return
        seen["sends"] += 1
        due = seen["sends"] >= chats // 2 and (seen["posted"] or not progress)
        if due and not killed and first:
            os.kill(first[0].pid, signal.SIGKILL)
            killed.append(request.at)

    with BotAPIServer(latency=0.002, on_request=hook) as server:
        if on_server is not None:
            on_server(server)
        args = command(server.url, recipients)
        env = {"NOTIFYONCE_BOT_TOKEN": TOKEN, "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCES}
        first.append(
            subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
        deadline = time.monotonic() + 120
        while first[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert killed, "the broadcast ended (or timed out) before it was killed"
        first[0].communicate(timeout=30)
        requests = server.requests
        before = Counter(
            str(r.chat_id)
            for r in requests
            if r.method in SENDS and r.reply.delivers and r.chat_id != str(ADMIN)
        )
        assert chats // 2 <= sum(before.values()) < chats, "not killed halfway"

        time.sleep(2.5)  # the killed run's leases expire; the next run sweeps them
        again = _with_a_long_lease(args)
        second = subprocess.run(again, env=env, capture_output=True, text=True, timeout=300)
        requests, deliveries, uploads = server.requests, server.deliveries, server.uploads

    sent, unknown = _settled(backend, table)
    return _Runs(
        chats, before, killed[0], requests, deliveries, uploads, second, sent, unknown, server
    )


def _statuses(backend: Backend, table: str) -> dict[str, str]:
    """The status of each of the campaign's chats with a row in the ledger."""
    engine = sa.create_engine(backend.sync_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT subject, status FROM {table} WHERE action = 'news'")
            ).all()
    finally:
        engine.dispose()
    return {str(subject): state for subject, state in rows}


def _settled(backend: Backend, table: str) -> tuple[set[str], set[str]]:
    """The campaign's chats recorded sent, and those recorded unknown."""
    status = _statuses(backend, table)
    unknown = {chat for chat, state in status.items() if state == "unknown"}
    sent = {chat for chat, state in status.items() if state == "sent"}
    return sent, unknown


def _assert_each_chat_once(runs: _Runs, *, cli: bool = True) -> None:
    """Exactly once for sent chats, never twice for unknown ones, the unknown ones listed
    (by ``notifyonce broadcast``; any command exits 1 when there are some)."""
    before, sent, unknown, second = runs.before, runs.sent, runs.unknown, runs.second
    delivered = runs.delivered()
    everyone = {str(i) for i in range(1, runs.chats + 1)}

    left = sorted(everyone - sent - unknown, key=int)
    assert everyone == sent | unknown, (
        f"every chat is settled, none failed or held: {len(left)} are not ({left[:20]}, "
        f"their sends before the kill {[before[chat] for chat in left[:20]]}); the re-run "
        f"said:\n{second.stdout[-2000:]}"
    )
    assert {1} == {delivered[chat] for chat in sent}, "sent chats got it exactly once"
    assert set() == {chat for chat in unknown if delivered[chat] > 1}, "never twice"
    assert set() == {chat for chat in unknown if delivered[chat] != before[chat]}, (
        "an unknown chat was sent to again by the second run"
    )
    # Only what was under way at the kill is unknown (the send it landed in among them):
    # claims whose request was not written yet, at most the concurrency, and sends
    # answered whose outcome waited for its write, at most the recorder's backlog.
    lost = {chat for chat in unknown if delivered[chat] == 0}
    assert 1 <= len(unknown) <= CONCURRENCY + _RECORD_BACKLOG
    assert len(lost) <= CONCURRENCY
    assert (1 if unknown else 0) == second.returncode, second.stderr
    if unknown and cli:
        count = re.search(r"([\d,]+) chats? of the campaign with an unknown outcome", second.stdout)
        assert count is not None, second.stdout
        assert len(unknown) == int(count.group(1).replace(",", ""))
        listed = set(re.findall(r"^  (\d+)$", second.stdout, re.MULTILINE))
        assert set() == listed - unknown
        assert min(len(unknown), 100) == len(listed)  # the command lists the first 100
    print(
        f"killed after {sum(before.values())} sends; {len(unknown)} unknown "
        f"({len(unknown) - len(lost)} of them delivered), "
        f"{len(sent)} sent, {sum(1 for n in delivered.values() if n > 1)} twice; "
        f"{len(runs.uploads)} uploads; second run: {second.stdout.splitlines()[0]}"
    )


def _assert_one_progress_message(runs: _Runs, name: str) -> int:
    """One message in the admin chat over both runs, posted by the first, edited by both,
    ending with the second run's summary; its edits."""
    to_admin = [r for r in runs.requests if r.chat_id == str(ADMIN)]
    assert "sendMessage" == to_admin[0].method
    assert to_admin[0].at < runs.killed_at, "the first run posted it"
    # Beside the message, the summary may send the unknown chats as a file (over 10).
    files = [r for r in to_admin[1:] if r.method == "sendDocument"]
    shown = [r for r in to_admin[1:] if r.method != "sendDocument"]
    assert {"editMessageText"} == {r.method for r in shown}, "never posted again"
    edits = [r for r in shown if r.reply.delivers]
    assert any(r.at > runs.killed_at for r in edits), "the second run edited it"
    posted = [d for d in runs.deliveries if d.chat_id == str(ADMIN) and d.method == "sendMessage"]
    assert 1 == len(posted)
    text = runs.server.message_text(ADMIN, posted[0].message_id) or ""
    assert text.startswith(
        f"Broadcast news/{name}: finished, {runs.chats:,} of {runs.chats:,} handled"
    ), text
    listed = "with an unknown outcome" in text and text.endswith(": in the file below")
    assert (1 if listed else 0) == len(files), text
    print(f"progress: 1 message, {len(edits)} edits; ends: {text.splitlines()[1]}")
    return len(edits)


def test_sigkill_halfway_then_rerun_sends_each_chat_once(
    backend: Backend, table: str, tmp_path: Path
) -> None:
    """Killed at half of 10,000 chats and re-run: exactly once each, in-flight ones unknown."""
    text = tmp_path / "text.txt"
    text.write_text("News for everyone\n")
    command = _cli(backend, table, "--text-file", str(text))
    _assert_each_chat_once(_kill_halfway_and_rerun(backend, table, tmp_path, command))


@pytest.fixture
def file_table(backend: Backend, table: str) -> object:
    """The file-id table the migration creates beside the test's ledger table."""
    yield f"{table}_file_ids"
    drop_table(backend, f"{table}_file_ids")
    drop_table(backend, f"{table}_rate_limits")
    drop_table(backend, f"{table}_alembic_version")


def test_photo_broadcast_killed_halfway_uploads_the_photo_once(
    backend: Backend, table: str, file_table: str, tmp_path: Path
) -> None:
    """A photo to 10,000 chats, killed halfway and re-run: each chat once, one upload in all.

    The first send of the first run uploads; its concurrent sends wait for Telegram's
    file_id and send by it; the file_id is stored in the ledger's database before any of
    them goes on, so the second run finds it and uploads nothing.
    """
    photo = tmp_path / "tariff.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 400)
    text = tmp_path / "text.txt"
    text.write_text("News for everyone\n")
    command = _cli(backend, table, "--text-file", str(text), "--photo", str(photo))
    runs = _kill_halfway_and_rerun(backend, table, tmp_path, command)
    _assert_each_chat_once(runs)

    assert 1 == len(runs.uploads), "the photo was uploaded once across both runs"
    upload = runs.uploads[0]
    assert upload.file_id is not None
    assert hashlib.sha256(photo.read_bytes()).hexdigest() == upload.sha256
    assert {"sendPhoto"} == {d.method for d in runs.deliveries}
    assert {upload.file_id} == {d.file_id for d in runs.deliveries}, "every chat got that photo"
    by_id = [d for d in runs.deliveries if d.params.get("photo") == upload.file_id]
    assert len(runs.deliveries) - 1 == len(by_id), "all but the upload were sent by file_id"
    assert {"News for everyone"} == {d.text for d in runs.deliveries}, "the text is the caption"


COPY_CHATS = 3_000


def test_copy_campaign_killed_halfway_keeps_one_progress_message(
    backend: Backend, table: str, tmp_path: Path
) -> None:
    """An admin's post copied to 3,000 chats with the progress in the admin chat, SIGKILLed
    mid-send at half and re-run: each chat gets the post once (the sends under way at the
    kill unknown, never sent again), and the admin chat has one progress message, posted by
    the first run, edited in place by both, ending with the summary."""

    def command(server: str, chats: Path) -> list[str]:
        post = posted.setdefault("id", servers[0].post(ADMIN, "The winter sale starts now"))
        return _cli(
            backend,
            table,
            "--copy-from",
            f"{ADMIN}:{post}",
            "--progress-chat",
            str(ADMIN),
            "--progress-every",
            "0.2",
        )(server, chats)

    posted: dict[str, int] = {}
    servers: list[BotAPIServer] = []
    runs = _kill_halfway_and_rerun(
        backend, table, tmp_path, command, chats=COPY_CHATS, progress=True, on_server=servers.append
    )
    _assert_each_chat_once(runs)
    sends = [r for r in runs.requests if r.method in SENDS and r.chat_id != str(ADMIN)]
    assert {"copyMessage"} == {r.method for r in sends}
    assert {"The winter sale starts now"} == {
        d.text for d in runs.deliveries if d.chat_id != str(ADMIN)
    }
    _assert_one_progress_message(runs, "crash-1")


ALBUM_CHATS = 3_000


def test_album_campaign_killed_halfway_uploads_each_file_once(
    backend: Backend, table: str, file_table: str, tmp_path: Path
) -> None:
    """An album of 3 photos to 3,000 chats with the progress in the admin chat, SIGKILLed
    mid-send at half and re-run: each chat gets the album once, each photo is uploaded once
    over both runs, and the admin chat has one progress message ending with the summary."""
    photos = []
    for n in range(3):
        photo = tmp_path / f"p{n}.jpg"
        photo.write_bytes(b"\xff\xd8\xff\xe0" + bytes([n]) * 20_000)
        photos.append(photo)

    def command(server: str, chats: Path) -> list[str]:
        config = {
            "db_url": backend.async_url,
            "table": table,
            "lease": 2,
            "server": server,
            "token": TOKEN,
            "album": [str(p) for p in photos],
            "caption": "Three new flavours",
            "campaign": "crash-1",
            "recipients": str(chats),
            "concurrency": CONCURRENCY,
            "progress_chat": ADMIN,
        }
        worker = str(Path(__file__).with_name("_crash_worker.py"))
        return [sys.executable, worker, json.dumps(config)]

    runs = _kill_halfway_and_rerun(
        backend, table, tmp_path, command, chats=ALBUM_CHATS, progress=True
    )
    _assert_each_chat_once(runs, cli=False)
    sends = [r for r in runs.requests if r.method in SENDS and r.chat_id != str(ADMIN)]
    assert {"sendMediaGroup"} == {r.method for r in sends}
    uploads = [u for u in runs.uploads if u.chat_id != str(ADMIN)]  # not the unknown list
    assert 3 == len(uploads), "each photo uploaded once over both runs"
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in photos}
    assert digests == {u.sha256 for u in uploads}
    albums = [d for d in runs.deliveries if d.chat_id != str(ADMIN)]
    assert {u.file_id for u in uploads} == {d.file_id for d in albums}
    assert 3 * sum(runs.delivered().values()) == len(albums)
    _assert_one_progress_message(runs, "crash-1")


PERSONAL_CHATS = 3_000
#: Where the rows live, and when 10:00 there is (UTC) on the fake clock's day.
DUE = {
    "Europe/Moscow": dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.timezone.utc),
    "Europe/Berlin": dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc),
    "UTC": dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc),
}
ZONES = tuple(DUE)
#: The campaign's start (--at) and the fake clock's first reading.
CLOCK_START = dt.datetime(2026, 12, 1, 6, 5, tzinfo=dt.timezone.utc)
#: The fake clock's step: the job period a local-time send must land within.
CLOCK_STEP = dt.timedelta(minutes=20)
#: Real seconds with no new send after which the clock moves on although sends are
#: missing (a pass that stalls this long on a busy machine is not expected).
STALLED = 30.0
CLOCKED_CLI = Path(__file__).with_name("_clocked_cli.py")


def _row_name(chat: int) -> str:
    """A name per chat; every seventh is written as markup, which must arrive as text."""
    return f"<b>User {chat}</b>" if chat % 7 == 0 else f"User_{chat}"


def _zone(chat: str) -> str:
    return ZONES[int(chat) % 3]


class _Clock:
    """The fake wall clock of the broadcasting processes: a file the test rewrites, and
    what the server saw of the sends and when, by that clock.

    The clock moves past a zone's 10:00 only once every chat of that zone that is still
    to be sent was seen at the server: a pass held up on a busy machine is waited for,
    not stamped a step late."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = CLOCK_START
        #: The chats of each zone the server is to see, and those it saw.
        self.expected = {zone: PERSONAL_CHATS // len(ZONES) for zone in ZONES}
        self.seen: dict[str, set[str]] = {zone: set() for zone in ZONES}
        self.set(CLOCK_START)

    def set(self, when: dt.datetime) -> None:
        written = self.path.with_suffix(".tmp")
        written.write_text(when.isoformat(), encoding="utf-8")
        os.replace(written, self.path)
        self.now = when

    def saw(self, chat: str) -> None:
        """A send to ``chat`` reached the server (called on the server's thread)."""
        self.seen[_zone(chat)].add(chat)

    def wait_seen(self, process: subprocess.Popen[str]) -> None:
        """Until ``process`` has read the clock's time (or ended)."""
        seen = Path(f"{self.path}.seen")
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            if seen.exists() and seen.read_text(encoding="utf-8") == self.now.isoformat():
                return
            time.sleep(0.02)
        assert process.poll() is not None, f"the clock's {self.now} was never read"

    def wait_sent(self, process: subprocess.Popen[str]) -> None:
        """Until the server saw every chat due by the clock's time that is still to be
        sent, or ``process`` ended, or ``STALLED`` seconds passed with no new chat seen:
        a chat that is not sent at its hour fails the assertions that follow rather
        than hanging the test."""
        due = [zone for zone, at in DUE.items() if at <= self.now]
        count, progress = -1, time.monotonic()
        while process.poll() is None and time.monotonic() - progress < STALLED:
            seen = {zone: len(self.seen[zone]) for zone in due}
            if all(n >= self.expected[zone] for zone, n in seen.items()):
                return
            if sum(seen.values()) != count:
                count, progress = sum(seen.values()), time.monotonic()
            time.sleep(0.02)

    def lost(self, recorded: Iterable[str]) -> None:
        """After the kill: chats claimed (``recorded``) whose send never reached the server
        stay unknown and are never sent, so they are not waited for."""
        for chat in recorded:
            zone = _zone(chat)
            if chat not in self.seen[zone]:
                self.expected[zone] -= 1

    def walk(self, process: subprocess.Popen[str], until: dt.datetime) -> None:
        """Step the clock while ``process`` runs, up to ``until``, waiting at each step
        for it to be seen and, at a step that brings a zone's 10:00, for its sends."""
        while process.poll() is None and self.now < until:
            before = self.now
            self.set(before + CLOCK_STEP)
            self.wait_seen(process)
            if any(before < due <= self.now for due in DUE.values()):
                self.wait_sent(process)


def _settle(server: BotAPIServer) -> None:
    """Until the server has read what a killed process wrote before it died: no new
    request for a moment (bounded)."""
    deadline = time.monotonic() + 10
    count = -1
    while count != len(server.requests) and time.monotonic() < deadline:
        count = len(server.requests)
        time.sleep(0.3)


def test_a_personal_local_time_campaign_killed_halfway_sends_each_chat_its_own_text(
    backend: Backend, table: str, tmp_path: Path
) -> None:
    """A CSV of 3,000 rows (a name, English or Russian, one of three time zones), a
    template in two languages at 10:00 local, on a fake clock that walks the morning in
    20-minute steps; SIGKILLed at half (during Berlin's hour) and re-run: each chat once
    or unknown, its own name in its own language, markup in a name as literal text, and
    every send within one step after 10:00 in its zone (Berlin's rest at the resume)."""
    rows = tmp_path / "people.csv"
    with rows.open("w") as file:
        file.write("chat_id,name,language,tz\n")
        for chat in range(1, PERSONAL_CHATS + 1):
            language = "ru" if chat % 2 else "en"
            file.write(f'{chat},"{_row_name(chat)}",{language},{ZONES[chat % 3]}\n')
    english = tmp_path / "news.html"
    english.write_text("<b>Hello</b>, $name!\n")
    russian = tmp_path / "news.ru.html"
    russian.write_text("<b>Привет</b>, $name!\n")
    content = [
        "--text-file",
        str(english),
        "--text-file-for",
        f"ru={russian}",
        "--parse-mode",
        "HTML",
        "--template",
        "--at-local",
        "10:00",
        "--default-tz",
        "Europe/Berlin",
        "--at",
        CLOCK_START.isoformat(),
        "--at-or-now",
    ]
    assert 0 == main(["migrate", "--database-url", backend.sync_url, "--table", table])
    clock = _Clock(tmp_path / "clock")
    stamps: dict[str, list[dt.datetime]] = {}
    first: list[subprocess.Popen[str]] = []
    killed: list[float] = []

    def hook(request: Request) -> None:
        """The server's thread, the answer held: each send noted by the fake clock."""
        if request.method not in SENDS:
            return
        clock.saw(str(request.chat_id))
        stamps.setdefault(str(request.chat_id), []).append(clock.now)
        if sum(map(len, stamps.values())) >= PERSONAL_CHATS // 2 and not killed and first:
            os.kill(first[0].pid, signal.SIGKILL)
            killed.append(request.at)

    with BotAPIServer(latency=0.002, on_request=hook) as server:
        command = _cli(backend, table, *content)(server.url, rows)
        args = [sys.executable, str(CLOCKED_CLI), *command[3:]]
        env = {
            "NOTIFYONCE_BOT_TOKEN": TOKEN,
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": SOURCES,
            "NOTIFYONCE_TEST_CLOCK": str(clock.path),
        }

        def start() -> subprocess.Popen[str]:
            return subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )

        first.append(start())
        clock.wait_seen(first[0])
        clock.walk(first[0], until=DUE["UTC"] + CLOCK_STEP)
        _, error = first[0].communicate(timeout=60)
        assert killed, f"the broadcast ended before it was killed: {error[-2000:]}"
        before = Counter(
            str(r.chat_id) for r in server.requests if r.method in SENDS and r.reply.delivers
        )
        assert PERSONAL_CHATS // 2 <= sum(before.values()) < PERSONAL_CHATS, "not halfway"
        _settle(server)
        clock.lost(_statuses(backend, table))  # its chats, whatever their state
        # The killed run's leases (2 s) expire by the clock before the re-run sweeps them.
        clock.set(clock.now + dt.timedelta(minutes=1))
        again = start()
        clock.wait_seen(again)
        clock.wait_sent(again)  # the chats of the hours that came while it was down
        clock.walk(again, until=DUE["UTC"] + 2 * CLOCK_STEP)
        out, error = again.communicate(timeout=120)
        second = subprocess.CompletedProcess(args, again.returncode, out, error)
        requests, deliveries = server.requests, server.deliveries
    sent, unknown = _settled(backend, table)
    runs = _Runs(
        PERSONAL_CHATS, before, killed[0], requests, deliveries, [], second, sent, unknown, server
    )
    _assert_each_chat_once(runs)
    expected = {
        str(chat): ("<b>Привет</b>, " if chat % 2 else "<b>Hello</b>, ")
        + _row_name(chat).replace("<", "&lt;").replace(">", "&gt;")
        + "!"
        for chat in range(1, PERSONAL_CHATS + 1)
    }
    got = {d.chat_id: d.text for d in runs.deliveries}
    assert {chat: expected[chat] for chat in got} == got, "each chat its own row's text"
    assert set() == runs.sent - set(got), "every chat recorded sent was seen sent"
    late: dict[str, set[bool]] = {zone: set() for zone in ZONES}
    for chat, times in stamps.items():
        zone = _zone(chat)
        late[zone] |= {DUE[zone] <= at < DUE[zone] + CLOCK_STEP for at in times}
    assert {zone: {True} for zone in ZONES} == late, "every send within one step after 10:00"
    times = {at.strftime("%H:%M") for chat_times in stamps.values() for at in chat_times}
    print(f"sends by the fake clock at {sorted(times)}")
