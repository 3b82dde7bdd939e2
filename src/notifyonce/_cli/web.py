"""``notifyonce web``: serve the operator console (``notifyonce.web``) with uvicorn.

It binds 127.0.0.1 unless told otherwise, and refuses any other interface unless a login
is set in the environment (``NOTIFYONCE_WEB_TOKEN``, or ``NOTIFYONCE_WEB_USER`` and
``NOTIFYONCE_WEB_PASSWORD``): never as an argument, which the process list shows.
"""

from __future__ import annotations

import argparse
from typing import Any

from notifyonce._cli.common import EXIT_OK, UsageError, add_loop_options, event_loop, sync_engine
from notifyonce._errors import ValidationError

__all__ = ["DEFAULT_PORT", "add_parser", "run"]

DEFAULT_PORT = 8080


def add_parser(commands: argparse._SubParsersAction[Any], db: argparse.ArgumentParser) -> None:
    """Register ``web`` on the command line's subcommands."""
    parser = commands.add_parser(
        "web",
        parents=[db],
        help="serve the operator console: actions, campaigns, unknown slots, leases",
        description="Serve the operator console on http://HOST:PORT: each action's and "
        "campaign's slots per status, one subject's history, a running campaign's "
        "progress, the unknown and failed slots by error (and requeueing chosen ones), "
        "leases, flood waits, and the recipients every run skips (gone or opted out). "
        "It binds 127.0.0.1; another --host needs a login from the environment: "
        "NOTIFYONCE_WEB_TOKEN (16 characters or more), or "
        "NOTIFYONCE_WEB_USER and NOTIFYONCE_WEB_PASSWORD. Needs the web extra.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the interface to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--rate-table",
        default=None,
        help="the SQL rate store's table (default: the one beside the ledger table)",
    )
    add_loop_options(parser)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; the exit code."""
    if not 0 < args.port < 65536:
        raise UsageError("--port must be between 1 and 65535")
    try:  # lazy: the web extra may be missing, and the error names it
        import uvicorn

        from notifyonce.web import WebAuth, create_app
        from notifyonce.web._security import check_bind
    except ImportError:
        raise UsageError(
            "notifyonce web needs the web extra: pip install 'notifyonce[web]'"
        ) from None
    try:
        auth = WebAuth.from_env()
        check_bind(args.host, auth)
    except ValidationError as exc:
        raise UsageError(f"web: {exc}") from None
    loop = event_loop(args)
    engine = sync_engine(args, pool_pre_ping=True)
    app = create_app(
        engine, table=args.table, schema=args.schema, rate_table=args.rate_table, auth=auth
    )
    login = "no login (this machine only)" if auth is None else f"login: {auth!r}"
    print(f"notifyonce console on http://{args.host}:{args.port}/ ({login}); Ctrl-C stops it")
    try:
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            server_header=False,
            loop=loop.name,  # "uvloop" or "asyncio": uvicorn's own "auto" knows no opt-out
        )
    finally:
        engine.dispose()
    return EXIT_OK
