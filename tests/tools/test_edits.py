"""edit_file on real files: line endings kept, matches across CRLF."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin.edits import edit_file


# found trying it as a new user (third round)
def test_edit_file_matches_lf_text_in_a_crlf_file_and_keeps_crlf(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    out = edit_file(path="w.txt", old_string="a\nb", new_string="A\nB\nBB")
    assert out.startswith("edited w.txt: replaced 1 occurrence\n")
    assert (workspace / "w.txt").read_bytes() == b"A\r\nB\r\nBB\r\nc\r\n"


# found trying it as a new user (third round)
def test_edit_file_new_lines_in_a_crlf_file_get_crlf(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="b", new_string="b\nc")
    assert (workspace / "w.txt").read_bytes() == b"a\r\nb\r\nc\r\n"


# found trying it as a new user (third round)
def test_edit_file_crlf_text_sent_as_crlf_still_matches(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"a\r\nb\r\n")
    edit_file(path="w.txt", old_string="a\r\nb", new_string="x\r\ny")
    assert (workspace / "w.txt").read_bytes() == b"x\r\ny\r\n"


# found trying it as a new user (third round)
def test_edit_file_lf_files_are_untouched_by_the_crlf_path(workspace: Path) -> None:
    (workspace / "u.txt").write_bytes(b"a\nb\n")
    edit_file(path="u.txt", old_string="a\nb", new_string="x\ny")
    assert (workspace / "u.txt").read_bytes() == b"x\ny\n"
    with pytest.raises(ToolError, match="old_string was not found"):
        edit_file(path="u.txt", old_string="x\r\ny", new_string="z")
