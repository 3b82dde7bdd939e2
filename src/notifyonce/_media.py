"""Media a message can carry: a photo, a document or a video, checked when it is built.

A media object says where the file comes from: a local file (a ``pathlib.Path``) or its
bytes are uploaded; a ``str`` is a ``file_id`` Telegram gave earlier or an http(s) URL
Telegram fetches. A ``str`` is never read as a path: ``"photo.jpg"`` as a file_id would be
refused by Telegram for every chat, so it is refused here, before anything is claimed.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

from notifyonce._errors import ValidationError, ValidationTypeError

__all__ = [
    "ALBUM_SIZES",
    "MB",
    "Album",
    "Copy",
    "Document",
    "Media",
    "Photo",
    "Video",
    "file_sha256",
    "file_size",
    "refuse_media",
    "refuse_telegram_only",
]

MB = 1024 * 1024

# A Bot API file_id: URL-safe base64 and nothing else.
_FILE_ID = re.compile(r"[A-Za-z0-9_-]{8,}")
# A chat to copy from: a chat id other than 0, or an @username.
_FROM_CHAT = re.compile(r"-?[1-9][0-9]{0,19}|@[A-Za-z][A-Za-z0-9_]{2,63}")
# A filename goes into a multipart header: no quotes, separators or control characters.
_BAD_FILENAME = re.compile(r'["\\/\x00-\x1f\x7f]')


@dataclass(frozen=True, slots=True)
class _Media:
    source: os.PathLike[str] | bytes | str
    filename: str | None = None
    # sha256 of bytes given in memory (hashed once, here); None for the other sources.
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    kind: ClassVar[str] = ""
    upload_limit: ClassVar[int] = 0

    def __post_init__(self) -> None:
        name = self.kind
        source = self.source
        if self.filename is not None:
            if not isinstance(self.filename, str):
                raise ValidationTypeError("filename", "must be a str or None")
            if not self.filename or _BAD_FILENAME.search(self.filename):
                raise ValidationError(
                    "filename", "must be a plain file name: no quotes, slashes or control codes"
                )
        if isinstance(source, (bytearray, memoryview)):
            source = bytes(source)
            object.__setattr__(self, "source", source)
        if isinstance(source, bytes):
            _check_size(name, len(source), self.upload_limit)
            object.__setattr__(self, "_digest", hashlib.sha256(source).hexdigest())
        elif isinstance(source, os.PathLike):
            _check_size(name, file_size(name, source), self.upload_limit)
        elif isinstance(source, str):
            if self.filename is not None:
                raise ValidationError("filename", f"applies to an upload, not to a {name} str")
            if not (source.startswith(("http://", "https://")) or _FILE_ID.fullmatch(source)):
                raise ValidationError(
                    name,
                    "is a str that is neither a file_id nor an http(s) URL; to upload a "
                    "local file pass a pathlib.Path, or its bytes",
                )
        else:
            raise ValidationTypeError(
                name,
                "must be a pathlib.Path or bytes (uploaded) or a str (a file_id or URL), "
                f"got {type(source).__name__}",
            )

    def __repr__(self) -> str:
        source = self.source
        if isinstance(source, bytes):
            shown = f"<{len(source)} bytes>"
        elif isinstance(source, os.PathLike):
            shown = repr(os.path.basename(os.fspath(source)))
        elif source.startswith(("http://", "https://")):
            shown = "url=<redacted>"  # a signed URL can carry a secret
        else:
            shown = f"file_id={source!r}"
        return f"{type(self).__name__}({shown})"

    @property
    def uploads(self) -> bool:
        """Whether sending it uploads bytes (a file or bytes) rather than naming a file."""
        return not isinstance(self.source, str)

    def upload_name(self) -> str:
        """The file name the upload carries."""
        if self.filename is not None:
            return self.filename
        if isinstance(self.source, os.PathLike):
            return os.path.basename(os.fspath(self.source)) or self.kind
        return _DEFAULT_NAMES[self.kind]


_DEFAULT_NAMES = {"photo": "photo.jpg", "document": "document", "video": "video.mp4"}


def _check_size(name: str, size: int, limit: int) -> None:
    if size == 0:
        raise ValidationError(name, "is empty (0 bytes); Telegram refuses empty files")
    if size > limit:
        raise ValidationError(
            name,
            f"is {size / MB:.1f} MB; the Bot API takes uploads of a {name} up to {limit // MB} MB",
        )


def file_sha256(path: str) -> str:
    """The hex sha256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_size(name: str, path: str | os.PathLike[str]) -> int:
    """The size of a readable regular file, or a ValidationError naming ``name``."""
    where = os.fspath(path)
    try:
        info = os.stat(where)
    except OSError as exc:
        raise ValidationError(name, f"cannot use {where!r}: {type(exc).__name__}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValidationError(name, f"{where!r} is not a regular file")
    if not os.access(where, os.R_OK):
        raise ValidationError(name, f"{where!r} is not readable")
    return info.st_size


@dataclass(frozen=True, slots=True, repr=False)
class Photo(_Media):
    """A photo for [`Message.media`][notifyonce.Message]: sent with ``sendPhoto``.

    Args:
        source: A ``pathlib.Path`` or the bytes of the image (uploaded, at most 10 MB), or a
            ``str``: a ``file_id`` from an earlier send, or an http(s) URL.
        filename: The upload's file name (default: the path's name, else ``photo.jpg``).

    Raises:
        ValidationError: The file is missing, unreadable, empty or over the limit, or a
            ``str`` is neither a file_id nor a URL (nothing is sent).

    Examples:
        >>> Photo("https://example.com/tariff.png")
        Photo(url=<redacted>)
        >>> Photo(b"PNG image bytes", filename="tariff.png")
        Photo(<15 bytes>)
    """

    kind: ClassVar[str] = "photo"
    upload_limit: ClassVar[int] = 10 * MB


@dataclass(frozen=True, slots=True, repr=False)
class Document(_Media):
    """A file for [`Message.media`][notifyonce.Message]: sent with ``sendDocument``.

    Args:
        source: A ``pathlib.Path`` or the file's bytes (uploaded, at most 50 MB), or a
            ``str``: a ``file_id`` from an earlier send, or an http(s) URL.
        filename: The upload's file name (default: the path's name, else ``document``).

    Examples:
        >>> Document(b"%PDF-1.7 ...", filename="invoice.pdf")
        Document(<12 bytes>)
    """

    kind: ClassVar[str] = "document"
    upload_limit: ClassVar[int] = 50 * MB


@dataclass(frozen=True, slots=True, repr=False)
class Video(_Media):
    """A video for [`Message.media`][notifyonce.Message]: sent with ``sendVideo``.

    Args:
        source: A ``pathlib.Path`` or the video's bytes (uploaded, at most 50 MB), or a
            ``str``: a ``file_id`` from an earlier send, or an http(s) URL.
        filename: The upload's file name (default: the path's name, else ``video.mp4``).

    Examples:
        >>> Video("BAACAgIAAxkBAAIBQ2Zk")
        Video(file_id='BAACAgIAAxkBAAIBQ2Zk')
    """

    kind: ClassVar[str] = "video"
    upload_limit: ClassVar[int] = 50 * MB


Media: TypeAlias = "Photo | Document | Video"


@dataclass(frozen=True, slots=True)
class Copy:
    """A message already in Telegram, copied to each recipient with ``copyMessage``.

    Whatever the message holds (formatted text, a photo, an album's item, a poll) goes
    out as is, without a "forwarded from" header. Build it with
    [`Message.copy`][notifyonce.Message.copy], which also takes a caption override and
    buttons. Telegram senders only.

    Args:
        from_chat_id: The chat the message is in (an int, its text, or ``@channelname``);
            not 0.
        message_id: The message's id in that chat, a positive int.

    Raises:
        ValidationError: A chat id of 0 or a malformed one, a message id below 1
            (the error names the field; nothing is sent).

    Examples:
        >>> Copy(-1001234567890, 42)
        Copy(from_chat_id=-1001234567890, message_id=42)
    """

    from_chat_id: int | str
    message_id: int

    kind: ClassVar[str] = "copy"

    def __post_init__(self) -> None:
        chat = self.from_chat_id
        if isinstance(chat, bool) or not isinstance(chat, (int, str)):
            raise ValidationTypeError(
                "from_chat_id", f"must be a chat id (an int) or a str, got {type(chat).__name__}"
            )
        if chat == 0 or chat == "0":
            raise ValidationError("from_chat_id", "must not be 0: give the chat the message is in")
        if not _FROM_CHAT.fullmatch(str(chat)):
            raise ValidationError(
                "from_chat_id", "must be a chat id such as 12345 or -100123, or an @channelname"
            )
        mid = self.message_id
        if isinstance(mid, bool) or not isinstance(mid, int):
            raise ValidationTypeError("message_id", f"must be an int, got {type(mid).__name__}")
        if mid <= 0:
            raise ValidationError("message_id", f"must be a positive message id, got {mid}")

    @property
    def uploads(self) -> bool:
        """Always False: a copy names a message, it uploads nothing."""
        return False


def refuse_media(media: object, sender: str) -> None:
    """A ValidationError when a text-only sender is given a message with media."""
    if media is not None:
        raise ValidationError(
            "media",
            f"{sender} sends text only; send photos, documents and videos with "
            "TelegramSender, AiogramSender or PTBSender",
        )


#: How many photos and videos an album holds: Telegram's bounds.
ALBUM_SIZES = range(2, 11)


@dataclass(frozen=True, slots=True)
class Album:
    """A media group: 2 to 10 photos and videos sent together with ``sendMediaGroup``, as
    one notification (one slot). The message's text is the caption of the first item.

    Each file is uploaded once and sent by its ``file_id`` after that, across the
    campaign and, with a [`SQLFileIdStore`][notifyonce.telegram.SQLFileIdStore], across
    runs. Telegram sends no buttons under an album. ``TelegramSender`` only.

    Args:
        items: The [`Photo`][notifyonce.Photo] and [`Video`][notifyonce.Video] objects,
            in order.

    Raises:
        ValidationError: Fewer than 2 or more than 10 items, or an item that is not a
            Photo or a Video (``field == "album"``; nothing is sent).

    Examples:
        >>> Album([Photo("https://example.com/a.png"), Photo("https://example.com/b.png")])
        Album(Photo(url=<redacted>), Photo(url=<redacted>))
        >>> Album([Photo("https://example.com/a.png")])
        Traceback (most recent call last):
        ...
        notifyonce._errors.ValidationError: album: has 1 item; Telegram takes 2 to 10 ...
    """

    items: tuple[Photo | Video, ...]

    kind: ClassVar[str] = "album"

    def __init__(self, items: Iterable[Photo | Video] | object) -> None:
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise ValidationTypeError("album", "must be a list of photos and videos")
        found = tuple(items)
        for number, item in enumerate(found, 1):
            if not isinstance(item, (Photo, Video)):
                raise ValidationTypeError(
                    "album", f"item {number} is a {type(item).__name__}, not a Photo or a Video"
                )
        if len(found) not in ALBUM_SIZES:
            noun = "item" if len(found) == 1 else "items"
            raise ValidationError(
                "album",
                f"has {len(found)} {noun}; Telegram takes 2 to 10 photos and videos in an album",
            )
        object.__setattr__(self, "items", found)

    def __repr__(self) -> str:
        return f"Album({', '.join(repr(item) for item in self.items)})"

    @property
    def uploads(self) -> bool:
        """Whether sending it uploads bytes (an item from a file or bytes)."""
        return any(item.uploads for item in self.items)


def refuse_telegram_only(media: object, sender: str) -> None:
    """A ValidationError when a sender without ``copyMessage`` or ``sendMediaGroup`` is
    given a copy or an album."""
    if isinstance(media, (Copy, Album)):
        raise ValidationError(
            "media",
            f"{sender} sends no copies or albums; send a Message.copy or an Album with "
            "TelegramSender",
        )
