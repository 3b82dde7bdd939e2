"""Campaigns that speak to each recipient: rows from files and queries, templates escaped
for the parse mode, variants by language, each recipient's own hour, one fingerprint."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from notifyonce import (
    AsyncLedger,
    Broadcast,
    Message,
    Notifier,
    QuietHours,
    Recipient,
    ValidationError,
    recipients_from_file,
    recipients_from_query,
)
from notifyonce._campaign import LanguageCounts
from notifyonce._personal import LocalHour, Personal, read_rows
from notifyonce._senders.telegram.markup import markup_problem
from notifyonce.testing import BotAPIServer, FakeSender

from ._clocks import WallClock

UTC = dt.timezone.utc


@pytest.fixture
async def ledger(async_engine: AsyncEngine, async_table: str) -> AsyncLedger:
    ledger = AsyncLedger(async_engine, table_name=async_table)
    await ledger.create_schema()
    return ledger


def texts_by_chat(sender: FakeSender) -> dict[str, str]:
    return {r.recipient: r.message.text for r in sender.sent}


async def claimed(ledger: AsyncLedger) -> int:
    """The campaign's delivery slots (the campaign's own row of its message aside)."""
    query = sa.select(sa.func.count()).where(ledger.table.c.action == "news")
    async with ledger.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


CSV = "chat_id,name,language,tz\n1,Ann,de,Europe/Berlin\n2,Boris,ru,Europe/Moscow\n3,Carl,,\n"


# -- rows -------------------------------------------------------------------------------


async def test_a_csv_file_gives_rows_with_language_tz_and_fields(tmp_path: Path) -> None:
    """A CSV file with a header is read as rows: chat id, language, tz, every column a field."""
    path = tmp_path / "people.csv"
    path.write_text(CSV)
    rows = [row async for row in recipients_from_file(path).rows()]
    assert [1, 2, 3] == [row.chat for row in rows]
    assert ["de", "ru", None] == [row.language for row in rows]
    assert ["Europe/Berlin", "Europe/Moscow", "None"] == [str(row.timezone) for row in rows]
    assert {"chat_id": "1", "name": "Ann", "language": "de", "tz": "Europe/Berlin"} == dict(
        rows[0].fields
    )
    assert [1, 2, 3] == [chat async for chat in recipients_from_file(path)]


async def test_json_lines_give_rows_and_numbers_become_text(tmp_path: Path) -> None:
    """A JSON lines file is read as rows; a number in a field is its text."""
    path = tmp_path / "people.jsonl"
    lines = [{"chat_id": 7, "name": "Ann", "points": 12}, {"chat_id": "@news", "language": "RU"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = [row async for row in recipients_from_file(path).rows()]
    assert [7, "@news"] == [row.chat for row in rows]
    assert "12" == rows[0].fields["points"]
    assert "ru" == rows[1].language


async def test_bad_rows_are_named_by_line_before_anything_is_claimed(
    ledger: AsyncLedger, tmp_path: Path
) -> None:
    """No chat id, a bad tz, a row of the wrong width: each named by its line; nothing sent."""
    path = tmp_path / "people.csv"
    path.write_text("chat_id,name,tz\n1,Ann,\n,Bob,\n3,Carl,Mars/Olympus\n4,Dan\n5,Eve,UTC\n")
    sender = FakeSender()
    source = recipients_from_file(path)
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, sender), "news", "c1", Message("Hi $name"), source, template=True
        ).run()
    problem = info.value.problem
    assert "recipients" == info.value.field
    assert ["line 3", "line 4", "line 5"] == re.findall(r"line \d+", problem)
    assert "Mars/Olympus" in problem
    assert "2 cells where the header has 3" in problem
    assert [] == sender.sent
    assert 0 == await claimed(ledger)


async def test_a_csv_quote_never_closed_is_named_at_its_line(
    ledger: AsyncLedger, tmp_path: Path
) -> None:
    """A CSV cell whose quote is never closed (it swallows the rest of the file) is named
    as such at the line it opens on, not counted as a line of too few cells; nothing sent."""
    path = tmp_path / "people.csv"
    path.write_text(
        'chat_id,name,city,tz,plan\n1,Ann,Oslo,UTC,pro\n2,"Bob,Rome\n3,Carl,Lima,UTC,pro\n'
    )
    sender = FakeSender()
    source = recipients_from_file(path)
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, sender), "news", "c1", Message("Hi $name"), source, template=True
        ).run()
    assert (
        "line 3 ('2,\"Bob,Rome'): recipient has a quote (\") that is never closed: the rest "
        "of the file was read into its cell; close it, or double a quote meant as text"
    ) == info.value.problem
    assert [] == sender.sent


async def test_a_json_line_that_is_no_object_is_named(tmp_path: Path, ledger: AsyncLedger) -> None:
    """A JSON lines file with a line that is not an object is refused naming that line."""
    path = tmp_path / "people.jsonl"
    path.write_text('{"chat_id": 1}\n[2]\n')
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, FakeSender()), "news", "c1", Message("Hi"), recipients_from_file(path)
        ).run()
    assert "line 2 ('[2]'): recipient is not a JSON object" == info.value.problem


async def test_a_query_keeps_every_selected_column(
    ledger: AsyncLedger, async_engine: AsyncEngine, async_table: str
) -> None:
    """recipients_from_query keeps every column: the first the chat, language and tz read."""
    users = sa.Table(
        f"{async_table}_people",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("first_name", sa.String(40)),
        sa.Column("language", sa.String(10)),
    )
    async with async_engine.begin() as conn:
        await conn.run_sync(users.create)
        await conn.execute(
            users.insert(),
            [
                {"id": 1, "first_name": "Ann", "language": "en"},
                {"id": 2, "first_name": "Борис", "language": "ru"},
            ],
        )
    try:
        sender = FakeSender()
        query = sa.select(users.c.id, users.c.first_name, users.c.language)
        await Broadcast(
            Notifier(ledger, sender),
            "news",
            "c1",
            Message("Hi $first_name"),
            recipients_from_query(async_engine, query),
            template=True,
            variants={"ru": Message("Привет, $first_name")},
        ).run()
        assert {"1": "Hi Ann", "2": "Привет, Борис"} == texts_by_chat(sender)
    finally:
        async with async_engine.begin() as conn:
            await conn.run_sync(users.drop)


def test_a_large_csv_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    """200,000 rows are read one at a time: the peak allocation stays that of a few rows."""
    path = tmp_path / "many.csv"
    with path.open("w") as file:
        file.write("chat_id,name,language,tz\n")
        for i in range(1, 200_001):
            file.write(f"{i},Name {i},ru,Europe/Moscow\n")
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_rows(str(path), "csv"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 200_000 == count
    assert peak < 2 * 2**20, peak


# -- templates ------------------------------------------------------------------------


def _html_visible(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def _markdown_v2_visible(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", re.sub(r"(?<!\\)\*", "", text))


VALUES = st.text(
    st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\x00"), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_a_value_arrives_as_literal_text_in_html(value: str) -> None:
    """Any value filled into an HTML template is valid HTML that shows the value as is."""
    personal = Personal(Message("<b>Hi</b> $name!", parse_mode="HTML"), template=True)
    text = personal.render(Recipient(1, {"name": value})).text
    assert None is markup_problem(text, "HTML")
    assert f"Hi {value}!" == _html_visible(text)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_a_value_arrives_as_literal_text_in_markdown_v2(value: str) -> None:
    """Any value filled into a MarkdownV2 template is valid MarkdownV2 showing it as is."""
    personal = Personal(Message("*Hi* ${name}\\!", parse_mode="MarkdownV2"), template=True)
    text = personal.render(Recipient(1, {"name": value})).text
    assert None is markup_problem(text, "MarkdownV2")
    assert f"Hi {value}!" == _markdown_v2_visible(text)


def test_markup_in_a_field_is_escaped_for_each_parse_mode() -> None:
    """<b>Bob</b> and Bob_the_* arrive as those characters, in HTML and in MarkdownV2."""
    row = Recipient(1, {"name": "<b>Bob</b> & Bob_the_*"})
    as_html = Personal(Message("Hi $name", parse_mode="HTML"), template=True).render(row)
    as_md = Personal(Message("Hi $name", parse_mode="MarkdownV2"), template=True).render(row)
    plain = Personal(Message("Hi $name"), template=True).render(row)
    assert "Hi &lt;b&gt;Bob&lt;/b&gt; &amp; Bob_the_*" == as_html.text
    assert "Hi <b\\>Bob</b\\> & Bob\\_the\\_\\*" == as_md.text
    assert "Hi <b>Bob</b> & Bob_the_*" == plain.text


async def test_a_text_without_template_is_sent_as_written(ledger: AsyncLedger) -> None:
    """Without template=True a $ is a dollar sign: today's campaigns do not change."""
    sender = FakeSender()
    await Broadcast(Notifier(ledger, sender), "news", "c1", Message("$5 off, $name"), [1]).run()
    assert ["$5 off, $name"] == sender.texts


