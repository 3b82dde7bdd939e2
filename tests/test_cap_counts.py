"""A frequency cap's skips counted alike everywhere: the summary, the ledger's stats and the
console give the same capped count for a broadcast.

Three campaigns of the category ``promo``, capped at 2 a week, run side by side in
processes of their own (``notifyonce broadcast``) to the same chats, through the local test
Bot API server: no chat gets more than 2 of them (counted at the server), the rest are
skipped as capped, each campaign's summary, ``notifyonce stats --json`` and the console's
campaign numbers say how many, and a transactional send to a capped chat still goes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    AsyncLedger,
    FrequencyCap,
    Ledger,
    Message,
    Notification,
    Notifier,
    Outcome,
)
from notifyonce.telegram import TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender
from notifyonce.web import _queries as queries

from ._clocks import WallClock
from ._databases import MARKS, SYNC_NAMES, drop_table, make_backend

TOKEN = "12345:cap-counts-secret-token"
TEXT = "secret-promo-9b2e: two a week at most"
CAMPAIGNS = ("promo-a", "promo-b", "promo-c")
WEEK = dt.timedelta(days=7)
STATS = (sys.executable, "-m", "notifyonce", "stats", "--json")


def broadcast(server: BotAPIServer, url: str, table: str, workdir: Path, action: str) -> list[str]:
    """The command line of one capped promo campaign to every chat of ``chats.txt``."""
    return [
        sys.executable,
        "-m",
        "notifyonce",
        "broadcast",
        "--database-url",
        url,
        "--table",
        table,
        "--recipients-file",
        str(workdir / "chats.txt"),
        "--text-file",
        str(workdir / "text.txt"),
        "--action",
        action,
        "--campaign",
        "c1",
        "--category",
        "promo",
        "--cap",
        "promo=2/7d",
        "--base-url",
        server.url,
        "--rate",
        "0",
        "--progress-every",
        "600",
    ]


def told(summary: str, word: str) -> int:
    """The count before ``word`` in a summary (``"1,000 sent"``), or after it for the
    skipped reasons (``"capped 1,000"``); 0 when the summary does not name it."""
    pattern = rf"\b{word} ([\d,]+)" if word == "capped" else rf"([\d,]+) {word}\b"
    found = re.search(pattern, summary)
    return 0 if found is None else int(found.group(1).replace(",", ""))


def stats(url: str, table: str) -> dict[str, dict[str, int]]:
    """``notifyonce stats --json``'s counts per action."""
    done = subprocess.run(
        [*STATS, "--database-url", url, "--table", table],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    actions: dict[str, dict[str, int]] = json.loads(done.stdout)["actions"]
    return actions


def console(url: str, table: str, action: str) -> dict[str, object]:
    """What the console's live page of ``action``/c1 polls (its campaign JSON)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            now = dt.datetime.now(dt.timezone.utc)
            table_ = Ledger(engine, table_name=table).table
            return queries.campaign_progress(conn, table_, action, "c1", now).as_json()
    finally:
        engine.dispose()


def side_by_side(chats: int, name: str, tmp_path: Path) -> None:
    backend = make_backend(name, tmp_path)
    table = backend.unique_table()
    engine = sa.create_engine(backend.sync_url)
    Ledger(engine, table_name=table).create_schema()
    engine.dispose()
    (tmp_path / "chats.txt").write_text("".join(f"{i}\n" for i in range(1, chats + 1)))
    (tmp_path / "text.txt").write_text(TEXT + "\n")
    env = {"NOTIFYONCE_BOT_TOKEN": TOKEN}
    try:
        with BotAPIServer() as server:
            runs = [
                subprocess.Popen(
                    broadcast(server, backend.async_url, table, tmp_path, action),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**_environ(), **env},
                )
                for action in CAMPAIGNS
            ]
            summaries = {}
            for action, process in zip(CAMPAIGNS, runs, strict=True):
                out, err = process.communicate(timeout=300)
                assert 0 == process.returncode, err
                summaries[action] = out.splitlines()[-1]
            per_chat = Counter(d.chat_id for d in server.deliveries)
            assert {2} == set(per_chat.values()), summaries
            assert chats == len(per_chat)
            counted = stats(backend.sync_url, table)
            for action in CAMPAIGNS:
                summary = summaries[action]
                shown = console(backend.sync_url, table, action)
                assert (
                    told(summary, "capped"),
                    told(summary, "sent"),
                ) == (counted[action].get("capped", 0), counted[action].get("sent", 0)), summary
                assert told(summary, "capped") == shown["capped"], summary
                assert told(summary, "sent") == shown["counts"]["sent"], summary  # type: ignore[index]
            assert chats == sum(told(s, "capped") for s in summaries.values())
            assert 2 * chats == sum(told(s, "sent") for s in summaries.values())
            # A transactional send of the category to a capped chat still goes.
            assert Outcome.SENT == asyncio.run(_receipt(server, backend.async_url, table))
            assert 3 == Counter(d.chat_id for d in server.deliveries)["1"]
    finally:
        drop_table(backend, table)


async def _receipt(server: BotAPIServer, url: str, table: str) -> Outcome:
    engine = create_async_engine(url)
    ledger = AsyncLedger(engine, table_name=table)
    try:
        async with TelegramSender(TOKEN, base_url=server.url, rate_limit=None) as sender:
            notifier = Notifier(ledger, sender, caps=[FrequencyCap("promo", 2, WEEK)])
            return await notifier.send_once(
                "receipt", 1, "order-1", Message("your order"), category="promo", transactional=True
            )
    finally:
        await engine.dispose()


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NOTIFYONCE_DATABASE")}


@pytest.mark.parametrize("name", [pytest.param(n, marks=MARKS[n]) for n in SYNC_NAMES])
def test_three_capped_campaigns_side_by_side_count_their_capped_chats_alike(
    name: str, tmp_path: Path
) -> None:
    """Three promo campaigns capped at 2 a week, in three processes at once, to 500 chats:
    each chat got 2, the 500 others are capped, and every campaign's summary, the stats and
    the console give the same capped and sent counts; a transactional send still goes."""
    side_by_side(500, name, tmp_path)


@pytest.mark.storm
@pytest.mark.slow
@pytest.mark.postgres
def test_three_capped_campaigns_side_by_side_to_5000_chats(tmp_path: Path) -> None:
    """As above, to 5,000 chats, on PostgreSQL: the three databases' cap statements and
    counts are checked at 500 above; this is the scale a bot's weekly promotions reach
    (about 80 s of three processes' sending per database, run once)."""
    side_by_side(5000, "postgres-psycopg", tmp_path)


async def test_a_capped_chat_is_counted_once_however_often_a_run_meets_it(
    ledger: AsyncLedger, clock: WallClock
) -> None:
    """A cap of 1 a week: campaign b, run twice after a, skips its 10 chats as capped both
    times, and the stats count them once (10 released rows kept as capped); a run of a
    again finds them already done, not capped; a week later b reaches them."""
    notifier = Notifier(ledger, FakeSender(), caps=[FrequencyCap("promo", 1, WEEK)])
    chats = [Notification(chat, "c1", Message("sale")) for chat in range(1, 11)]

    async def run(action: str) -> tuple[dict[Outcome, int], dict[str, int]]:
        report = await notifier.send_many(action, chats, category="promo")
        return {o: n for o, n in report.counts.items() if n}, dict(report.skips)

    assert ({Outcome.SENT: 10}, {}) == await run("a")
    for _ in range(2):
        assert ({Outcome.SKIPPED: 10}, {"capped": 10}) == await run("b")
        assert {"b": 10} == (await ledger.stats()).capped
    assert ({Outcome.DUPLICATE: 10}, {}) == await run("a")
    clock.advance(WEEK)
    assert ({Outcome.SENT: 10}, {}) == await run("b")
    assert {} == (await ledger.stats()).capped
