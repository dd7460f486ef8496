"""read_file and list_directory stay inside the workspace."""

from __future__ import annotations

import os

import pytest

from crow_cli.errors import OutsideWorkspace, ToolError
from crow_cli.tools.builtin.files import list_directory, read_file


@pytest.fixture
def ws(tmp_path, enter_workspace):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (root / "sub").mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    enter_workspace(root)
    return root


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
    with pytest.raises(ToolError, match=r"'nope\.txt' does not exist"):
        read_file(path="nope.txt")
    with pytest.raises(ToolError, match="'sub' is a directory, not a file"):
        read_file(path="sub")


def test_list_directory(ws):
    assert list_directory() == "./ (2 entries)\nsub/\na.txt"
    with pytest.raises(OutsideWorkspace):
        list_directory(path="..")
