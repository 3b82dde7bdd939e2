"""The operator console (`notifyonce web`) over ASGI: each page answers its question on
every database, a requeue goes through its confirmation, and the guards hold (no login,
no page; no CSRF token or another site, no change; no message text or token anywhere)."""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ._databases import Backend, drop_table, make_backend
from ._optional import require
from ._web_ledger import (
    BOT_TOKEN,
    DEADLINE,
    EVIL_SUBJECT,
    LATER,
    MESSAGE_TEXT,
    Seeded,
    insert_rows,
    seeded_ledger,
)

require("starlette", "web")
httpx = require("httpx", "web")

from notifyonce import Audience, Ledger, SlotStatus  # noqa: E402
from notifyonce._campaign import CANCEL_NOTE, cancel_note, cancel_query  # noqa: E402
from notifyonce.web import WebAuth, create_app  # noqa: E402
from notifyonce.web import _queries as queries  # noqa: E402

TOKEN = "operator-token-0123456789"
PAGES = [
    "/",
    "/subject?subject=3",
    "/campaign?action=promo&campaign=2026-12-sale",
    "/campaign.json?action=promo&campaign=2026-12-sale",
    "/problems",
    "/problems?status=unknown&action=trial_6h",
    "/leases",
    "/rate-limits",
    "/recipients",
    "/recipients?recipient=3",
    "/recipients?kind=gone&reason=deactivated&after=400",
    "/search?by=error&q=Unauthorized",
    "/search?by=campaign&q=sale",
    "/subject?subject=3&after=1",
]


class Console:
    """The app on one seeded database, a client for it, and the sync ledger beside it."""

    def __init__(self, backend: Backend, seeded: Seeded, auth: WebAuth | None) -> None:
        self.seeded = seeded
        self.engine = sa.create_engine(backend.sync_url)
        self.ledger = Ledger(self.engine, table_name=seeded.table)
        self.app = create_app(self.engine, table=seeded.table, auth=auth)

    def client(self, **kwargs: Any) -> Any:
        transport = httpx.ASGITransport(app=self.app)
        return httpx.AsyncClient(transport=transport, base_url="http://localhost:8080", **kwargs)

    def status(self, subject: object, cycle: object = DEADLINE) -> SlotStatus:
        record = self.ledger.get("trial_6h", subject, cycle)
        assert record is not None
        return record.status


