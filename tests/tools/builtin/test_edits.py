"""write_file and edit_file write atomically, refuse huge files before reading them, and count overlapping
occurrences (issue: what crow writes on its own and the bounds on what models send)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin.edits import MAX_EDIT_BYTES, edit_file, write_file

_FULL_DISK = """
import resource, signal, sys
from crow_cli.errors import ToolError
from crow_cli.tools.builtin.edits import edit_file, write_file
from crow_cli.tools.context import ToolContext, using_context

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
with using_context(ToolContext.for_workspace(sys.argv[1])):
    for call in (lambda: write_file("big.txt", "new line\\n" * 50_000),
                 lambda: edit_file("big.txt", "line 7\\n", "line 7\\n" + "x" * 200_000 + "\\n")):
        try:
            call()
        except ToolError as exc:
            print(exc)
"""


# issue: a new user's write_file on a full disk left a 450 KB file with 0 of its lines (truncate, then write)
def test_a_failed_write_leaves_the_file_whole(tmp_path: Path) -> None:
    original = "".join(f"line {i}\n" for i in range(9000))  # ~80 KB, under the limit
    (tmp_path / "big.txt").write_text(original)
    ran = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("'big.txt' was not written (") and
                                   line.endswith("; the file is unchanged") for line in lines)
    assert (tmp_path / "big.txt").read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]  # no temporary file left behind


def test_writes_keep_the_file_s_mode(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o750)
    edit_file("run.sh", "hi", "there")
    assert script.read_text() == "echo there\n" and (script.stat().st_mode & 0o777) == 0o750
    write_file("run.sh", "echo bye\n")
    assert (script.stat().st_mode & 0o777) == 0o750
    write_file("new.txt", "x")
    assert (ws / "new.txt").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    ran = subprocess.run(["sh", "-c", "umask"], capture_output=True, text=True, check=True)
    return int(ran.stdout.strip(), 8)


def test_a_link_to_a_file_in_the_workspace_stays_a_link(ws: Path) -> None:
    (ws / "real.txt").write_text("a\n")
    (ws / "alias.txt").symlink_to("real.txt")
    write_file("alias.txt", "b\n")
    assert (ws / "alias.txt").is_symlink() and (ws / "real.txt").read_text() == "b\n"


# issue: edit_file read a 3 GB log whole (3.2 GB of memory, 12-20 s) before refusing it as too big
def test_a_huge_file_is_refused_before_it_is_read(ws: Path) -> None:
    log = ws / "huge.log"
    with log.open("wb") as fh:
        fh.truncate(3 * 1024**3)  # sparse: no disk used, but read whole it is 3 GB of memory
    with pytest.raises(ToolError, match=f"is {3 * 1024**3} bytes; edit_file handles files up to {MAX_EDIT_BYTES}"):
        edit_file("huge.log", "a", "b")


# issue: "    0,\n    0,\n" in three "    0," lines occurs twice, overlapping; the edit was made at the first
def test_an_overlapping_old_string_is_not_unique(ws: Path) -> None:
    (ws / "data.py").write_text("x = [\n    0,\n    0,\n    0,\n]\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        edit_file("data.py", "    0,\n    0,\n", "    1,\n")
    assert (ws / "data.py").read_text() == "x = [\n    0,\n    0,\n    0,\n]\n"
    (ws / "a.txt").write_text("aaa")
    with pytest.raises(ToolError, match="occurs 2 times"):
        edit_file("a.txt", "aa", "b")
    assert edit_file("a.txt", "aa", "b", replace_all=True).text.startswith("edited a.txt: replaced 1 occurrence")


def test_a_fifo_in_the_target_s_place_is_refused(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    with pytest.raises(ToolError, match="is a FIFO"):
        write_file("pipe", "x")
