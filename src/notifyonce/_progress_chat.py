"""A broadcast's progress where the admin is: one message in a chat, edited in place.

The message is posted with the campaign's own sender (so within the bot's rate limit)
at the first progress snapshot, edited at most once every ``every`` seconds, and edited a
last time with the summary. A failure to post or edit is logged and never stops the
campaign.

The message's chat and id are kept in the ledger (see ``_campaign``) as soon as it is
posted, so a run resumed after a crash or a cancel edits the same message instead of
posting another; a message the admin deleted (its edit refused for good) is posted anew
and remembered instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from notifyonce._broadcast import skipped_text, stop_line, unknown_text, waiting_text
from notifyonce._campaign import keep_progress_message, progress_message
from notifyonce._errors import PermanentSendError, SendError, ValidationError
from notifyonce._media import Document
from notifyonce._message import Message

if TYPE_CHECKING:
    from notifyonce._broadcast import Broadcast, BroadcastProgress
    from notifyonce._ledger.ledger import AsyncLedger

__all__ = ["ProgressMessage", "render_progress"]

logger = logging.getLogger("notifyonce.broadcast")

# Unknown chats up to this many are listed in the summary itself; more go as a file.
UNKNOWN_INLINE = 10


class _EditingSender(Protocol):
    async def send(self, recipient: str, message: Message) -> Any: ...

    async def edit_text(self, recipient: str, message_id: int, text: str) -> bool: ...


def render_progress(name: str, p: BroadcastProgress, ending: str | None = None) -> str:
    """The progress message's text: the campaign, how far, the counts (this run's); the
    summary at the end, ``ending`` the line of a run stopped before its end (the command
    line's own, see `stop_line`)."""
    total = f" of {p.total:,}" if p.total is not None else ""
    state = "running" if not p.finished else "stopped" if ending else "finished"
    counts = (
        f"sent {p.sent:,} · failed {p.failed:,} · unknown {p.unknown:,} · "
        f"already done {p.duplicate:,}"
    )
    # The command line's words and tallies: tried and given back apart from not tried.
    counts += "".join(
        f" · {what} {n:,}"
        for n, what in ((p.given_back, "given back"), (p.untried, "not tried"))
        if n
    )
    head = f"Broadcast {name}: {state}, {p.handled:,}{total} handled in {p.elapsed:.0f} s"
    lines = [head, counts]
    skipped = skipped_text(p)
    if skipped:
        lines.append(skipped)
    waiting = waiting_text(p)
    if waiting and not p.finished:
        lines.append(waiting)
    if not p.finished and p.eta is not None and not p.waiting:
        lines.append(f"{p.rate:,.0f}/s, about {p.eta:.0f} s left")
    if p.finished and p.unknown:
        lines.append("unknown: may or may not have arrived; they are not sent again")
    if p.finished and ending:
        lines.append(ending)
    elif p.finished and p.retry:
        lines.append("run the campaign again to retry the rest")
    return "\n".join(lines)


class ProgressMessage:
    """Shows a [`Broadcast`][notifyonce.Broadcast]'s progress in a chat (an admin's): one
    message, posted at the first snapshot and edited in place, ending with the summary.

    The message is remembered in the campaign's ledger, so a later run of the campaign
    (resumed after a crash or a cancel) edits it too; if it is gone (deleted in the
    chat), a new one is posted and remembered.

    Pass it as ``Broadcast(..., progress_chat=ProgressMessage(sender, admin_chat))``;
    ``notifyonce broadcast --progress-chat ID`` does the same.

    Args:
        sender: A sender that can edit what it sent, e.g. the campaign's
            [`TelegramSender`][notifyonce.telegram.TelegramSender] (its rate limit then
            paces the edits with the campaign's sends).
        chat: The chat to post in.
        every: The fewest seconds between two edits (Telegram limits edits of one
            message); the final summary is always shown.
        clock: Monotonic clock (tests inject a fake one).

    Attributes:
        message_id: The progress message's id once posted (or found in the ledger).
        edits: How many times it was edited (an unchanged text is not counted).
        posts: How many messages it posted (1, or 0 when it edited an earlier run's).
    """

    def __init__(
        self,
        sender: _EditingSender,
        chat: int | str,
        *,
        every: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not callable(getattr(sender, "edit_text", None)):
            raise ValidationError("sender", "must be able to edit its messages (edit_text)")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or every < 0:
            raise ValidationError("every", "must be a number of seconds, at least 0")
        self.sender = sender
        self.chat = str(chat)
        self.every = float(every)
        self.clock = clock
        self.message_id: int | None = None
        self.edits = 0
        self.posts = 0
        self._shown: float | None = None
        # Where the message is remembered: the campaign's ledger, action and campaign id.
        self._keep: tuple[AsyncLedger, str, str] | None = None

    async def follow(self, broadcast: Broadcast) -> None:
        """Show ``broadcast``'s snapshots until its last one (the summary)."""
        name = f"{broadcast.action}/{broadcast.campaign}"
        if not broadcast.notifier.dry_run:
            self._keep = (broadcast.notifier.ledger, broadcast.action, broadcast.campaign)
            if self.message_id is None:
                earlier = await progress_message(*self._keep)
                if earlier is not None and earlier[0] == self.chat:
                    self.message_id = earlier[1]
        final = False
        async for snapshot in broadcast.watch():
            final = snapshot.finished
            due = self._shown is None or self.clock() - self._shown >= self.every
            if final:
                await self._summary(broadcast, render_progress(name, snapshot, _ending(broadcast)))
            elif due:
                await self.show(render_progress(name, snapshot))
        last = broadcast._last
        if not final and last is not None and last.finished:  # it ended before we watched
            await self._summary(broadcast, render_progress(name, last, _ending(broadcast)))

    async def _summary(self, broadcast: Broadcast, text: str) -> None:
        """The summary; with the campaign's unknown chats (the admin's to check by hand)
        listed in it when they are few, or as a file beside it when they are many."""
        unknown: list[str] = []
        if not broadcast.notifier.dry_run:
            try:
                unknown, _ = await broadcast._standing()
            except SQLAlchemyError as exc:
                logger.warning("the unknown chats could not be listed (%s)", type(exc).__name__)
        # The counts above are this run's; the list is the campaign's (earlier runs' too).
        this_run = broadcast._last.unknown if broadcast._last is not None else 0
        if 0 < len(unknown) <= UNKNOWN_INLINE:
            text += f"\n{unknown_text(this_run, len(unknown))}: " + ", ".join(unknown)
        elif unknown:
            text += f"\n{unknown_text(this_run, len(unknown))}: in the file below"
        await self.show(text)
        if len(unknown) > UNKNOWN_INLINE:
            name = f"{broadcast.action}-{broadcast.campaign}-unknown.txt"
            listing = Document(("\n".join(unknown) + "\n").encode(), filename=name)
            try:
                await self.sender.send(
                    self.chat, Message(f"{len(unknown):,} unknown chats", media=listing)
                )
            except (SendError, ValidationError) as exc:
                logger.warning("could not send the unknown chats to the admin chat (%s)", exc)

    async def show(self, text: str) -> None:
        """Post ``text``, or put it in the message posted before (a message gone is posted
        anew); a failure is logged."""
        self._shown = self.clock()
        try:
            if self.message_id is not None:
                try:
                    if await self.sender.edit_text(self.chat, self.message_id, text):
                        self.edits += 1
                    return
                except PermanentSendError as exc:
                    logger.warning("the progress message is gone (%s); posting a new one", exc)
                    self.message_id = None
            receipt = await self.sender.send(self.chat, Message(text))
            self.posts += 1
            mid = getattr(receipt, "message_id", None)
            self.message_id = mid if isinstance(mid, int) else None
            if self.message_id is not None and self._keep is not None:
                await keep_progress_message(*self._keep, self.chat, self.message_id)
        except SendError as exc:
            logger.warning("could not show the progress in the admin chat (%s)", exc)


def _ending(broadcast: Broadcast) -> str | None:
    """The stop line of a run that ended before its end (None when it ran to the end)."""
    task, last = broadcast._task, broadcast._last
    if task is None or not task.done() or last is None:
        return None
    cause = broadcast._cause(task.cancelled())
    if cause is None:
        return None
    run = broadcast._run
    stopped = None if run is None else run.report.stopped
    resume_at = None if run is None else run.resume_at
    name = f"{broadcast.action}/{broadcast.campaign}"
    return stop_line(name, last, cause, stopped, broadcast._not_tried, resume_at)
