"""The operator console in a real browser: the distribution's headless Chromium, driven by
Playwright (pointed at /usr/bin/chromium; Playwright's own browser download is never
used). Locally a missing Chromium skips with how to install it; under CI=true it fails.

Set NOTIFYONCE_WEB_SCREENSHOTS=DIR to also save a screenshot of each page there (the
pictures of docs/guides/web.md come from this run: NOTIFYONCE_WEB_SCREENSHOTS=docs/assets),
at 1280 px and, for the ``phone-`` ones, 420 px."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from notifyonce import Ledger, SlotStatus
from notifyonce._campaign import CANCEL_NOTE, cancel_note, cancel_query

from ._browser import chromium
from ._databases import Backend, make_backend
from ._optional import require
from ._web_ledger import DEADLINE, EVIL_SUBJECT, MESSAGE_TEXT, insert_rows, seed, unseed

require("starlette", "web")
uvicorn = require("uvicorn", "web")
sync_api = require("playwright.sync_api", "dev")

from notifyonce.web import WebAuth, create_app  # noqa: E402

pytestmark = pytest.mark.sqlite

TOKEN = "browser-test-token-0123456789"
SHOTS = os.environ.get("NOTIFYONCE_WEB_SCREENSHOTS")


@dataclass
class Served:
    url: str
    ledger: Ledger
    table: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The console on a seeded SQLite ledger, served by uvicorn on 127.0.0.1."""
    backend: Backend = make_backend("sqlite", tmp_path)
    seeded = asyncio.run(seed(backend))
    engine = sa.create_engine(backend.sync_url)
    app = create_app(engine, table=seeded.table, auth=WebAuth(token=TOKEN))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start within 10 s"
    try:
        yield Served(
            f"http://127.0.0.1:{port}", Ledger(engine, table_name=seeded.table), seeded.table
        )
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()
        unseed(backend, seeded)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"web-{name}.png"), full_page=True)