async def test_a_missing_field_takes_its_default(ledger: AsyncLedger, tmp_path: Path) -> None:
    """A row without the field (or with it empty) gets the default; $$ is a dollar sign."""
    path = tmp_path / "people.csv"
    path.write_text("chat_id,name\n1,Ann\n2,\n")
    sender = FakeSender()
    await Broadcast(
        Notifier(ledger, sender),
        "news",
        "c1",
        Message("Hi $name, $$5 off"),
        recipients_from_file(path),
        template=True,
        defaults={"name": "friend"},
    ).run()
    assert {"1": "Hi Ann, $5 off", "2": "Hi friend, $5 off"} == texts_by_chat(sender)


async def test_a_missing_field_without_default_is_refused_before_any_claim(
    ledger: AsyncLedger, tmp_path: Path
) -> None:
    """A row without a field and no default: refused naming its line; nothing claimed."""
    path = tmp_path / "people.csv"
    path.write_text("chat_id,name\n1,Ann\n2,\n3,Cy\n")
    sender = FakeSender()
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, sender),
            "news",
            "c1",
            Message("Hi $name"),
            recipients_from_file(path),
            template=True,
        ).run()
    assert info.value.problem.startswith("line 3 ('2,'): recipient has no field 'name'")
    assert ([], 0) == (sender.sent, await claimed(ledger))


