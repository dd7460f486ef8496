"""Attachments: `crow run -f FILE` and `@path` in chat."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crow_cli.attachments import MAX_TEXT_BYTES, image_attachment, load_attachment, mentioned_files, user_content
from crow_cli.errors import ConfigError
from crow_cli.tools.context import ToolContext, using_context
from tests.replay_server import text_stream
from tests.support import png, run_here, write_config

PNG = png()


@pytest.fixture
def set_workspace() -> Iterator[Callable[[Path], None]]:
    """Confine to a folder for one test (the tool context is restored after it)."""
    with contextlib.ExitStack() as stack:
        yield lambda root: stack.enter_context(using_context(ToolContext.for_workspace(root)))


def test_text_files_go_into_the_message_fenced_with_their_path(tmp_path: Path,
                                                                set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    (tmp_path / "a.md").write_text("has ``` inside\n")
    content = user_content("review", [load_attachment("a.md")])
    assert content == "review\n\n[attached file: a.md]\n````\nhas ``` inside\n````"


def test_images_are_image_url_parts(tmp_path: Path, set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    (tmp_path / "d.png").write_bytes(PNG)
    (tmp_path / "t.txt").write_text("hello")
    content = user_content("what is this?", [load_attachment("t.txt"), load_attachment("d.png")])
    assert isinstance(content, list)
    assert content[0]["type"] == "text" and "[attached file: t.txt]" in content[0]["text"]
    assert "[attached image: d.png]" in content[0]["text"]
    # named by its path for the session's transcripts (`crow_image`); the server gets the part without it
    assert content[1] == {"type": "image_url",
                          "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
                          "crow_image": {"name": "d.png"}}


@pytest.mark.parametrize(("name", "data", "error"), [
    ("big.txt", b"x" * (MAX_TEXT_BYTES + 1), "text files are attached up to 262,144"),
    ("blob.bin", b"\0\1\2binary", "a binary file"),
    ("missing.txt", None, "no such file"),
])
def test_refusals_are_one_line(tmp_path: Path, name: str, data: bytes | None, error: str,
                               set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    if data is not None:
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ConfigError, match=error):
        load_attachment(name)


# A truncated image (a real PNG's first 30 bytes) is refused naming the file (`-i`, `@path` in chat)
@pytest.mark.parametrize("image_only", [False, True])
def test_a_truncated_image_is_refused_naming_the_file(tmp_path: Path, image_only: bool,
                                                      set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    (tmp_path / "cut.png").write_bytes(PNG[:30])
    with pytest.raises(ConfigError) as caught:
        load_attachment("cut.png", image_only=image_only)
    assert str(caught.value) == "cannot attach cut.png: a truncated PNG: it is 30 bytes and ends before its IHDR header"


def test_a_truncated_image_on_stdin_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        image_attachment(PNG[:-12], "stdin")
    assert str(caught.value).startswith("cannot attach stdin: a truncated PNG: it is 55 bytes and has no IEND")


def test_outside_the_workspace_is_refused(tmp_path: Path, set_workspace: Callable[[Path], None]) -> None:
    inside = tmp_path / "ws"
    inside.mkdir()
    (tmp_path / "secret.txt").write_text("no")
    set_workspace(inside)
    with pytest.raises(ConfigError, match="outside the workspace"):
        load_attachment("../secret.txt")


def test_mentions_name_existing_files_only(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("x")
    assert mentioned_files("look at @src/app.py, and ask @bob or mail a@b.c", tmp_path) == ["src/app.py"]


async def test_crow_run_attaches_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("remember the milk")
    (tmp_path / "d.png").write_bytes(PNG)
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_stream("ok")}], "summarise", files=("notes.txt", "d.png"), cwd=tmp_path,
                         config=config)
    assert ran.code == 0, ran.stderr
    content = ran.requests[0]["messages"][-1]["content"]
    assert content[0]["text"].startswith("summarise\n\n[attached file: notes.txt]\n```\nremember the milk\n```")
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    refused = await run_here([], files=("../nope.txt",), cwd=tmp_path, config=config)
    assert refused.code == 2 and refused.requests == [] and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "cannot attach '../nope.txt'" in refused.stderr


# `crow run -f .env` never sends the run's API key to the model nor stores it in the session: an attached file
# is masked as tool output (`read_file .env`) and instruction files are.
async def test_an_attached_file_never_carries_the_api_key(tmp_path: Path, _isolated_home: Path) -> None:
    key = "sk-live-attach-0123456789abcdef"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_stream("ok")}], "what is set?", flags={"api_key": key}, files=(".env",),
                         cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    assert ran.requests[0]["messages"][-1]["content"].endswith("OPENAI_API_KEY=[REDACTED]\n```")
    store = [f for f in _isolated_home.rglob("sessions.db*") if f.is_file()]
    assert store and not any(key.encode() in f.read_bytes() for f in store)


# A file with a non-UTF-8 name is attached and stored (its name with U+FFFD)
async def test_a_non_utf8_file_name_is_attached_and_stored(tmp_path: Path, _isolated_home: Path) -> None:
    import os

    (tmp_path / os.fsdecode(b"caf\xe9.txt")).write_text("menu")
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_stream("ok")}], "read it", files=(os.fsdecode(b"caf\xe9.txt"),), cwd=tmp_path,
                         config=config)
    assert ran.code == 0, ran.stderr
    assert "[attached file: caf\ufffd.txt]" in ran.requests[0]["messages"][-1]["content"]


# `-f loop` (`ln -s loop loop`) is a one-line error (Python 3.11's resolve() raises RuntimeError on a loop)
def test_a_symlink_loop_is_one_line(tmp_path: Path, set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(ConfigError, match=r"^cannot attach 'loop': 'loop': .*symlink loop$"):
        load_attachment("loop")


# A text file with a byte-order mark (UTF-16, UTF-32, UTF-8) is attached as text, decoded as read_file and
# AGENTS.md decode it, without the mark; a binary file is still refused
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_a_text_file_with_a_byte_order_mark_is_attached_as_text(tmp_path: Path, encoding: str,
                                                                 set_workspace: Callable[[Path], None]) -> None:
    set_workspace(tmp_path)
    (tmp_path / "notes.txt").write_bytes("café ünïcode\n".encode(encoding))
    assert load_attachment("notes.txt").text == "café ünïcode\n"
    (tmp_path / "blob.bin").write_bytes(b"\0\1\2 not text")
    with pytest.raises(ConfigError, match="a binary file"):
        load_attachment("blob.bin")