@pytest.fixture(
    params=[
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres-psycopg", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request.param, tmp_path)


async def _console(backend: Backend, auth: WebAuth | None) -> AsyncIterator[Console]:
    async with seeded_ledger(backend) as seeded:
        console = Console(backend, seeded, auth)
        try:
            yield console
        finally:
            console.engine.dispose()


@pytest.fixture
async def console(backend: Backend) -> AsyncIterator[Console]:
    """The console without a login (as on 127.0.0.1)."""
    async for made in _console(backend, None):
        yield made


@pytest.fixture
async def guarded(backend: Backend) -> AsyncIterator[Console]:
    """The console with a token login."""
    async for made in _console(backend, WebAuth(token=TOKEN)):
        yield made


def _row(html: str, marker: str) -> str:
    """The table row of ``html`` holding ``marker``."""
    match = re.search(rf"<tr[^>]*{re.escape(marker)}[^>]*>(.*?)</tr>", html, re.S)
    assert match, f"no row with {marker}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def test_overview_counts_each_action_and_campaign_per_status(console: Console) -> None:
    """Actions and campaigns with their slots per status, and the last hour's sends."""
    async with console.client() as client:
        page = (await client.get("/")).text
    statuses = " ".join(s.value for s in SlotStatus)
    assert "claimed sent failed unknown released" == statuses
    # trial_6h: 1 held, 2 sent, 2 failed (two cycles), 2 unknown, 0 released
    assert _row(page, 'data-action="trial_6h"').startswith("trial_6h 1 2 2 2 0" + " ")
    assert _row(page, 'data-action="promo"').startswith("promo 1 8 1 1 1" + " ")
    assert "2 sends in the last 60 minutes" in page  # trial_6h's sparkline title
    assert "8 sends in the last 60 minutes" in page
    finished = _row(page, 'data-campaign="2026-11-sale"')
    running = _row(page, 'data-campaign="2026-12-sale"')
    assert finished.endswith("0 5 1 0 0 details")
    assert running.endswith("1 3 0 1 1 details")
    assert "notifyonce.campaign" not in page
    assert "notifyonce.progress" not in page


async def test_counts_stop_at_the_cap(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    """A count past the cap reads no further and shows as "cap+"."""
    monkeypatch.setattr(queries, "COUNT_CAP", 1)
    async with console.client() as client:
        page = (await client.get("/")).text
    assert _row(page, 'data-action="trial_6h"').startswith("trial_6h 1 1+ 1+ 1+ 0" + " ")


async def test_subject_history_spans_actions_and_cycles(console: Console) -> None:
    """One subject's slots of every action and cycle, subjects shown escaped."""
    async with console.client() as client:
        page = (await client.get("/subject", params={"subject": "3"})).text
        evil = (await client.get("/subject", params={"subject": EVIL_SUBJECT})).text
    assert "2 slots of subject" in page
    assert "2026-12-31T18:00:00Z" in page
    assert "2026-12-01T18:00:00Z" in page
    assert "bot was blocked by the user" in page
    assert "read timeout" in page
    assert EVIL_SUBJECT not in evil
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in evil
    assert "1 slot of subject" in evil


async def test_campaign_progress_and_its_live_json(console: Console) -> None:
    """A running campaign: handled of total, remaining, unknown so far, rate and ETA."""
    async with console.client() as client:
        page = await client.get("/campaign", params={"action": "promo", "campaign": "2026-12-sale"})
        data = (
            await client.get(
                "/campaign.json", params={"action": "promo", "campaign": "2026-12-sale"}
            )
        ).json()
    assert 200 == page.status_code
    assert 'data-live-url="/campaign.json?action=promo&amp;campaign=2026-12-sale"' in page.text
    assert "live.js" in page.text
    assert {"claimed": 1, "sent": 3, "failed": 0, "unknown": 1, "released": 1} == data["counts"]
    assert (4, 10, 6, 1) == (data["done"], data["total"], data["remaining"], data["unknown"])
    assert data["rate"] > 0
    assert data["eta_seconds"] > 0
    assert 3 == sum(data["per_minute"])  # this campaign's sends, not the finished one's
    assert 60 == len(data["per_minute"])
    assert "Sends of this campaign per minute" in page.text


def _recipients(html: str) -> list[str]:
    """The recipients listed on a page of /recipients, in order."""
    found = re.findall(r'<tr class="(?:gone|opted-out)" data-recipient="([^"]*)"', html)
    return [unescape(r) for r in found]


async def test_recipients_counts_each_reason_and_category(console: Console) -> None:
    """The gone chats per reason and the opt-outs per category: the audience's own counts,
    as `notifyonce recipients counts` prints them, each a link to its rows; on the first
    page only (no search, filter or later page), as they read the whole table."""
    async with console.client() as client:
        page = (await client.get("/recipients")).text
        searched = (await client.get("/recipients", params={"recipient": "3"})).text
        next_page = (await client.get("/recipients", params={"after": "3"})).text
        chosen = (await client.get("/recipients", params={"reason": "blocked"})).text
    assert "gone 233" == _row(page, 'data-count="gone"')
    assert "blocked 1" == _row(page, 'data-reason="blocked"')
    assert "chat_not_found 1" == _row(page, 'data-reason="chat_not_found"')
    assert "deactivated 230" == _row(page, 'data-reason="deactivated"')
    assert "other 1" == _row(page, 'data-reason="other"')
    assert "opted out 2" == _row(page, 'data-count="opted_out"')
    assert "promo 2" == _row(page, 'data-category="promo"')
    assert 'href="/recipients?reason=deactivated"' in page
    assert 'href="/recipients?category=promo"' in page
    assert 'id="no-counts"' not in page
    for later in (searched, next_page, chosen):
        assert 'id="no-counts"' in later  # they read the whole table: the first page only
        assert 'id="audience-counts"' not in later


async def test_recipients_are_listed_200_a_page_by_their_key(console: Console) -> None:
    """Every row comes once, 200 a page in recipient order, the next page asked after the
    last row's key: never more than a page and one row read."""
    asked: list[int] = []
    rows = Audience.rows

    def spy(self: Audience, **kwargs: Any) -> Any:
        asked.append(kwargs["limit"])
        return rows(self, **kwargs)

    seen: list[str] = []
    url: str | None = "/recipients"
    async with console.client() as client:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Audience, "rows", spy)
            while url is not None:
                page = (await client.get(url)).text
                seen += _recipients(page)
                found = re.search(r'<a id="next" href="([^"]+)"', page)
                url = None if found is None else found.group(1).replace("&amp;", "&")
        gone = _recipients((await client.get("/recipients", params={"reason": "deactivated"})).text)
    everyone = ["105", "3", *(str(i) for i in console.seeded.imported), "4", "7", EVIL_SUBJECT]
    assert sorted(everyone) == sorted(seen)  # each once, in the database's order
    assert len(seen) == len(set(seen))
    assert [201, 201] == asked
    assert [str(i) for i in console.seeded.imported][:200] == gone


async def test_a_recipient_search_shows_what_the_audience_knows(console: Console) -> None:
    """A chat gone, one opted out, one unknown to the audience; a recipient shown escaped;
    the subject page says the same of its subject."""
    async with console.client() as client:
        gone = (await client.get("/recipients", params={"recipient": "3"})).text
        opted = (await client.get("/recipients", params={"recipient": "7"})).text
        unknown = (await client.get("/recipients", params={"recipient": "8"})).text
        evil = (await client.get("/recipients", params={"recipient": EVIL_SUBJECT})).text
        subject = (await client.get("/subject", params={"subject": "3"})).text
    state = re.compile(r'<div id="state">(.*?)</div>', re.S)
    for page, said in (
        (gone, "gone: blocked, since"),
        (opted, "opted out of promo (by button, from update, since"),
        (unknown, "neither gone nor opted out: every notification goes to it"),
        (subject, "gone: blocked, since"),
    ):
        found = state.search(page)
        assert found is not None
        assert said in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", found.group(1)))
    assert "[403] Forbidden: bot was blocked by the user" in gone
    assert EVIL_SUBJECT not in evil
    assert "opted out of promo (by command" in evil


async def test_the_recipients_page_refuses_a_bad_filter_and_says_to_migrate(
    console: Console, backend: Backend
) -> None:
    """A reason that is not one answers 400 naming it; without the recipients table the page
    answers 503 saying to run `notifyonce migrate`, and the subject page still works."""
    async with console.client() as client:
        bad = await client.get("/recipients", params={"reason": "left"})
        drop_table(backend, f"{console.seeded.table}_recipients")
        missing = await client.get("/recipients")
        subject = await client.get("/subject", params={"subject": "3"})
    assert 400 == bad.status_code
    assert "reason: must be a GoneReason" in bad.text
    assert 503 == missing.status_code
    assert "run <code>notifyonce migrate</code>" in missing.text
    assert 200 == subject.status_code
    assert "2 slots of subject" in subject.text
    assert "run notifyonce migrate" in subject.text


def _cancel_request(console: Console, campaign: str) -> str | None:
    with console.engine.connect() as conn:
        value = conn.execute(cancel_query(console.ledger.table, "promo", campaign)).scalar()
    return cancel_note(value)


async def test_cancel_goes_through_a_confirmation_and_needs_the_csrf_token(
    console: Console,
) -> None:
    """The running campaign's page offers a cancel; its confirmation says what happens; a
    POST without the CSRF token, a wrong one, from another site, or unconfirmed changes
    nothing; the confirmed one stores the request, which the pages then show."""
    running = {"action": "promo", "campaign": console.seeded.running}
    async with console.client() as client:
        page = (await client.get("/campaign", params=running)).text
        assert 'id="cancel"' in page
        assert "not requested" in page
        confirm = (await client.get("/campaign/cancel", params=running)).text
        for promise in ("stops within a few seconds", "sends under way finish"):
            assert promise in confirm
        assert "Nothing is sent twice" in confirm
        assert "--resume-cancelled" in confirm
        form = {**running, "csrf": _csrf(confirm), "confirm": "yes"}
        refused = [
            await client.post("/campaign/cancel", data={**form, "csrf": ""}),
            await client.post("/campaign/cancel", data={**form, "csrf": "0" * 64}),
            await client.post(
                "/campaign/cancel", data=form, headers={"sec-fetch-site": "cross-site"}
            ),
            await client.post("/campaign/cancel", data={**form, "confirm": ""}),
            await client.post("/campaign/cancel", data={**form, "campaign": "no-such"}),
        ]
        assert [403] * 5 == [r.status_code for r in refused]
        assert None is _cancel_request(console, console.seeded.running)

        done = await client.post("/campaign/cancel", data=form)
        assert 303 == done.status_code
        note = _cancel_request(console, console.seeded.running)
        assert note is not None
        assert note.startswith(CANCEL_NOTE)
        after = (await client.get("/campaign", params=running)).text
        data = (await client.get("/campaign.json", params=running)).json()
        overview = (await client.get("/")).text
    assert 'id="cancel"' not in after
    assert "cancel requested" in after  # one chat is still claimed: the run is stopping
    assert (note, "cancel requested") == (data["cancel"], data["cancel_state"])
    assert "cancel requested" in _row(overview, f'data-campaign="{console.seeded.running}"')
    assert "cancel" not in _row(overview, f'data-campaign="{console.seeded.finished}"')
    assert None is _cancel_request(console, console.seeded.finished)


async def test_problems_grouped_by_error_and_listed(console: Console) -> None:
    """Unknown and failed slots grouped by action and error; one group's slots listed."""
    async with console.client() as client:
        page = (await client.get("/problems")).text
        chosen = (
            await client.get("/problems", params={"status": "unknown", "action": "trial_6h"})
        ).text
    groups = re.findall(r"<tr class=\"st-(\w+)\">(.*?)</tr>", page, re.S)
    flat = sorted(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", g)).strip() for _, g in groups)
    assert "failed promo 1 [400] Bad Request: chat not found choose" in flat
    assert "unknown trial_6h 1 read timeout after the request was sent choose" in flat
    assert 2 == chosen.count('name="slot"')


async def test_leases_show_the_held_claims(console: Console) -> None:
    """The held claims, soonest to end first, and how many expired."""
    async with console.client() as client:
        page = (await client.get("/leases")).text
    assert re.search(r"<th>held</th><td>2</td>", page)
    assert re.search(r"<th>expired \(for sweep\)</th><td>0</td>", page)
    assert 2 == page.count('<tr class="held">')


async def test_rate_page_shows_the_sql_stores_flood_waits(
    console: Console, backend: Backend
) -> None:
    """A 429's wait recorded in the SQL rate store, and the released slots' errors."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce.ratelimit import SQLRateStore

    async with console.client() as client:
        before = (await client.get("/rate-limits")).text
    engine = create_async_engine(backend.async_url)
    try:
        store = SQLRateStore(engine, table_name=f"{console.seeded.table}_rate_limits")
        await store.create_schema()
        await store.flood_wait("777", "-1001234", 30.0)
    finally:
        await engine.dispose()
    async with console.client() as client:
        after = (await client.get("/rate-limits")).text
    assert 'id="no-store"' in before
    assert "[429] Too Many Requests: retry after 7" in after
    assert "c:777:-1001234" in after
    assert "-1001234" in after
    assert "waiting" in after


async def test_requeue_goes_through_a_confirmation_and_changes_only_the_chosen(
    console: Console,
) -> None:
    """The chosen unknown slots are released after the confirmation, nothing before it;
    the same subject's unknown slot of another cycle, not chosen, stays unknown."""
    other = DEADLINE - dt.timedelta(days=30)
    claim = console.ledger.claim_slot("trial_6h", 3, other)
    assert claim is not None
    console.ledger.mark_unknown(claim, "read timeout after the request was sent")
    chosen = [console.ledger.get("trial_6h", s, DEADLINE) for s in (3, EVIL_SUBJECT)]
    ids = [str(r.id) for r in chosen if r is not None]
    async with console.client() as client:
        page = (
            await client.get("/problems", params={"status": "unknown", "action": "trial_6h"})
        ).text
        assert 3 == page.count('name="slot"')
        confirm = await client.post("/requeue/confirm", data={"csrf": _csrf(page), "slot": ids})
        assert 200 == confirm.status_code
        assert "Requeue 2 slots?" in confirm.text
        assert "may send a duplicate" in confirm.text
        assert SlotStatus.UNKNOWN == console.status(3)  # nothing changed yet
        done = await client.post(
            "/requeue", data={"csrf": _csrf(confirm.text), "slot": ids, "confirm": "yes"}
        )
        assert 303 == done.status_code
        shown = (await client.get(done.headers["location"])).text
    assert "Requeued 2 slots" in shown
    assert SlotStatus.RELEASED == console.status(3)
    assert SlotStatus.RELEASED == console.status(EVIL_SUBJECT)
    assert SlotStatus.UNKNOWN == console.status(3, other)
    assert SlotStatus.FAILED == console.status(3, LATER)
    assert SlotStatus.SENT == console.status(1)


async def test_requeue_leaves_a_slot_that_changed_since_the_page(console: Console) -> None:
    """A slot requeued elsewhere and claimed again is not touched by a stale form."""
    async with console.client() as client:
        page = (
            await client.get("/problems", params={"status": "unknown", "action": "trial_6h"})
        ).text
        ids = re.findall(r'name="slot" value="(\d+)"', page)
        console.ledger.requeue("trial_6h", status="unknown")
        assert console.ledger.claim_slot("trial_6h", 3, DEADLINE) is not None
        done = await client.post(
            "/requeue", data={"csrf": _csrf(page), "slot": ids, "confirm": "yes"}
        )
    assert "requeued=0" in done.headers["location"]
    assert SlotStatus.CLAIMED == console.status(3)


async def test_no_token_no_page(guarded: Console) -> None:
    """Every page and the JSON answer 401 without a login; the token lets in."""
    async with guarded.client() as client:
        for path in PAGES:
            response = await client.get(path)
            assert 401 == response.status_code, path
            assert "trial_6h" not in response.text, path
        wrong = await client.get("/", headers={"authorization": "Bearer not-the-token-at-all"})
        assert 401 == wrong.status_code
        right = await client.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert 200 == right.status_code
        assert "trial_6h" in right.text
    async with guarded.client() as browser:
        login_page = (await browser.get("/")).text
        bad = await browser.post("/login", data={"csrf": _csrf(login_page), "token": "nope"})
        assert 401 == bad.status_code
        good = await browser.post("/login", data={"csrf": _csrf(login_page), "token": TOKEN})
        assert 303 == good.status_code
        assert 200 == (await browser.get("/leases")).status_code


async def test_basic_auth_from_a_user_and_password(backend: Backend) -> None:
    """A user and password: the browser's own prompt (WWW-Authenticate), then pages."""
    async for console in _console(backend, WebAuth(username="ops", password="pw-of-ops")):
        async with console.client() as client:
            refused = await client.get("/")
            assert 401 == refused.status_code
            assert refused.headers["www-authenticate"].startswith("Basic")
            good = base64.b64encode(b"ops:pw-of-ops").decode()
            bad = base64.b64encode(b"ops:wrong").decode()
            assert (
                401
                == (await client.get("/", headers={"authorization": f"Basic {bad}"})).status_code
            )
            assert (
                200
                == (await client.get("/", headers={"authorization": f"Basic {good}"})).status_code
            )


async def test_a_post_without_session_csrf_or_from_another_site_changes_nothing(
    guarded: Console,
) -> None:
    """Requeue refused: no CSRF token, a wrong one, no session cookie, a cross-site POST,
    a logged-out session; the slot stays unknown."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with guarded.client(headers=headers) as client:
        page = (
            await client.get("/problems", params={"status": "unknown", "action": "trial_6h"})
        ).text
        ids = re.findall(r'name="slot" value="(\d+)"', page)
        form = {"csrf": _csrf(page), "slot": ids, "confirm": "yes"}
        attempts = [
            await client.post("/requeue", data={**form, "csrf": ""}),
            await client.post("/requeue", data={**form, "csrf": "0" * 64}),
            await client.post("/requeue", data=form, headers={"origin": "https://evil.example"}),
            await client.post("/requeue", data=form, headers={"sec-fetch-site": "cross-site"}),
        ]
    async with guarded.client(headers=headers) as cookieless:
        attempts.append(await cookieless.post("/requeue", data=form))
    async with guarded.client() as logged_out:
        login = (await logged_out.get("/")).text
        attempts.append(await logged_out.post("/requeue", data={**form, "csrf": _csrf(login)}))
    assert [403] * 6 == [r.status_code for r in attempts]
    assert SlotStatus.UNKNOWN == guarded.status(3)


async def test_a_rebound_host_reads_nothing_and_changes_nothing(console: Console) -> None:
    """DNS rebinding: with no login, a request naming another host (a page whose name was
    pointed at 127.0.0.1) gets 421 on every page, no CSRF token, and its POST changes no
    row; the same requests to localhost work."""
    transport = httpx.ASGITransport(app=console.app)
    async with console.client() as local:
        page = (
            await local.get("/problems", params={"status": "unknown", "action": "trial_6h"})
        ).text
        form = {"csrf": _csrf(page), "slot": re.findall(r'name="slot" value="(\d+)"', page)}
        cookies = dict(local.cookies)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://attacker.test:8080", cookies=cookies
    ) as rebound:
        pages = [await rebound.get(path) for path in PAGES]
        posted = await rebound.post("/requeue", data={**form, "confirm": "yes"})
        static = await rebound.get("/static/console.css")
    assert [421] * (len(PAGES) + 2) == [r.status_code for r in [*pages, posted, static]]
    assert all("csrf" not in r.text for r in pages)
    assert "attacker.test:8080 is not this machine" in pages[0].text
    assert SlotStatus.UNKNOWN == console.status(3)
    async with console.client() as local:
        local.cookies.update(cookies)
        done = await local.post("/requeue", data={**form, "confirm": "yes"})
    assert 303 == done.status_code
    assert SlotStatus.RELEASED == console.status(3)


@pytest.mark.parametrize(
    ("host", "port", "refused"),
    [
        ("127.0.0.1:8080", 8080, None),
        ("localhost:8080", 8080, None),
        ("LOCALHOST:8080", 8080, None),
        ("[::1]:8080", 8080, None),
        ("127.0.0.1", 80, None),
        ("127.0.0.1", None, None),
        ("attacker.test:8080", 8080, "is not this machine"),
        ("localhost.attacker.test:8080", 8080, "is not this machine"),
        ("127.0.0.1.nip.io:8080", 8080, "is not this machine"),
        ("localhost:8081", 8080, "the Host names port 8081, and the console listens on 8080"),
        ("127.0.0.1", 8080, "the Host names port 80"),
        ("", 8080, "names no valid Host"),
        (None, 8080, "names no valid Host"),
        ("[::1", 8080, "names no valid Host"),
        ("localhost:80x", 8080, "names no valid Host"),
        ("localhost:8080:1", 8080, "names no valid Host"),
    ],
)
def test_without_a_login_only_this_machine_on_its_port_is_answered(
    host: str | None, port: int | None, refused: str | None
) -> None:
    """The Host rule without a login: loopback names on the server's own port."""
    from notifyonce.web._security import host_refusal

    reason = host_refusal(host, scheme="http", server_port=port, auth=None, allowed_hosts=None)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None
        assert refused in reason


def test_allowed_hosts_and_a_login_decide_the_host_rule() -> None:
    """With a login any Host is answered; a list of allowed hosts is then the only rule."""
    from notifyonce.web._security import host_refusal

    auth = WebAuth(token=TOKEN)
    assert None is host_refusal(
        "ops.example.com", scheme="https", server_port=8000, auth=auth, allowed_hosts=None
    )
    allowed = frozenset({"ops.example.com", "intra.example.com:8443"})
    for login in (None, auth):
        reasons = [
            host_refusal(h, scheme="https", server_port=8000, auth=login, allowed_hosts=allowed)
            for h in (
                "ops.example.com",
                "OPS.example.com:9999",
                "intra.example.com:8443",
                "intra.example.com",
                "localhost:8000",
            )
        ]
        assert [None, None, None] == reasons[:3]
        assert all("not one of the console's allowed hosts" in str(r) for r in reasons[3:])


def test_allowed_hosts_is_checked_before_anything_else() -> None:
    """A string or an empty list of allowed hosts is refused, naming the field."""
    from notifyonce._errors import ValidationError

    for bad in ("ops.example.com", [], [""]):
        with pytest.raises(ValidationError, match="allowed_hosts"):
            create_app("sqlite://", allowed_hosts=bad)


async def test_allowed_hosts_let_a_proxy_name_through(backend: Backend) -> None:
    """Behind a proxy that keeps its public name, allowed_hosts lets that name in and
    still refuses others."""
    async with seeded_ledger(backend) as seeded:
        engine = sa.create_engine(backend.sync_url)
        try:
            app = create_app(engine, table=seeded.table, allowed_hosts=["ops.example.com"])
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="https://ops.example.com"
            ) as client:
                ok = await client.get("/")
                other = await client.get("/", headers={"host": "localhost"})
        finally:
            engine.dispose()
    assert (200, 421) == (ok.status_code, other.status_code)


async def test_no_message_text_or_token_in_any_response(guarded: Console) -> None:
    """The campaigns' message, its fingerprint and a bot token in an error never appear."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with guarded.client(headers=headers) as client:
        bodies = [(await client.get(path)).text for path in PAGES]
        bodies.append(
            (await client.get("/problems", params={"status": "failed", "action": "trial_6h"})).text
        )
        bodies.append((await client.get("/subject", params={"subject": "4"})).text)
    everything = "\n".join(bodies)
    assert "[401] Unauthorized at /bot&lt;redacted&gt;/sendMessage" in everything
    assert "[401] at /bot&lt;redacted&gt;/getChat" in everything  # an audience row's words
    for secret in (MESSAGE_TEXT, "Secret sale", BOT_TOKEN, BOT_TOKEN.split(":")[1], TOKEN):
        assert secret not in everything
    assert "msg-sha256:" not in everything


@pytest.mark.parametrize("engine_kind", ["sync", "async"])
async def test_a_database_without_the_ledger_shows_a_page_saying_to_migrate(
    backend: Backend, engine_kind: str
) -> None:
    """Every page of a console whose database has no ledger table answers 503 with a page
    (or, for JSON, an error) saying to run `notifyonce migrate`; it was a bare 500."""
    from sqlalchemy.ext.asyncio import create_async_engine

    table = backend.unique_table()
    engine = (
        sa.create_engine(backend.sync_url)
        if engine_kind == "sync"
        else create_async_engine(backend.async_url)
    )
    transport = httpx.ASGITransport(app=create_app(engine, table=table))
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8080"
        ) as client:
            answers = {path: await client.get(path) for path in PAGES}
    finally:
        if isinstance(engine, sa.Engine):
            engine.dispose()
        else:
            await engine.dispose()
    assert dict.fromkeys(PAGES, 503) == {p: a.status_code for p, a in answers.items()}
    for path, answer in answers.items():
        shown = answer.json()["error"] if path.startswith("/campaign.json") else answer.text
        assert "notifyonce migrate" in shown
        assert table in shown


async def test_async_engine_and_mounting_under_a_path(backend: Backend) -> None:
    """The app on an AsyncEngine, mounted under /ops in another Starlette app."""
    from sqlalchemy.ext.asyncio import create_async_engine
    from starlette.applications import Starlette
    from starlette.routing import Mount

    async with seeded_ledger(backend) as seeded:
        engine = create_async_engine(backend.async_url)
        try:
            outer = Starlette(routes=[Mount("/ops", app=create_app(engine, table=seeded.table))])
            transport = httpx.ASGITransport(app=outer)
            local = "http://127.0.0.1"
            async with httpx.AsyncClient(transport=transport, base_url=local) as client:
                page = (await client.get("/ops/")).text
                problems = await client.get("/ops/problems")
                recipients = await client.get("/ops/recipients")
                searched = await client.get("/ops/recipients", params={"recipient": "3"})
        finally:
            await engine.dispose()
    assert 'href="/ops/problems"' in page
    assert 'href="/ops/static/console.css"' in page
    assert 'href="/ops/favicon.svg"' in page
    assert 200 == problems.status_code
    assert "read timeout" in problems.text
    assert 'href="/ops/recipients"' in page
    assert "gone 233" == _row(recipients.text, 'data-count="gone"')
    assert "[403] Forbidden: bot was blocked by the user" in searched.text


def test_bind_refused_on_another_interface_without_a_login(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`notifyonce web --host 0.0.0.0` without a login from the environment exits 2."""
    from notifyonce._cli import main
    from notifyonce.web._security import check_bind

    for name in ("NOTIFYONCE_WEB_TOKEN", "NOTIFYONCE_WEB_USER", "NOTIFYONCE_WEB_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["web", "--host", "0.0.0.0", "--database-url", "sqlite://"])
    assert 2 == exited.value.code
    assert "reachable from other machines, and no login is set" in capsys.readouterr().err
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", WebAuth.from_env({"NOTIFYONCE_WEB_TOKEN": TOKEN}))
    monkeypatch.setenv("NOTIFYONCE_WEB_TOKEN", "short")
    with pytest.raises(SystemExit):
        main(["web", "--host", "0.0.0.0", "--database-url", "sqlite://"])
    assert "token: must be at least 16 characters long" in capsys.readouterr().err


def test_sends_per_minute_reads_only_the_last_hour(tmp_path: Path) -> None:
    """The sparkline buckets: sends an hour ago and older are not counted."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'l.db'}")
    ledger = Ledger(engine)
    ledger.create_schema()
    for subject in range(3):
        claim = ledger.claim_slot("a", subject, "c")
        assert claim is not None
        ledger.mark_sent(claim)
    now = ledger.now()
    t = ledger.table
    with engine.begin() as conn:
        conn.execute(
            sa.update(t).where(t.c.subject == "0").values(sent_at=now - dt.timedelta(minutes=61))
        )
        conn.execute(
            sa.update(t).where(t.c.subject == "1").values(sent_at=now - dt.timedelta(minutes=30))
        )
        series = queries._per_minute(conn, t, "a", now)
    engine.dispose()
    assert 60 == len(series)
    assert 1 == series[-1]
    assert 1 == series[29]
    assert 2 == sum(series)


# -- campaign states, paging, search, the pages an operator reaches by mistake ---------------


def _states(html: str) -> dict[str, str]:
    """Each campaign row of ``html``: its campaign id and the state its badge says."""
    rows = re.findall(
        r'<tr data-campaign="([^"]*)">.*?<span class="badge state-([\w-]+)" '
        r'data-state="([^"]*)">([^<]*)</span>',
        html,
        re.S,
    )
    for _, css, data, text in rows:
        assert (css, data) == (text.replace(" ", "-"), text)  # the word, not the colour alone
    return {unescape(campaign): text for campaign, _, _, text in rows}


EVERY_STATE = {
    "2026-11-sale": "finished",
    "2026-12-sale": "running",
    "n-scheduled": "scheduled",
    "n-never": "never started",
    "n-stopped": "stopped",
    "n-cancelled": "cancelled",
}


async def test_each_campaign_has_its_state_as_a_column_and_a_badge(console: Console) -> None:
    """The overview names each campaign's state (a word in a badge) and draws its progress
    of the recorded total; the campaign page says the same state."""
    async with console.client() as client:
        page = (await client.get("/")).text
        pages = {
            c: (await client.get("/campaign", params={"action": a, "campaign": c})).text
            for a, c in (("promo", "2026-11-sale"), ("news", "n-stopped"), ("news", "n-never"))
        }
        data = (
            await client.get("/campaign.json", params={"action": "news", "campaign": "n-cancelled"})
        ).json()
    assert EVERY_STATE == _states(page)
    assert "<th>state</th><th>progress</th>" in page
    assert '<progress max="10" value="4"' in _raw_row(page, "2026-12-sale")
    assert "40%" in _row(page, 'data-campaign="2026-12-sale"')
    assert "100%" in _row(page, 'data-campaign="2026-11-sale"')
    assert "50%" in _row(page, 'data-campaign="n-stopped"')
    assert "total unknown" in _row(page, 'data-campaign="n-never"')
    shown = {c: re.search(r'data-state="([^"]*)"', html) for c, html in pages.items()}
    assert {"2026-11-sale": "finished", "n-stopped": "stopped", "n-never": "never started"} == {
        c: m.group(1) for c, m in shown.items() if m
    }
    assert "cancelled" == data["state"]


def _raw_row(html: str, campaign: str) -> str:
    match = re.search(rf'<tr data-campaign="{re.escape(campaign)}">(.*?)</tr>', html, re.S)
    assert match
    return match.group(1)


async def test_a_finished_or_cancelled_campaign_shows_no_rate_eta_or_cancel(
    console: Console,
) -> None:
    """Rate, ETA and the cancel button are for a campaign that can still send: the
    running one has them, the finished and the cancelled ones none."""
    async with console.client() as client:

        async def page(action: str, campaign: str) -> str:
            params = {"action": action, "campaign": campaign}
            return (await client.get("/campaign", params=params)).text

        running = await page("promo", "2026-12-sale")
        ended = [await page("promo", "2026-11-sale"), await page("news", "n-cancelled")]
    for marker in ('data-field="rate"', 'data-field="eta"', 'id="cancel"'):
        assert marker in running
        assert [False, False] == [marker in html for html in ended]


async def test_a_campaigns_state_follows_its_rows(console: Console) -> None:
    """The derivation, row by row: a claim whose lease ran out is no run (stopped); a send
    in the last 30 seconds is one (running); a start time past with no slot is never
    started; a finished campaign whose counts stop at the cap is still finished, and
    stopped again once a requeue gives it a chat to try."""
    t, ledger = console.ledger.table, console.ledger
    now = ledger.now()

    def state(action: str, campaign: str) -> str:
        with console.engine.connect() as conn:
            return queries.campaign_progress(conn, t, action, campaign, ledger.now()).state

    assert "running" == state("promo", "2026-12-sale")
    with console.engine.begin() as conn:  # the run died: its claim's lease ran out
        conn.execute(
            sa.update(t)
            .where(t.c.cycle == "2026-12-sale", t.c.status == SlotStatus.CLAIMED.value)
            .values(lease_until=now - dt.timedelta(minutes=1))
        )
    assert "running" == state("promo", "2026-12-sale")  # its last sends are seconds old
    with console.engine.begin() as conn:
        conn.execute(
            sa.update(t)
            .where(t.c.cycle == "2026-12-sale", t.c.sent_at.is_not(None))
            .values(sent_at=now - dt.timedelta(seconds=45))
        )
        conn.execute(
            sa.update(t)
            .where(t.c.subject == "news", t.c.cycle == "n-scheduled")
            .values(cycle_at=now - dt.timedelta(minutes=1))
        )
    assert "stopped" == state("promo", "2026-12-sale")
    assert "never started" == state("news", "n-scheduled")
    with console.engine.connect() as conn:
        capped = queries.campaign_summaries(conn, t, ledger.now(), cap=1)
    assert "finished" == {c.campaign: c.state for c in capped}["2026-11-sale"]
    # A requeue gives it a chat to try again: stopped, though it was found finished.
    assert 1 == len(console.ledger.requeue("promo", status="failed", cycle="2026-11-sale"))
    with console.engine.connect() as conn:
        capped = queries.campaign_summaries(conn, t, ledger.now(), cap=1)
    assert "stopped" == {c.campaign: c.state for c in capped}["2026-11-sale"]


async def test_the_overview_redraws_itself(console: Console) -> None:
    """The overview carries its refresh (the script and the part it redraws), as the
    campaign page does."""
    async with console.client() as client:
        page = (await client.get("/")).text
    assert '<div id="live-overview" data-refresh-every="5">' in page
    assert "live.js" in page
    assert page.index('id="search"') < page.index('id="live-overview"')  # kept as typed


async def test_search_by_campaign_subject_and_error(console: Console) -> None:
    """One box: campaigns by a part of their id or action (any case), a subject to its
    own page, slots by a part of their error as shown (never by a hidden bot token); a
    query shown escaped, a LIKE wildcard taken as itself."""
    async with console.client() as client:
        by_id = (await client.get("/search", params={"by": "campaign", "q": "SALE"})).text
        by_action = (await client.get("/search", params={"by": "campaign", "q": "news"})).text
        wildcard = (await client.get("/search", params={"by": "campaign", "q": "%"})).text
        subject = await client.get("/search", params={"by": "subject", "q": EVIL_SUBJECT})
        errors = (await client.get("/search", params={"by": "error", "q": "forbidden"})).text
        evil = (await client.get("/search", params={"by": "error", "q": EVIL_SUBJECT})).text
        bad = await client.get("/search", params={"by": "message", "q": "x"})
        token = (await client.get("/search", params={"by": "error", "q": BOT_TOKEN[:12]})).text
        overview = (await client.get("/")).text
    assert {"2026-11-sale", "2026-12-sale"} == set(_states(by_id))
    assert {"n-scheduled", "n-never", "n-stopped", "n-cancelled"} == set(_states(by_action))
    assert {} == _states(wildcard)
    assert 303 == subject.status_code
    assert "/subject?subject=%3Cscript%3E" in subject.headers["location"]
    assert 1 == errors.count('<tr class="st-failed"')
    assert "[403] Forbidden: bot was blocked by the user" in errors
    assert EVIL_SUBJECT not in evil
    assert "&lt;script&gt;" in evil
    assert (400, "by: must be one of campaign, subject, error") == (
        bad.status_code,
        bad.text.strip().split(", got")[0],
    )
    assert 'id="search"' in overview
    assert 0 == token.count('<tr class="st-')  # the token the page hides is not searchable


async def _pages(client: Any, url: str, found: str) -> tuple[list[str], int]:
    """Every value ``found`` matches, following each page's "next page" link to the end;
    and how many pages there were."""
    seen: list[str] = []
    pages = 0
    next_url: str | None = url
    while next_url is not None and pages < 20:
        page = await client.get(next_url)
        assert 200 == page.status_code, next_url
        pages += 1
        seen += [unescape(v) for v in re.findall(found, page.text)]
        link = re.search(r'<a id="next" href="([^"]+)"', page.text)
        next_url = None if link is None else unescape(link.group(1))
    return seen, pages


async def test_lists_go_past_200_rows_a_page_at_a_time_after_the_last(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subject's 205 slots, an action's 205 unknown ones and its errors come each once
    over two pages, and the campaigns 2 a page; every page reads after its last row's id
    (no OFFSET in any statement)."""
    many = range(205)
    insert_rows(
        console.ledger,
        [
            {"action": "digest", "subject": "77", "cycle": f"c{i:03}", "status": "unknown"}
            for i in many
        ]
        + [
            {
                "action": "digest",
                "subject": str(1000 + i),
                "cycle": "c",
                "status": "failed",
                "last_error": f"[400] Bad Request: quota {i}",
            }
            for i in many
        ],
    )
    monkeypatch.setattr(queries, "MAX_CAMPAIGNS", 2)
    statements: list[str] = []
    # Each statement as the default dialect writes it: OFFSET only when one is asked for.
    sa.event.listen(console.engine, "before_execute", lambda *a: statements.append(str(a[1])))
    slot = r'<tr class="st-\w+" data-slot="(\d+)">'
    async with console.client() as client:
        history, history_pages = await _pages(client, "/subject?subject=77", slot)
        problems, problem_pages = await _pages(
            client, "/problems?status=unknown&action=digest", slot
        )
        errors, error_pages = await _pages(client, "/search?by=error&q=quota", slot)
        campaigns, campaign_pages = await _pages(client, "/", r'<tr data-campaign="([^"]*)">')
        bad = await client.get("/subject", params={"subject": "77", "after": "1; drop"})
    assert (205, 205, 2, 2) == (len(history), len(set(history)), history_pages, problem_pages)
    assert (205, 205) == (len(problems), len(set(problems)))
    assert set(history) == set(problems)
    assert (205, 2) == (len(set(errors)), error_pages)
    assert sorted(EVERY_STATE) == sorted(campaigns)
    assert 3 == campaign_pages
    ledger = [s for s in statements if "_recipients" not in s]  # the audience's own reads
    assert [] == [s for s in ledger if "OFFSET" in s.upper()]
    assert 400 == bad.status_code
    assert "after: must be a row id" in bad.text


async def test_an_unknown_campaign_is_a_404_page(console: Console) -> None:
    """A campaign the ledger does not know: its page, its JSON and its cancel answer 404
    saying so, with the name shown escaped."""
    unknown = {"action": "promo", "campaign": EVIL_SUBJECT}
    async with console.client() as client:
        page = await client.get("/campaign", params=unknown)
        data = await client.get("/campaign.json", params=unknown)
        cancel = await client.get("/campaign/cancel", params=unknown)
        known = await client.get("/campaign", params={"action": "news", "campaign": "n-never"})
    assert (404, 404, 404, 200) == tuple(r.status_code for r in (page, data, cancel, known))
    assert "No such campaign" in page.text
    assert EVIL_SUBJECT not in page.text
    assert "&lt;script&gt;" in page.text
    assert data.json()["error"].startswith("there is no campaign")


async def test_the_console_has_a_favicon(guarded: Console) -> None:
    """An inline SVG icon served by the app (no login needed, like the styles), linked
    from every page; a rebound Host still gets nothing."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with guarded.client() as client:
        icon = await client.get("/favicon.svg")
        ico = await client.get("/favicon.ico")
        page = (await client.get("/", headers=headers)).text
    transport = httpx.ASGITransport(app=guarded.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as client:
        rebound = await client.get("/favicon.svg", headers={"host": "attacker.test:8080"})
    assert (200, "image/svg+xml") == (icon.status_code, icon.headers["content-type"])
    assert icon.text.startswith("<svg ")
    assert icon.text == ico.text
    assert '<link rel="icon" type="image/svg+xml" href="/favicon.svg">' in page
    assert 200 == rebound.status_code  # with a login any Host is answered
    local = httpx.ASGITransport(app=create_app(guarded.engine, table=guarded.seeded.table))
    async with httpx.AsyncClient(transport=local, base_url="http://localhost:8080") as client:
        refused = await client.get("/favicon.svg", headers={"host": "attacker.test:8080"})
    assert 421 == refused.status_code


async def test_a_stopped_or_cancelled_campaign_shows_the_command_that_resumes_it(
    console: Console,
) -> None:
    """A stopped campaign: the command to run again, with a copy button; a cancelled one:
    the same with --resume-cancelled; a running or finished one: none. Names are quoted
    for the shell and escaped in the page."""
    odd = "it's <b>"
    insert_rows(
        console.ledger,
        [
            {
                "action": "notifyonce.campaign",
                "subject": "news",
                "cycle": odd,
                "status": "sent",
                "token": 3,
            },
            {"action": "news", "subject": "1", "cycle": odd, "status": "failed"},
        ],
    )
    async with console.client() as client:

        async def command(action: str, campaign: str) -> str | None:
            params = {"action": action, "campaign": campaign}
            page = (await client.get("/campaign", params=params)).text
            found = re.search(r'<code id="resume-command">([^<]*)</code>', page)
            if found is None:
                return None
            assert 'data-copy="resume-command"' in page
            assert "Resume it from the command line" in page
            return unescape(found.group(1))

        stopped = await command("news", "n-stopped")
        cancelled = await command("news", "n-cancelled")
        quoted = await command("news", odd)
        others = [await command("promo", "2026-12-sale"), await command("promo", "2026-11-sale")]
    assert "notifyonce broadcast --action news --campaign n-stopped ..." == stopped
    assert (
        "notifyonce broadcast --action news --campaign n-cancelled ... --resume-cancelled"
        == cancelled
    )
    assert "notifyonce broadcast --action news --campaign 'it'\"'\"'s <b>' ..." == quoted
    assert [None, None] == others


async def test_a_personalised_campaign_lists_its_languages_and_who_waits(
    console: Console,
) -> None:
    """The counts per language the broadcast keeps: a row per variant (the default one
    named so), each count in its column, and how many wait for their hour; a campaign
    without such counts has no languages table."""
    from notifyonce._campaign import LanguageCounts

    kept = LanguageCounts(
        {
            "": {"recipients": 1200, "sent": 700, "unknown": 2, "earlier": 3, "waiting": 495},
            "ru": {"recipients": 800, "sent": 90, "other": 10, "waiting": 700},
        },
        waiting=1195,
        next_due=dt.datetime(2026, 12, 2, 7, 0, tzinfo=dt.timezone.utc),
    )
    insert_rows(
        console.ledger,
        [
            {
                "action": "notifyonce.languages",
                "subject": "promo",
                "cycle": "2026-12-sale",
                "status": "sent",
                "last_error": kept.text(),
            }
        ],
    )
    async with console.client() as client:
        page = (
            await client.get("/campaign", params={"action": "promo", "campaign": "2026-12-sale"})
        ).text
        other = (
            await client.get("/campaign", params={"action": "news", "campaign": "n-stopped"})
        ).text
        overview = (await client.get("/")).text
        data = (
            await client.get(
                "/campaign.json", params={"action": "promo", "campaign": "2026-12-sale"}
            )
        ).json()
    # Rows wait hours for their hour: no ETA from the recent rate, on the page or its JSON.
    said = "after the rows waiting for their hour (see below)"
    assert (None, said, 1195) == (data["eta_seconds"], data["eta"], data["waiting"])
    assert f'<span data-field="eta">{said}</span>' in page
    assert "default (every other language) 1,200 700 2 3 0 495" == _row(
        page, 'data-language="default"'
    )
    assert "ru 800 90 0 0 10 700" == _row(page, 'data-language="ru"')
    waiting = re.search(r'<p id="waiting"[^>]*>([^<]*)</p>', page)
    assert waiting is not None
    assert "Waiting for their hour: 1,195 (next 2026-12-02 07:00 UTC)" == waiting.group(1)
    assert 'id="languages"' not in other
    assert "notifyonce.languages" not in overview  # the ledger's own row, not an action
    sale = _row(overview, 'data-campaign="2026-12-sale"')
    assert "1,195 wait for their hour" in sale, sale
    assert "wait for their hour" not in _row(overview, 'data-campaign="n-stopped"')


async def test_the_overview_shows_each_digests_windows_and_its_capped_digests(
    console: Console, backend: Backend
) -> None:
    """A digest whose flush sent one subject's digest and was held back by a cap for the
    other's: the overview's digest row counts the capped one's event still waiting, the
    later window's two events not due yet, the one sent and the one capped."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from notifyonce import AsyncLedger, Digest, FrequencyCap, Message, Notifier, Outcome
    from notifyonce.testing import FakeSender

    engine = create_async_engine(backend.async_url)
    try:
        ledger = AsyncLedger(engine, table_name=console.seeded.table)
        cap = FrequencyCap("replies", 1, dt.timedelta(days=7))
        notifier = Notifier(ledger, FakeSender(), caps=[cap])
        hour = dt.timedelta(hours=1)
        digest = Digest(ledger, "replies", every=hour)
        now = dt.datetime.now(dt.timezone.utc)
        earlier = now - 3 * hour
        held = await notifier.send_once("other", "b", "x", Message("hi"), category="replies")
        assert Outcome.SENT == held  # b has had its one of the week
        for subject, key in (("a", "1"), ("a", "2"), ("b", "3")):
            assert await digest.add(subject, key, None, at=earlier)
        report = await digest.flush(notifier, lambda s, e: Message(f"{len(e)} new"), now=now)
        assert ({"capped": 1}, 1) == (report.skips, report.sent)
        for key in ("4", "5"):
            assert await digest.add("a", key, None, at=now + dt.timedelta(days=1))
    finally:
        await engine.dispose()
    async with console.client() as client:
        page = (await client.get("/")).text
    # digest, events waiting, windows waiting, due now, next due, sent, capped
    row = _row(page, 'data-digest="replies"').split()
    assert ["replies", "3", "2", "1"] == row[:4]
    assert ["1", "1"] == row[-2:]