def test_console_in_a_browser(served: Served, browser: Any) -> None:
    """Refused without the token; after the login each page answers its question, the
    campaign page updates itself, a cross-site POST changes nothing, and a requeue through
    the confirmation changes the rows, and a cancel through its confirmation stores the
    request."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    base = served.url

    refused = page.goto(f"{base}/problems")
    assert 401 == refused.status
    assert "Log in" in page.inner_text("h1")
    assert "trial_6h" not in page.content()

    page.fill('input[name="token"]', TOKEN)
    page.click("#login button")
    page.wait_for_url(f"{base}/")
    row = page.inner_text('#actions tr[data-action="trial_6h"]')
    assert re.match(r"trial_6h\s+1\s+2\s+2\s+2\s+0", row), row
    assert page.locator('#actions tr[data-action="trial_6h"] svg.spark').count() == 1
    assert "running" == page.inner_text('tr[data-campaign="2026-12-sale"] .badge')
    assert "finished" == page.inner_text('tr[data-campaign="2026-11-sale"] .badge')
    _shot(page, "overview")

    page.goto(f"{base}/subject?subject={EVIL_SUBJECT}")
    assert EVIL_SUBJECT == page.inner_text("td.subject")  # shown as stored, not run
    page.goto(f"{base}/subject?subject=3")
    assert "2 slots of subject" in page.inner_text("#found")
    _shot(page, "subject")

    page.goto(f"{base}/campaign?action=promo&campaign=2026-12-sale")
    assert "10" == page.inner_text('[data-field="total"]')
    assert "6" == page.inner_text('[data-field="remaining"]')
    # live.js polls the JSON and redraws (a Content-Security-Policy allows no inline script)
    sync_api.expect(page.locator('[data-field="updated"]')).to_have_text(
        re.compile(r"^updated "), timeout=10_000
    )
    _shot(page, "campaign")

    page.goto(f"{base}/leases")
    _shot(page, "leases")
    page.goto(f"{base}/rate-limits")
    assert "[429] Too Many Requests" in page.inner_text("#released")
    _shot(page, "rate-limits")

    page.goto(f"{base}/problems?status=unknown&action=trial_6h")
    ids = page.eval_on_selector_all('input[name="slot"]', "boxes => boxes.map(b => b.value)")
    assert 2 == len(ids)
    _shot(page, "problems")

    # Another site's page posting to the console: the browser sends no session cookie
    # (SameSite=Strict) and says where it came from; nothing changes.
    other = context.new_page()
    fields = "".join(f'<input name="slot" value="{i}">' for i in ids)
    other.set_content(
        f'<form method="post" action="{base}/requeue">{fields}'
        '<input name="confirm" value="yes"><button>go</button></form>'
    )
    with other.expect_navigation() as navigation:
        other.click("button")
    assert 403 == navigation.value.status
    assert SlotStatus.UNKNOWN == served.ledger.get("trial_6h", 3, DEADLINE).status

    page.check("#all")
    page.click("#choose button")
    assert "may send a duplicate" in page.inner_text("#warn")
    assert "Requeue 2 slots?" in page.inner_text("h1")
    _shot(page, "confirm")
    assert SlotStatus.UNKNOWN == served.ledger.get("trial_6h", 3, DEADLINE).status
    page.click("#confirm")
    assert "Requeued 2 slots" in page.inner_text("#done")
    assert SlotStatus.RELEASED == served.ledger.get("trial_6h", 3, DEADLINE).status
    assert SlotStatus.RELEASED == served.ledger.get("trial_6h", EVIL_SUBJECT, DEADLINE).status
    assert MESSAGE_TEXT not in page.content()

    # Cancel the running campaign through its confirmation.
    page.goto(f"{base}/campaign?action=promo&campaign=2026-12-sale")
    assert "not requested" == page.inner_text("#cancel-state")
    page.click("#cancel")
    assert "stops within a few seconds" in page.inner_text("#what")
    _shot(page, "confirm-cancel")
    assert None is _cancel_request(served)
    page.click("#confirm")
    page.wait_for_url(re.compile(r"/campaign\?"))
    assert "cancel requested" == page.inner_text("#cancel-state")
    assert "cancelled" == page.inner_text('[data-field="state-badge"] .badge')
    assert page.locator('[data-field="eta"]').count() == 0
    assert page.locator("#cancel").count() == 0
    note = _cancel_request(served)
    assert note is not None
    assert note.startswith(CANCEL_NOTE)
    context.close()


def _logged_in(browser: Any, served: Served, width: int) -> tuple[Any, Any]:
    """A browser context ``width`` pixels wide, logged in, and its page."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.url)
    page = context.new_page()
    page.goto(f"{served.url}/login")
    page.fill('input[name="token"]', TOKEN)
    page.click("#login button")
    page.wait_for_url(f"{served.url}/")
    return context, page


FITTED = [
    "/",
    "/campaign?action=promo&campaign=2026-12-sale",
    "/campaign?action=news&campaign=n-cancelled",
    "/subject?subject=3",
    "/problems?status=unknown&action=trial_6h",
    "/leases",
    "/rate-limits",
    "/recipients",
    "/search?by=error&q=forbidden",
    "/campaign?action=promo&campaign=no-such",
    "/campaign/cancel?action=promo&campaign=2026-12-sale",
]


@pytest.mark.parametrize("width", [1280, 420])
def test_every_page_fits_the_screen_with_its_nav_and_badges(
    served: Served, browser: Any, width: int
) -> None:
    """At 1280 px and on a 420 px phone no page scrolls sideways (a wide table scrolls
    in its own box), every link of the nav is on screen, and the campaign pages show
    their state badges."""
    context, page = _logged_in(browser, served, width)
    for path in FITTED:
        page.goto(served.url + path)
        inner, scroll = page.evaluate("[window.innerWidth, document.scrollingElement.scrollWidth]")
        assert scroll <= inner, (path, scroll, inner)
        links = page.locator("#nav a")
        assert 6 == links.count()
        for i in range(links.count()):
            box = links.nth(i).bounding_box()
            assert links.nth(i).is_visible(), path
            assert box is not None
            assert 0 <= box["x"], (path, box)
            assert box["x"] + box["width"] <= inner, (path, box)
    page.goto(served.url + "/")
    badges = page.locator("#campaigns .badge")
    assert 6 == badges.count()
    if width == 420:
        # The campaigns table is wider than the phone: it scrolls inside its own box.
        wide = page.evaluate(
            "(() => { const t = document.getElementById('campaigns');"
            " return [t.scrollWidth, t.clientWidth]; })()"
        )
        assert wide[0] > wide[1]
        _shot(page, "phone-overview")
        page.goto(served.url + "/campaign?action=news&campaign=n-stopped")
        _shot(page, "phone-campaign")
    context.close()


