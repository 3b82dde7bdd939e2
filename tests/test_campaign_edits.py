"""After the send: the local Bot API server's edits and deletes, and a campaign's revisions.

The server answers ``editMessageText``, ``editMessageCaption``, ``editMessageReplyMarkup``,
``deleteMessage`` and ``deleteMessages`` with Telegram's refusals; `CampaignRevision` edits
or deletes each message a campaign sent once, through the ledger's slots.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from notifyonce import (
    Album,
    AsyncLedger,
    Broadcast,
    CampaignRevision,
    Copy,
    DeliveryMode,
    Message,
    Notifier,
    PermanentSendError,
    Photo,
    Receipt,
    Revision,
    SentMessages,
    ValidationError,
    ValidationTypeError,
)
from notifyonce.telegram import RateLimit, TelegramSender
from notifyonce.testing import BotAPIServer, FakeSender, Reply

TOKEN = "424242:EDIT-secret"
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
KEYBOARD = {"inline_keyboard": [[{"text": "Open", "url": "https://example.org/"}]]}
TWO_DAYS = 48 * 3600.0


def photo(n: int = 0) -> Photo:
    return Photo(b"\xff\xd8\xff\xe0" + bytes([n]) * 400, filename=f"p{n}.jpg")


# -- the server -----------------------------------------------------------------------------


async def test_the_server_edits_a_text_once_and_refuses_what_telegram_refuses(
    bot_api_server: BotAPIServer,
) -> None:
    """A text edit changes the message; the same edit again is "not modified" (False); a
    message the server does not hold is "message to edit not found"."""
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        sent = await sender.send("5", Message("Sale until Friday"))
        assert isinstance(sent.message_id, int)
        first = await sender.edit_message("5", sent.message_id, text="Sale until Sunday")
        again = await sender.edit_message("5", sent.message_id, text="Sale until Sunday")
        with pytest.raises(PermanentSendError) as missing:
            await sender.edit_message("5", 999, text="Sale until Sunday")
    assert (True, False) == (first, again)
    assert "Sale until Sunday" == bot_api_server.message_text(5, sent.message_id)
    assert "Bad Request: message to edit not found" == missing.value.description
    changes = [(c.method, c.chat_id, c.message_id) for c in bot_api_server.changes]
    assert [("editMessageText", "5", sent.message_id)] == changes


async def test_a_caption_edit_and_a_keyboard_edit_and_the_other_kind_of_message(
    bot_api_server: BotAPIServer,
) -> None:
    """A photo's caption is edited with editMessageCaption; a text edit of a photo is
    refused ("there is no text in the message to edit") and the sender tries the caption;
    a keyboard alone is editMessageReplyMarkup, "not modified" when it is the same."""
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        sent = await sender.send("6", Message("Old caption", media=photo()))
        assert isinstance(sent.message_id, int)
        mid = sent.message_id
        assert await sender.edit_message("6", mid, text="New caption", caption=True)
        assert await sender.edit_message("6", mid, text="Newer caption")  # tried as text first
        assert await sender.edit_message("6", mid, reply_markup=KEYBOARD)
        assert not await sender.edit_message("6", mid, reply_markup=KEYBOARD)
    methods = [(r.method, r.reply.status) for r in bot_api_server.requests[1:]]
    assert [
        ("editMessageCaption", 200),
        ("editMessageText", 400),
        ("editMessageCaption", 200),
        ("editMessageReplyMarkup", 200),
        ("editMessageReplyMarkup", 400),
    ] == methods
    assert "Newer caption" == bot_api_server.message_text(6, mid)


async def test_the_server_deletes_within_48_hours_by_its_clock(
    bot_api_server: BotAPIServer,
) -> None:
    """A message is deleted once (then "message to delete not found"); one older than 48
    hours by the server's clock is "message can't be deleted for everyone"; an album's
    messages go in one deleteMessages."""
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        one = await sender.send("7", Message("one"))
        old = await sender.send("7", Message("old"))
        album = await sender.send("7", Message("three", media=Album([photo(1), photo(2)])))
        assert isinstance(one.message_id, int)
        assert isinstance(old.message_id, int)
        await sender.delete_messages("7", [one.message_id])
        with pytest.raises(PermanentSendError) as gone:
            await sender.delete_messages("7", [one.message_id])
        date = bot_api_server.message_date(7, old.message_id)
        assert date is not None
        bot_api_server.set_message_date(7, old.message_id, date - TWO_DAYS - 1)
        with pytest.raises(PermanentSendError) as too_old:
            await sender.delete_messages("7", [old.message_id])
        ids = [int(i) for i in str(album.message_id).split(",")]
        await sender.delete_messages("7", ids)
        bot_api_server.advance_clock(TWO_DAYS + 1)
        late = await sender.send("7", Message("late"))
        assert isinstance(late.message_id, int)
        await sender.delete_messages("7", [late.message_id])  # young by the moved clock
    assert "Bad Request: message to delete not found" == gone.value.description
    assert "Bad Request: message can't be deleted for everyone" == too_old.value.description
    assert "old" == bot_api_server.message_text(7, old.message_id)
    deleted = [(c.method, c.message_id) for c in bot_api_server.changes]
    expected = [("deleteMessage", one.message_id)]
    expected += [("deleteMessages", i) for i in ids] + [("deleteMessage", late.message_id)]
    assert expected == deleted


@pytest.mark.parametrize(
    ("text", "caption", "markup", "field"),
    [
        ("x" * 4097, False, None, "text"),
        ("x" * 1025, True, None, "text"),
        (None, False, None, "text"),
        ("<b>open", False, None, "text"),
        (None, False, {"inline_keyboard": [[{"callback_data": {1, 2}}]]}, "reply_markup"),
    ],
)
async def test_a_bad_edit_is_refused_before_any_request(
    bot_api_server: BotAPIServer, text: str | None, caption: bool, markup: object, field: str
) -> None:
    """Too long a text or caption, nothing to edit, HTML that does not parse, a keyboard
    JSON cannot carry: a ValidationError naming the field, and no request."""
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        with pytest.raises(ValidationError) as refused:
            await sender.edit_message(
                "5",
                1,
                text=text,
                caption=caption,
                reply_markup=markup,
                parse_mode="HTML" if text == "<b>open" else None,
            )
    assert field == refused.value.field
    assert [] == bot_api_server.requests


# -- revisions ------------------------------------------------------------------------------


def notifier_for(ledger: AsyncLedger, server: BotAPIServer) -> tuple[Notifier, TelegramSender]:
    sender = TelegramSender(TOKEN, base_url=server.url, rate_limit=FAST)
    return Notifier(ledger, sender, concurrency=8), sender


async def test_an_edit_edits_each_message_once_and_again_changes_nothing(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """30 text messages edited: each once (revision 2); the same edit again is all
    duplicates and no request; another edit is revision 3 and edits them again."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c1", Message("Sale"), range(1, 31)).run()
        revision = CampaignRevision(notifier, "news", "c1")
        first = await revision.edit("Sale ends Sunday")
        calls = len(bot_api_server.requests)
        again = await revision.edit("Sale ends Sunday")
        repeated = len(bot_api_server.requests) - calls
        third = await revision.edit("Sale is over", reply_markup=KEYBOARD)
    assert (30, 0) == (first.progress.sent, first.progress.duplicate)
    assert (0, 30, 0) == (again.progress.sent, again.progress.duplicate, repeated)
    assert ("c1#edit-2", "c1#edit-2", "c1#edit-3") == (
        first.campaign,
        again.campaign,
        third.campaign,
    )
    edited = [(c.chat_id, c.message_id) for c in bot_api_server.changes]
    assert (60, 30) == (len(edited), len(set(edited))), "each message once per revision"
    held = bot_api_server.deliveries
    texts = {bot_api_server.message_text(d.chat_id, d.message_id) for d in held}
    assert {"Sale is over"} == texts
    assert [Revision("c1#edit-2", "edit", 2), Revision("c1#edit-3", "edit", 3)] == (
        await revision.revisions()
    )


