"""``notifyonce serve-test-api``: the local Bot API server, to try bots and commands by hand.

It is the server the test suite uses ([`BotAPIServer`][notifyonce.testing.BotAPIServer]),
on a fixed port, printing a line for every request it answers, so the broadcast command,
the quick start and the example bots can be run without Telegram and without a bot:
nothing leaves the machine. It accepts any token.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import threading
from typing import IO, Any

from notifyonce._cli.common import EXIT_OK, UsageError
from notifyonce.testing import BotAPIServer, Delivery, Request

__all__ = ["DEFAULT_PORT", "add_parser", "run"]

DEFAULT_PORT = 8081
_SHOWN = 60  # characters of a message text shown per line
_POLL = 0.1  # seconds between looks at what the server received


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Register ``serve-test-api`` on the command line's subcommands."""
    parser = commands.add_parser(
        "serve-test-api",
        help="run a local Bot API server that prints what it receives (to try bots by hand)",
        description="Run the Bot-API-shaped server of notifyonce's tests on 127.0.0.1, "
        "printing a line for every message it receives (its text too: it is a test "
        "server) and every request it refuses. Point a bot at it with "
        "NOTIFYONCE_BOT_API_URL=http://127.0.0.1:PORT (TelegramSender and `notifyonce "
        "broadcast` read it), or aiogram's and python-telegram-bot's base URL options. "
        "It accepts any token; nothing reaches Telegram. A polling bot gets updates "
        "queued with POST /user_says (chat_id, text); POST /user_blocks and "
        "/user_unblocks (chat_id) block and unblock the bot for a user (/block and /unblock "
        "without the update), /bot_removed and "
        "/bot_added (chat_id, status) take it out of a group and back, /user_presses "
        "(chat_id, data) presses an inline button. POST /post (chat_id, text, optional "
        "message_id) puts a post in a channel, answering its message_id (to --copy-from), "
        "/delete_message (chat_id, message_id) deletes it, /script (chat_id, reply: "
        "blocked, chat_not_found, flood with retry_after, ...; times) makes the next sends "
        "to a chat fail; GET /received answers what it received, as JSON. Ctrl-C stops it.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the port on 127.0.0.1 (default: {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds added before every answer, like a network round trip (default: 0)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object a line instead of text"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; the exit code."""
    if not 0 < args.port < 65536:
        raise UsageError("--port must be between 1 and 65535")
    if args.latency < 0:
        raise UsageError("--latency must be 0 or more")
    server = BotAPIServer(port=args.port, latency=args.latency)
    try:
        server.start()
    except OSError as exc:
        raise UsageError(
            f"cannot listen on 127.0.0.1:{args.port} ({exc.strerror or type(exc).__name__}): "
            "is another server running there? Pass --port"
        ) from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    out = sys.stdout
    if args.json:
        print(json.dumps({"event": "listening", "url": server.url}), file=out, flush=True)
    else:
        print(
            f"notifyonce test Bot API server on {server.url} (any token; nothing reaches "
            "Telegram)\n"
            f"  point a bot at it:  export NOTIFYONCE_BOT_API_URL={server.url}\n"
            f"  a user writes:      curl -d chat_id=42 -d text=/start {server.url}/user_says\n"
            f"  a user blocks it:   curl -d chat_id=42 {server.url}/user_blocks\n"
            "Ctrl-C stops it.",
            file=out,
            flush=True,
        )
    log = _Log(server, out, as_json=args.json)
    try:
        while not stop.wait(_POLL):
            log.print_new()
        log.print_new()
    finally:
        server.stop()
    return EXIT_OK


class _Log:
    """Prints what the server received since the last look: each message delivered, each
    request refused, and the calls other than sends and ``getUpdates`` (which a polling
    bot makes all the time)."""

    def __init__(self, server: BotAPIServer, out: IO[str], *, as_json: bool) -> None:
        self.server = server
        self.out = out
        self.as_json = as_json
        self.seen = {"calls": 0, "requests": 0, "deliveries": 0, "changes": 0}

    def _new(self, name: str, items: list[Any]) -> list[Any]:
        fresh = items[self.seen[name] :]
        self.seen[name] = len(items)
        return fresh

    def print_new(self) -> None:
        for method in self._new("calls", self.server.calls):
            if method not in _SENDS and method not in _CHANGES and method != "getUpdates":
                self._print({"event": "call", "method": method}, method)
        for delivery in self._new("deliveries", self.server.deliveries):
            self._delivered(delivery)
        for change in self._new("changes", self.server.changes):
            verb = "deleted" if change.method.startswith("delete") else "edited"
            record = {
                "event": verb,
                "method": change.method,
                "chat_id": change.chat_id,
                "message_id": change.message_id,
            }
            line = f"{verb} message {change.message_id} in chat {change.chat_id} ({change.method})"
            self._print(record, line)
        for request in self._new("requests", self.server.requests):
            if not request.reply.delivers:
                self._refused(request)

    def _delivered(self, delivery: Delivery) -> None:
        text = delivery.text
        shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
        record = {
            "event": "delivered",
            "method": delivery.method,
            "chat_id": delivery.chat_id,
            "message_id": delivery.message_id,
            "text": text,
            "file_id": delivery.file_id,
        }
        self._print(record, f"delivered {delivery.method} to chat {delivery.chat_id}: {shown!r}")

    def _refused(self, request: Request) -> None:
        status = request.reply.status
        record = {
            "event": "refused",
            "method": request.method,
            "chat_id": request.chat_id,
            "status": status,
        }
        to = "" if request.chat_id is None else f" to chat {request.chat_id}"
        why = {401: " (wrong token)", 404: " (wrong path or method)"}.get(status, "")
        said = _description(request.reply.body)
        if said is not None:
            # Telegram's own words for it (never the message's text, nor the token); a
            # wrong token or path has the server's own words above.
            record["description"] = said
            why = why or f" {said}"
        self._print(record, f"refused {request.method or 'request'}{to}: {status}{why}")

    def _print(self, record: dict[str, Any], line: str) -> None:
        now = dt.datetime.now().astimezone()
        if self.as_json:
            text = json.dumps({"at": now.isoformat(timespec="milliseconds"), **record})
        else:
            text = f"{now:%H:%M:%S}  {line}"
        print(text, file=self.out, flush=True)


def _description(body: bytes | None) -> str | None:
    """The ``description`` of a Bot API error answer (``"Forbidden: bot was blocked by the
    user"``), or None when the answer has none (a dropped connection, a proxy's page)."""
    if not body:
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    said = answer.get("description") if isinstance(answer, dict) else None
    return said[:200] if isinstance(said, str) and said else None


_SENDS = {"sendMessage", "sendPhoto", "sendDocument", "sendVideo"}
# Edits and deletes: printed as what they changed (a refused one as refused).
_CHANGES = {
    "editMessageText",
    "editMessageCaption",
    "editMessageReplyMarkup",
    "deleteMessage",
    "deleteMessages",
}