async def test_a_list_row_without_a_field_is_refused_before_any_claim(
    ledger: AsyncLedger,
) -> None:
    """A list of rows is checked whole before the first send, as a file is: the row
    without the field comes after the Notifier's first batches, which are not sent either."""
    sender = FakeSender()
    rows = [Recipient(chat, {"name": "Ann"}) for chat in range(1, 2001)] + [Recipient(2001)]
    with pytest.raises(ValidationError) as info:
        await Broadcast(
            Notifier(ledger, sender), "news", "c1", Message("Hi $name"), rows, template=True
        ).run()
    assert "has no field 'name' for the template, and it has no default" == info.value.problem
    assert ([], 0) == (sender.sent, await claimed(ledger))


async def test_a_template_with_a_bad_dollar_is_refused_at_once(ledger: AsyncLedger) -> None:
    """A $ that starts no placeholder in a template is refused when the Broadcast is built."""
    with pytest.raises(ValidationError) as info:
        Broadcast(Notifier(ledger, FakeSender()), "n", "c", Message("5$ off"), [1], template=True)
    assert "message" == info.value.field


async def test_a_recipient_made_too_long_by_its_values_is_refused_alone(
    ledger: AsyncLedger, tmp_path: Path, bot_api_server: BotAPIServer
) -> None:
    """A name that pushes the text past 4,096 refuses that chat alone, before its claim."""
    from notifyonce.telegram import TelegramSender

    path = tmp_path / "people.csv"
    path.write_text(f"chat_id,name\n1,Ann\n2,{'N' * 100}\n3,Cy\n")
    message = Message("x" * 4000 + " $name")
    async with TelegramSender("123:abc", base_url=bot_api_server.url, rate_limit=None) as sender:
        report = await Broadcast(
            Notifier(ledger, sender),
            "news",
            "c1",
            message,
            recipients_from_file(path),
            template=True,
        ).run()
    assert (2, 1) == (report.progress.sent, report.progress.skipped)
    assert {"refused: text too long once filled in": 1} == dict(report.progress.skips)
    assert ["1", "3"] == sorted(str(r.chat_id) for r in bot_api_server.deliveries)
    assert 2 == await claimed(ledger)


