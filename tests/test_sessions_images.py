"""Images in the session store: stored once by content hash beside the database, not inline in every row and
every export (issue 33 §2); rows an older crow stored inline still load. An image keeps its name in its
reference (a transcript says `[image: shot.png, 41 KB]`, not its type), and its file goes with the last row
that references it."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import pytest

from crow_cli.export import export_session
from crow_cli.images import Image, describe_part, image_part
from crow_cli.sessions import IMAGE_REF, SessionStore
from tests.replay_server import ReplayServer
from tests.support import crow_here, run_args, text_sse

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
URL = Image(PNG).data_url()


def prompt(text: str = "what is this?") -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}, image_part(Image(PNG))]}


def rows(db: Path) -> list[str]:
    with sqlite3.connect(db) as raw:
        return [r[0] for r in raw.execute("SELECT message FROM messages ORDER BY position")]


def test_an_image_is_stored_once_by_reference_and_loads_back(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        store.append(info.id, {"role": "assistant", "content": "a test pattern"})
        store.append(info.id, prompt("and again?"))  # the same image: the same file
        other = store.create(model="m")
        store.append(other.id, prompt())
    stored = rows(db)
    assert all(base64.b64encode(PNG).decode()[:40] not in r for r in stored)  # no row holds the image
    files = list((tmp_path / "images").iterdir())
    assert [f.name for f in files] == [f"{Image(PNG).sha256}.png"] and files[0].read_bytes() == PNG
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"
    part = json.loads(stored[0])["content"][1]
    assert part["image_url"]["url"] == IMAGE_REF + Image(PNG).sha256
    assert part["crow_image"] == {"file": files[0].name, "mime_type": "image/png", "bytes": len(PNG)}
    with SessionStore(db) as store:
        loaded = store.load(info.id)
    assert loaded[0] == prompt() and loaded[2] == prompt("and again?")  # as sent: a data URL part


def test_an_inline_image_of_an_older_crow_still_loads(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (info.id, json.dumps(prompt())))
    with SessionStore(db) as store:
        assert store.messages(info.id) == [prompt()]


def test_a_missing_image_file_becomes_a_note_and_the_session_loads(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
    for file in (tmp_path / "images").iterdir():
        file.unlink()
    with SessionStore(db) as store:
        (message,) = store.load(info.id)
    assert message["content"][1] == {"type": "text", "text": f"[image {Image(PNG).sha256}.png: missing from the "
                                                               "session store's images folder]"}


def test_exports_carry_the_reference_and_the_transcript_names_the_image(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        messages = store.messages(info.id)
        info = store.get(info.id)
    for fmt in ("json", "jsonl"):
        text = export_session(info, messages, fmt)
        assert URL not in text and IMAGE_REF + Image(PNG).sha256 in text
    md = export_session(info, messages, "md")
    assert f"## You\n\nwhat is this?\n[image: {Image(PNG).sha256}.png, 208 B]" in md


def test_a_checkpoint_view_stores_its_images_by_reference_too(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.add_checkpoint(info.id, 1, [prompt()], 100, 50)
        (checkpoint,) = store.checkpoints(info.id)
    assert checkpoint.view == [prompt()]
    with sqlite3.connect(db) as raw:
        (view,) = raw.execute("SELECT view FROM checkpoints").fetchone()
    assert URL not in view and IMAGE_REF in view


def named(text: str = "what is this?", name: str = "shot.png", data: bytes = PNG) -> dict:
    """A prompt with an image as `attachments.user_content` builds it: named by its file."""
    return {"role": "user", "content": [{"type": "text", "text": text}, image_part(Image(data), name)]}


def image_files(folder: Path) -> set[str]:
    images = folder / "images"
    return {f.name for f in images.iterdir()} if images.exists() else set()


def test_an_image_s_name_is_kept_in_its_reference_and_comes_back_with_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, named())
        info = store.get(info.id)
        (loaded,) = store.messages(info.id)
        md = export_session(info, [loaded], "md")
        exported = json.loads(export_session(info, [loaded], "json"))
    ref = json.loads(rows(db)[0])["content"][1]["crow_image"]
    assert ref == {"file": f"{Image(PNG).sha256}.png", "mime_type": "image/png", "bytes": len(PNG), "name": "shot.png"}
    assert loaded == named()  # a resumed chat and an editor's replay name it too
    assert describe_part(loaded["content"][1]) == "[image: shot.png, 208 B]"
    assert "## You\n\nwhat is this?\n[image: shot.png, 208 B]" in md
    assert exported["messages"][0]["content"][1]["crow_image"]["name"] == "shot.png"


def test_an_image_stored_without_a_name_is_shown_as_before(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        (loaded,) = store.messages(info.id)
    assert loaded == prompt() and describe_part(loaded["content"][1]) == "[image: image/png, 208 B]"


# `crow run -f` through `crow sessions export`: the file's name reaches the transcript, never the server
def test_an_attached_file_s_name_reaches_the_export_and_not_the_server(
        _isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "screenshot.png").write_bytes(PNG)
    with ReplayServer([{"sse": text_sse("A test pattern.")}]) as server:
        assert crow_here(*run_args(server, "--no-tools", "-f", "screenshot.png", "what is this?")) == 0
    assert server.requests[0]["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": URL}}
    with SessionStore() as store:
        (info,) = store.recent()
    capsys.readouterr()
    assert crow_here("sessions", "export", info.id, "-f", "md") == 0
    assert "[attached image: screenshot.png]\n[image: screenshot.png, 208 B]" in capsys.readouterr().out
    assert crow_here("sessions", "export", info.id, "-f", "jsonl") == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["content"][1]["crow_image"]["name"] == "screenshot.png"


def test_deleting_a_session_removes_its_image_files_but_not_one_another_session_holds(tmp_path: Path) -> None:
    other_png = PNG + b"other"
    with SessionStore(tmp_path / "s.db") as store:
        one = store.create(model="m")
        store.append(one.id, named(name="shared.png"))
        store.append(one.id, named(name="own.png", data=other_png))
        store.add_checkpoint(one.id, 2, [named(name="own.png", data=other_png)], 100, 50)
        two = store.create(model="m")
        store.append(two.id, named(name="shared.png"))
        shared, own = f"{Image(PNG).sha256}.png", f"{Image(other_png).sha256}.png"
        assert image_files(tmp_path) == {shared, own}
        store.delete(one.id)
        assert image_files(tmp_path) == {shared}  # the other session's image stays, and still loads
        assert store.messages(two.id) == [named(name="shared.png")]
        store.delete(two.id)
    assert image_files(tmp_path) == set()


def with_image_and_empty(db: Path) -> tuple[str, str]:
    """The ids of two sessions in the store `db` (closed again): one holding `named()`, one empty."""
    with SessionStore(db) as store:
        holding = store.create(model="m")
        store.append(holding.id, named())
        return holding.id, store.create(model="m").id


def test_a_session_s_copied_rows_count_as_references(tmp_path: Path) -> None:
    # a fork or copy of a session may insert the stored rows as they are, never through `append`: the count is
    # over the rows, so the copy keeps the image alive
    db = tmp_path / "s.db"
    original, copy = with_image_and_empty(db)
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages SELECT ?, position, message FROM messages WHERE session_id = ?",
                    (copy, original))
    with SessionStore(db) as store:
        store.delete(original)
        assert store.messages(copy) == [named()]
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}


def test_a_checkpoint_s_reference_keeps_an_image_alive(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        one = store.create(model="m")
        store.append(one.id, named())
        two = store.create(model="m")
        store.add_checkpoint(two.id, 0, [named()], 100, 50)
        store.delete(one.id)
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}
        assert store.checkpoints(two.id)[0].view == [named()]


def test_dropping_the_end_of_a_session_removes_the_images_only_it_held(tmp_path: Path) -> None:
    other_png = PNG + b"later"
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, named())
        store.append(info.id, {"role": "assistant", "content": "a test pattern"})
        store.append(info.id, named("and these?", "later.png", other_png))
        store.append(info.id, named("and again?"))  # the first image once more, after the cut: still held
        store.truncate(info.id, 2)  # /retry, /undo
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}


def test_a_damaged_row_does_not_stop_a_delete(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    holding, broken = with_image_and_empty(db)
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (broken, '{"content": [{"crow_image": '))
    with SessionStore(db) as store:
        store.delete(holding)
        store.delete(broken)
    assert image_files(tmp_path) == set()


def test_only_files_the_store_named_are_ever_removed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "notes.txt").write_text("mine")
    forged = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_REF + "0" * 64},
                                           "crow_image": {"file": "notes.txt", "mime_type": "image/png"}},
                                          {"type": "image_url", "image_url": {"url": IMAGE_REF + "0" * 64},
                                           "crow_image": {"file": "../s.db", "mime_type": "image/png"}}]}
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (info.id, json.dumps(forged)))
    with SessionStore(db) as store:
        store.delete(info.id)
    assert (tmp_path / "images" / "notes.txt").read_text() == "mine" and db.exists()
