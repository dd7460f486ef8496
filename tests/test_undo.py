"""Undo the last exchange and restore the files crow's file tools changed (issue 13: "there is no /undo")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import CROW, run_crow, tool_turn, write_config


def _edit_turn() -> str:
    return tool_turn(("c1", "edit_file", json.dumps({"path": "a.txt", "old_string": "one", "new_string": "ONE"})),
                     ("c2", "write_file", json.dumps({"path": "new/b.txt", "content": "fresh"})),
                     ("c3", "run_shell", json.dumps({"command": "echo side effect > c.txt"})))


def test_sessions_undo_restores_files_and_lists_shell_commands(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one two\n")
    config = write_config(tmp_path, max_retries=0)
    first = run_crow([{"sse": tool_turn(("c0", "write_file", json.dumps({"path": "a.txt", "content": "one\n"})))},
                      {"sse": text_stream("wrote a")}], "--yes", "write a", cwd=tmp_path, config=config)
    assert first.code == 0, first.stderr
    second = run_crow([{"sse": _edit_turn()}, {"sse": text_stream("edited")}], "--yes", "-c", "edit a", cwd=tmp_path,
                      config=config)
    assert second.code == 0, second.stderr
    assert (tmp_path / "a.txt").read_text() == "ONE\n" and (tmp_path / "new" / "b.txt").exists()
    with SessionStore() as store:
        sid = store.latest().id
        before = len(store.messages(sid))

    dry = subprocess.run([CROW, "sessions", "undo", sid, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and (tmp_path / "a.txt").read_text() == "ONE\n"
    undo = subprocess.run([CROW, "sessions", "undo", sid], capture_output=True, text=True, timeout=60)
    assert undo.returncode == 0, undo.stderr
    assert undo.stdout.splitlines() == dry.stdout.splitlines() == [
        "undo: removes the last exchange (6 messages), starting with “edit a”",
        f"  restores {tmp_path / 'a.txt'}",
        f"  deletes {tmp_path / 'new' / 'b.txt'} (it created it)",
        "  not undoable: run_shell echo side effect > c.txt"]
    assert (tmp_path / "a.txt").read_text() == "one\n"  # as the first exchange left it
    assert not (tmp_path / "new" / "b.txt").exists()
    with SessionStore() as store:
        messages = store.messages(sid)
    assert len(messages) == before - 6 and messages[-1] == {"role": "assistant", "content": "wrote a"}

    again = subprocess.run([CROW, "sessions", "undo", sid], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and f"deletes {tmp_path / 'a.txt'}" not in again.stdout
    assert f"restores {tmp_path / 'a.txt'}" in again.stdout and (tmp_path / "a.txt").read_text() == "one two\n"
    empty = subprocess.run([CROW, "sessions", "undo", sid], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 1 and "nothing to undo" in empty.stderr