# -- languages ------------------------------------------------------------------------


async def test_each_row_gets_its_languages_variant(ledger: AsyncLedger, tmp_path: Path) -> None:
    """ru gets the ru variant, pt-br the pt one, others and rows without one the default."""
    path = tmp_path / "people.csv"
    path.write_text("chat_id,name,language\n1,Ann,en\n2,Boris,ru\n3,João,pt-BR\n4,Xu,\n")
    sender = FakeSender()
    await Broadcast(
        Notifier(ledger, sender),
        "news",
        "c1",
        Message("Hello $name"),
        recipients_from_file(path),
        template=True,
        variants={"ru": Message("Привет, $name"), "pt": Message("Olá $name")},
    ).run()
    expected = {"1": "Hello Ann", "2": "Привет, Boris", "3": "Olá João", "4": "Hello Xu"}
    assert expected == texts_by_chat(sender)


def test_a_variant_has_its_own_buttons_filled_in() -> None:
    """A variant's buttons are its own; their texts take values as is, URLs percent-encoded."""
    keyboard = {"inline_keyboard": [[{"text": "Open, $name", "url": "https://x.test/?u=$name"}]]}
    ru = {"inline_keyboard": [[{"text": "Открыть", "url": "https://x.test/ru"}]]}
    personal = Personal(
        Message("Hi", reply_markup=keyboard),
        {"ru": Message("Привет", reply_markup=ru)},
        template=True,
    )
    mine = personal.render(Recipient(1, {"name": "A&B <x>"})).reply_markup
    assert {
        "inline_keyboard": [[{"text": "Open, A&B <x>", "url": "https://x.test/?u=A%26B%20%3Cx%3E"}]]
    } == mine
    assert ru == personal.render(Recipient(2, {"name": "B"}, language="ru")).reply_markup


@pytest.mark.parametrize("key", ["text", "url"])
def test_a_field_only_a_button_needs_is_refused_when_missing(key: str) -> None:
    """A recipient with every field the text needs but not one a button's text or URL
    needs is refused, naming that field, rather than sent a button with a blank in it."""
    button = {"text": "Open", "url": "https://x.test/"}
    button[key] += "$slug" if key == "url" else " $slug"
    personal = Personal(
        Message("Hi $name", reply_markup={"inline_keyboard": [[button]]}), template=True
    )
    with pytest.raises(ValidationError) as refused:
        personal.render(Recipient(1, {"name": "Ann"}))
    assert "recipient" == refused.value.field
    assert "has no field 'slug' for the template" in refused.value.problem


# -- the recipient's own hour ---------------------------------------------------------


