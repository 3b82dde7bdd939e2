"""Upload once: the first send of a file uploads it, every later send reuses its file_id.

A file is known by the sha256 of its bytes, so a changed file is uploaded again, and the
file_id of bytes read after the file was hashed is never kept under that hash. A file a
campaign pinned to the bytes it fingerprinted (``_campaign.pin``) is not sent at all once
its bytes changed. Within one
sender the first send of a file uploads it and concurrent sends of the same file wait for
its answer, then send by the ``file_id`` Telegram returned; if that upload fails, the next
send uploads. A [`FileIdStore`][notifyonce.telegram.FileIdStore] keeps the file ids beyond
the process ([`SQLFileIdStore`][notifyonce.telegram.SQLFileIdStore]: in the ledger's
database), so a campaign run again after a crash does not upload again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, runtime_checkable

from notifyonce._errors import PermanentSendError, TransientSendError, ValidationError
from notifyonce._media import Album, Document, Media, Photo, Video, file_sha256, file_size

__all__ = [
    "FileIdStore",
    "MemoryFileIdStore",
    "UploadOnce",
    "changed",
    "file_key",
    "read_upload",
    "same_bytes",
    "unreadable",
]

logger = logging.getLogger("notifyonce.telegram")

R = TypeVar("R")

# Words of Telegram's refusals of a file_id it no longer knows ("wrong file identifier/HTTP
# URL specified", "wrong remote file identifier specified", "FILE_REFERENCE_EXPIRED").
_STALE_FILE = ("file identifier", "file_id", "file_reference", "wrong remote file")


@runtime_checkable
class FileIdStore(Protocol):
    """Where a sender keeps the ``file_id`` of each file it uploaded, by content.

    Keys are ``"<bot id>:<kind>:<sha256 of the bytes>"``: a file_id is valid only for
    the bot that uploaded the file. A store that fails is treated as empty (the file is
    uploaded again), never as a reason not to send.
    """

    async def get(self, key: str) -> str | None:
        """The file_id stored under ``key``, or None."""
        ...

    async def put(self, key: str, file_id: str) -> None:
        """Store ``file_id`` under ``key`` (a key already stored may keep its first id)."""
        ...

    async def forget(self, key: str) -> None:
        """Drop ``key``: Telegram refused its file_id."""
        ...


class MemoryFileIdStore:
    """File ids in this process only: the default store of a sender.

    Examples:
        >>> MemoryFileIdStore()
        MemoryFileIdStore(0 files)
    """

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"MemoryFileIdStore({len(self._ids)} files)"

    async def get(self, key: str) -> str | None:
        return self._ids.get(key)

    async def put(self, key: str, file_id: str) -> None:
        self._ids.setdefault(key, file_id)

    async def forget(self, key: str) -> None:
        self._ids.pop(key, None)


class _Digests:
    """sha256 of files, re-read only when a file's size, mtime or inode changed."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._lock = asyncio.Lock()

    async def of(self, path: str) -> str:
        async with self._lock:  # concurrent first sends hash the file once
            info = os.stat(path)
            stamp = (info.st_size, info.st_mtime_ns, info.st_ino)
            known = self._known.get(path)
            if known is not None and known[0] == stamp:
                return known[1]
            digest = await asyncio.to_thread(file_sha256, path)
            self._known[path] = (stamp, digest)
            return digest


def file_key(bot: str, kind: str, digest: str) -> str:
    """The store key of a file uploaded by ``bot`` as ``kind`` (photo, document, video)."""
    return f"{bot}:{kind}:{digest}"


def unreadable(media: Media, reason: str) -> TransientSendError:
    """The error of a media file that cannot be read at send time: about the message (every
    recipient would be refused alike), never the recipient's, and nothing was sent. It names
    the file's path, so the run that stops on it says which file to put back."""
    return TransientSendError(
        f"the {media.kind} file {_where(media)!r} cannot be read ({reason}); nothing was sent",
        about_message=True,
    )


def changed(media: Media) -> TransientSendError:
    """The error of a file pinned to a campaign's fingerprint (see ``_campaign.pin``) whose
    bytes are no longer the ones pinned: about the message, and nothing was sent."""
    return TransientSendError(
        f"the {media.kind} file {_where(media)!r} changed since the campaign recorded it; "
        "nothing was sent. Put the first file back, or run the campaign again allowing "
        "the change",
        about_message=True,
    )


def same_bytes(media: Media, key: str, data: bytes) -> bool:
    """Whether ``data``, read to be uploaded, are the bytes ``key`` names: a file rewritten
    after it was hashed is not, and its file_id must not be kept under that key.

    Raises:
        TransientSendError: ``changed``, for a pinned file: it must not be sent at all.
    """
    if key.endswith(hashlib.sha256(data).hexdigest()):
        return True
    if _pinned(media):
        raise changed(media)
    return False


def _pinned(media: Media) -> bool:
    return isinstance(media.source, os.PathLike) and media._digest is not None


def _where(media: Media) -> str:
    return os.fspath(media.source) if isinstance(media.source, os.PathLike) else "bytes"


def _read(path: str, kind: str, limit: int) -> bytes:
    file_size(kind, path)  # a ValidationError when it went missing or became a directory
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValidationError(kind, f"grew over the Bot API's {limit // 2**20} MB upload limit")
    return data


