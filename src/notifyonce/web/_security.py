"""Who may look and who may change: the console's login, session cookie and CSRF tokens.

- Without an auth setting the console answers everyone who reaches it, so the command
  binds 127.0.0.1 and refuses any other interface (``check_bind``), and every request
  must name this machine in its ``Host`` header (``host_refusal``): a page on another
  site whose name an attacker pointed at 127.0.0.1 (DNS rebinding) sends its own name
  there, and is turned away before anything is read.
- With one (a token, or a user and password, from the environment), a request is let in
  by an ``Authorization`` header (``Bearer <token>`` or HTTP Basic) or by the session
  cookie that the login form sets.
- A request that changes something (a POST) needs the session cookie and the CSRF token
  derived from it in its form, and is refused when the browser says it came from another
  site (``Sec-Fetch-Site``, ``Origin``).

Sessions are stateless: the cookie is a random id and an HMAC of it under a secret drawn
when the app starts (or given), so a restart logs everyone out and nothing is stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from notifyonce._errors import ValidationError

__all__ = [
    "ENV_PASSWORD",
    "ENV_TOKEN",
    "ENV_USER",
    "Session",
    "Sessions",
    "WebAuth",
    "check_bind",
    "host_refusal",
    "is_loopback",
]

# The names of the variables, not secrets.
ENV_TOKEN = "NOTIFYONCE_WEB_TOKEN"  # noqa: S105
ENV_USER = "NOTIFYONCE_WEB_USER"
ENV_PASSWORD = "NOTIFYONCE_WEB_PASSWORD"  # noqa: S105
COOKIE = "notifyonce_session"
_MIN_TOKEN = 16


@dataclass(frozen=True)
class WebAuth:
    """What the console asks of a visitor: a token, or a user and password (HTTP Basic).

    Read it from the environment with `from_env` (never from a command-line argument,
    which other users of the machine can see in the process list).

    Attributes:
        token: A secret of at least 16 characters: ``Authorization: Bearer <token>``, or
            typed into the login page once per browser session.
        username: With ``password``: HTTP Basic, which browsers ask for themselves.
        password: See ``username``.
    """

    token: str | None = None
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < _MIN_TOKEN:
            raise ValidationError("token", f"must be at least {_MIN_TOKEN} characters long")
        if (self.username is None) != (self.password is None):
            raise ValidationError("password", "a user needs a password and a password a user")
        if self.password is not None and not self.password:
            raise ValidationError("password", "must not be empty")
        if self.token is None and self.password is None:
            raise ValidationError("token", "give a token, or a user and a password")

    def __repr__(self) -> str:  # never the secrets themselves
        kinds = [k for k, v in (("token", self.token), ("basic", self.password)) if v]
        return f"WebAuth({', '.join(kinds)})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WebAuth | None:
        """The auth set in ``NOTIFYONCE_WEB_TOKEN``, or ``NOTIFYONCE_WEB_USER`` and
        ``NOTIFYONCE_WEB_PASSWORD``; None when neither is set.

        Raises:
            ValidationError: A setting is there but unusable (a short token, a user
                without a password).
        """
        env = os.environ if environ is None else environ
        token = env.get(ENV_TOKEN) or None
        user = env.get(ENV_USER) or None
        password = env.get(ENV_PASSWORD) or None
        if token is None and user is None and password is None:
            return None
        return cls(token=token, username=user, password=password)

    def accepts_header(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries this auth's token or user."""
        if not authorization:
            return False
        scheme, _, value = authorization.partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "bearer" and self.token is not None:
            return _same(value, self.token)
        if scheme == "basic" and self.password is not None and self.username is not None:
            try:
                decoded = base64.b64decode(value, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return False
            user, _, password = decoded.partition(":")
            return _same(user, self.username) & _same(password, self.password)
        return False

    def accepts_token(self, typed: str) -> bool:
        """Whether the login form's token is this auth's token."""
        return self.token is not None and _same(typed, self.token)


def _same(given: str, wanted: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), wanted.encode("utf-8"))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: WebAuth | None) -> None:
    """Refuse to serve on an interface other machines reach when nobody has to log in.

    Raises:
        ValidationError: ``host`` is not a loopback address and ``auth`` is None.
    """
    if auth is None and not is_loopback(host):
        raise ValidationError(
            "host",
            f"{host!r} is reachable from other machines, and no login is set: set "
            f"${ENV_TOKEN} (16 characters or more), or ${ENV_USER} and ${ENV_PASSWORD}, "
            "in the environment, or bind 127.0.0.1",
        )


