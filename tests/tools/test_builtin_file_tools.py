"""The file tools against real files: workspace confinement, edits, search."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crow_cli.errors import OutsideWorkspace, ToolError
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.builtin.edits import edit_file, write_file
from crow_cli.tools.builtin.files import list_directory, read_file
from crow_cli.tools.builtin.search import search_files


@pytest.fixture
def ws(tmp_path: Path, enter_workspace: Callable[..., object]) -> Path:
    """A workspace folder with an outside neighbour holding a secret, and a symlink leading to it."""
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (root / "hello.txt").write_text("hello\nworld\n")
    (root / "link_dir").symlink_to(outside, target_is_directory=True)
    (root / "link_file.txt").symlink_to(outside / "secret.txt")
    enter_workspace(root)
    return root


def _escapes(tmp_path: Path) -> list[str]:
    return ["../outside/secret.txt", str(tmp_path / "outside" / "secret.txt"), "link_file.txt",
            "link_dir/secret.txt"]


CALLS: dict[str, Any] = {
    "read_file": lambda p: read_file(path=p),
    "list_directory": lambda p: list_directory(path=p.rsplit("/", 1)[0] if "/" in p else p),
    "search_files": lambda p: search_files(pattern="SECRET", path=p),
    "write_file": lambda p: write_file(path=p, content="pwned\n"),
    "edit_file": lambda p: edit_file(path=p, old_string="TOP SECRET", new_string="pwned"),
}


def test_every_file_tool_is_covered() -> None:
    file_tools = {t.name for t in BUILTIN_TOOLS if t.name != "run_shell"}
    assert file_tools == set(CALLS)


@pytest.mark.parametrize("tool_name", sorted(CALLS))
@pytest.mark.parametrize("kind", ["relative", "absolute", "symlink_file", "symlink_dir"])
def test_path_escapes_are_refused(ws: Path, tmp_path: Path, tool_name: str, kind: str) -> None:
    path = dict(zip(["relative", "absolute", "symlink_file", "symlink_dir"], _escapes(tmp_path), strict=True))[kind]
    if tool_name == "list_directory" and kind == "symlink_file":
        path = "link_dir"
    with pytest.raises(OutsideWorkspace, match="outside the workspace"):
        CALLS[tool_name](path)
    assert (tmp_path / "outside" / "secret.txt").read_text() == "TOP SECRET\n"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.txt"]


def test_write_file_through_a_dangling_parent_escape_is_refused(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(OutsideWorkspace):
        write_file(path="link_dir/new/deep.txt", content="x")
    assert not (tmp_path / "outside" / "new").exists()


def test_search_skips_symlinks_leading_out_when_walking_the_tree(ws: Path) -> None:
    assert search_files(pattern="SECRET") == "no matches for 'SECRET'"
    assert "hello.txt:2: world" in search_files(pattern="wor")


def test_write_file_creates_parents_and_reports(ws: Path) -> None:
    created = write_file(path="a/b/c.txt", content="one\n")
    assert created.text == "created a/b/c.txt (4 bytes)"
    assert (ws / "a/b/c.txt").read_text() == "one\n"
    overwrote = write_file(path="a/b/c.txt", content="two\n")
    assert overwrote.text.startswith("overwrote a/b/c.txt")
    # the person is shown what changed (issue 34): the whole new file, then the diff against it
    assert created.display is not None and created.display.diff is not None and "+one\n" in created.display.diff
    assert overwrote.display is not None and overwrote.display.diff is not None
    assert "-one\n+two\n" in overwrote.display.diff
    with pytest.raises(ToolError, match="is a directory"):
        write_file(path="a", content="x")


def test_edit_requires_exactly_one_match(ws: Path) -> None:
    f = ws / "code.py"
    f.write_text("x = 1\ny = 1\nz = 2\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        edit_file(path="code.py", old_string="= 1", new_string="= 3")
    assert f.read_text() == "x = 1\ny = 1\nz = 2\n"
    with pytest.raises(ToolError, match="not found"):
        edit_file(path="code.py", old_string="w = 9", new_string="w = 0")
    with pytest.raises(ToolError, match="empty"):
        edit_file(path="code.py", old_string="", new_string="w = 0")
    edited = edit_file(path="code.py", old_string="y = 1", new_string="y = 5")
    out = edited.text
    assert edited.display is not None and edited.display.diff is not None and out.endswith(edited.display.diff)
    assert f.read_text() == "x = 1\ny = 5\nz = 2\n"
    assert out.splitlines()[:3] == ["edited code.py: replaced 1 occurrence", "--- a/code.py", "+++ b/code.py"]
    assert "-y = 1\n+y = 5\n" in out


def test_edit_replace_all_and_crlf_kept(ws: Path) -> None:
    f = ws / "w.txt"
    f.write_bytes(b"a\r\nb a\r\n")
    out = edit_file(path="w.txt", old_string="a", new_string="c", replace_all=True).text
    assert f.read_bytes() == b"c\r\nb c\r\n"
    assert "replaced 2 occurrences" in out


def test_edit_refuses_binary_and_missing(ws: Path) -> None:
    (ws / "bin.dat").write_bytes(b"\0\1\2abc")
    with pytest.raises(ToolError, match="binary"):
        edit_file(path="bin.dat", old_string="abc", new_string="x")
    with pytest.raises(ToolError, match="does not exist"):
        edit_file(path="nope.txt", old_string="a", new_string="b")


def test_read_file_keeps_binary_refusal(ws: Path) -> None:
    (ws / "bin.dat").write_bytes(b"\0\1\2abc")
    with pytest.raises(ToolError, match="binary"):
        read_file(path="bin.dat")


def test_search_invalid_regex_is_a_tool_error(ws: Path) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        search_files(pattern="(unclosed")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_search_respects_gitignore_in_a_git_repo(ws: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True, env=env)
    (ws / ".gitignore").write_text("ignored/\n*.log\n")
    (ws / "ignored").mkdir()
    (ws / "ignored" / "x.txt").write_text("needle in ignored\n")
    (ws / "debug.log").write_text("needle in log\n")
    (ws / "src").mkdir()
    (ws / "src" / "kept.py").write_text("# needle kept\n")
    out = search_files(pattern="needle")
    assert out == "src/kept.py:1: # needle kept"
    assert search_files(pattern="needle", path="src") == "src/kept.py:1: # needle kept"


def test_search_walk_skips_vendor_folders_and_caps_matches(ws: Path) -> None:
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "m.js").write_text("needle\n")
    (ws / "many.txt").write_text("needle\n" * 250)
    out = search_files(pattern="needle").splitlines()
    assert len(out) == 201
    assert all(line.startswith("many.txt:") for line in out[:200])
    assert out[-1].startswith("[… 50 more matches")


def test_file_tools_schemas_are_as_documented() -> None:
    by_name = {t.name: t for t in BUILTIN_TOOLS}
    schemas = {name: t.schema()["function"]["parameters"] for name, t in by_name.items()}
    assert json.loads(json.dumps(schemas["edit_file"]))["required"] == ["path", "old_string", "new_string"]
    assert schemas["edit_file"]["properties"]["replace_all"]["default"] is False
    assert schemas["search_files"]["properties"]["path"]["default"] == "."
    assert schemas["run_shell"]["required"] == ["command"]
    for name in ("write_file", "edit_file", "run_shell"):
        assert by_name[name].needs_approval and not by_name[name].parallel
    for name in ("read_file", "list_directory", "search_files"):
        assert not by_name[name].needs_approval and by_name[name].parallel


# edit_file on CRLF files (found by a fresh-user tester)
def test_edit_file_matches_lf_text_in_a_crlf_file_and_keeps_crlf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    out = edit_file(path="w.txt", old_string="a\nb", new_string="A\nB\nBB").text
    assert out.startswith("edited w.txt: replaced 1 occurrence\n")
    assert (ws / "w.txt").read_bytes() == b"A\r\nB\r\nBB\r\nc\r\n"


def test_edit_file_new_lines_in_a_crlf_file_get_crlf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="b", new_string="b\nc")
    assert (ws / "w.txt").read_bytes() == b"a\r\nb\r\nc\r\n"


def test_edit_file_crlf_text_sent_as_crlf_still_matches(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="a\r\nb", new_string="x\r\ny")
    assert (ws / "w.txt").read_bytes() == b"x\r\ny\r\n"


def test_edit_file_lf_files_are_untouched_by_the_crlf_path(ws: Path) -> None:
    (ws / "u.txt").write_bytes(b"a\nb\n")
    edit_file(path="u.txt", old_string="a\nb", new_string="x\ny")
    assert (ws / "u.txt").read_bytes() == b"x\ny\n"
    with pytest.raises(ToolError, match="old_string was not found"):
        edit_file(path="u.txt", old_string="x\r\ny", new_string="z")


# Found trying it as a new user: write_file to a FIFO hung until the tool timeout (issue 11 item 14)
def test_non_regular_files_are_refused_by_every_file_tool(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    for call in (lambda: write_file(path="pipe", content="x"), lambda: read_file(path="pipe"),
                 lambda: edit_file(path="pipe", old_string="a", new_string="b")):
        with pytest.raises(ToolError, match=r"'pipe' is a FIFO \(named pipe\)"):
            call()
    with pytest.raises(ToolError, match=r"^'pipe' is a FIFO \(named pipe\); not searched$"):
        search_files(pattern="x", path="pipe")
    with pytest.raises(ToolError, match=r"^'nothing' does not exist$"):
        search_files(pattern="x", path="nothing")


async def test_writing_a_fifo_is_refused_before_anyone_is_asked(ws: Path) -> None:
    # issue 11 item 14 with item 2: the preview's pre-check answers the call, nobody is asked about it
    from crow_cli.history import ToolCall
    from crow_cli.tools.approval import make_approver

    os.mkfifo(ws / "pipe")
    asked: list[str] = []

    async def ask(call: ToolCall, tool: object, preview: str) -> Any:
        asked.append(preview)
        return "yes"

    call = ToolCall("c1", "write_file", json.dumps({"path": "pipe", "content": "x"}), 0)
    tool = next(t for t in BUILTIN_TOOLS if t.name == "write_file")
    with pytest.raises(ToolError, match="FIFO"):
        await make_approver("ask", ask=ask)(call, tool)
    assert asked == []
