"""Defects a third fresh-user tester found in the built-in tools: read_file ranges past its read cap,
nonsensical ranges, and edit_file on CRLF files. (search_files' regex budget: test_search_budget.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin.edits import edit_file
from crow_cli.tools.builtin.files import MAX_RETURN_CHARS, read_file
from crow_cli.tools.dispatch import truncate_output
from crow_cli.tools.workspace import _ROOT, set_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Path]:
    token = set_workspace(tmp_path)
    yield tmp_path
    _ROOT.reset(token)


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
                    f"{MAX_RETURN_CHARS * 2 + 1} characters long: only its first {MAX_RETURN_CHARS} are shown; "
                    "read on with start_line=2]")
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


def test_edit_file_matches_lf_text_in_a_crlf_file_and_keeps_crlf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    out = edit_file(path="w.txt", old_string="a\nb", new_string="A\nB\nBB")
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
