"""Albums: 2-10 photos and videos as one notification, sent with sendMediaGroup, each file
uploaded once and sent by its file_id after that, across a campaign and across runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from notifyonce import (
    Album,
    AsyncLedger,
    Broadcast,
    Document,
    Message,
    Notifier,
    Photo,
    ValidationError,
    Video,
)
from notifyonce._cli import main
from notifyonce.telegram import RateLimit, SQLFileIdStore, TelegramSender
from notifyonce.testing import BotAPIServer

from .test_cli_broadcast import TEXT, command, run, server, workdir

__all__ = ["server", "workdir"]  # the broadcast command's fixtures, used here

TOKEN = "424242:ALBUM-secret"
FAST = RateLimit(bot_per_second=500.0, private_chat_per_second=50.0)
RUN_TIMEOUT = 60.0


def photos(count: int) -> list[Photo]:
    return [Photo(bytes([n]) * 1000, filename=f"p{n}.jpg") for n in range(count)]


@pytest.mark.parametrize("count", [0, 1, 11])
def test_an_album_of_fewer_than_2_or_more_than_10_is_refused(count: int) -> None:
    """An album of 0, 1 or 11 items is refused naming the field ``album``."""
    with pytest.raises(ValidationError) as caught:
        Album(photos(count))
    assert "album" == caught.value.field
    assert f"has {count} item" in caught.value.problem


def test_an_album_takes_photos_and_videos_only_and_no_buttons() -> None:
    """A document in an album, or buttons under one, is refused before any send."""
    with pytest.raises(ValidationError) as caught:
        Album([*photos(1), Document(b"%PDF", filename="a.pdf")])
    assert ("album", "item 2 is a Document, not a Photo or a Video") == (
        caught.value.field,
        caught.value.problem,
    )
    sender = TelegramSender(TOKEN, rate_limit=None)
    keyboard = {"inline_keyboard": [[{"text": "A", "url": "https://e.x"}]]}
    with pytest.raises(ValidationError) as refused:
        sender.check("1", Message("", media=Album(photos(2)), reply_markup=keyboard))
    assert "reply_markup" == refused.value.field


async def test_an_album_goes_out_in_one_request_with_the_caption_on_the_first(
    bot_api_server: BotAPIServer,
) -> None:
    """Two photos and a video: one sendMediaGroup request, three messages, the caption on
    the first; the receipt has the three messages' ids and the three file ids."""
    album = Album([*photos(2), Video(b"\x00\x00\x00\x18ftypmp42" * 50, filename="v.mp4")])
    async with TelegramSender(TOKEN, base_url=bot_api_server.url, rate_limit=None) as sender:
        receipt = await sender.send("1", Message("<b>Menu</b>", parse_mode="HTML", media=album))
    assert ["sendMediaGroup"] == [r.method for r in bot_api_server.requests]
    first, second, third = bot_api_server.deliveries
    assert ("<b>Menu</b>", "", "") == (first.text, second.text, third.text)
    expected_ids = f"{first.message_id},{second.message_id},{third.message_id}"
    assert expected_ids == receipt.message_id
    assert [first.file_id, second.file_id, third.file_id] == str(receipt.file_id).split(",")
    assert 3 == len(bot_api_server.uploads)


