"""Undo the last exchange: a rewind of it through the workspace's snapshots when it has them (what `run_shell`
changed too), else a restore of the files crow's file tools changed, from their backups.

`crow run` runs in this process (`run_here`), `crow sessions undo` as crow's typer app in this process
(`_undo`); one `crow sessions undo --dry-run` runs as a `crow` process."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from crow_cli.rewind import Scanner
from crow_cli.sessions import SessionStore
from crow_cli.undo import apply_undo, plan_undo, snapshot_workspace
from tests.replay_server import text_stream
from tests.support import CROW, authorless, crow_here, run_here, tool_turn, write_config

Capture = pytest.CaptureFixture[str]


def _undo(capsys: Capture, sid: str, *flags: str) -> tuple[int, str, str]:
    """`crow sessions undo SID FLAGS` in this process (`crow_here`): exit code, stdout, stderr."""
    capsys.readouterr()
    code = crow_here("sessions", "undo", sid, *flags)
    out, err = capsys.readouterr()
    return code, out, err


def _edit_turn() -> str:
    return tool_turn(("c1", "edit_file", json.dumps({"path": "a.txt", "old_string": "one", "new_string": "ONE"})),
                     ("c2", "write_file", json.dumps({"path": "new/b.txt", "content": "fresh"})),
                     ("c3", "run_shell", json.dumps({"command": "echo side effect > c.txt"})))


async def test_sessions_undo_restores_files_and_lists_shell_commands(tmp_path: Path, capsys: Capture) -> None:
    (tmp_path / "a.txt").write_text("one two\n")
    config = write_config(tmp_path, max_retries=0)
    first = await run_here([{"sse": tool_turn(("c0", "write_file", json.dumps({"path": "a.txt", "content": "one\n"})))},
                            {"sse": text_stream("wrote a")}], "write a", yes=True, cwd=tmp_path, config=config)
    assert first.code == 0, first.stderr
    second = await run_here([{"sse": _edit_turn()}, {"sse": text_stream("edited")}], "edit a", yes=True,
                            continue_last=True, cwd=tmp_path, config=config)
    assert second.code == 0, second.stderr
    assert (tmp_path / "a.txt").read_text() == "ONE\n" and (tmp_path / "new" / "b.txt").exists()
    with SessionStore() as store:
        sid = store.latest().id
        before = len(store.messages(sid))

    dry = subprocess.run([CROW, "sessions", "undo", sid, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and (tmp_path / "a.txt").read_text() == "ONE\n"
    code, out, err = _undo(capsys, sid)
    assert code == 0, err
    assert out.splitlines() == dry.stdout.splitlines() == [
        "undo: removes the last exchange (6 messages), starting with “edit a”",
        f"  restores {tmp_path / 'a.txt'}",
        f"  deletes {tmp_path / 'new' / 'b.txt'} (it created it)",
        "  not undoable: run_shell echo side effect > c.txt"]
    assert (tmp_path / "a.txt").read_text() == "one\n"  # as the first exchange left it
    assert not (tmp_path / "new" / "b.txt").exists()
    with SessionStore() as store:
        messages = store.messages(sid)
    assert len(messages) == before - 6 and authorless(messages[-1]) == {"role": "assistant", "content": "wrote a"}

    with SessionStore() as store:
        assert store.get(sid).title == "write a"  # its prompt is still there
    code, again, _ = _undo(capsys, sid)
    assert code == 0 and f"deletes {tmp_path / 'a.txt'}" not in again
    assert f"restores {tmp_path / 'a.txt'}" in again and (tmp_path / "a.txt").read_text() == "one two\n"
    with SessionStore() as store:
        assert store.get(sid).title == ""  # the title never names a prompt undo removed
    code, _, err = _undo(capsys, sid)
    assert code == 1 and "nothing to undo" in err


# A file the user changed after crow's turn (a line added to the notes.txt crow created, to the main.py crow
# edited) is neither deleted nor rewritten by `crow sessions undo` unless --force
async def test_files_changed_since_crow_wrote_them_are_not_restored_unless_forced(tmp_path: Path,
                                                                                 capsys: Capture) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    turn = tool_turn(("c1", "write_file", json.dumps({"path": "notes.txt", "content": "crow's notes\n"})),
                     ("c2", "edit_file", json.dumps({"path": "main.py", "old_string": "1", "new_string": "2"})))
    ran = await run_here([{"sse": turn}, {"sse": text_stream("done")}], "go", yes=True, cwd=tmp_path,
                         config=write_config(tmp_path, max_retries=0))
    assert ran.code == 0, ran.stderr
    with (tmp_path / "notes.txt").open("a") as fh:
        fh.write("the user's own line\n")
    with (tmp_path / "main.py").open("a") as fh:
        fh.write("print('user')\n")
    with SessionStore() as store:
        sid = store.latest().id
    code, held, err = _undo(capsys, sid)
    assert code == 0, err
    assert f"  changed since, not restored: {tmp_path / 'notes.txt'}\n" in held
    assert f"  changed since, not restored: {tmp_path / 'main.py'}\n" in held
    assert "--force restores" in held
    assert (tmp_path / "notes.txt").read_text() == "crow's notes\nthe user's own line\n"
    assert (tmp_path / "main.py").read_text() == "print(2)\nprint('user')\n"


# Undo names each file it holds back once, with no second warning, and a file crow created that is gone already
# as gone, not as one it deletes
async def test_undo_names_each_held_file_once_and_a_created_file_gone_already(tmp_path: Path, capsys: Capture) -> None:
    turn = tool_turn(("c1", "write_file", json.dumps({"path": "notes.txt", "content": "crow's notes\n"})),
                     ("c2", "write_file", json.dumps({"path": "scratch.txt", "content": "tmp\n"})))
    ran = await run_here([{"sse": turn}, {"sse": text_stream("done")}], "go", yes=True, cwd=tmp_path,
                         config=write_config(tmp_path, max_retries=0))
    assert ran.code == 0, ran.stderr
    with (tmp_path / "notes.txt").open("a") as fh:
        fh.write("the user's own line\n")
    (tmp_path / "scratch.txt").unlink()
    with SessionStore() as store:
        sid = store.latest().id
    code, held, err = _undo(capsys, sid)
    assert code == 0, err
    assert held.splitlines()[1:] == [
        f"  changed since, not restored: {tmp_path / 'notes.txt'}",
        f"  gone already: {tmp_path / 'scratch.txt'} (it created it)",
        "  (--force restores files that changed since all the same; their changes are lost)"]
    assert "warning" not in err and "notes.txt" not in err


async def test_force_restores_a_changed_file(tmp_path: Path, capsys: Capture) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    config = write_config(tmp_path, max_retries=0)
    first = await run_here([{"sse": text_stream("hello")}], "hi", cwd=tmp_path, config=config)
    assert first.code == 0, first.stderr
    turn = tool_turn(("c1", "edit_file", json.dumps({"path": "main.py", "old_string": "1", "new_string": "2"})))
    ran = await run_here([{"sse": turn}, {"sse": text_stream("done")}], "go", yes=True, continue_last=True,
                         cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    (tmp_path / "main.py").write_text("print(2)\nprint('user')\n")
    with SessionStore() as store:
        sid = store.latest().id
    code, forced, _ = _undo(capsys, sid, "--force")
    assert code == 0 and f"  restores {tmp_path / 'main.py'}" in forced
    assert (tmp_path / "main.py").read_text() == "print(1)\n"


# A path that now leads elsewhere (a folder crow wrote into, since made a symlink) is never touched, even forced
async def test_a_path_that_now_leads_elsewhere_is_never_touched(tmp_path: Path, capsys: Capture) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    turn = tool_turn(("c1", "write_file", json.dumps({"path": "sub/new.txt", "content": "x\n"})))
    ran = await run_here([{"sse": turn}, {"sse": text_stream("done")}], "go", yes=True, cwd=work,
                         config=write_config(tmp_path, max_retries=0))
    assert ran.code == 0, ran.stderr
    (outside / "new.txt").write_text("x\n")  # the same content: only the path tells it apart
    (work / "sub" / "new.txt").unlink()
    (work / "sub").rmdir()
    (work / "sub").symlink_to(outside, target_is_directory=True)
    with SessionStore() as store:
        sid = store.latest().id
    code, forced, err = _undo(capsys, sid, "--force")
    assert code == 0, err
    assert f"changed since, not restored: {work / 'sub' / 'new.txt'} (now leads to {outside / 'new.txt'})" \
        in forced
    assert (outside / "new.txt").read_text() == "x\n"


# The plan counts one message in the singular: "(1 message)"
def test_the_plan_counts_one_message_in_the_singular() -> None:
    from crow_cli.undo import UndoPlan

    assert UndoPlan(keep=0, removed=1, prompt="hi").describe()[0] == \
        "undo: removes the last exchange (1 message), starting with “hi”"


def _exchange(store: SessionStore, sid: str, prompt: str, tool: str, arguments: dict[str, str]) -> int:
    """Store one exchange of a tool call (its result, the answer); returns the message count during the call."""
    store.append(sid, {"role": "user", "content": prompt})
    store.append(sid, {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"{prompt}-1", "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}]})
    during = len(store.messages(sid))
    store.append(sid, {"role": "tool", "tool_call_id": f"{prompt}-1", "content": "ok"})
    store.append(sid, {"role": "assistant", "content": "done"})
    return during


def _sed_exchange(store: SessionStore, sid: str, root: Path, name: str) -> None:
    """An exchange whose `run_shell` `sed -i` changed `name`, with the snapshots chat takes around the call."""
    scanner = Scanner(root, exclude=store.files())
    during = _exchange(store, sid, f"fix {name}", "run_shell", {"command": f"sed -i 's/old/new/' {name}"})
    for kind in ("before", "after"):
        if kind == "after":
            (root / name).write_text("new line\n")
        scan = scanner.scan()
        assert store.add_snapshot(sid, during, kind, str(root), scan.manifest, scan.contents) == []


# An exchange without snapshots (`crow run`, an older crow) is undone from crow's file tools' backups, as before
# snapshots were taken; an earlier exchange's snapshots are not used for it
def test_an_exchange_without_snapshots_is_undone_from_the_backups(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "a.txt").write_text("old line\n")
    (root / "b.txt").write_text("ONE\n")
    with SessionStore() as store:
        sid = store.create(cwd=str(root)).id
        _sed_exchange(store, sid, root, "a.txt")  # a chat exchange: snapshots
        during = _exchange(store, sid, "edit b", "edit_file", {"path": "b.txt", "old_string": "one",
                                                               "new_string": "ONE"})  # `crow run`: a backup only
        store.add_file_backup(sid, during, str(root / "b.txt"), b"one\n", hashlib.sha256(b"ONE\n").hexdigest())
        assert snapshot_workspace(store, sid) is None
        plan = plan_undo(store, sid, workspace=root, now=Scanner(root, exclude=store.files()).scan())
        assert plan.rewind is None
        assert plan.describe() == ["undo: removes the last exchange (4 messages), starting with “edit b”",
                                   f"  restores {root / 'b.txt'}"]
        assert apply_undo(store, sid, plan) == []
        assert len(store.messages(sid)) == 4
    assert (root / "b.txt").read_text() == "one\n"
    assert (root / "a.txt").read_text() == "new line\n"  # the earlier exchange's change stays


# `crow sessions undo` of an exchange with snapshots restores what its `run_shell` changed; --dry-run lists it and
# changes nothing
def test_sessions_undo_dry_run_lists_a_file_a_command_changed(tmp_path: Path, capsys: Capture) -> None:
    root = tmp_path.resolve()
    (root / "a.txt").write_text("old line\n")
    with SessionStore() as store:
        sid = store.create(cwd=str(root)).id
        _sed_exchange(store, sid, root, "a.txt")
    code, out, err = _undo(capsys, sid, "--dry-run")
    assert code == 0, err
    assert out.splitlines() == ["undo: removes the last exchange (4 messages), starting with “fix a.txt”",
                                f"  restores {root / 'a.txt'}"]
    assert (root / "a.txt").read_text() == "new line\n"
    with SessionStore() as store:
        assert len(store.messages(sid)) == 4
    code, out, err = _undo(capsys, sid)
    assert code == 0, err
    assert f"  restores {root / 'a.txt'}" in out and "not undoable" not in out
    assert (root / "a.txt").read_text() == "old line\n"
    with SessionStore() as store:
        assert store.messages(sid) == []


# A file changed outside crow after an exchange with snapshots is named and held back by `crow sessions undo`;
# --force puts it back all the same
def test_sessions_undo_holds_a_file_changed_outside_crow_unless_forced(tmp_path: Path, capsys: Capture) -> None:
    root = tmp_path.resolve()
    (root / "a.txt").write_text("old line\n")
    with SessionStore() as store:
        sid = store.create(cwd=str(root)).id
        _sed_exchange(store, sid, root, "a.txt")
    (root / "a.txt").write_text("the user's line\n")
    code, out, err = _undo(capsys, sid, "--dry-run")
    assert code == 0, err
    assert out.splitlines()[1:] == [
        f"  changed outside crow since, not restored: {root / 'a.txt'}",
        "  (--force restores files that changed since all the same; their changes are lost)"]
    code, out, err = _undo(capsys, sid, "--force")
    assert code == 0, err
    assert out.splitlines()[1:] == [f"  restores {root / 'a.txt'}"]
    assert (root / "a.txt").read_text() == "old line\n"