def _split_host(header: str) -> tuple[str, int | None] | None:
    """A ``Host`` header's name (lower case, IPv6 in brackets) and port; None when it is
    not one."""
    header = header.strip().lower()
    if header.startswith("["):
        name, bracket, rest = header.partition("]")
        if not bracket:
            return None
        name += "]"
    else:
        name, _, port = header.partition(":")
        rest = f":{port}" if port else ""
    if not name:
        return None
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name, int(rest[1:])


def host_refusal(
    header: str | None,
    *,
    scheme: str,
    server_port: int | None,
    auth: WebAuth | None,
    allowed_hosts: frozenset[str] | None,
) -> str | None:
    """Why a request's ``Host`` header is refused, or None when it is accepted.

    - ``allowed_hosts`` given: the name, or ``name:port``, must be one of them.
    - Otherwise, without a login: the name must be a loopback address or ``localhost``,
      and the port the one the server listens on (``server_port``, when known). With a
      login any name is accepted: a rebound page has no session and no credentials.

    Args:
        header: The request's ``Host`` header (None when it sent none).
        scheme: ``http`` or ``https``: the port a header without one means.
        server_port: The port the request came in on (the ASGI scope's ``server``).
        auth: The console's login, or None.
        allowed_hosts: The names (lower case, optionally ``:port``) the operator allowed.
    """
    if allowed_hosts is None and auth is not None:
        return None
    parsed = _split_host(header) if header else None
    if parsed is None:
        return "the request names no valid Host"
    name, port = parsed
    if port is None:
        port = 443 if scheme in ("https", "wss") else 80
    if allowed_hosts is not None:
        if name in allowed_hosts or f"{name}:{port}" in allowed_hosts:
            return None
        return f"the Host {name}:{port} is not one of the console's allowed hosts"
    if not is_loopback(name):
        return (
            f"the Host {name}:{port} is not this machine: with no login set, the console "
            "answers only to 127.0.0.1, localhost and [::1] (set a login, or allowed_hosts, "
            "to serve another name)"
        )
    if server_port is not None and port != server_port:
        return f"the Host names port {port}, and the console listens on {server_port}"
    return None


@dataclass(frozen=True)
class Session:
    """One browser's session: its id, whether it logged in, and its CSRF token."""

    id: str
    authenticated: bool
    csrf: str
    fresh: bool  # not from a valid cookie: the response sets one


class Sessions:
    """Makes and reads the session cookie and the CSRF token, under one secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _sign(self, purpose: str, value: str) -> str:
        digest = hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256)
        return digest.hexdigest()

    def new(self, *, authenticated: bool = False) -> Session:
        sid = secrets.token_urlsafe(24)
        return Session(sid, authenticated, self._sign("csrf", sid), fresh=True)

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie names, or None when it is missing or was not made here."""
        if not cookie:
            return None
        sid, _, rest = cookie.partition(".")
        flag, _, signature = rest.partition(".")
        if not sid or flag not in ("0", "1"):
            return None
        if not hmac.compare_digest(signature, self._sign("session", f"{sid}.{flag}")):
            return None
        return Session(sid, flag == "1", self._sign("csrf", sid), fresh=False)

    def cookie(self, session: Session) -> str:
        value = f"{session.id}.{int(session.authenticated)}"
        return f"{value}.{self._sign('session', value)}"

    def csrf_ok(self, session: Session | None, token: str | None) -> bool:
        """Whether ``token`` is the CSRF token of ``session`` (a cookie's, not a new one)."""
        if session is None or session.fresh or not token:
            return False
        return hmac.compare_digest(token, session.csrf)


def cross_site(headers: Mapping[str, str], host: str) -> bool:
    """Whether the browser says the request comes from another site.

    ``Sec-Fetch-Site`` is set by every current browser; ``Origin`` by every browser on
    a POST. A client that sends neither (a script) is judged by its CSRF token alone.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = headers.get("origin")
    if origin is None or origin == "null":
        return origin == "null"
    netloc = origin.split("://", 1)[-1]
    return netloc != host
