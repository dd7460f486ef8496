"""The file tools (crow_cli/tools/builtin/files.py) against real files.

Properties guarded here:

- read_file and list_directory stay inside the workspace; symlinks out are refused;
- edits and search work on real files and stay confined;
- read_file never hands the model U+FFFD: binary files are refused, other encodings are decoded and said so;
- read_file's line ranges: past its read cap, nonsensical ranges, lines longer than one call returns.
"""

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
from crow_cli.text import truncate_output
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.builtin.edits import edit_file, write_file
from crow_cli.tools.builtin.files import MAX_RETURN_CHARS, SNIFF_BYTES, list_directory, read_file
from crow_cli.tools.builtin.search import search_files


@pytest.fixture
def files_ws(tmp_path, enter_workspace):
    root = tmp_path / "files_ws"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "sub").mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    enter_workspace(root)
    return root


def test_read_file_whole_and_line_range(files_ws):
    assert read_file(path="a.txt") == "one\ntwo\nthree\n"
    assert read_file(path="a.txt", start_line=2, end_line=2) == "two\n"
    assert read_file(path="a.txt", start_line=2) == "two\nthree\n"


@pytest.mark.parametrize("path", ["../secret.txt", "sub/../../secret.txt"])
def test_relative_escape_is_refused(files_ws, path):
    with pytest.raises(OutsideWorkspace):
        read_file(path=path)


def test_absolute_path_outside_is_refused_inside_is_allowed(files_ws):
    with pytest.raises(OutsideWorkspace):
        read_file(path=str(files_ws.parent / "secret.txt"))
    assert read_file(path=str(files_ws / "a.txt")).startswith("one")


def test_symlink_leading_out_is_refused(files_ws):
    os.symlink(files_ws.parent / "secret.txt", files_ws / "link.txt")
    os.symlink(files_ws.parent, files_ws / "up")
    with pytest.raises(OutsideWorkspace):
        read_file(path="link.txt")
    with pytest.raises(OutsideWorkspace):
        list_directory(path="up")


