"""The console's ASGI app: its routes, the guard in front of them, and the two actions.

Pages read through ``_queries`` on a sync ``Engine`` (in Starlette's thread pool) or an
``AsyncEngine`` (through ``run_sync``); the recipients page reads through the audience's
own API, so it counts what `notifyonce recipients` counts. The actions go through the
ledger's own code, so a requeue here follows exactly the rules of ``notifyonce requeue``,
and a cancel writes the request a running broadcast reads (``_campaign.cancel_statement``).
The console starts no campaign (it never sees a message or a recipients list): a stopped
one's page shows the command line that resumes it instead.

Long lists go a page at a time: a page reads one row more than it shows, and its *next
page* link names the last row's id (``after``), so the next read starts there through an
index, never with an ``OFFSET`` that would read every row before it.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import jinja2
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from notifyonce._audience import AsyncAudience, Audience, AudienceRow, RecipientState
from notifyonce._campaign import CANCEL_POLL, cancel_statement
from notifyonce._errors import ValidationError
from notifyonce._ledger.ledger import AsyncLedger, Ledger
from notifyonce._ledger.table import SlotStatus
from notifyonce._senders.rate.sql import build_rate_table, default_rate_table
from notifyonce._senders.redaction import redact
from notifyonce.web import _queries as q
from notifyonce.web._security import (
    COOKIE,
    Session,
    Sessions,
    WebAuth,
    cross_site,
    host_refusal,
)
from notifyonce.web._svg import FAVICON, chart, sparkline

__all__ = ["create_app"]

T = TypeVar("T")
HERE = Path(__file__).parent
REQUEUEABLE = (SlotStatus.UNKNOWN.value, SlotStatus.FAILED.value)
MAX_CHOSEN = 500  # slots one requeue may name
RECIPIENTS_PAGE = 200  # rows of the audience a page lists
SEARCH_BY = ("campaign", "subject", "error")
# A bot token on its own (the ledger's errors are scrubbed of it already; this is a second
# net for errors written by other code into the same table).
_BARE_TOKEN = re.compile(r"\b\d{5,20}:[A-Za-z0-9_-]{30,}\b")


def scrub(text: str | None) -> str:
    """An error text fit to show: no bot token in a URL path or on its own."""
    if not text:
        return ""
    return _BARE_TOKEN.sub("<redacted>", redact(text))


@jinja2.pass_context
def href(
    context: Mapping[str, Any], name: str, path: str | None = None, **query: str | None
) -> str:
    """A root-relative link to a route (under the app's mount point), with a query (its
    None values left out)."""
    request: Request = context["request"]
    params = {"path": path} if path is not None else {}
    url = request.url_for(name, **params).path
    kept = {k: v for k, v in query.items() if v is not None}
    return f"{url}?{urlencode(kept)}" if kept else url


def _ago(when: dt.datetime | None, now: dt.datetime) -> str:
    if when is None:
        return ""
    seconds = (now - when).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 90:
        text = f"{seconds:.0f} s"
    elif seconds < 5400:
        text = f"{seconds / 60:.0f} min"
    elif seconds < 172800:
        text = f"{seconds / 3600:.0f} h"
    else:
        text = f"{seconds / 86400:.0f} d"
    return f"in {text}" if future else f"{text} ago"


#: The ETA of a local-time campaign while rows wait for their hour: not the rate's to tell.
WAITING_ETA = "after the rows waiting for their hour (see below)"


def _eta_text(progress: q.CampaignProgress) -> str | None:
    """The campaign's ETA as its page says it (None: unknown)."""
    if progress.waiting:
        return WAITING_ETA
    return None if progress.eta_seconds is None else _duration(progress.eta_seconds)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Console:
    """The app's state: the ledger, its tables, the sessions and the templates."""

    def __init__(
        self,
        engine: sa.Engine | AsyncEngine,
        *,
        table: str,
        schema: str | None,
        rate_table: str | None,
        auth: WebAuth | None,
        secret: bytes | None,
    ) -> None:
        self.engine = engine
        self.ledger: Ledger | AsyncLedger = (
            AsyncLedger(engine, table_name=table, schema=schema)
            if isinstance(engine, AsyncEngine)
            else Ledger(engine, table_name=table, schema=schema)
        )
        self.table = self.ledger.table
        self.audience: Audience | AsyncAudience = (
            AsyncAudience.beside(self.ledger)
            if isinstance(self.ledger, AsyncLedger)
            else Audience.beside(self.ledger)
        )
        rate_name = rate_table if rate_table is not None else default_rate_table(table)
        self.rate = build_rate_table(sa.MetaData(), rate_name, schema)
        self.auth = auth
        self.sessions = Sessions(secret)
        self.templates = Jinja2Templates(directory=HERE / "templates")
        env = self.templates.env
        env.filters["scrub"] = scrub
        env.filters["sparkline"] = sparkline
        env.filters["chart"] = chart
        env.globals["duration"] = _duration
        env.globals["href"] = href

    # -- running reads (and the one write) ----------------------------------------------

    async def read(self, body: Callable[[Connection], T], *, commit: bool = False) -> T:
        """``body`` on a connection; with ``commit``, in one transaction committed when it
        returns."""
        engine = self.engine
        if isinstance(engine, AsyncEngine):
            async with engine.begin() if commit else engine.connect() as conn:
                return await conn.run_sync(body)

        def run() -> T:
            with engine.begin() if commit else engine.connect() as conn:
                return body(conn)

        return await run_in_threadpool(run)

    def now(self) -> dt.datetime:
        return self.ledger.now()

    async def has_ledger(self) -> bool:
        """Whether the ledger's table is in the database (a page's read failing without it
        means the database was never migrated, not that it is broken)."""
        table = self.table
        return await self.read(lambda conn: sa.inspect(conn).has_table(table.name, table.schema))

    def no_ledger(self, request: Request, session: Session) -> Response:
        """503: the page (or the JSON error) saying to run ``notifyonce migrate`` first."""
        name = self.table.fullname
        if request.url.path.endswith(".json"):
            error = f"the ledger table {name} is not in this database: run `notifyonce migrate`"
            return self.finish(request, session, JSONResponse({"error": error}, status_code=503))
        return self.respond(request, session, "no_ledger.html", {"table": name}, status_code=503)

    async def ask(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """The audience's ``method``: the async one on an AsyncEngine, the sync one in the
        thread pool."""
        call = getattr(self.audience, method)
        if isinstance(self.audience, AsyncAudience):
            return await call(*args, **kwargs)
        return await run_in_threadpool(partial(call, *args, **kwargs))

    async def has_audience(self) -> bool:
        """Whether the recipients table is there (a database not migrated lacks it)."""
        t = self.audience.table
        return await self.read(lambda conn: sa.inspect(conn).has_table(t.name, schema=t.schema))

    async def recipient_state(self, recipient: str) -> RecipientState | str:
        """What the audience knows of ``recipient``, or why it cannot say."""
        if not await self.has_audience():
            return f"no recipients table {self.audience.table.name!r}: run notifyonce migrate"
        try:
            state: RecipientState = await self.ask("state", recipient)
        except ValidationError as exc:
            return str(exc)
        return state

    # -- the guard ---------------------------------------------------------------------

    def session(self, request: Request) -> tuple[Session, bool]:
        """The request's session, and whether it may see the pages."""
        session = self.sessions.read(request.cookies.get(COOKIE)) or self.sessions.new()
        if self.auth is None:
            return session, True
        if session.authenticated:
            return session, True
        if self.auth.accepts_header(request.headers.get("authorization")):
            logged_in = Session(session.id, True, session.csrf, fresh=True)
            return logged_in, True
        return session, False

    def respond(
        self, request: Request, session: Session, name: str, context: dict[str, Any], **kw: Any
    ) -> Response:
        now = self.now()
        context = {
            "csrf": session.csrf,
            "now": now,
            "ago": lambda when: _ago(when, now),
            "auth": self.auth is not None,
            **context,
        }
        response = self.templates.TemplateResponse(request, name, context, **kw)
        return self.finish(request, session, response)

    def finish(self, request: Request, session: Session, response: Response) -> Response:
        """Set the session cookie when it is new, and forbid caching and framing."""
        if session.fresh:
            response.set_cookie(
                COOKIE,
                self.sessions.cookie(session),
                path=request.scope.get("root_path") or "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        response.headers["cache-control"] = "no-store"
        response.headers["x-frame-options"] = "DENY"
        response.headers["x-content-type-options"] = "nosniff"
        response.headers["referrer-policy"] = "same-origin"
        response.headers["content-security-policy"] = (
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
            "form-action 'self'; base-uri 'none'"
        )
        return response

    def refused(self, request: Request, session: Session) -> Response:
        """No login: the login page (or a JSON 401), and Basic's prompt when it is set."""
        headers = {}
        if self.auth is not None and self.auth.password is not None:
            headers["www-authenticate"] = 'Basic realm="notifyonce", charset="UTF-8"'
        if request.url.path.endswith(".json"):
            return self.finish(
                request,
                session,
                JSONResponse({"error": "log in first"}, status_code=401, headers=headers),
            )
        context = {"error": None, "token_login": self.auth is not None and self.auth.token}
        return self.respond(
            request, session, "login.html", context, status_code=401, headers=headers
        )

    async def checked_form(
        self, request: Request, *, confirmed: str | None = None
    ) -> tuple[Session, Any] | Response:
        """A POST's session and form, or the refusal: no session, no CSRF token, another
        site, or (when it names ``confirmed``, the change) no ``confirm=yes``."""
        session = self.sessions.read(request.cookies.get(COOKIE))
        form = await request.form()
        token = form.get("csrf")
        host = request.headers.get("host", "")
        if cross_site(request.headers, host):
            return PlainRefusal("refused: the request came from another site")
        if session is None or not self.sessions.csrf_ok(
            session, token if isinstance(token, str) else None
        ):
            return PlainRefusal(
                "refused: this form has no valid CSRF token for your session; "
                "reload the page and try again"
            )
        if self.auth is not None and not session.authenticated:
            return PlainRefusal("refused: log in first")
        if confirmed is not None and form.get("confirm") != "yes":
            return PlainRefusal(f"refused: {confirmed} was not confirmed")
        return session, form


class PlainRefusal(Response):
    """403 (or ``status_code``) with a one-line reason."""

    def __init__(self, reason: str, status_code: int = 403) -> None:
        super().__init__(reason + "\n", status_code=status_code, media_type="text/plain")


class HostGuard:
    """Turns away a request whose ``Host`` the console does not answer to (see
    ``host_refusal``), before any route, page or form is read."""

    def __init__(
        self, app: ASGIApp, *, auth: WebAuth | None, allowed_hosts: frozenset[str] | None
    ) -> None:
        self.app = app
        self.auth = auth
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = None
            for key, value in scope.get("headers", ()):
                if key == b"host":
                    host = value.decode("latin-1")
                    break
            server = scope.get("server")
            reason = host_refusal(
                host,
                scheme=scope.get("scheme", "http"),
                server_port=server[1] if server and server[1] is not None else None,
                auth=self.auth,
                allowed_hosts=self.allowed_hosts,
            )
            if reason is not None:
                response = Response(
                    f"refused: {reason}\n", status_code=421, media_type="text/plain"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _hosts(allowed_hosts: Iterable[str] | None) -> frozenset[str] | None:
    if allowed_hosts is None:
        return None
    if isinstance(allowed_hosts, str):
        raise ValidationError("allowed_hosts", "must be a list of host names, not one string")
    hosts = frozenset(h.strip().lower() for h in allowed_hosts)
    if not hosts or "" in hosts:
        raise ValidationError("allowed_hosts", "must name at least one host, and no empty one")
    return hosts


Handler = Callable[[Console, Request, Session], Awaitable[Response]]


def _page(console: Console, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        session, allowed = console.session(request)
        if not allowed:
            return console.refused(request, session)
        try:
            return await handler(console, request, session)
        except ValidationError as exc:
            return console.finish(request, session, PlainRefusal(str(exc), status_code=400))
        except sa.exc.SQLAlchemyError:
            if await console.has_ledger():
                raise
        return console.no_ledger(request, session)

    return endpoint


# -- the pages -----------------------------------------------------------------------------


def _after(request: Request) -> int | None:
    """The ``after`` of a page's link: the id of the last row of the page before."""
    after = request.query_params.get("after", "")
    if not after:
        return None
    if not after.isdigit() or len(after) > 19:
        raise ValidationError("after", f"must be a row id (digits), got {after[:40]!r}")
    return int(after)


def _paged(rows: list[T], limit: int, key: Callable[[T], int]) -> tuple[list[T], int | None]:
    """A page of ``rows`` (read with one row more than ``limit``), and where the next
    page starts (None: this is the last one)."""
    shown = rows[:limit]
    return shown, key(shown[-1]) if len(rows) > limit else None


async def _campaigns(
    console: Console, request: Request, search: str | None
) -> tuple[list[q.CampaignSummary], int | None]:
    t, now, after, limit = console.table, console.now(), _after(request), q.MAX_CAMPAIGNS
    rows = await console.read(
        lambda conn: q.campaign_summaries(
            conn, t, now, q.COUNT_CAP, after=after, search=search, limit=limit + 1
        )
    )
    return _paged(rows, limit, lambda c: c.id)


async def overview(console: Console, request: Request, session: Session) -> Response:
    t = console.table
    now = console.now()
    actions = await console.read(lambda conn: q.action_summaries(conn, t, now, q.COUNT_CAP))
    digests = await console.read(lambda conn: q.digest_summaries(conn, t, now, q.COUNT_CAP))
    campaigns, more = await _campaigns(console, request, None)
    context = {
        "actions": actions,
        "digests": digests,
        "campaigns": campaigns,
        "more": more,
        "first_page": _after(request) is None,
        "statuses": q.STATUSES,
        "cap": q.COUNT_CAP,
        "by": "campaign",
        "q": "",
    }
    return console.respond(request, session, "overview.html", context)


async def search_page(console: Console, request: Request, session: Session) -> Response:
    """One search box for three questions: which campaigns (by id or action), one
    subject's slots (its own page), which slots failed with an error."""
    by = request.query_params.get("by", "campaign")
    text = request.query_params.get("q", "").strip()
    if by not in SEARCH_BY:
        raise ValidationError("by", f"must be one of {', '.join(SEARCH_BY)}, got {by[:40]!r}")
    if by == "subject" and text:
        url = request.url_for("subject").path + "?" + urlencode({"subject": text})
        return console.finish(request, session, RedirectResponse(url, status_code=303))
    context: dict[str, Any] = {"by": by, "q": text, "statuses": q.STATUSES, "cap": q.COUNT_CAP}
    context.update(campaigns=[], slots=[], more=None, first_page=_after(request) is None)
    if text and by == "campaign":
        context["campaigns"], context["more"] = await _campaigns(console, request, text)
    elif text and by == "error":
        t, after = console.table, _after(request)
        rows = await console.read(lambda conn: q.error_slots(conn, t, text, q.PAGE + 1, after))
        page, context["more"] = _paged(rows, q.PAGE, lambda r: r.id)
        # The text must be in the error as shown: a search must not find a bot token the
        # page hides, one letter at a time.
        wanted = text.casefold()
        context["slots"] = [r for r in page if wanted in scrub(r.last_error).casefold()]
    return console.respond(request, session, "search.html", context)


async def subject_page(console: Console, request: Request, session: Session) -> Response:
    subject = request.query_params.get("subject", "").strip()
    t, after = console.table, _after(request)
    rows: list[q.SlotRow] = []
    if subject:
        rows = await console.read(
            lambda conn: q.subject_history(conn, t, subject, q.PAGE + 1, after)
        )
    shown, more = _paged(rows, q.PAGE, lambda r: r.id)
    state = await console.recipient_state(subject) if subject else None
    context = {
        "subject": subject,
        "rows": shown,
        "state": state,
        "more": more,
        "first_page": after is None,
    }
    return console.respond(request, session, "subject.html", context)


_KINDS = {"": None, "gone": True, "opted_out": False}


async def recipients_page(console: Console, request: Request, session: Session) -> Response:
    """The audience: counts per reason and category, one recipient's state, and its rows
    a page at a time along the table's key (a page and one row read, however deep)."""
    params = request.query_params
    recipient = params.get("recipient", "").strip()
    kind, reason, category = params.get("kind", ""), params.get("reason"), params.get("category")
    after, after_category = params.get("after"), params.get("after_category")
    context: dict[str, Any] = {"recipient": recipient, "page": RECIPIENTS_PAGE}
    if not await console.has_audience():
        # 503 as every page whose table is missing: the database needs `notifyonce migrate`.
        context["missing"] = console.audience.table.name
        return console.respond(request, session, "recipients.html", context, status_code=503)
    gone = True if reason else False if category else _KINDS.get(kind)
    start = None
    if after:
        # Only the key is read (recipient, category); the rest is a placeholder.
        start = AudienceRow(after, after_category or None, "", "", console.now())
    try:
        if kind not in _KINDS:
            raise ValidationError("kind", f"must be gone or opted_out, got {kind!r}")
        rows: list[AudienceRow] = await console.ask(
            "rows",
            gone=gone,
            reason=reason,
            category=category,
            after=start,
            limit=RECIPIENTS_PAGE + 1,
        )
    except ValidationError as exc:
        context["error"] = str(exc)
        return console.respond(request, session, "recipients.html", context, status_code=400)
    shown = rows[:RECIPIENTS_PAGE]
    more = None
    if len(rows) > RECIPIENTS_PAGE:
        last = shown[-1]
        more = {"after": last.recipient, "after_category": last.category}
    # The exact counts read the whole table (as `notifyonce recipients counts` does): on
    # the first page only, so a search, a filter or a later page costs only its own rows.
    landing = not (start or recipient or kind or reason or category)
    context.update(
        counts=await console.ask("counts") if landing else None,
        state=await console.recipient_state(recipient) if recipient else None,
        rows=shown,
        filters={"kind": kind or None, "reason": reason, "category": category},
        more=more,
        first_page=start is None,
    )
    return console.respond(request, session, "recipients.html", context)


def _campaign_args(request: Request) -> tuple[str, str] | None:
    action = request.query_params.get("action", "")
    campaign = request.query_params.get("campaign", "")
    return (action, campaign) if action and campaign else None


async def _progress(console: Console, action: str, campaign: str) -> q.CampaignProgress:
    t = console.table
    now = console.now()
    return await console.read(lambda conn: q.campaign_progress(conn, t, action, campaign, now))


def resume_command(action: str, campaign: str, *, cancelled: bool) -> str:
    """The command line that resumes a campaign: the one that started it, whose message
    and recipients options (``...``) the console cannot know."""
    words = ["notifyonce", "broadcast", "--action", action, "--campaign", campaign]
    command = " ".join(shlex.quote(w) for w in words) + " ..."
    return command + " --resume-cancelled" if cancelled else command


def _not_found(
    console: Console, request: Request, session: Session, action: str, campaign: str
) -> Response:
    """404: the page saying the ledger knows no such campaign (a JSON error for JSON)."""
    what = f"there is no campaign {campaign!r} of {action!r} in the ledger"
    if request.url.path.endswith(".json"):
        return console.finish(request, session, JSONResponse({"error": what}, status_code=404))
    context = {"action": action, "campaign": campaign}
    return console.respond(request, session, "not_found.html", context, status_code=404)


async def campaign_page(console: Console, request: Request, session: Session) -> Response:
    args = _campaign_args(request)
    if args is None:
        return console.finish(request, session, PlainRefusal("name an action and a campaign"))
    progress = await _progress(console, *args)
    if not progress.exists:
        return _not_found(console, request, session, *args)
    resume = None
    if progress.state in q.CampaignState.RESUMABLE:
        cancelled = progress.state == q.CampaignState.CANCELLED
        resume = resume_command(*args, cancelled=cancelled)
    t = console.table
    revisions = await console.read(lambda conn: q.campaign_revisions(conn, t, *args))
    languages = await console.read(lambda conn: q.campaign_languages(conn, t, *args))
    context = {
        "languages": languages,
        "p": progress,
        "resume": resume,
        "ended": q.CampaignState.ENDED,
        "eta": _eta_text(progress) or "unknown",
        "revisions": revisions,
    }
    return console.respond(request, session, "campaign.html", context)


async def campaign_json(console: Console, request: Request, session: Session) -> Response:
    args = _campaign_args(request)
    if args is None:
        return JSONResponse({"error": "name an action and a campaign"}, status_code=400)
    progress = await _progress(console, *args)
    if not progress.exists:
        return _not_found(console, request, session, *args)
    data = progress.as_json()
    data["eta"] = _eta_text(progress)
    return console.finish(request, session, JSONResponse(data))


async def problems_page(console: Console, request: Request, session: Session) -> Response:
    t = console.table
    params = request.query_params
    status, action = params.get("status"), params.get("action")
    error = params.get("error")
    after = _after(request)
    groups, sampled = await console.read(lambda conn: q.error_groups(conn, t))
    rows: list[q.SlotRow] = []
    if status in REQUEUEABLE and action:
        rows = await console.read(
            lambda conn: q.problem_slots(conn, t, status, action, error, q.PAGE + 1, after)
        )
    slots, more = _paged(rows, q.PAGE, lambda r: r.id)
    context = {
        "groups": groups,
        "sampled": sampled,
        "sample": q.ERROR_SAMPLE,
        "status": status,
        "action": action,
        "error": error,
        "slots": slots,
        "more": more,
        "first_page": after is None,
        "done": params.get("requeued"),
    }
    return console.respond(request, session, "problems.html", context)


async def leases_page(console: Console, request: Request, session: Session) -> Response:
    t = console.table
    now = console.now()
    summary = await console.read(lambda conn: q.leases(conn, t, now))
    return console.respond(request, session, "leases.html", {"s": summary, "cap": q.COUNT_CAP})


async def rate_page(console: Console, request: Request, session: Session) -> Response:
    t, rate = console.table, console.rate
    now = console.now().timestamp()

    def body(conn: Connection) -> tuple[bool, list[q.FloodWait], list[q.ErrorGroup]]:
        released, _ = q.error_groups(conn, t, statuses=(SlotStatus.RELEASED.value,))
        if not sa.inspect(conn).has_table(rate.name, schema=rate.schema):
            return False, [], released
        return True, q.flood_waits(conn, rate, now), released

    has_store, waits, released = await console.read(body)
    context = {
        "has_store": has_store,
        "rate_table": rate.name,
        "waits": waits,
        "released": released,
        "sample": q.ERROR_SAMPLE,
    }
    return console.respond(request, session, "rate.html", context)


# -- the actions ---------------------------------------------------------------------------


def _chosen_ids(form: Any) -> list[int]:
    ids: list[int] = []
    for value in form.getlist("slot"):
        try:
            ids.append(int(value))
        except ValueError:
            raise ValidationError("slot", f"{value!r} is not a slot id") from None
    return list(dict.fromkeys(ids))[:MAX_CHOSEN]


def _chosen_rows(console: Console, ids: list[int]) -> Callable[[Connection], list[q.SlotRow]]:
    t = console.table

    def body(conn: Connection) -> list[q.SlotRow]:
        if not ids:
            return []
        stmt = sa.select(*q._slot_columns(t)).where(t.c.id.in_(ids), t.c.status.in_(REQUEUEABLE))
        return sorted((q._slot(r) for r in conn.execute(stmt)), key=lambda s: s.id)

    return body


async def _requeue(
    ledger: Ledger | AsyncLedger, action: str, status: str, subjects: list[str], cycle: str
) -> list[Any]:
    if isinstance(ledger, AsyncLedger):
        return await ledger.requeue(action, status=status, subjects=subjects, cycle=cycle)
    return await run_in_threadpool(
        partial(ledger.requeue, action, status=status, subjects=subjects, cycle=cycle)
    )


async def _chosen(
    request: Request, console: Console, confirmed: str | None = None
) -> Response | tuple[Session, Mapping[str, Any], list[q.SlotRow]]:
    """The checked form of a requeue and the requeueable slots it chose (or a refusal)."""
    checked = await console.checked_form(request, confirmed=confirmed)
    if isinstance(checked, Response):
        return checked
    session, form = checked
    try:
        ids = _chosen_ids(form)
    except ValidationError as exc:
        return PlainRefusal(str(exc))
    return session, form, await console.read(_chosen_rows(console, ids))


async def requeue_confirm(request: Request, console: Console) -> Response:
    chosen = await _chosen(request, console)
    if isinstance(chosen, Response):
        return chosen
    session, form, rows = chosen
    unknown = sum(1 for r in rows if r.status == SlotStatus.UNKNOWN.value)
    context = {"rows": rows, "unknown": unknown, "back": form.get("back", "")}
    return console.respond(request, session, "confirm_requeue.html", context)


async def requeue_do(request: Request, console: Console) -> Response:
    chosen = await _chosen(request, console, confirmed="the requeue")
    if isinstance(chosen, Response):
        return chosen
    session, _, rows = chosen
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}
    for row in rows:
        by_status = groups.setdefault((row.action, row.cycle), {})
        by_status.setdefault(row.status, []).append(row.subject)
    requeued = 0
    for (action, cycle), by_status in groups.items():
        for status, subjects in by_status.items():
            # The ledger's own requeue, one action, cycle and status at a time: it re-checks
            # the status in its UPDATE, so a slot that changed since the page was drawn
            # (sent by a later run, say) is left alone.
            keys = await _requeue(console.ledger, action, status, subjects, cycle)
            requeued += len(keys)
    url = request.url_for("problems").path + f"?requeued={requeued}"
    return console.finish(request, session, RedirectResponse(url, status_code=303))


async def cancel_confirm(console: Console, request: Request, session: Session) -> Response:
    """The confirmation before a cancel: what it will do, and the one button that does it."""
    args = _campaign_args(request)
    if args is None:
        return console.finish(request, session, PlainRefusal("name an action and a campaign"))
    progress = await _progress(console, *args)
    if not progress.exists:
        return _not_found(console, request, session, *args)
    context = {"p": progress, "every": CANCEL_POLL}
    return console.respond(request, session, "confirm_cancel.html", context)


async def cancel_do(request: Request, console: Console) -> Response:
    """Store the campaign's cancel request (one UPDATE through the unique key)."""
    checked = await console.checked_form(request, confirmed="the cancel")
    if isinstance(checked, Response):
        return checked
    session, form = checked
    action, campaign = form.get("action"), form.get("campaign")
    if not isinstance(action, str) or not isinstance(campaign, str) or not action or not campaign:
        return PlainRefusal("refused: name an action and a campaign")
    statement = cancel_statement(console.table, action, campaign, console.now(), cancel=True)
    found = await console.read(lambda conn: conn.execute(statement).rowcount, commit=True)
    if not found:
        return PlainRefusal(
            f"refused: there is no campaign {campaign!r} of {action!r} (no run recorded it)"
        )
    url = (
        request.url_for("campaign").path + "?" + urlencode({"action": action, "campaign": campaign})
    )
    return console.finish(request, session, RedirectResponse(url, status_code=303))


async def login_form(console: Console, request: Request, session: Session) -> Response:
    return console.respond(request, session, "login.html", {"error": None, "token_login": True})


async def login(request: Request, console: Console) -> Response:
    session = console.sessions.read(request.cookies.get(COOKIE))
    form = await request.form()
    token = form.get("token")
    csrf = form.get("csrf")
    if cross_site(request.headers, request.headers.get("host", "")):
        return PlainRefusal("refused: the request came from another site")
    if session is None or not console.sessions.csrf_ok(
        session, csrf if isinstance(csrf, str) else None
    ):
        return PlainRefusal("refused: reload the login page and try again")
    if console.auth is None or not isinstance(token, str) or not console.auth.accepts_token(token):
        context = {"error": "that is not the token", "token_login": True}
        return console.respond(request, session, "login.html", context, status_code=401)
    logged_in = console.sessions.new(authenticated=True)  # a new id: no session fixation
    response = RedirectResponse(request.url_for("overview").path, status_code=303)
    return console.finish(request, logged_in, response)


def create_app(
    engine_or_url: sa.Engine | AsyncEngine | str,
    *,
    table: str = "notifyonce_slots",
    schema: str | None = None,
    rate_table: str | None = None,
    auth: WebAuth | None = None,
    secret: bytes | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> Starlette:
    """The operator console as an ASGI app, to serve alone or mount in your own app.

    Args:
        engine_or_url: The ledger's database: an ``Engine``, an ``AsyncEngine``, or a URL
            (a sync engine is made from it).
        table: The ledger table's name.
        schema: Its schema.
        rate_table: The SQL rate store's table (default: the one beside ``table``).
        auth: Who may log in; None lets in everyone who can reach the app, so mount it
            only where that is the operators (``notifyonce web`` refuses to listen on
            anything but 127.0.0.1 without it).
        secret: The key that signs session cookies (default: random at each start, so a
            restart logs everyone out; give the same one to every worker process).
        allowed_hosts: The names the app answers to in a request's ``Host`` header
            (``"ops.example.com"``, or ``"ops.example.com:8443"`` for one port). By
            default, without ``auth``, only ``127.0.0.1``, ``localhost`` and ``[::1]`` on
            the port the server listens on: a page elsewhere whose name was pointed at
            this machine (DNS rebinding) is refused with 421 before anything is read.
            With ``auth`` and no list, any name (each request must log in anyway).

    Examples:
        ```python
        from starlette.routing import Mount
        from notifyonce.web import WebAuth, create_app

        console = create_app(engine, auth=WebAuth.from_env())
        app.routes.append(Mount("/notifyonce", app=console))
        ```
    """
    hosts = _hosts(allowed_hosts)
    if isinstance(engine_or_url, str):
        from notifyonce._cli.common import sync_url

        engine_or_url = sa.create_engine(sync_url(engine_or_url), pool_pre_ping=True)
    if not isinstance(engine_or_url, (sa.Engine, AsyncEngine)):
        raise ValidationError(
            "engine_or_url",
            f"must be an Engine, an AsyncEngine or a URL, got {type(engine_or_url).__name__}",
        )
    console = Console(
        engine_or_url, table=table, schema=schema, rate_table=rate_table, auth=auth, secret=secret
    )

    def post(action: Callable[[Request, Console], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            return await action(request, console)

        return endpoint

    routes = [
        Route("/", _page(console, overview), name="overview"),
        Route("/search", _page(console, search_page), name="search"),
        Route("/subject", _page(console, subject_page), name="subject"),
        Route("/campaign", _page(console, campaign_page), name="campaign"),
        Route("/campaign.json", _page(console, campaign_json), name="campaign_json"),
        Route("/campaign/cancel", _page(console, cancel_confirm), name="cancel_confirm"),
        Route("/campaign/cancel", post(cancel_do), methods=["POST"], name="cancel"),
        Route("/problems", _page(console, problems_page), name="problems"),
        Route("/leases", _page(console, leases_page), name="leases"),
        Route("/rate-limits", _page(console, rate_page), name="rate_limits"),
        Route("/recipients", _page(console, recipients_page), name="recipients"),
        Route("/requeue/confirm", post(requeue_confirm), methods=["POST"], name="requeue_confirm"),
        Route("/requeue", post(requeue_do), methods=["POST"], name="requeue"),
        Route("/login", _login_page(console), name="login_form"),
        Route("/login", post(login), methods=["POST"], name="login"),
        Route("/favicon.svg", favicon, name="favicon"),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    guard = Middleware(HostGuard, auth=auth, allowed_hosts=hosts)
    app = Starlette(routes=routes, middleware=[guard])
    app.state.console = console
    return app


async def favicon(request: Request) -> Response:
    """The tab's icon: an inline SVG, the same for everyone (no login, like the styles)."""
    headers = {"cache-control": "max-age=86400", "x-content-type-options": "nosniff"}
    return Response(FAVICON, media_type="image/svg+xml", headers=headers)


def _login_page(console: Console) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        session, _ = console.session(request)
        return await login_form(console, request, session)

    return endpoint
