"""Images in the session store: stored once by content hash beside the database, not inline in every row and
every export (issue 33 §2); rows an older crow stored inline still load."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

from crow_cli.images import Image, image_part
from crow_cli.sessions import IMAGE_REF, SessionStore, export_session

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