class _TimedSender(FakeSender):
    """A FakeSender that notes the (fake) wall time of each send."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        super().__init__()
        self.clock = clock
        self.at: dict[str, dt.datetime] = {}

    async def send(self, recipient: str, message: Message):  # type: ignore[no-untyped-def]
        self.at[recipient] = self.clock()
        return await super().send(recipient, message)


async def test_each_recipient_gets_it_at_ten_in_its_own_zone(
    async_engine: AsyncEngine, async_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 10:00 local in Berlin, Moscow, New York and Tokyo: each sent within one step of
    the fake clock after its hour, over the day the campaign spans."""
    import notifyonce._broadcast as broadcast

    monkeypatch.setattr(broadcast, "_LOCAL_STEP", 0.01)
    clock = WallClock(dt.datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    # A lease longer than the day the fake clock walks: no claim expires in a jump.
    lease = dt.timedelta(days=3)
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=clock, lease=lease)
    await ledger.create_schema()
    sender = _TimedSender(clock)
    rows = [
        Recipient(1, {}, timezone=None),  # the default: Europe/Berlin, 09:00 UTC
        Recipient(2, {}, timezone=_zone("Europe/Moscow")),  # 11:00 there: tomorrow 07:00
        Recipient(3, {}, timezone=_zone("America/New_York")),  # 15:00 UTC
        Recipient(4, {}, timezone=_zone("Asia/Tokyo")),  # 10:00 there is 01:00 UTC tomorrow
    ]
    seen: list[int] = []
    job = Broadcast(
        Notifier(ledger, sender),
        "news",
        "c1",
        Message("Good morning"),
        rows,
        start_at_local=dt.time(10),
        default_tz="Europe/Berlin",
        on_progress=lambda p: seen.append(p.waiting),
        every=0.01,
    )
    due = {
        "1": dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        "2": dt.datetime(2026, 12, 2, 7, 0, tzinfo=UTC),
        "3": dt.datetime(2026, 12, 1, 15, 0, tzinfo=UTC),
        "4": dt.datetime(2026, 12, 2, 1, 0, tzinfo=UTC),
    }
    task = asyncio.ensure_future(job.run())
    # The first pass counts all four waiting before the clock moves at all: the progress
    # reports the loop below counts come every 0.01 s, and on a busy machine two of them
    # (still counting none waiting) could come before the first pass had counted
    # (bounded: 10 s; a pass that never counts four fails the check below).
    for _wait in range(2000):
        if task.done() or 4 in seen:
            break
        await asyncio.sleep(0.005)
    step = dt.timedelta(minutes=30)
    for _ in range(2 * 24):
        # The clock moves on once what is due by now was sent and a pass more reported
        # (a pass takes a few ms), or after 2 s: a chat never sent, or sent early, still
        # fails the checks below.
        reported = len(seen)
        for _wait in range(400):
            sent = all(chat in sender.at for chat, when in due.items() if when <= clock.now)
            if task.done() or (sent and len(seen) >= reported + 2):
                break
            await asyncio.sleep(0.005)
        if task.done():
            break
        clock.advance(step)
    report = await asyncio.wait_for(task, 10)
    assert (4, 0) == (report.progress.sent, report.progress.duplicate), "each pass asks anew"
    late = {chat: sender.at[chat] - when for chat, when in due.items()}
    assert dict.fromkeys(due, True) == {  # late by no more than one step
        chat: dt.timedelta(0) <= d <= step for chat, d in late.items()
    }
    assert 4 == max(seen)


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC), dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
        (
            dt.datetime(2026, 12, 1, 9, 0, 1, tzinfo=UTC),
            dt.datetime(2026, 12, 2, 9, 0, tzinfo=UTC),
        ),
        (
            dt.datetime(2026, 12, 1, 8, 59, 59, tzinfo=UTC),
            dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        ),
    ],
    ids=["at-the-hour", "a-second-after", "a-second-before"],
)
def test_the_local_hour_is_the_first_at_or_after_the_start(
    start: dt.datetime, expected: dt.datetime
) -> None:
    """10:00 in Berlin (09:00 UTC) from a start at that very moment is due at once; a
    second later it is the next day's; a second before, today's."""
    local = LocalHour(dt.time(10), _zone("Europe/Berlin"), start)
    assert expected == local.due(None)
    assert expected == local.due(_zone("Europe/Berlin"))


