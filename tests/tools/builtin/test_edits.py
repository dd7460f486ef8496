"""write_file and edit_file (`tools/builtin/edits`) against real files, and through `crow run` as a coding agent.

Properties guarded here:

- write_file and edit_file write atomically, refuse huge files before reading them, and count overlapping
  occurrences;
- in a scratch git repo with a scripted model, the edit (and the test command after it) happens under
  `--yes`, `auto-edit`, allow rules and on a terminal when the person says yes; nothing changes without an
  approver, under a deny rule or outside `--workspace`; bad `--approval` / `--workspace` are usage errors.

`--yes` and the question on a terminal run a `crow run` process end to end; the other policies, rules and
flags run `run_prompt` (what `crow run` runs) in this process (`run_here`).
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin.edits import MAX_EDIT_BYTES, edit_file, write_file
from crow_cli.tools.sandbox import backend
from tests.replay_server import ReplayServer
from tests.support import CROW, Ran, crow, run_here, script, tool_messages

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


# A write that fails part way (a full disk) leaves the file whole: no truncate-then-write, no temporary file left
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


# A file over edit_file's limit (a 3 GB log) is refused before it is read, not after reading it whole
def test_a_huge_file_is_refused_before_it_is_read(ws: Path) -> None:
    log = ws / "huge.log"
    with log.open("wb") as fh:
        fh.truncate(3 * 1024**3)  # sparse: no disk used, but read whole it is 3 GB of memory
    with pytest.raises(ToolError, match=f"is {3 * 1024**3} bytes; edit_file handles files up to {MAX_EDIT_BYTES}"):
        edit_file("huge.log", "a", "b")


# An old_string whose occurrences overlap ("    0,\n    0,\n" in three "    0," lines) occurs twice: not unique
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

BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = ("import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\nif __name__ == '__main__':\n"
         "    unittest.main()\n")
TEST_COMMAND = f"{sys.executable} -m unittest -q"
TURNS = [
    [("call_read", "read_file", {"path": "calc.py"})],
    [("call_edit", "edit_file", {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"})],
    [("call_test", "run_shell", {"command": TEST_COMMAND})],
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "calc.py").write_text(BUGGY)
    (root / "test_calc.py").write_text(TESTS)
    if shutil.which("git"):
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
        subprocess.run(["git", "add", "."], cwd=root, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", "buggy"], cwd=root, check=True, env=env)
    return root


def _run(repo: Path, *flags: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    with ReplayServer(script(*TURNS, final="Fixed add; the tests pass.")) as server:
        proc = crow("run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                         *flags, "Fix the failing test in this repo.", cwd=cwd or repo)
    return proc, server.requests


async def _run_here(repo: Path, *, cwd: Path | None = None, **kw: Any) -> Ran:
    """`_run` in this process: `flags` are the command-line settings (`--approval`, `--allow`…)."""
    return await run_here(script(*TURNS, final="Fixed add; the tests pass."), "Fix the failing test in this repo.",
                          cwd=cwd or repo, **kw)


def _results(requests: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in tool_messages(requests[-1])}


def test_with_yes_the_file_is_edited_and_the_tests_run(repo: Path) -> None:
    proc, requests = _run(repo, "--yes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Fixed add; the tests pass.\n"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    results = _results(requests)
    assert results["call_read"] == BUGGY
    assert "-    return a - b\n+    return a + b" in results["call_edit"]
    assert results["call_test"].startswith("[exit code 0]") and "OK" in results["call_test"]


async def test_without_yes_and_no_terminal_nothing_changes(repo: Path) -> None:
    proc = await _run_here(repo)
    assert proc.code == 0, proc.stderr
    assert (repo / "calc.py").read_text() == BUGGY
    results = _results(proc.requests)
    assert results["call_read"] == BUGGY  # read-only tools need no approval
    for call_id, name in (("call_edit", "edit_file"), ("call_test", "run_shell")):
        assert results[call_id].startswith(f"Error: {name} needs approval and nobody can approve it here")
    assert "✗ edit_file" in proc.stderr and "✗ run_shell" in proc.stderr


async def test_auto_edit_edits_but_the_shell_still_needs_approval(repo: Path) -> None:
    ran = await _run_here(repo, flags={"approval": "auto-edit"})
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    results = _results(ran.requests)
    assert "+    return a + b" in results["call_edit"]
    assert "run_shell needs approval" in results["call_test"]


async def test_allow_rule_from_a_flag_and_deny_rule_from_config(repo: Path, tmp_path: Path) -> None:
    ran = await _run_here(repo, flags={"approval": "auto-edit", "allow": [f"run_shell:{TEST_COMMAND}"]})
    assert _results(ran.requests)["call_test"].startswith("[exit code 0]")
    (repo / "calc.py").write_text(BUGGY)
    config = tmp_path / "config.toml"
    config.write_text('approval = "yolo"\ndeny = ["edit_file", "run_shell:rm -rf"]\n')
    ran = await _run_here(repo, config=config)
    assert (repo / "calc.py").read_text() == BUGGY
    results = _results(ran.requests)
    assert "edit_file was denied by the rule 'edit_file'" in results["call_edit"]
    assert "FAILED" in results["call_test"]  # yolo ran the tests, which still fail


async def test_workspace_flag_confines_tools_to_another_folder(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = await _run_here(repo, flags={"workspace": str(repo)}, yes=True, cwd=elsewhere)
    assert ran.code == 0, ran.stderr
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    assert "OK" in _results(ran.requests)["call_test"]


# `crow run --approval sometimes` / `--workspace /nonexistent/ws` (tests/surfaces/test_jsonl.py runs both
# as processes: exit 2, no event, no session)
@pytest.mark.parametrize(("flags", "message"), [
    ({"approval": "sometimes"}, "--approval must be one of ask, auto-edit, yolo, read-only, plan (got 'sometimes')"),
    ({"workspace": "/nonexistent/ws"}, "workspace '/nonexistent/ws' is not an existing folder"),
])
async def test_bad_flags_are_usage_errors(repo: Path, flags: dict[str, str], message: str) -> None:
    ran = await run_here([], flags=flags, cwd=repo)
    assert ran.code == 2 and ran.requests == []
    assert ran.stderr.strip() == f"crow: error: {message}"


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float = 60) -> None:
    while needle not in seen:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise AssertionError(f"no {needle!r} in {bytes(seen)!r}")
        try:
            data = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            raise AssertionError(f"terminal closed before {needle!r}: {bytes(seen)!r}")
        seen.extend(data)


def test_on_a_terminal_the_person_is_asked(repo: Path) -> None:
    master, slave = pty.openpty()
    with ReplayServer(script(*TURNS)) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CROW_", "OPENAI_"))}
        proc = subprocess.Popen(
            [str(CROW), "run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
             "Fix the failing test."], cwd=repo, env=env, stdin=slave, stderr=slave, stdout=subprocess.PIPE)
        os.close(slave)
        seen = bytearray()
        try:
            _read_until(master, b"Allow edit_file? [y]es / [n]o [reason] / [a]lways for edit_file: ", seen)
            assert b"-    return a - b" in seen  # the prompt shows the diff it asks about
            os.write(master, b"y\n")
            # without a sandbox the question is whether to run it outside one (the suite passes there too)
            _read_until(master, b"Allow run_shell?" if backend() else b"Run it outside the sandbox this once?", seen)
            assert f"$ {TEST_COMMAND}".encode() in seen
            os.write(master, b"n\n")
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
    assert proc.returncode == 0
    assert out.decode() == "All done.\n"
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    results = _results(server.requests)
    assert "+    return a + b" in results["call_edit"]
    assert results["call_test"] == "Error: the user declined run_shell; it was not run. Do not retry it unchanged"