@pytest.mark.parametrize("width", [1280, 420])
def test_tables_say_they_scroll_campaigns_are_links_times_are_utc_and_the_chart_has_axes(
    served: Served, browser: Any, width: int
) -> None:
    """At 420 px the campaigns table that scrolls says so above it (hidden at 1280, where
    it fits); each campaign id is a link to its page; the live page's "updated" time is
    UTC on a 24-hour clock whatever the browser's locale (en-US here: 12-hour), and its
    sends-per-minute chart keeps its scale, unit and time after a redraw."""
    context = browser.new_context(viewport={"width": width, "height": 800}, locale="en-US")
    page = context.new_page()
    page.goto(f"{served.url}/login")
    page.fill('input[name="token"]', TOKEN)
    page.click("#login button")
    page.wait_for_url(f"{served.url}/")
    hint = page.locator("#live-overview .scroll-hint")
    scrolls = page.evaluate(
        "(() => { const t = document.getElementById('campaigns');"
        " return t.scrollWidth > t.clientWidth; })()"
    )
    assert (width == 420, width == 420) == (scrolls, hint.is_visible())
    link = page.locator('#campaigns tr[data-campaign="2026-12-sale"] td:nth-child(2) a')
    assert "2026-12-sale" == link.inner_text()
    link.click()
    page.wait_for_url(re.compile(r"/campaign\?action=promo&campaign=2026-12-sale"))
    sync_api.expect(page.locator('[data-field="updated"]')).to_have_text(
        re.compile(r"^updated "), timeout=10_000
    )
    updated = page.inner_text('[data-field="updated"]')
    assert re.fullmatch(r"updated ([01]\d|2[0-3]):[0-5]\d:[0-5]\d UTC", updated), updated
    labels = page.eval_on_selector_all(
        '[data-field="sparkline"] svg.chart text', "texts => texts.map(t => t.textContent)"
    )
    assert ["0", "-60 min", "sends per minute", "now"] == labels[1:], labels
    assert labels[0].endswith("/min"), labels
    inner, scroll = page.evaluate("[window.innerWidth, document.scrollingElement.scrollWidth]")
    assert scroll <= inner
    context.close()


def test_the_overview_redraws_itself_and_a_resume_command_copies(
    served: Served, browser: Any
) -> None:
    """A campaign recorded after the overview was drawn appears on it without a reload,
    the search box keeping what was typed; a stopped campaign's page copies the command
    that resumes it."""
    context, page = _logged_in(browser, served, 1280)
    page.fill('#search input[name="q"]', "typed")
    campaign = {"action": "notifyonce.campaign", "subject": "news", "cycle": "n-fresh"}
    insert_rows(served.ledger, [{**campaign, "status": "sent", "token": 0}])
    fresh = page.locator('tr[data-campaign="n-fresh"] .badge')
    sync_api.expect(fresh).to_have_text("never started", timeout=15_000)
    assert "typed" == page.input_value('#search input[name="q"]')

    page.goto(f"{served.url}/campaign?action=news&campaign=n-stopped")
    assert "stopped" == page.inner_text('[data-field="state-badge"] .badge')
    command = page.inner_text("#resume-command")
    assert "notifyonce broadcast --action news --campaign n-stopped ..." == command
    page.click("#copy")
    sync_api.expect(page.locator("#copy")).to_have_text("Copied")
    assert command == page.evaluate("navigator.clipboard.readText()")
    _shot(page, "campaign-stopped")
    page.goto(f"{served.url}/search?by=campaign&q=n-")
    _shot(page, "search")
    context.close()


def _cancel_request(served: Served) -> str | None:
    with served.ledger.engine.connect() as conn:
        query = cancel_query(served.ledger.table, "promo", "2026-12-sale")
        return cancel_note(conn.execute(query).scalar())