async def test_a_cancel_from_the_console_ends_the_wait_for_the_next_hour(
    async_engine: AsyncEngine, async_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled between two hours: the rows still waiting are not sent, the run ends."""
    import notifyonce._broadcast as broadcast
    from notifyonce._campaign import request_cancel

    monkeypatch.setattr(broadcast, "_LOCAL_STEP", 0.01)
    monkeypatch.setattr(broadcast, "_CANCEL_POLL", 0.01)
    clock = WallClock(dt.datetime(2026, 12, 1, 9, 30, tzinfo=UTC))
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=clock)
    await ledger.create_schema()
    sender = FakeSender()
    rows = [Recipient(1), Recipient(2, timezone=_zone("Asia/Tokyo"))]  # Tokyo: tomorrow
    job = Broadcast(
        Notifier(ledger, sender),
        "news",
        "c1",
        Message("Hi"),
        rows,
        start_at_local=dt.time(10),
        default_tz="Europe/Berlin",  # 10:00 there is 09:00 UTC: row 1 is due at once
        start_at=dt.datetime(2026, 12, 1, 8, 30, tzinfo=UTC),  # the hours count from here
    )
    task = asyncio.ensure_future(job.run())
    for _ in range(200):
        await asyncio.sleep(0.01)
        if job.progress().sent:
            break
    assert await request_cancel(ledger, "news", "c1")
    report = await asyncio.wait_for(task, 10)
    assert ["1"] == [r.recipient for r in sender.sent]
    assert report.cancelled
    assert (report.report.stopped or "").startswith("cancelled from the console")


async def test_a_dry_run_of_a_local_time_campaign_waits_for_no_hour(ledger: AsyncLedger) -> None:
    """A dry run counts every row it would send, whatever its hour, without waiting."""
    rows = [Recipient(1, timezone=_zone("Asia/Tokyo")), Recipient(2)]
    notifier = Notifier(ledger, FakeSender(), dry_run=True)
    job = Broadcast(notifier, "news", "c1", Message("Hi"), rows, start_at_local=dt.time(10))
    report = await asyncio.wait_for(job.run(), 10)
    assert {"dry run: would send": 2} == dict(report.progress.skips)


def test_the_progress_line_and_the_admin_chat_show_who_waits_for_their_hour() -> None:
    """A local-time campaign's waiting rows and the next hour show in both displays."""
    from notifyonce import BroadcastProgress
    from notifyonce._cli.broadcast import render_line
    from notifyonce._progress_chat import render_progress

    later = dt.datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
    p = BroadcastProgress(sent=10, total=1210, waiting=1200, next_due=later, rate=40.0)
    said = "waiting for their hour 1,200 (next 2026-12-02 07:00 UTC)"
    line = "waiting for their hour 1,200, 40/s, next batch due 2026-12-02 07:00 UTC"
    assert line in render_line(p)
    assert said in render_progress("news/c1", p).splitlines()
    assert "waiting" not in render_line(BroadcastProgress(sent=10))


def test_rows_waiting_for_their_hour_get_no_eta_from_the_rate() -> None:
    """Right after the first zone's batch, with rows waiting hours for theirs, neither the
    progress line nor the admin chat's message gives an ETA from the recent rate: the line
    says when the next batch is due instead."""
    from notifyonce import BroadcastProgress
    from notifyonce._cli.broadcast import render_lines
    from notifyonce._progress_chat import render_progress

    later = dt.datetime(2026, 12, 2, 17, 0, tzinfo=UTC)
    p = BroadcastProgress(sent=400, total=1600, waiting=1200, next_due=later, rate=240.0)
    shown = "\n".join(render_lines(p, 200))
    assert (None, False) == (p.eta, "ETA" in shown), shown
    assert "next batch due 2026-12-02 17:00 UTC" in shown
    assert "s left" not in render_progress("news/c1", p)


def _zone(name: str) -> dt.tzinfo:
    import zoneinfo

    return zoneinfo.ZoneInfo(name)


async def test_quiet_hours_apply_in_each_rows_own_zone(
    async_engine: AsyncEngine, async_table: str, tmp_path: Path
) -> None:
    """At 23:00 UTC a Berlin row (midnight) is in quiet hours and skipped; Tokyo's is not."""
    clock = WallClock(dt.datetime(2026, 12, 1, 23, 0, tzinfo=UTC))
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=clock)
    await ledger.create_schema()
    path = tmp_path / "people.csv"
    path.write_text("chat_id,tz\n1,Europe/Berlin\n2,Asia/Tokyo\n")
    sender = FakeSender()
    night = QuietHours(dt.time(22), dt.time(8))
    report = await Broadcast(
        Notifier(ledger, sender, quiet_hours=night),
        "news",
        "c1",
        Message("Hi"),
        recipients_from_file(path),
    ).run()
    assert ["2"] == [r.recipient for r in sender.sent]
    assert {"quiet hours": 1} == dict(report.progress.skips)