async def read_upload(media: Media) -> bytes:
    """The bytes to upload; a TransientSendError about the message (see `unreadable`) when
    the file cannot be read right now."""
    source = media.source
    if isinstance(source, bytes):
        return source
    assert isinstance(source, os.PathLike)
    try:
        return await asyncio.to_thread(_read, os.fspath(source), media.kind, media.upload_limit)
    except (OSError, ValidationError) as exc:
        reason = exc.problem if isinstance(exc, ValidationError) else type(exc).__name__
        raise unreadable(media, reason) from None


def _refers_to_file(error: PermanentSendError) -> bool:
    text = str(error).lower()
    return error.code == 400 and any(word in text for word in _STALE_FILE)


class UploadOnce:
    """One sender's upload-once bookkeeping, over its file id store."""

    def __init__(self, bot: str, store: FileIdStore | None) -> None:
        self.bot = bot
        self.store: FileIdStore = MemoryFileIdStore() if store is None else store
        self._known: dict[str, str] = {}
        self._uploading: dict[str, asyncio.Future[None]] = {}
        self._digests = _Digests()
        # The key each file on disk had when it was last read, by (kind, path): a file gone
        # since is still sent by the file_id its content got.
        self._paths: dict[tuple[str, str], str] = {}

    def knows(self, media: object) -> bool:
        """Whether ``media`` is a file on disk whose file_id this sender already has (an
        album: each of its files): its sends need the files no more (they may be moved or
        deleted meanwhile). A copy, bytes or no media: False."""
        if isinstance(media, Album):
            return all(self.knows(item) for item in media.items)
        if not isinstance(media, (Photo, Document, Video)) or not isinstance(
            media.source, os.PathLike
        ):
            return False
        key = self._paths.get((media.kind, os.fspath(media.source)))
        return key is not None and key in self._known

    async def key(self, media: Media) -> str:
        """The store key of ``media``'s current content.

        A file on disk is read only when it changed since it was last read (its size,
        mtime or inode). One that cannot be read any more keeps the key it had, if its
        file_id is known: it is then sent by that file_id, without the file.

        Raises:
            TransientSendError: About the message (``about_message``): the file cannot be
                read and no file_id is known for it, or it is pinned to a campaign's
                fingerprint and its bytes changed (``changed``). Nothing was sent.
        """
        source = media.source
        if isinstance(source, bytes):
            digest = media._digest or hashlib.sha256(source).hexdigest()
            return file_key(self.bot, media.kind, digest)
        assert isinstance(source, os.PathLike)
        path = (media.kind, os.fspath(source))
        try:
            digest = await self._digests.of(path[1])
        except OSError as exc:
            known = self._paths.get(path)
            if known is not None and known in self._known:
                logger.info("a %s file is gone; sending it by its file_id", media.kind)
                return known
            raise unreadable(media, type(exc).__name__) from None
        if _pinned(media) and digest != media._digest:
            raise changed(media)
        key = self._paths[path] = file_key(self.bot, media.kind, digest)
        return key

    async def send(
        self,
        key: str,
        remaining: Callable[[], float],
        reuse: Callable[[str], Awaitable[tuple[R, str | None]]],
        upload: Callable[[], Awaitable[tuple[R, str | None]]],
    ) -> R:
        """Send by the known file_id of ``key``, or upload (one upload at a time per key).

        ``reuse(file_id)`` and ``upload()`` send and return (the result, the file_id in
        Telegram's answer). A send waiting for another's upload gives up with a
        TransientSendError (nothing sent) when ``remaining()`` seconds run out.
        """
        retried_stale = False
        while True:
            file_id = self._known.get(key)
            if file_id is not None:
                try:
                    result, _ = await reuse(file_id)
                except PermanentSendError as exc:
                    if retried_stale or not _refers_to_file(exc):
                        raise
                    # Telegram no longer knows this file_id: certainly not sent; upload.
                    retried_stale = True
                    await self._forget(key, file_id)
                    continue
                return result
            pending = self._uploading.get(key)
            if pending is not None:
                left = remaining()
                if left <= 0:
                    raise TransientSendError(
                        "the send's budget ran out waiting for the file's first upload"
                    )
                await asyncio.wait({pending}, timeout=left)
                continue
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._uploading[key] = done
            try:
                stored = await self._stored(key)
                if stored is not None:
                    self._known[key] = stored
                    continue
                result, file_id = await upload()
                if file_id is not None:
                    self._known[key] = file_id
                    await self._save(key, file_id)
                return result
            finally:
                # Success or failure, the waiters go on: they reuse the new file_id, or
                # the next one uploads.
                del self._uploading[key]
                done.set_result(None)

    async def _stored(self, key: str) -> str | None:
        try:
            return await self.store.get(key)
        except Exception as exc:
            logger.warning("file id store lookup failed (%s): uploading", type(exc).__name__)
            return None

    async def _save(self, key: str, file_id: str) -> None:
        try:
            await self.store.put(key, file_id)
        except Exception as exc:
            logger.warning(
                "file id store write failed (%s): a later run uploads again",
                type(exc).__name__,
            )

    async def _forget(self, key: str, file_id: str) -> None:
        if self._known.get(key) == file_id:
            del self._known[key]
        logger.warning("Telegram refused a stored file_id: uploading the file again")
        try:
            await self.store.forget(key)
        except Exception as exc:
            logger.warning("file id store delete failed (%s)", type(exc).__name__)