def test_binary_and_missing_files_are_refused(files_ws):
    (files_ws / "b.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        read_file(path="b.bin")
    with pytest.raises(ToolError, match=r"'nope\.txt' does not exist"):
        read_file(path="nope.txt")
    with pytest.raises(ToolError, match="'sub' is a directory, not a file"):
        read_file(path="sub")


def test_list_directory(files_ws):
    assert list_directory() == "./ (2 entries)\nsub/\na.txt"
    with pytest.raises(OutsideWorkspace):
        list_directory(path="..")

@pytest.fixture
def linked_ws(tmp_path: Path, enter_workspace: Callable[..., object]) -> Path:
    """A workspace folder with an outside neighbour holding a secret, and a symlink leading to it."""
    root = tmp_path / "linked_ws"
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
    # every built-in that takes a path (run_shell, shell_output, shell_kill, web_fetch and the plan tools take none)
    file_tools = {t.name for t in BUILTIN_TOOLS if "path" in t.schema()["function"]["parameters"]["properties"]}
    assert file_tools == set(CALLS)


@pytest.mark.parametrize("tool_name", sorted(CALLS))
@pytest.mark.parametrize("kind", ["relative", "absolute", "symlink_file", "symlink_dir"])
def test_path_escapes_are_refused(linked_ws: Path, tmp_path: Path, tool_name: str, kind: str) -> None:
    path = dict(zip(["relative", "absolute", "symlink_file", "symlink_dir"], _escapes(tmp_path), strict=True))[kind]
    if tool_name == "list_directory" and kind == "symlink_file":
        path = "link_dir"
    with pytest.raises(OutsideWorkspace, match="outside the workspace"):
        CALLS[tool_name](path)
    assert (tmp_path / "outside" / "secret.txt").read_text() == "TOP SECRET\n"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.txt"]


def test_write_file_through_a_dangling_parent_escape_is_refused(linked_ws: Path, tmp_path: Path) -> None:
    with pytest.raises(OutsideWorkspace):
        write_file(path="link_dir/new/deep.txt", content="x")
    assert not (tmp_path / "outside" / "new").exists()


def test_search_skips_symlinks_leading_out_when_walking_the_tree(linked_ws: Path) -> None:
    assert search_files(pattern="SECRET") == "no matches for 'SECRET'"
    assert "hello.txt:2: world" in search_files(pattern="wor")


def test_write_file_creates_parents_and_reports(linked_ws: Path) -> None:
    created = write_file(path="a/b/c.txt", content="one\n")
    assert created.text == "created a/b/c.txt (4 bytes)"
    assert (linked_ws / "a/b/c.txt").read_text() == "one\n"
    overwrote = write_file(path="a/b/c.txt", content="two\n")
    assert overwrote.text.startswith("overwrote a/b/c.txt")
    # the person is shown what changed: the whole new file, then the diff against it
    assert created.display is not None and created.display.diff is not None and "+one\n" in created.display.diff
    assert overwrote.display is not None and overwrote.display.diff is not None
    assert "-one\n+two\n" in overwrote.display.diff
    with pytest.raises(ToolError, match="is a directory"):
        write_file(path="a", content="x")


def test_edit_requires_exactly_one_match(linked_ws: Path) -> None:
    f = linked_ws / "code.py"
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


def test_edit_replace_all_and_crlf_kept(linked_ws: Path) -> None:
    f = linked_ws / "w.txt"
    f.write_bytes(b"a\r\nb a\r\n")
    out = edit_file(path="w.txt", old_string="a", new_string="c", replace_all=True).text
    assert f.read_bytes() == b"c\r\nb c\r\n"
    assert "replaced 2 occurrences" in out


def test_edit_refuses_binary_and_missing(linked_ws: Path) -> None:
    (linked_ws / "bin.dat").write_bytes(b"\0\1\2abc")
    with pytest.raises(ToolError, match="binary"):
        edit_file(path="bin.dat", old_string="abc", new_string="x")
    with pytest.raises(ToolError, match="does not exist"):
        edit_file(path="nope.txt", old_string="a", new_string="b")


def test_read_file_keeps_binary_refusal(linked_ws: Path) -> None:
    (linked_ws / "bin.dat").write_bytes(b"\0\1\2abc")
    with pytest.raises(ToolError, match="binary"):
        read_file(path="bin.dat")


def test_search_invalid_regex_is_a_tool_error(linked_ws: Path) -> None:
    with pytest.raises(ToolError, match="invalid regular expression"):
        search_files(pattern="(unclosed")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_search_respects_gitignore_in_a_git_repo(linked_ws: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=linked_ws, check=True, env=env)
    (linked_ws / ".gitignore").write_text("ignored/\n*.log\n")
    (linked_ws / "ignored").mkdir()
    (linked_ws / "ignored" / "x.txt").write_text("needle in ignored\n")
    (linked_ws / "debug.log").write_text("needle in log\n")
    (linked_ws / "src").mkdir()
    (linked_ws / "src" / "kept.py").write_text("# needle kept\n")
    out = search_files(pattern="needle")
    assert out == "src/kept.py:1: # needle kept"
    assert search_files(pattern="needle", path="src") == "src/kept.py:1: # needle kept"


def test_search_walk_skips_vendor_folders_and_caps_matches(linked_ws: Path) -> None:
    (linked_ws / "node_modules").mkdir()
    (linked_ws / "node_modules" / "m.js").write_text("needle\n")
    (linked_ws / "many.txt").write_text("needle\n" * 250)
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


# edit_file on CRLF files matches LF text and keeps CRLF
def test_edit_file_matches_lf_text_in_a_crlf_file_and_keeps_crlf(linked_ws: Path) -> None:
    (linked_ws / "w.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    out = edit_file(path="w.txt", old_string="a\nb", new_string="A\nB\nBB").text
    assert out.startswith("edited w.txt: replaced 1 occurrence\n")
    assert (linked_ws / "w.txt").read_bytes() == b"A\r\nB\r\nBB\r\nc\r\n"


def test_edit_file_new_lines_in_a_crlf_file_get_crlf(linked_ws: Path) -> None:
    (linked_ws / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="b", new_string="b\nc")
    assert (linked_ws / "w.txt").read_bytes() == b"a\r\nb\r\nc\r\n"


def test_edit_file_crlf_text_sent_as_crlf_still_matches(linked_ws: Path) -> None:
    (linked_ws / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="a\r\nb", new_string="x\r\ny")
    assert (linked_ws / "w.txt").read_bytes() == b"x\r\ny\r\n"


def test_edit_file_lf_files_are_untouched_by_the_crlf_path(linked_ws: Path) -> None:
    (linked_ws / "u.txt").write_bytes(b"a\nb\n")
    edit_file(path="u.txt", old_string="a\nb", new_string="x\ny")
    assert (linked_ws / "u.txt").read_bytes() == b"x\ny\n"
    with pytest.raises(ToolError, match="old_string was not found"):
        edit_file(path="u.txt", old_string="x\r\ny", new_string="z")


# every file tool refuses a file that is not regular (write_file to a FIFO would hang until the tool timeout)
def test_non_regular_files_are_refused_by_every_file_tool(linked_ws: Path) -> None:
    os.mkfifo(linked_ws / "pipe")
    for call in (lambda: write_file(path="pipe", content="x"), lambda: read_file(path="pipe"),
                 lambda: edit_file(path="pipe", old_string="a", new_string="b")):
        with pytest.raises(ToolError, match=r"'pipe' is a FIFO \(named pipe\)"):
            call()
    with pytest.raises(ToolError, match=r"^'pipe' is a FIFO \(named pipe\); not searched$"):
        search_files(pattern="x", path="pipe")
    with pytest.raises(ToolError, match=r"^'nothing' does not exist$"):
        search_files(pattern="x", path="nothing")


async def test_writing_a_fifo_is_refused_before_anyone_is_asked(linked_ws: Path) -> None:
    # the preview's pre-check answers the call, nobody is asked about it
    from crow_cli.history import ToolCall
    from crow_cli.tools.approval import make_approver

    os.mkfifo(linked_ws / "pipe")
    asked: list[str] = []

    async def ask(question: Any) -> Any:
        asked.append(question.preview)
        return "yes"

    call = ToolCall("c1", "write_file", json.dumps({"path": "pipe", "content": "x"}), 0)
    tool = next(t for t in BUILTIN_TOOLS if t.name == "write_file")
    with pytest.raises(ToolError, match="FIFO"):
        await make_approver("ask", ask=ask)(call, tool)
    assert asked == []

def test_latin1_text_is_decoded_with_a_note(ws: Path) -> None:
    (ws / "old.txt").write_bytes("café au lait\nna\u00efve\n".encode("latin-1"))
    out = read_file(path="old.txt")
    note, *lines = out.splitlines()
    assert "\ufffd" not in out
    assert lines == ["café au lait", "naïve"]
    assert note == ("[read_file: old.txt is not UTF-8 (byte 0xe9 at offset 3); decoded as cp1252, a guess. "
                    "edit_file refuses it: it only edits UTF-8 files]")


def test_cp1252_quotes_and_line_ranges(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\n\x93two\x94 \x80 5\r\nthree\r\n")
    out = read_file(path="win.txt", start_line=2, end_line=2)
    assert out.startswith("[read_file: win.txt is not UTF-8 (byte 0x93 at offset 5); decoded as cp1252")
    assert out.splitlines()[1:] == ["\u201ctwo\u201d \u20ac 5"]


def test_bytes_cp1252_leaves_undefined_fall_back_to_latin1(ws: Path) -> None:
    (ws / "odd.txt").write_bytes(b"a\x81b\xe9\n")
    out = read_file(path="odd.txt")
    assert "decoded as latin-1" in out.splitlines()[0]
    assert out.splitlines()[1] == "a\x81bé"


def test_utf16_with_a_byte_order_mark_is_text(ws: Path) -> None:
    (ws / "u16.txt").write_bytes("hé\nwörld\n".encode("utf-16"))
    note, *lines = read_file(path="u16.txt").splitlines()
    assert lines == ["hé", "wörld"] and "decoded as UTF-16 (byte-order mark)" in note


async def test_edit_file_calls_utf16_text_what_it_is_not_binary(ws: Path) -> None:
    # edit_file calls UTF-16 text what read_file calls it, not "binary"
    from crow_cli.tools.builtin.edits import edit_file

    (ws / "u16.txt").write_bytes("hé\nwörld\n".encode("utf-16"))
    with pytest.raises(ToolError, match=r"^'u16.txt' is UTF-16 text; edit_file only edits UTF-8 files; not edited$"):
        await edit_file.invoke({"path": "u16.txt", "old_string": "hé", "new_string": "ha"})


# an executable, not a PNG: an image file is shown to the model (tests/test_loop.py)
@pytest.mark.parametrize("data", [b"\x7fELF\x02\x01\x01\0\0\0\0\0", b"x" * 10_000 + b"\0tail"])
def test_a_file_with_nul_bytes_is_refused_as_binary(ws: Path, data: bytes) -> None:
    (ws / "blob.bin").write_bytes(data)
    with pytest.raises(ToolError, match=rf"^'blob.bin' is a binary file \({len(data)} bytes\); not read$"):
        read_file(path="blob.bin")


def test_utf8_cut_inside_a_character_at_the_sniff_cap_is_still_utf8(ws: Path) -> None:
    text = "a" + "é" * (SNIFF_BYTES // 2 + 10)  # the sniffed bytes end inside a 2-byte character
    (ws / "big.txt").write_text(text, encoding="utf-8")
    out = read_file(path="big.txt")
    assert "\ufffd" not in out and "decoded as" not in out
    note, body = out.split("\n", 1)
    assert note.startswith("[read_file: big.txt has 1 line (") and body == text[:MAX_RETURN_CHARS]


def test_plain_utf8_has_no_note(ws: Path) -> None:
    (ws / "ok.txt").write_text("naïve ✓\n", encoding="utf-8")
    assert read_file(path="ok.txt") == "naïve ✓\n"

def _big(ws: Path) -> list[str]:
    """8000 lines of 100 bytes each (800 000 bytes, past every cap)."""
    lines = [f"line {n:05d} ".ljust(99, "x") + "\n" for n in range(1, 8001)]
    (ws / "big.txt").write_text("".join(lines))
    return lines


def test_read_file_reaches_lines_past_the_read_cap(ws: Path) -> None:
    lines = _big(ws)
    assert read_file(path="big.txt", start_line=7999, end_line=99999) == "".join(lines[7998:])
    assert read_file(path="big.txt", start_line=6000, end_line=6001) == "".join(lines[5999:6001])


def test_read_file_reports_the_real_line_count(ws: Path) -> None:
    _big(ws)
    with pytest.raises(ToolError, match=r"^'big.txt' has 8000 lines; start_line 8001 is past the end$"):
        read_file(path="big.txt", start_line=8001)


def test_a_cut_read_says_so_first_and_survives_the_dispatch_cap(ws: Path) -> None:
    lines = _big(ws)
    out = read_file(path="big.txt")
    note, body = out.split("\n", 1)
    shown = MAX_RETURN_CHARS // 100
    assert note == (f"[read_file: big.txt has 8000 lines (800000 bytes); showing lines 1–{shown} (at most "
                    f"{MAX_RETURN_CHARS} characters per call); read on with start_line={shown + 1}]")
    assert body == "".join(lines[:shown])
    assert truncate_output(out, 50_000) == out  # the default max_output_chars keeps all of it, note included
    later = read_file(path="big.txt", start_line=shown + 1)
    assert later.startswith(f"[read_file: big.txt has 8000 lines (800000 bytes); showing lines {shown + 1}–")


def test_one_line_longer_than_the_cap_is_cut_and_said(ws: Path) -> None:
    (ws / "min.js").write_text("x" * (MAX_RETURN_CHARS * 2) + "\nnext\n")
    note, body = read_file(path="min.js").split("\n", 1)
    assert note == (f"[read_file: min.js has 2 lines ({MAX_RETURN_CHARS * 2 + 6} bytes); line 1 is "
                    f"{MAX_RETURN_CHARS * 2 + 1} characters long: characters 1–{MAX_RETURN_CHARS} are shown; "
                    f"read on with start_line=1, start_char={MAX_RETURN_CHARS}]")
    assert body == "x" * MAX_RETURN_CHARS


@pytest.mark.parametrize(("start", "end", "message"), [
    (5, 2, "end_line 2 is before start_line 5"),
    (0, -1, "start_line must be 1 or more (lines are numbered from 1); got 0"),
    (0, None, "start_line must be 1 or more (lines are numbered from 1); got 0"),
    (None, 0, "end_line must be 1 or more (lines are numbered from 1); got 0"),
    (2, -1, "end_line must be 1 or more (lines are numbered from 1); got -1"),
])
def test_nonsensical_ranges_are_clear_errors(ws: Path, start: int | None, end: int | None, message: str) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour\nfive\nsix\n")
    with pytest.raises(ToolError) as caught:
        read_file(path="a.txt", start_line=start, end_line=end)
    assert str(caught.value) == message


def test_an_end_line_past_the_end_is_clamped(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    assert read_file(path="a.txt", start_line=2, end_line=50) == "two\n"


def test_the_rest_of_a_long_line_is_reached_with_start_char(ws: Path) -> None:
    # the rest of a line longer than one call returns can be read with the next call
    line = "".join(f"{n:09d}," for n in range(12_000))  # 120 000 characters, one line
    (ws / "min.js").write_text(line + "\nnext\n")
    parts, start = [], 0
    while True:
        out = read_file(path="min.js", start_line=1, end_line=1, start_char=start)
        if not out.startswith("[read_file: "):  # the rest fits
            parts.append(out)
            break
        note, body = out.split("\n", 1)
        parts.append(body)
        start = int(note.rsplit("start_char=", 1)[1].rstrip("]"))
    assert len(parts) == 4  # 40 000 + 40 000 + 40 000 characters, then the line ending
    assert "".join(parts) == line + "\n"
    assert read_file(path="min.js", start_line=1, start_char=len(line)) == "\nnext\n"


def test_a_huge_single_line_is_not_read_whole_into_memory(ws: Path) -> None:
    # read_file does not hold the whole line (here 16 MB) in memory to return 40 000 characters
    import tracemalloc

    with (ws / "huge.txt").open("w") as fh:
        for _ in range(256):
            fh.write("y" * 65_536)
    tracemalloc.start()
    try:
        out = read_file(path="huge.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.endswith("y" * MAX_RETURN_CHARS)
    assert "line 1 is 16777216 characters long" in out
    assert peak < 4 * 1024 * 1024


def test_a_negative_start_char_is_refused(ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    with pytest.raises(ToolError, match="start_char must be 0 or more"):
        read_file(path="a.txt", start_char=-1)


# what a model reads of each built-in tool: every parameter described, and no docstring indentation carried
# into the description (read_file's docstring once held `\n` escapes that kept both from being parsed)
def test_every_builtin_tool_describes_each_parameter_without_docstring_indentation() -> None:
    from crow_cli.tools.builtin import BUILTIN_TOOLS

    for builtin in BUILTIN_TOOLS:
        function = builtin.schema()["function"]
        assert not any(line.startswith(" ") for line in function["description"].splitlines()), function["name"]
        for name, spec in function["parameters"]["properties"].items():
            assert spec.get("description"), (function["name"], name)