# -- one campaign ---------------------------------------------------------------------


async def test_a_changed_variant_or_button_is_refused_on_resume(ledger: AsyncLedger) -> None:
    """The fingerprint covers the template, each variant and the buttons."""
    notifier = Notifier(ledger, FakeSender())
    ru = {"ru": Message("Привет, $name")}
    ann = [Recipient(1, {"name": "Ann"})]
    await Broadcast(
        notifier, "news", "c1", Message("Hi $name"), ann, template=True, variants=ru
    ).run()
    changes = [
        {"variants": {"ru": Message("Здравствуйте, $name")}, "template": True},
        {"variants": ru, "template": False},
        {"variants": ru, "template": True, "defaults": {"name": "x"}},
    ]
    for change in changes:
        with pytest.raises(ValidationError) as info:
            await Broadcast(notifier, "news", "c1", Message("Hi $name"), ann, **change).run()
        assert "message" == info.value.field
    keyboard = {"inline_keyboard": [[{"text": "Open", "url": "https://x.test"}]]}
    await Broadcast(notifier, "news", "c2", Message("Hi", reply_markup=keyboard), [1]).run()
    other = {"inline_keyboard": [[{"text": "Open", "url": "https://y.test"}]]}
    with pytest.raises(ValidationError):
        await Broadcast(notifier, "news", "c2", Message("Hi", reply_markup=other), [2]).run()


async def test_buttons_json_has_no_form_for_keep_one_fingerprint() -> None:
    """An object in the buttons (its repr holds its address) fingerprints the same on
    every run, so a resume is not refused for it."""
    from notifyonce._campaign import fingerprint

    class Markup:
        pass

    first = await fingerprint(Message("Hi", reply_markup={"keyboard": Markup()}))
    again = await fingerprint(Message("Hi", reply_markup={"keyboard": Markup()}))
    assert first == again


# -- the console's counts per language ---------------------------------------------------


async def languages_kept(ledger: AsyncLedger) -> LanguageCounts | None:
    """The counts per language the campaign's run kept for the console."""
    from notifyonce.web._queries import campaign_languages

    async with ledger.engine.connect() as conn:
        return await conn.run_sync(
            lambda sync: campaign_languages(sync, ledger.table, "news", "c1")
        )