async def test_an_album_campaign_uploads_each_file_once_over_two_runs(
    ledger: AsyncLedger, bot_api_server: BotAPIServer, tmp_path: Path
) -> None:
    """An album of 3 photos to 60 chats, run twice with new senders and a SQL file id
    store: each chat gets the album once, and each file is uploaded once in all."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'files.sqlite3'}")
    store = SQLFileIdStore(engine)
    await store.create_schema()
    album = Message("Our menu", media=Album(photos(3)))
    chats = list(range(100, 160))
    try:
        for _ in range(2):
            async with TelegramSender(
                TOKEN, base_url=bot_api_server.url, rate_limit=FAST, file_store=store
            ) as sender:
                run = Broadcast(Notifier(ledger, sender, concurrency=8), "menu", "c", album, chats)
                await asyncio.wait_for(run.run(), RUN_TIMEOUT)
    finally:
        await engine.dispose()
    assert Counter({str(c): 1 for c in chats}) == Counter(
        r.chat_id for r in bot_api_server.requests if r.method == "sendMediaGroup"
    )
    assert 180 == len(bot_api_server.deliveries)
    assert [1, 1, 1] == sorted(Counter(u.sha256 for u in bot_api_server.uploads).values())


async def test_the_server_refuses_a_group_of_one(bot_api_server: BotAPIServer) -> None:
    """The local Bot API server answers a media group of one with a 400, as Telegram
    does (a sender that skipped the check would be refused for every chat)."""
    import httpx

    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{bot_api_server.url}/bot{TOKEN}/sendMediaGroup",
            json={"chat_id": 1, "media": [{"type": "photo", "media": "https://e.x/a.png"}]},
        )
    assert 400 == answer.status_code
    assert "wrong number of media" in answer.json()["description"]


# -- the command line: --album, or --photo and --video repeated --------------------------

# Each of these bytes is a file of its own content, so each is uploaded once.
JPEG = b"\xff\xd8\xff\xe0" + b"album-photo" * 100
MP4 = b"\x00\x00\x00\x18ftypmp42" * 100


def album_files(folder: Path) -> list[Path]:
    """Two photos and a video in ``folder``."""
    files = [folder / "a.jpg", folder / "b.png", folder / "c.mp4"]
    for number, (path, data) in enumerate(zip(files, (JPEG, JPEG, MP4), strict=True)):
        path.write_bytes(data + bytes([number]))
    return files


def album_command(workdir: Path, server: BotAPIServer, *media: str) -> list[str]:
    """The broadcast command of test_cli_broadcast with ``media`` and no text file."""
    args = command(workdir, server, *media)
    at = args.index("--text-file")
    del args[at : at + 2]
    return args


def test_album_sends_the_files_as_one_media_group_with_the_caption(
    workdir: Path, server: BotAPIServer
) -> None:
    """--album a.jpg b.png c.mp4 --caption-file: one sendMediaGroup per chat, in that
    order, the caption on the first item, each file uploaded once; a rerun sends nothing."""
    files = album_files(workdir)
    (workdir / "caption.txt").write_text("secret-caption-a1b2\n")
    args = album_command(
        workdir,
        server,
        "--album",
        *map(str, files),
        "--caption-file",
        str(workdir / "caption.txt"),
    )
    first = run(args)
    assert 0 == first.returncode, first.stderr
    assert 0 == run(args).returncode
    assert Counter({str(i): 1 for i in range(1, 51)}) == Counter(
        r.chat_id for r in server.requests if r.method == "sendMediaGroup"
    )
    assert {"sendMediaGroup"} == {r.method for r in server.requests}
    first_chat = [d for d in server.deliveries if d.chat_id == "1"]
    assert ["secret-caption-a1b2", "", ""] == [d.text for d in first_chat]
    assert ["PHO", "PHO", "VID"] == [str(d.file_id)[:3] for d in first_chat]
    assert [1, 1, 1] == sorted(Counter(u.sha256 for u in server.uploads).values())
    assert "secret-caption-a1b2" not in first.stdout + first.stderr


def test_photo_and_video_repeated_make_an_album_in_their_order(
    workdir: Path, server: BotAPIServer
) -> None:
    """--video v --photo a --photo b is the album video, photo, photo, with --text-file's
    text as its caption; one --photo alone is still a photo."""
    a, b, video = album_files(workdir)
    args = command(workdir, server, "--video", str(video), "--photo", str(a), "--photo", str(b))
    done = run(args)
    assert 0 == done.returncode, done.stderr
    first_chat = [d for d in server.deliveries if d.chat_id == "1"]
    assert ["VID", "PHO", "PHO"] == [str(d.file_id)[:3] for d in first_chat]
    assert [TEXT, "", ""] == [d.text for d in first_chat]
    server.reset()
    single = [*command(workdir, server, "--photo", str(a))]
    single[single.index("c1")] = "c2"
    assert 0 == run(single).returncode
    assert {"sendPhoto"} == {r.method for r in server.requests}


def album_problems(folder: Path) -> list[tuple[list[str], str]]:
    """(media options, the error they get) for albums refused before any claim."""
    a, b, video = album_files(folder)
    (folder / "notes.pdf").write_bytes(b"%PDF-1.7")
    big = folder / "big.jpg"
    with big.open("wb") as file:
        file.truncate(11 * 1024 * 1024)  # sparse: 11 MB on paper
    (folder / "long.txt").write_text("x" * 1025)
    (folder / "folder.jpg").mkdir()
    eleven = [str(a)] * 11
    return [
        (["--album", str(a)], "--album: has 1 item; Telegram takes 2 to 10"),
        (["--album", *eleven], "--album: has 11 items; Telegram takes 2 to 10"),
        (["--album", str(a), str(folder / "nope.jpg")], "--album: item 2: cannot use"),
        (["--album", str(a), str(folder / "folder.jpg")], "--album: item 2: '"),
        (["--album", str(a), str(folder / "notes.pdf")], "--album: item 2 (notes.pdf) is not"),
        (["--album", str(big), str(a)], "--album: item 1: is 11.0 MB; the Bot API takes"),
        (["--album", str(a), str(b), "--caption-file", str(folder / "long.txt")], "1024"),
        (["--photo", str(a), "--video", str(folder / "nope.mp4")], "--video: cannot use"),
        (["--album", str(a), str(b), "--photo", str(video)], "--album: give the album"),
        (["--album", str(a), str(b), "--document", str(video)], "not allowed with"),
        (["--photo", str(a), "--document", str(video)], "--document: "),
        (["--album", str(a), str(b), "--buttons-file", str(folder / "buttons.json")], "album"),
    ]


@pytest.mark.parametrize("case", range(12))
def test_an_album_is_checked_before_anything_is_claimed(
    workdir: Path,
    server: BotAPIServer,
    capsys: pytest.CaptureFixture[str],
    case: int,
) -> None:
    """Too few or too many files, a missing one, a folder, a too large one, a file that is
    not a photo or a video, a long caption, or an album mixed with other media or with
    buttons exits 2 naming the option and the problem; nothing is claimed or sent."""
    (workdir / "buttons.json").write_text('[[{"text": "A", "url": "https://e.x"}]]')
    media, problem = album_problems(workdir)[case]
    with_caption = "--caption-file" in media
    args = (album_command if with_caption else command)(workdir, server, *media)[3:]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert 2 == exited.value.code
    assert problem in capsys.readouterr().err
    assert [] == server.requests
    assert 0 == main(["stats"])
    assert "news" not in capsys.readouterr().out


def test_a_changed_album_is_refused_on_resume_unless_allowed(
    workdir: Path, server: BotAPIServer
) -> None:
    """An album campaign resumed with a file changed exits 2 and sends nothing; with
    --allow-changed-message the chats not handled yet get the new album."""
    files = album_files(workdir)
    chats = workdir / "chats.txt"
    chats.write_text("1\n2\n")
    args = command(workdir, server, "--album", *map(str, files))
    assert 0 == run(args).returncode
    chats.write_text("1\n2\n3\n")
    files[1].write_bytes(JPEG + b"changed")
    refused = run(args)
    assert 2 == refused.returncode
    assert "differs from the message campaign news/c1 started with" in refused.stderr
    assert ["1", "2"] == sorted({r.chat_id or "" for r in server.requests})
    allowed = run([*args, "--allow-changed-message"])
    assert 0 == allowed.returncode, allowed.stderr
    assert ["1", "2", "3"] == sorted({r.chat_id or "" for r in server.requests})
