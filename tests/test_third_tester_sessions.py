"""Defects a third tester found around sessions: two writers, terminal escapes, file modes, --json
errors, a closed stdout. Real SQLite, real `crow` subprocesses against the replay server, a pty."""

from __future__ import annotations

import json
import os
import pty
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from crow_cli.errors import SessionError
from crow_cli.sessions import SessionStore, default_db_path
from crow_cli.surfaces.jsonl import event_schema
from tests.replay_server import ReplayServer, text_stream
from tests.test_sessions import CROW, crow, run_args, tool_call_sse, wait_for

GATED_TOOL = '''
import os, time
from crow_cli.tools import tool

@tool
def gated(flag: str) -> str:
    """Wait until the file `flag` exists.

    Args:
        flag: a path.
    """
    while not os.path.exists(flag):
        time.sleep(0.05)
    return "gate opened"
'''

HOSTILE = "look\x1b]0;HACKED\x07\x1b[2J here\x9b31m \x1b]52;c;aGk=\x07end"


def _tools(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir(exist_ok=True)
    (folder / "gated.py").write_text(GATED_TOOL)
    return folder


def _valid_history(messages: list[dict[str, Any]]) -> bool:
    """Every assistant tool call is answered exactly once, right after its assistant message."""
    i = 0
    while i < len(messages):
        calls = messages[i].get("tool_calls") or []
        if messages[i].get("role") == "tool":
            return False  # a result not right after its calls
        ids = [c["id"] for c in calls]
        results = [m.get("tool_call_id") for m in messages[i + 1: i + 1 + len(ids)]]
        if results != ids or any(m.get("role") != "tool" for m in messages[i + 1: i + 1 + len(ids)]):
            return False
        i += 1 + len(ids)
    return True


class _Holder:
    """A `crow run` whose tool waits on a flag file: it holds its session until `release()`."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.flag = tmp_path / "flag"
        script = [{"sse": tool_call_sse("call_A", "gated", json.dumps({"flag": str(self.flag)}))},
                  {"sse": text_stream("A done.")}]
        self.server = ReplayServer(script).__enter__()
        self.proc = subprocess.Popen([CROW, *run_args(self.server, "--tools-dir", str(_tools(tmp_path)), *args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True)
        wait_for(self._tool_running)
        with SessionStore() as store:
            self.session_id = store.latest().id

    def _tool_running(self) -> bool:
        assert self.proc.poll() is None, self.proc.communicate()
        if not default_db_path().exists():
            return False
        with SessionStore() as store:
            latest = store.latest()
            return latest is not None and any(m.get("tool_calls") for m in store.messages(latest.id))

    def release(self) -> tuple[int, str]:
        self.flag.touch()
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.server.__exit__(None, None, None)


# 1. one writer per session


def test_a_session_in_use_is_refused_and_its_history_stays_valid(tmp_path: Path, _isolated_home: Path) -> None:
    holder = _Holder(tmp_path, "A")
    try:
        sid, pid = holder.session_id, holder.proc.pid
        in_use = f"crow: error: session {sid} is in use by another crow (pid {pid})\n"
        with ReplayServer([{"sse": text_stream("B")}] * 3) as server:
            for args in (["--session", sid, "B"], ["-c", "B"]):
                second = crow(*run_args(server, *args))
                assert (second.returncode, second.stderr) == (1, in_use)
            chat = crow("chat", "--resume", sid, "--base-url", server.base_url, "--model", "m", "--api-key", "k")
            assert (chat.returncode, chat.stderr) == (1, in_use)
            slash = subprocess.run([CROW, "chat", "--base-url", server.base_url, "--model", "m", "--api-key", "k"],
                                   input=f"/resume {sid}\n", capture_output=True, text=True, timeout=60)
            assert slash.returncode == 0 and in_use.strip() in slash.stdout, slash.stdout
            assert server.requests == []
        for args in (["list"], ["show", sid], ["export", sid, "-f", "json"]):  # readers are never refused
            assert crow("sessions", *args).returncode == 0
        refused = crow("sessions", "delete", sid)
        assert (refused.returncode, refused.stderr) == (1, in_use)
        code, err = holder.release()
        assert code == 0, err
    finally:
        holder.close()
    assert not any(default_db_path().with_name("sessions.db.locks").iterdir())  # its lock file is gone too
    with SessionStore() as store:
        stored = store.messages(sid)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert _valid_history(stored)
    with ReplayServer([{"sse": text_stream("C")}]) as server:  # free again once A has ended
        assert crow(*run_args(server, "--session", sid, "C")).returncode == 0


def test_the_lock_of_a_killed_crow_does_not_block(tmp_path: Path, _isolated_home: Path) -> None:
    holder = _Holder(tmp_path, "A")
    try:
        sid = holder.session_id
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait(10)
    finally:
        holder.close()
    with ReplayServer([{"sse": text_stream("resumed")}]) as server:
        result = crow(*run_args(server, "--session", sid, "again"))
    assert result.returncode == 0, result.stderr
    with SessionStore() as store:
        stored = store.messages(sid)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user", "assistant"]
    assert _valid_history(stored)


def test_the_store_grants_one_writer_per_session(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as first, SessionStore(db) as second:
        info = first.create()
        with pytest.raises(SessionError) as refused:
            second.load(info.id)
        assert str(refused.value) == f"session {info.id} is in use by another crow (pid {os.getpid()})"
        assert first.load(info.id) == []  # the holder itself may load it again
        first.release(info.id)
        assert second.load(info.id) == []
        assert second.messages(info.id) == [] and first.recent()[0].id == info.id  # reading is never refused


async def test_chat_holds_only_the_session_it_is_in(tmp_path: Path) -> None:
    from dataclasses import replace

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from crow_cli.config import Settings
    from crow_cli.surfaces.chat import ChatApp, ChatOptions

    db = tmp_path / "s.db"
    store = SessionStore(db)
    old = store.create(model="test-model")
    store.append(old.id, {"role": "user", "content": "before"})
    store.release()
    script = [{"sse": text_stream("one")}, {"sse": text_stream("two")}]
    with ReplayServer(script) as server, create_pipe_input() as pipe, SessionStore(db) as other:
        pipe.send_text(f"/resume {old.id}\rhello\r/new\rsecond\r/exit\r")
        app = ChatApp(replace(Settings(model="test-model", api_key="sk-test"), base_url=server.base_url),
                      ChatOptions(), console=Console(file=open(os.devnull, "w"), width=100),  # noqa: SIM115
                      pt_input=pipe, pt_output=DummyOutput(), store=store)
        assert await app.run() == 0
        new = app.recorder.session_id
        assert new and new != old.id
        with pytest.raises(SessionError, match="in use by another crow"):
            other.load(new)  # the chat is in it
        assert [m["content"] for m in other.load(old.id)] == ["before", "hello", "one"]  # /new let it go
    store.close()


# 2. stored text cannot drive the terminal


def _on_pty(*args: str) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen([CROW, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    os.close(master)
    return proc.wait(30), out.decode("utf-8", "replace")


def _controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 32 and c not in "\r\n\t") or 0x7F <= ord(c) <= 0x9F}


def test_sessions_commands_neutralise_control_characters_on_a_terminal(_isolated_home: Path) -> None:
    with SessionStore() as store:
        info = store.create(model="m\x1b[2J")
        store.append(info.id, {"role": "user", "content": HOSTILE})
        store.append(info.id, {"role": "assistant", "content": HOSTILE})
    messages = [{"role": "user", "content": HOSTILE}, {"role": "assistant", "content": HOSTILE}]
    for args in (["list"], ["show", info.id], ["export", info.id], ["export", info.id, "-f", "jsonl"],
                 ["export", info.id, "-f", "json"]):
        code, out = _on_pty("sessions", *args)
        assert code == 0 and "HACKED" in out, (args, out)
        assert not _controls(out), (args, _controls(out))
    code, out = _on_pty("sessions", "export", info.id, "-f", "json")
    assert json.loads(out)["messages"] == messages  # the data stays exact
    piped = crow("sessions", "show", info.id)
    assert HOSTILE in piped.stdout  # a pipe or file gets the text as stored
    code, out = _on_pty("sessions", "delete", info.id)
    assert code == 0 and "deleted" in out and not _controls(out), out


# 3. private files


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_session_files_are_private_and_existing_folders_keep_their_mode(_isolated_home: Path) -> None:
    share = _isolated_home / ".local" / "share"
    share.mkdir(parents=True)
    share.chmod(0o755)
    with ReplayServer([{"sse": text_stream("ok")}]) as server:
        assert crow(*run_args(server, "hello")).returncode == 0
    db = default_db_path()
    assert _mode(share) == 0o755  # it existed: left alone
    assert _mode(db.parent) == 0o700
    with SessionStore() as store:  # while open, the WAL files exist
        store.create()
        for path in db.parent.iterdir():
            if path.is_file():
                assert _mode(path) == 0o600, path


def test_state_folders_crow_creates_are_private(_isolated_home: Path) -> None:
    from crow_cli.surfaces.chat import _history_path

    path = _history_path()
    assert path.exists() and _mode(path) == 0o600
    folder = path.parent
    while folder != _isolated_home:
        assert _mode(folder) == 0o700, folder  # none of these existed
        folder = folder.parent


def test_an_old_world_readable_store_is_made_private(_isolated_home: Path) -> None:
    db = default_db_path()
    SessionStore().close()
    db.chmod(0o644)
    SessionStore().close()
    assert _mode(db) == 0o600


# 4. --json errors and conflicting flags


def test_json_run_on_an_unknown_session_starts_and_finishes(_isolated_home: Path) -> None:
    with ReplayServer([]) as server:
        result = crow(*run_args(server, "--json", "--session", "nope", "hi"))
        conflict = crow(*run_args(server, "-c", "--session", "abc", "hi"))
        assert server.requests == []
    assert result.returncode == 1
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["type"] for e in events] == ["run_started", "run_finished"]
    for event in events:
        jsonschema.validate(event, event_schema())
    assert events[1]["status"] == "error" and events[1]["exit_code"] == 1
    assert events[1]["error"] == "no session 'nope' (crow sessions list shows them)"
    assert result.stderr == "crow: error: no session 'nope' (crow sessions list shows them)\n"
    assert conflict.returncode == 2 and conflict.stdout == ""
    assert conflict.stderr == "crow: error: --continue and --session cannot be combined\n"


# 5. a closed stdout


def test_run_with_stdout_closed_is_not_an_internal_error(_isolated_home: Path) -> None:
    with ReplayServer([{"sse": text_stream("answer nobody reads")}]) as server:
        result = subprocess.run([CROW, *run_args(server, "hi")], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert "internal error" not in result.stderr and result.returncode == 0, result.stderr
    with SessionStore() as store:
        stored = store.messages(store.latest().id)
    assert stored[-1] == {"role": "assistant", "content": "answer nobody reads"}