async def test_a_run_keeps_its_counts_per_language_for_the_console(
    ledger: AsyncLedger, tmp_path: Path
) -> None:
    """Each variant's recipients and outcomes, counted by the row's language (``ru-RU``
    is the ``ru`` variant's; a language without one is the default's); a re-run counts
    the chats the first run sent as earlier."""
    path = tmp_path / "people.csv"
    path.write_text(
        "chat_id,name,language\n1,Ann,de\n2,Boris,ru\n3,Vera,ru-RU\n4,Carl,\n5,Olga,ru\n"
    )
    ru = {"ru": Message("Привет, $name")}

    def job(rows: object) -> Broadcast:
        return Broadcast(
            Notifier(ledger, FakeSender()),
            "news",
            "c1",
            Message("Hi $name"),
            recipients_from_file(rows),  # type: ignore[arg-type]
            template=True,
            variants=ru,
        )

    first = tmp_path / "first.csv"
    first.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
    await job(first).run()
    await job(path).run()
    kept = await languages_kept(ledger)
    assert kept is not None
    empty = {"unknown": 0, "other": 0, "waiting": 0}
    assert {
        "": {"recipients": 2, "sent": 1, "earlier": 1, **empty},
        "ru": {"recipients": 3, "sent": 2, "earlier": 1, **empty},
    } == kept.languages
    assert (0, None) == (kept.waiting, kept.next_due)


async def test_a_local_time_run_keeps_who_waits_for_their_hour_per_language(
    async_engine: AsyncEngine, async_table: str
) -> None:
    """Cancelled between two hours: the console's counts say which language's rows wait,
    how many, and when the next is due."""
    from notifyonce._campaign import request_cancel

    clock = WallClock(dt.datetime(2026, 12, 1, 9, 30, tzinfo=UTC))
    ledger = AsyncLedger(async_engine, table_name=async_table, clock=clock)
    await ledger.create_schema()
    tokyo = _zone("Asia/Tokyo")
    rows = [
        Recipient(1, {"language": "en"}, language="en"),  # Berlin: due at 09:00 UTC
        Recipient(2, {"language": "ru"}, language="ru", timezone=tokyo),  # tomorrow 01:00
        Recipient(3, {"language": "ru"}, language="ru", timezone=tokyo),
    ]
    job = Broadcast(
        Notifier(ledger, FakeSender()),
        "news",
        "c1",
        Message("Hi"),
        rows,
        variants={"ru": Message("Привет")},
        start_at_local=dt.time(10),
        default_tz="Europe/Berlin",
        start_at=dt.datetime(2026, 12, 1, 8, 30, tzinfo=UTC),
    )
    task = asyncio.ensure_future(job.run())
    for _ in range(500):
        await asyncio.sleep(0.01)
        if job.progress().waiting:
            break
    assert await request_cancel(ledger, "news", "c1")
    await asyncio.wait_for(task, 30)
    kept = await languages_kept(ledger)
    assert kept is not None
    assert {"recipients": 1, "sent": 1, "waiting": 0} == {
        k: kept.languages[""][k] for k in ("recipients", "sent", "waiting")
    }
    assert {"recipients": 2, "sent": 0, "waiting": 2} == {
        k: kept.languages["ru"].get(k, 0) for k in ("recipients", "sent", "waiting")
    }
    assert (2, dt.datetime(2026, 12, 2, 1, 0, tzinfo=UTC)) == (kept.waiting, kept.next_due)


def test_counts_of_many_languages_fit_their_row_leaving_the_smallest_out() -> None:
    """Sixty languages do not fit the row's 500 characters: the smallest are left out and
    counted, and what is kept reads back as written."""
    languages = {f"l{n:02d}": {"recipients": 1000 + n, "sent": n, "waiting": 1} for n in range(60)}
    text = LanguageCounts(languages, waiting=60).text()
    assert len(text) <= 500
    kept = LanguageCounts.read(text)
    assert kept is not None
    assert 60 == len(kept.languages) + kept.left_out
    assert {"l59", "l58"} <= set(kept.languages)
    assert "l00" not in kept.languages
    assert {
        "recipients": 1059,
        "sent": 59,
        "waiting": 1,
        "unknown": 0,
        "earlier": 0,
        "other": 0,
    } == (kept.languages["l59"])
    assert None is LanguageCounts.read("not json")