async def test_not_modified_is_done_and_not_found_is_recorded_not_retried(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A message already so counts as edited; a message the user deleted is recorded
    failed ("message to edit not found") and a second run does not try it again."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c2", Message("Same"), [1, 2, 3]).run()
        first_ids = {d.chat_id: d.message_id for d in bot_api_server.deliveries}
        bot_api_server.delete_message(2, first_ids["2"])
        report = await CampaignRevision(notifier, "news", "c2").edit("Same")
        before = len(bot_api_server.requests)
        again = await CampaignRevision(notifier, "news", "c2").edit("Same")
    assert (2, 1) == (report.progress.sent, report.progress.failed)
    assert [] == bot_api_server.changes, "nothing changed: the text was already that"
    tried = again.progress.sent + again.progress.failed
    assert (0, before) == (tried, len(bot_api_server.requests))
    t = ledger.table
    async with ledger.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(t.c.subject, t.c.status, t.c.last_error).where(t.c.cycle == "c2#edit-2")
        )
        status = {s: (st, err) for s, st, err in rows.all()}
    assert "failed" == status["2"][0]
    assert "message to edit not found" in str(status["2"][1])
    assert {"sent"} == {status["1"][0], status["3"][0]}


@pytest.mark.parametrize("kind", ["edit", "delete"])
async def test_a_revision_is_at_least_once_by_default_and_at_most_once_when_told(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, kind: str
) -> None:
    """A revision's request that went through but lost its answer (the connection cut)
    is tried again by default, whatever the Notifier's mode, and Telegram's answer to the
    retry ("not modified", "not found") counts as done: no chat unknown, each message
    changed once; with mode=AT_MOST_ONCE the chat is unknown and never tried again."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    assert DeliveryMode.AT_MOST_ONCE == notifier.mode
    statuses = {}
    async with sender:
        for mode, campaign in ((None, "d1"), (DeliveryMode.AT_MOST_ONCE, "d2")):
            await Broadcast(notifier, "news", campaign, Message("Sale"), [1, 2]).run()
            revision = (
                CampaignRevision(notifier, "news", campaign)
                if mode is None
                else CampaignRevision(notifier, "news", campaign, mode=mode)
            )
            bot_api_server.script("1", [Reply.drop_after_delivery()])
            run = revision.edit("Sale ends Sunday") if kind == "edit" else revision.delete()
            first = await run
            run = revision.edit("Sale ends Sunday") if kind == "edit" else revision.delete()
            second = await run
            t = ledger.table
            async with ledger.engine.connect() as conn:
                rows = await conn.execute(
                    sa.select(t.c.subject, t.c.status).where(
                        t.c.action == "news", t.c.cycle == first.campaign
                    )
                )
                statuses[campaign] = dict(rows.all())
            statuses[campaign + "-runs"] = (
                (first.progress.sent, first.progress.retry, first.progress.unknown),
                (second.progress.sent, second.progress.duplicate),
            )
    assert {"1": "sent", "2": "sent"} == statuses["d1"]
    assert ((1, 1, 0), (1, 1)) == statuses["d1-runs"]
    assert {"1": "unknown", "2": "sent"} == statuses["d2"]
    assert ((1, 0, 1), (0, 2)) == statuses["d2-runs"]
    changed = [(c.chat_id, c.message_id) for c in bot_api_server.changes]
    assert 4 == len(changed) == len(set(changed)), "each message changed once"


async def test_a_revision_refuses_a_mode_that_is_not_a_delivery_mode(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """mode="at_least_once" (a str) is refused, naming the field, before anything."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        with pytest.raises(ValidationTypeError) as refused:
            CampaignRevision(notifier, "news", "c1", mode="at_least_once")  # type: ignore[arg-type]
    assert "mode" == refused.value.field
    assert "must be a DeliveryMode, got str" in refused.value.problem


