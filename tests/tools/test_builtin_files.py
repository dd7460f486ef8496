"""read_file and list_directory stay inside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crow_cli.errors import OutsideWorkspace, ToolError
from crow_cli.tools.builtin.files import MAX_RETURN_CHARS, list_directory, read_file
from crow_cli.tools.dispatch import truncate_output
from crow_cli.tools.workspace import set_workspace


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "sub").mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    token = set_workspace(root)
    yield root
    token.var.reset(token)


def test_read_file_whole_and_line_range(ws):
    assert read_file(path="a.txt") == "one\ntwo\nthree\n"
    assert read_file(path="a.txt", start_line=2, end_line=2) == "two\n"
    assert read_file(path="a.txt", start_line=2) == "two\nthree\n"


@pytest.mark.parametrize("path", ["../secret.txt", "sub/../../secret.txt"])
def test_relative_escape_is_refused(ws, path):
    with pytest.raises(OutsideWorkspace):
        read_file(path=path)


def test_absolute_path_outside_is_refused_inside_is_allowed(ws):
    with pytest.raises(OutsideWorkspace):
        read_file(path=str(ws.parent / "secret.txt"))
    assert read_file(path=str(ws / "a.txt")).startswith("one")


def test_symlink_leading_out_is_refused(ws):
    os.symlink(ws.parent / "secret.txt", ws / "link.txt")
    os.symlink(ws.parent, ws / "up")
    with pytest.raises(OutsideWorkspace):
        read_file(path="link.txt")
    with pytest.raises(OutsideWorkspace):
        list_directory(path="up")


def test_binary_and_missing_files_are_refused(ws):
    (ws / "b.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        read_file(path="b.bin")
    with pytest.raises(ToolError, match="not a file"):
        read_file(path="nope.txt")


def test_list_directory(ws):
    assert list_directory() == "./ (2 entries)\nsub/\na.txt"
    with pytest.raises(OutsideWorkspace):
        list_directory(path="..")


def _big(ws: Path) -> list[str]:
    """8000 lines of 100 bytes each (800 000 bytes, past every cap)."""
    lines = [f"line {n:05d} ".ljust(99, "x") + "\n" for n in range(1, 8001)]
    (ws / "big.txt").write_text("".join(lines))
    return lines


# found trying it as a new user (third round)
def test_read_file_reaches_lines_past_the_read_cap(ws: Path) -> None:
    lines = _big(ws)
    assert read_file(path="big.txt", start_line=7999, end_line=99999) == "".join(lines[7998:])
    assert read_file(path="big.txt", start_line=6000, end_line=6001) == "".join(lines[5999:6001])


# found trying it as a new user (third round)
def test_read_file_reports_the_real_line_count(ws: Path) -> None:
    _big(ws)
    with pytest.raises(ToolError, match=r"^'big.txt' has 8000 lines; start_line 8001 is past the end$"):
        read_file(path="big.txt", start_line=8001)


# found trying it as a new user (third round)
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


# found trying it as a new user (third round)
def test_one_line_longer_than_the_cap_is_cut_and_said(ws: Path) -> None:
    (ws / "min.js").write_text("x" * (MAX_RETURN_CHARS * 2) + "\nnext\n")
    note, body = read_file(path="min.js").split("\n", 1)
    assert note == (f"[read_file: min.js has 2 lines ({MAX_RETURN_CHARS * 2 + 6} bytes); line 1 is "
                    f"{MAX_RETURN_CHARS * 2 + 1} characters long: only its first {MAX_RETURN_CHARS} are shown; "
                    "read on with start_line=2]")
    assert body == "x" * MAX_RETURN_CHARS


# found trying it as a new user (third round)
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


# found trying it as a new user (third round)
def test_an_end_line_past_the_end_is_clamped(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    assert read_file(path="a.txt", start_line=2, end_line=50) == "two\n"
