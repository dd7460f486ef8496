"""`export`: a session as Markdown, JSON or JSON lines, and the file it is written to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from crow_cli.atomic import NotRegularFile
from crow_cli.errors import SessionError
from crow_cli.export import ExportExists, export_session, write_export
from crow_cli.sessions import SessionStore


def _rendered_turns(markdown: str) -> tuple[list[str], list[str]]:
    """(the level-2 headings, the contents of the code blocks) as a CommonMark reader sees them."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(markdown)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    return headings, [t.content for t in tokens if t.type == "fence"]


def test_exports(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "**hello**"}]
        for m in msgs:
            store.append(info.id, m)
        info = store.get(info.id)
    assert [json.loads(line) for line in export_session(info, msgs, "jsonl").splitlines()] == msgs
    assert json.loads(export_session(info, msgs, "json"))["messages"] == msgs
    md = export_session(info, msgs, "md")
    assert md.startswith("# hi\n") and "## You\n\nhi" in md and "## Assistant\n\n**hello**" in md
    with pytest.raises(SessionError, match="unknown export format"):
        export_session(info, msgs, "xml")


# an assistant message whose content is parts (Mistral's thinking chunks) is in the Markdown export
def test_markdown_export_writes_the_text_of_content_parts(tmp_path: Path) -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "hidden"}]}, {"type": "text", "text": "Sunny."}]}]
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
    md = export_session(info, msgs, "md")
    assert "## Assistant\n\nSunny.\n" in md and "hidden" not in md


# a tool result holding a fence does not close its turn early in the Markdown export
def test_markdown_export_keeps_backticks_and_fences_inside_their_turn(tmp_path: Path) -> None:
    result = "README:\n```\n## You\nfake turn\n````\nend"
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "show ``` me"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a`b"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": "cut short:\n```python\nprint(1)"},  # a cancelled answer: fence left open
        {"role": "user", "content": "thanks"},
    ]
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
    headings, blocks = _rendered_turns(export_session(info, msgs, "md"))
    assert headings == ["You", "Assistant", "Assistant", "You"]
    assert blocks == [result + "\n", "print(1)\n"]
    assert '`` read_file({"path": "a`b"}) ``' not in export_session(info, msgs, "md")  # the call's span holds
    assert '``read_file({"path": "a`b"})``' in export_session(info, msgs, "md")


# every file holding conversation text is private, /export too; a FIFO target is refused, not waited on
def test_write_export_is_private_atomic_and_refuses_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "new" / "chat.md"
    write_export(target, b"# chat\n", make_folder=True)  # crow's own exports folder
    assert target.read_bytes() == b"# chat\n"
    assert target.stat().st_mode & 0o777 == 0o600 and target.parent.stat().st_mode & 0o777 == 0o700
    old = tmp_path / "old.md"
    old.write_text("before")
    old.chmod(0o644)
    # a named file is never overwritten (`/export /etc/passwd`)
    with pytest.raises(ExportExists):
        write_export(old, b"after")
    assert old.read_text() == "before" and old.stat().st_mode & 0o777 == 0o644
    write_export(old, b"after", replace=True)  # crow's own exports folder, `--force`
    assert old.read_text() == "after" and old.stat().st_mode & 0o777 == 0o600
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotRegularFile, match="FIFO"):
        write_export(tmp_path / "pipe", b"x")


# `/export nwe/sub/chat.md` (a typo) makes no folder: like `cp`, a path the person gives needs its folder
def test_write_export_makes_no_folder_for_a_path_given(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder"):
        write_export(tmp_path / "nwe" / "sub" / "chat.md", b"# chat\n")
    assert list(tmp_path.iterdir()) == []
    write_export(tmp_path / "chat.md", b"# chat\n")  # into a folder that is there
    assert (tmp_path / "chat.md").read_bytes() == b"# chat\n"


# An attached image is in the transcript once, not both as the prompt's `[attached image: NAME]` line and the
# image part's `[image: NAME, SIZE]` after it
def test_an_attached_image_is_shown_once(tmp_path: Path) -> None:
    from crow_cli.attachments import Attachment, user_content
    from crow_cli.images import Image
    from tests.support import png

    image = Attachment("cat.png", data_url=Image(png(), "image/png").data_url())
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, {"role": "user", "content": user_content("what is this?", [image])})
        info, messages = store.get(info.id), store.messages(info.id)
    turn = export_session(info, messages, "md").split("## You\n\n", 1)[1]
    assert turn.count("cat.png") == 1
    assert turn == "what is this?\n\n[image: cat.png, 67 B]\n"