async def test_a_delete_removes_every_album_item_once(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """An album campaign deleted: every item of every album once, in one deleteMessages a
    chat; a second delete is all duplicates."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        album = Message("Menu", media=Album([photo(1), photo(2), photo(3)]))
        await Broadcast(notifier, "news", "c3", album, [1, 2, 3, 4]).run()
        revision = CampaignRevision(notifier, "news", "c3")
        report = await revision.delete()
        again = await revision.delete()
    assert (4, 4) == (report.progress.sent, again.progress.duplicate)
    held = {(d.chat_id, d.message_id) for d in bot_api_server.deliveries}
    deleted = [(c.chat_id, c.message_id) for c in bot_api_server.changes]
    assert 12 == len(held)
    assert sorted(held) == sorted(deleted)
    assert {"deleteMessages"} == {c.method for c in bot_api_server.changes}
    assert [Revision("c3#delete", "delete", None)] == await revision.revisions()


async def test_a_delete_says_what_is_past_48_hours_and_deletes_only_the_rest_when_told(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Two of five messages sent three days ago: a delete refuses with both counts and no
    request; with what_is_possible it deletes the three others and never tries the two."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c4", Message("Old news"), [1, 2, 3, 4, 5]).run()
        ids = {d.chat_id: d.message_id for d in bot_api_server.deliveries}
        three_days = ledger.now() - dt.timedelta(days=3)
        t = ledger.table
        async with ledger.engine.begin() as conn:
            await conn.execute(
                sa.update(t)
                .where(t.c.cycle == "c4", t.c.subject.in_(["1", "2"]))
                .values(sent_at=three_days)
            )
        for chat in ("1", "2"):
            bot_api_server.set_message_date(chat, ids[chat], three_days.timestamp())
        revision = CampaignRevision(notifier, "news", "c4")
        assert SentMessages(5, 2, 0, 0) == await revision.messages()
        before = len(bot_api_server.requests)
        with pytest.raises(ValidationError) as refused:
            await revision.delete()
        tried = len(bot_api_server.requests) - before
        report = await revision.delete(what_is_possible=True)
    assert 0 == tried
    assert "2 of the 5 messages" in refused.value.problem
    assert "other 3" in refused.value.problem
    assert 3 == report.progress.sent
    assert {"3", "4", "5"} == {c.chat_id for c in bot_api_server.changes}
    assert {"deleteMessage"} == {r.method for r in bot_api_server.requests[before:]}
    assert ["3", "4", "5"] == sorted(r.chat_id for r in bot_api_server.requests[before:]), (
        "the two old ones never tried"
    )


async def test_a_deleted_campaign_is_not_edited(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """An edit after the campaign's delete is refused, naming the campaign, before any
    request or claim."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c11", Message("Sale"), [1, 2]).run()
        revision = CampaignRevision(notifier, "news", "c11")
        await revision.delete()
        requests, rows = len(bot_api_server.requests), await _rows(ledger)
        with pytest.raises(ValidationError) as refused:
            await revision.edit("Sale ends Sunday")
        after = (len(bot_api_server.requests), await _rows(ledger))
    assert "campaign" == refused.value.field
    assert "campaign news/c11 was deleted" in refused.value.problem
    assert (requests, rows) == after


