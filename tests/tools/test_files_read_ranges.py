"""read_file's line ranges: past its read cap, nonsensical ranges, lines longer than one call returns.
(Found by a fresh-user tester; edit_file on CRLF files: test_file_tools.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.text import truncate_output
from crow_cli.tools.builtin.files import MAX_RETURN_CHARS, read_file


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
    # smaller: the rest of a line longer than one call returns could not be read at all (issue 11)
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
    # smaller: read_file held the whole line (here 16 MB) in memory to return 40 000 characters (issue 11)
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