async def test_the_48_hours_count_with_a_margin_of_ten_minutes(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A message sent 47 hours 51 minutes ago by the ledger's clock counts as past
    Telegram's limit (the run takes a while), one sent 47 hours 49 minutes ago does not."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c9", Message("News"), [1, 2, 3]).run()
        t = ledger.table
        for chat, ago in (
            ("1", dt.timedelta(hours=47, minutes=51)),
            ("2", dt.timedelta(hours=47, minutes=49)),
        ):
            async with ledger.engine.begin() as conn:
                await conn.execute(
                    sa.update(t)
                    .where(t.c.cycle == "c9", t.c.subject == chat)
                    .values(sent_at=ledger.now() - ago)
                )
        standing = await CampaignRevision(notifier, "news", "c9").messages()
    assert SentMessages(3, 1, 0, 0) == standing


async def test_a_revision_reaches_every_chat_past_its_first_page(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chats are read a page at a time: with pages of two, five chats are edited,
    the last page's one too, and each once."""
    import notifyonce._revision as revision_module

    monkeypatch.setattr(revision_module, "_PAGE", 2)
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c10", Message("Sale"), range(1, 6)).run()
        report = await CampaignRevision(notifier, "news", "c10").edit("Sale ends Sunday")
    edited = [c.chat_id for c in bot_api_server.changes]
    assert 5 == report.progress.sent
    assert ["1", "2", "3", "4", "5"] == sorted(edited)


async def test_bad_revisions_are_refused_before_any_claim_or_request(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """No such campaign, a campaign still running (a chat claimed), a text over the
    limit, a sender that cannot edit, a reserved action: refused, naming the field,
    with nothing claimed or sent."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c5", Message("Hi"), [1, 2]).run()
        rows_before = await _rows(ledger)
        requests = len(bot_api_server.requests)
        with pytest.raises(ValidationError) as missing:
            await CampaignRevision(notifier, "news", "nope").edit("x")
        with pytest.raises(ValidationError) as long:
            await CampaignRevision(notifier, "news", "c5").edit("x" * 5000)
        fake = CampaignRevision(Notifier(ledger, FakeSender()), "news", "c5")
        with pytest.raises(ValidationTypeError) as cannot:
            await fake.delete()
        with pytest.raises(ValidationError) as reserved:
            CampaignRevision(notifier, "notifyonce.revision", "c5")
        claim = await ledger.claim_slot("news", 3, "c5")
        assert claim is not None
        with pytest.raises(ValidationError) as running:
            await CampaignRevision(notifier, "news", "c5").edit("x")
        rows_after = await _rows(ledger)
    assert "campaign" == missing.value.field
    assert "no sent message" in missing.value.problem
    assert "text" == long.value.field
    assert "sender" == cannot.value.field
    assert "action" == reserved.value.field
    assert "campaign" == running.value.field
    assert "still running" in running.value.problem
    assert rows_before + 1 == rows_after, "only the test's own claim was written"
    assert requests == len(bot_api_server.requests)


async def test_a_copy_campaign_is_edited_as_text_or_caption(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """Copies of a text post are edited with editMessageText (the first try)."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        post = bot_api_server.post(777, "Winter sale")
        message = Message("", media=Copy(777, post))
        await Broadcast(notifier, "news", "c6", message, [1, 2]).run()
        report = await CampaignRevision(notifier, "news", "c6").edit("Winter sale: -30%")
    assert 2 == report.progress.sent
    assert {"editMessageText"} == {c.method for c in bot_api_server.changes}


async def _rows(ledger: AsyncLedger) -> int:
    async with ledger.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(ledger.table)
        return int((await conn.execute(query)).scalar_one())


async def test_the_console_lists_a_campaigns_revisions_with_their_counts(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """The campaign's page has a Revisions table: edit 2, edit 3 and the delete, each
    with its slots per status and a link to its own page."""
    httpx = pytest.importorskip("httpx")
    from notifyonce.web import create_app

    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c7", Message("Hi"), [1, 2, 3]).run()
        third = next(d for d in bot_api_server.deliveries if d.chat_id == "3")
        bot_api_server.delete_message(3, third.message_id)  # the user deleted it
        revision = CampaignRevision(notifier, "news", "c7")
        await revision.edit("Hello")
        await revision.edit("Hello again")
        await revision.delete()
    app = create_app(ledger.engine, table=ledger.table.name)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        page = (await client.get("/campaign", params={"action": "news", "campaign": "c7"})).text
    rows = re.findall(r'<tr data-revision="([^"]+)">(.*?)</tr>', page, re.S)
    shown = [
        (cycle, re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cells)).split())
        for cycle, cells in rows
    ]
    assert [
        ("c7#edit-2", ["edit", "2", "0", "2", "1", "0", "0"]),
        ("c7#edit-3", ["edit", "3", "0", "2", "1", "0", "0"]),
        ("c7#delete", ["delete", "0", "3", "0", "0", "0"]),
    ] == shown
    assert "/campaign?action=news&amp;campaign=c7%23edit-2" in page


async def test_a_crashed_runs_expired_claim_does_not_count_as_running(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """A claim of the campaign whose lease ran out (a run that crashed) does not make the
    campaign "still running": the edit goes on, to the chats that were sent."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c8", Message("Hi"), [1, 2]).run()
        await _crashed_claim(ledger, 3, "c8")
        revision = CampaignRevision(notifier, "news", "c8")
        standing = await revision.messages()
        report = await revision.edit("Hello")
    assert SentMessages(2, 0, 0, 0) == standing
    assert 2 == report.progress.sent


async def _crashed_claim(ledger: AsyncLedger, chat: int, campaign: str) -> None:
    """A claim of ``chat`` in ``campaign`` whose run crashed: its lease ran out a minute ago
    (the message may or may not have gone)."""
    claim = await ledger.claim_slot("news", chat, campaign, lease=dt.timedelta(seconds=1))
    assert claim is not None
    t = ledger.table
    async with ledger.engine.begin() as conn:
        past = ledger.now() - dt.timedelta(minutes=1)
        await conn.execute(sa.update(t).where(t.c.id == claim.id).values(lease_until=past))


async def _status(ledger: AsyncLedger, chat: int, campaign: str) -> str | None:
    record = await ledger.get("news", chat, campaign)
    return None if record is None else record.status.value


async def test_an_edit_leaves_a_crashed_at_most_once_runs_claims_to_their_campaign(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """An at-most-once campaign crashed with chat 3 in flight; an edit (at least once)
    before the resume sweeps only its own revision's claims: chat 3 stays claimed, and the
    resume, at most once, records it unknown (a chat already handled, to that run) and does
    not send it again. Another campaign
    of the action run at least once leaves it too."""
    notifier, sender = notifier_for(ledger, bot_api_server)
    async with sender:
        await Broadcast(notifier, "news", "c8", Message("Hi"), [1, 2]).run()
        await _crashed_claim(ledger, 3, "c8")
        edited = await CampaignRevision(notifier, "news", "c8").edit("Hello")
        after_edit = await _status(ledger, 3, "c8")
        other = Notifier(ledger, sender, mode=DeliveryMode.AT_LEAST_ONCE)
        await Broadcast(other, "news", "c9", Message("Other"), [7]).run()
        after_other = await _status(ledger, 3, "c8")
        later = Notifier(ledger, sender, concurrency=8)  # the resume: a new process
        resumed = await Broadcast(later, "news", "c8", Message("Hi"), [1, 2, 3]).run()
    assert (2, "claimed", "claimed") == (edited.progress.sent, after_edit, after_other)
    assert (0, 3, 0) == (
        resumed.progress.sent,
        resumed.progress.duplicate,
        resumed.progress.unknown,
    )
    assert "unknown" == await _status(ledger, 3, "c8")
    assert [] == [d for d in bot_api_server.deliveries if d.chat_id == "3"]


async def test_an_at_least_once_campaign_still_retries_its_own_crashed_claims(
    ledger: AsyncLedger, bot_api_server: BotAPIServer
) -> None:
    """The campaign's run sweeps its own cycle in its own mode: at least once, a crashed
    run's expired claim is released and its chat sent on the resume."""
    sender = TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=FAST)
    notifier = Notifier(ledger, sender, mode=DeliveryMode.AT_LEAST_ONCE)
    async with sender:
        await _crashed_claim(ledger, 3, "c10")
        resumed = await Broadcast(notifier, "news", "c10", Message("Hi"), [1, 2, 3]).run()
    assert (3, 0) == (resumed.progress.sent, resumed.progress.unknown)
    assert "sent" == await _status(ledger, 3, "c10")
    assert ["3"] == [d.chat_id for d in bot_api_server.deliveries if d.chat_id == "3"]


class _TurnCountingEditor:
    """An editor that records each rate-limit turn and what was done inside it."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.inside: str | None = None

    async def send(self, recipient: str, message: Message) -> Receipt:
        self.log.append(("send", recipient))
        return Receipt(recipient, int(recipient) * 10)

    @contextlib.asynccontextmanager
    async def turn(self, recipient: str | int) -> AsyncIterator[None]:
        self.inside = str(recipient)
        self.log.append(("turn", str(recipient)))
        try:
            yield
        finally:
            self.inside = None

    async def edit_message(self, recipient: str | int, message_id: int, **_: object) -> bool:
        assert str(recipient) == self.inside, "an edit outside its chat's turn"
        self.log.append(("edit", str(recipient)))
        return True

    async def delete_messages(self, recipient: str | int, message_ids: object, **_: object) -> None:
        assert str(recipient) == self.inside, "a delete outside its chat's turn"
        self.log.append(("delete", str(recipient)))

    def check_edit(self, text: str | None, **_: object) -> None:
        return None


async def test_edits_and_deletes_take_the_senders_rate_limit_turns(ledger: AsyncLedger) -> None:
    """Each edit and each delete runs inside its chat's rate-limit turn, one turn each,
    as a send does: the bot's budget counts them."""
    editor = _TurnCountingEditor()
    notifier = Notifier(ledger, editor, concurrency=1)  # type: ignore[arg-type]
    await Broadcast(notifier, "news", "c9", Message("Hi"), [1, 2]).run()
    editor.log.clear()
    revision = CampaignRevision(notifier, "news", "c9")
    await revision.edit("Hello")
    await revision.delete()
    expected = [("turn", "1"), ("edit", "1"), ("turn", "2"), ("edit", "2")]
    expected += [("turn", "1"), ("delete", "1"), ("turn", "2"), ("delete", "2")]
    assert expected == editor.log
