"""The session store on a real SQLite file, and `crow run` / `crow sessions` as subprocesses.

Properties guarded here:

- messages round-trip exactly, in order; `append` returns the position and makes the session the most recent;
- ids are short; a unique prefix resolves (LIKE wildcards literal), an ambiguous one or none is an error;
- `latest` is the most recently updated session, of the folder asked for when given;
- the title is the first user message's (or the `title` given), set once, cut to fit;
- `truncate` drops the messages from a position on, the checkpoints past it and the file backups from it;
- `delete` drops a session with all it holds; `fork` copies all of it;
- `load` repairs a turn cut mid-way and stores the repair; a damaged store or message fails in one line and
  leaves nothing locked; one writer per session (created sessions are held at once; a dead holder's lock
  does not block);
- credentials in a base URL are never stored; files are private; `crow run` / `crow sessions` record,
  continue, list and delete as documented.

A stored and resumed session (`crow run -c`, chat /resume, ACP session/load all `load` it) keeps what the
server attached to each assistant message, so the resumed requests send it back byte for byte.

Images in the session store: stored once by content hash beside the database, not inline in every row and
every export; rows an older crow stored inline still load. An image keeps its name in its
reference (a transcript says `[image: shot.png, 41 KB]`, not its type), and its file goes with the last row
that references it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import pty
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from crow_cli.config import Settings, load_settings
from crow_cli.errors import SessionError
from crow_cli.export import export_session
from crow_cli.history import AssistantTurn, ToolCall, tool_message, user_message
from crow_cli.images import Image, describe_part, image_part
from crow_cli.sessions import IMAGE_REF, SessionInUse, SessionStore, SessionStoreDamaged, default_db_path
from crow_cli.surfaces.chat.app import ChatApp, ChatOptions
from crow_cli.surfaces.options import SurfaceOptions
from crow_cli.surfaces.run import RunOptions, run_prompt
from crow_cli.text import public_url
from crow_cli.wire.outgoing import Outgoing
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    CROW,
    assert_contract,
    authorless,
    chat,
    chunk,
    crow,
    crow_here,
    png,
    run_args,
    run_here,
    sse,
    text_sse,
    tool_delta,
    wait_for,
    write_config,
)

SLOW_TOOL = '''
import time
from crow_cli.tools import tool

@tool
def slow(seconds: float = 60) -> str:
    """Sleep for a while.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "slept"
'''


def tool_call_sse(call_id: str, name: str, arguments: str) -> str:
    return sse(chunk({"role": "assistant", "tool_calls": [tool_delta(0, call_id, name, arguments)]}),
               chunk({}, "tool_calls"))


# the store


def test_messages_round_trip_in_order(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m", base_url="http://h/v1", cwd="/w")
        msgs = [{"role": "user", "content": "Héllo\nthere, please summarise the whole repository for me in detail"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "", "content": "ok"}]
        assert [store.append(info.id, m) for m in msgs] == [0, 1, 2]
    with SessionStore(db) as store:  # a fresh connection sees exactly what was committed
        assert store.messages(info.id) == msgs
        got = store.get(info.id)
        assert got.title == "Héllo there, please summarise the whole repository for me i…"
        assert len(got.title) == 60
        assert (got.model, got.base_url, got.cwd, got.messages) == ("m", "http://h/v1", "/w", 3)


def test_ids_are_short_and_prefixes_resolve(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        ids = {store.create().id for _ in range(50)}
        assert len(ids) == 50
        assert all(len(i) == 6 and i.isalnum() and i == i.lower() for i in ids)  # "234567" is not islower()
        some = sorted(ids)[0]
        unique = next(p for n in range(1, 7) if len([i for i in ids if i.startswith(p := some[:n])]) == 1)
        assert store.get(unique.upper()).id == some
        with pytest.raises(SessionError, match="no session"):
            store.get("zzzzzzz")
        with pytest.raises(SessionError, match="no session"):
            store.get("%")  # LIKE wildcards are literal
        shared = next(c for c in "23456789abcdefghjkmnpqrstuvwxyz" if sum(i.startswith(c) for i in ids) > 1)
        with pytest.raises(SessionError, match="ambiguous"):
            store.get(shared)


def test_recent_latest_delete_truncate(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        assert store.latest() is None
        a, b = store.create(), store.create()
        store.append(b.id, {"role": "user", "content": "b"})
        store.append(a.id, {"role": "user", "content": "a"})
        store.append(a.id, {"role": "assistant", "content": "x"})
        assert [s.id for s in store.recent()] == [a.id, b.id]
        assert store.latest().id == a.id
        store.truncate(a.id, 1)
        assert store.messages(a.id) == [{"role": "user", "content": "a"}]
        assert store.append(a.id, {"role": "assistant", "content": "y"}) == 1
        assert store.delete(a.id[:5]).id == a.id
        assert [s.id for s in store.recent()] == [b.id]
        con = sqlite3.connect(tmp_path / "s.db")  # the file as another reader sees it
        assert con.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (a.id,)).fetchone() == (0,)
        con.close()


# provenance: a mutation check (w5) — `latest` ignoring the folder, the title given ignored, truncate keeping
# the file backups or dropping the checkpoint at the position kept, and set_model storing a URL's credentials
# each passed every test of this file
def test_latest_of_a_folder_and_a_title_given(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        here, there = store.create(cwd="/here"), store.create(cwd="/there")
        store.append(here.id, {"role": "user", "content": "the prompt\n\npiped input"}, title="the prompt")
        store.append(there.id, {"role": "user", "content": "later"})
        assert store.latest("/here").id == here.id and store.latest().id == there.id
        assert store.get(here.id).title == "the prompt"


def test_truncate_keeps_the_checkpoint_at_the_position_kept_and_drops_the_backups_from_it(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create().id
        for n in range(4):
            store.append(sid, {"role": "user", "content": f"m{n}"})
        for position in (1, 2):
            store.add_checkpoint(sid, position, [{"role": "user", "content": "summary"}], 10, 5)
        store.add_file_backup(sid, 0, "a.txt", b"a")
        store.add_file_backup(sid, 1, "b.txt", b"b")
        store.truncate(sid, 1)
        assert [c.position for c in store.checkpoints(sid)] == [1]
        assert store.file_backups(sid, 0) == [("a.txt", b"a", None)]


def test_set_model_never_stores_credentials_of_the_url(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create().id
        store.set_model(sid, "m2", "https://user:hunter2@llm.example/v1?key=hunter2")
        info = store.get(sid)
        assert info.model == "m2" and "hunter2" not in info.base_url and "llm.example" in info.base_url


def test_fork_copies_everything_of_a_session_and_the_original_stays_as_it_was(tmp_path: Path) -> None:
    from crow_cli.history import AUTHOR_KEY
    from crow_cli.images import Image, image_part

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m", base_url="http://h/v1", cwd="/w")
        call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
        for m in ({"role": "system", "content": "You are terse."},
                  {"role": "user", "content": [{"type": "text", "text": "look"}, image_part(Image(png))]},
                  {"role": "assistant", "content": None, "tool_calls": [call], AUTHOR_KEY: {"model": "m"}},
                  {"role": "tool", "tool_call_id": "c1", "content": "wrote it"},
                  {"role": "assistant", "content": "Done.", AUTHOR_KEY: {"model": "m"}}):
            store.append(info.id, m)
        store.add_checkpoint(info.id, 4, [{"role": "user", "content": "summary so far"}], 900, 90, "so far")
        store.add_file_backup(info.id, 2, "/w/a.txt", b"before", "hash-after")
        source = store.get(info.id)

        fork = store.fork(info.id[:4])  # a prefix, as every sessions command takes
        assert fork.id != info.id and fork.title == "look (fork)" and fork.messages == 5
        # a fork of a fork is titled "look (fork)", not "look (fork) (fork)"
        second = store.fork(fork.id)
        assert second.title == "look (fork)"
        store.delete(second.id)
        assert (fork.model, fork.base_url, fork.cwd) == ("m", "http://h/v1", "/w")
        assert fork.updated_at >= source.updated_at
        assert store.latest(cwd="/w").id == fork.id  # `crow run -c` there continues the fork
        assert store.messages(fork.id) == store.messages(info.id)
        assert store.checkpoints(fork.id) == store.checkpoints(info.id) != []
        assert store.file_backups(fork.id, 0) == store.file_backups(info.id, 0) != []
        raw = sqlite3.connect(db)  # each row exactly as stored: the image by reference, one file for both
        rows = [raw.execute("SELECT position, message FROM messages WHERE session_id = ? ORDER BY position",
                            (sid,)).fetchall() for sid in (info.id, fork.id)]
        raw.close()
        assert rows[0] == rows[1] and '"crow_image"' in rows[1][1][1]
        assert len(list(store.images_dir.iterdir())) == 1
        with SessionStore(db) as other, pytest.raises(SessionInUse):
            other.load(fork.id)  # held by the store that forked it, as a created one is

        store.append(fork.id, {"role": "user", "content": "another direction"})
        store.truncate(fork.id, 2)  # /retry or /undo in the fork
        store.add_checkpoint(fork.id, 2, [{"role": "user", "content": "x"}], 10, 5)
    with SessionStore(db) as store:
        assert store.get(info.id) == source
        assert len(store.messages(info.id)) == 5
        assert [c.position for c in store.checkpoints(info.id)] == [4]
        assert store.file_backups(info.id, 0) == [("/w/a.txt", b"before", "hash-after")]
        assert store.delete(fork.id).id == fork.id
        assert len(store.messages(info.id)) == 5 and len(list(store.images_dir.iterdir())) == 1
        with pytest.raises(SessionError, match="no session 'zzzz'"):
            store.fork("zzzz")
        assert [s.id for s in store.recent()] == [info.id]  # a refused fork leaves nothing behind


def test_migrations_are_recorded_once_and_wal_is_on(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        assert store.migrations() == ["m001_initial", "m002_checkpoints", "m003_file_backups", "m004_file_written",
                                      "m005_subagent_runs", "m006_session_modes",
                                      "m007_workspace_snapshots"]
    with SessionStore(db) as store:  # reopening applies nothing twice
        assert store.migrations() == ["m001_initial", "m002_checkpoints", "m003_file_backups", "m004_file_written",
                                      "m005_subagent_runs", "m006_session_modes",
                                      "m007_workspace_snapshots"]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert con.execute("SELECT COUNT(*) FROM _migrations").fetchone() == (7,)


def test_a_session_keeps_the_modes_it_ran_under_and_an_older_one_has_none(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        old = store.create(model="m")
        new = store.create(model="m", approval="read-only", sandbox="read-only")
        assert (store.get(old.id).approval, store.get(old.id).sandbox) == (None, None)
        assert (store.get(new.id).approval, store.get(new.id).sandbox) == ("read-only", "read-only")
        store.set_modes(old.id, "auto-edit", "workspace-write")
        assert (store.get(old.id).approval, store.get(old.id).sandbox) == ("auto-edit", "workspace-write")
        fork = store.fork(new.id)
        assert (fork.approval, fork.sandbox) == ("read-only", "read-only")  # a fork keeps them too


def test_load_repairs_a_turn_cut_mid_way_and_stores_the_repair(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create()
        store.append(info.id, {"role": "user", "content": "go"})
        store.append(info.id, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]})
        store.append(info.id, {"role": "tool", "tool_call_id": "a", "content": "done"})
        history = store.load(info.id)
        assert history[3] == {"role": "tool", "tool_call_id": "b",
                              "content": "Error: the tool call was interrupted; no result.",
                              "crow_outcome": "cancelled"}
        assert store.messages(info.id) == history
        assert store.load(info.id) == history  # already valid: nothing more added


# A store that is not a database (random bytes in sessions.db) is one line saying what to do
def test_a_store_that_is_not_a_database_says_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "sessions.db"
    bad.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(SessionStoreDamaged) as caught:
        SessionStore(bad)
    message = str(caught.value)
    assert caught.value.path == bad and caught.value.exit_code == 1 and "\n" not in message
    assert message == (f"the session store {str(bad)!r} is damaged (file is not a database): move it aside to start "
                       f"a new one (mv {str(bad)!r} {str(bad) + '.damaged'!r}), or use --no-session")


def _damage_the_last_pages(path: Path, pages: int = 4) -> None:
    page = 4096
    data = bytearray(path.read_bytes())
    data[-pages * page:] = b"\xff" * (pages * page)
    path.write_bytes(bytes(data))


# A store damaged past its first pages opens, then fails on a read
def test_a_damaged_store_fails_reads_with_the_same_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with SessionStore(path) as store:
        info = store.create(model="m")
        for i in range(400):
            store.append(info.id, {"role": "user", "content": f"message {i} " + "x" * 200})
    _damage_the_last_pages(path)
    with pytest.raises(SessionStoreDamaged, match="database disk image is malformed"), SessionStore(path) as store:
        store.messages(info.id)


# `crow sessions` reports a damaged store like chat and run do: one line, exit 1
@pytest.mark.parametrize("args", [["list"], ["show", "abc"], ["export", "abc", "--format", "json"]])
def test_crow_sessions_reports_a_damaged_store_in_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = default_db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(256)) * 40)
    code = crow_here("sessions", *args)
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines() == [f"crow: error: the session store {str(path)!r} is damaged (file is not a "
                                        f"database): move it aside to start a new one (mv {str(path)!r} "
                                        f"{str(path) + '.damaged'!r}), or use --no-session"]


# A negative limit is refused, not taken as a listing of nothing
def test_sessions_list_refuses_a_negative_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert crow_here("sessions", "list", "--limit", "-1") == 2
    assert capsys.readouterr().err.strip() == "crow: error: --limit must be 0 (all) or more (got -1)"


# crow run records sessions


async def test_run_records_and_continues_and_never_stores_the_key(_isolated_home: Path, tmp_path: Path) -> None:
    secret = {"api_key": "sk-VERY-SECRET-0123456789"}
    ran = await run_here([{"sse": text_stream("First answer.")}], "first question", cwd=tmp_path,
                         flags={**secret, "system": "be brief"}, system="be brief")
    assert ran.code == 0, ran.stderr
    ran = await run_here([{"sse": text_stream("Second answer.")}], "second question", cwd=tmp_path, flags=secret,
                         continue_last=True)
    assert ran.code == 0, ran.stderr
    with SessionStore() as store:
        first = store.latest()
    third = await run_here([{"sse": text_stream("Third answer.")}], "third question", cwd=tmp_path, flags=secret,
                           session_id=first.id[:4])
    assert third.code == 0, third.stderr
    ran = await run_here([{"sse": text_stream("Unrecorded.")}], "not kept", cwd=tmp_path, flags=secret, session=False)
    assert ran.code == 0, ran.stderr
    sent = third.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert sent[-1]["content"] == "third question"
    with SessionStore() as store:
        assert [s.id for s in store.recent()] == [first.id]
        assert authorless(store.messages(first.id)) == [*sent, {"role": "assistant", "content": "Third answer."}]
        assert store.get(first.id).title == "first question"
    assert default_db_path().is_relative_to(_isolated_home)
    for path in _isolated_home.rglob("*"):
        if path.is_file():
            assert secret["api_key"].encode() not in path.read_bytes(), path


def test_run_session_errors(_isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ran = asyncio.run(run_here([], "hi", cwd=tmp_path, session_id="nosuch"))  # `crow run --session nosuch`
    assert (ran.code, ran.requests) == (1, [])
    assert ran.stderr.strip() == "crow: error: no session 'nosuch' (crow sessions list shows them)"
    with ReplayServer([]) as server:  # crow's typer app in this process (`crow_here`): the flags conflict
        assert crow_here(*run_args(server, "--no-session", "-c", "hi")) == 2
        assert "cannot be combined" in capsys.readouterr().err
        assert server.requests == []


async def test_crash_mid_turn_loses_only_the_turn_in_flight_and_resumes(_isolated_home: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "slow.py").write_text(SLOW_TOOL)
    script = [{"sse": tool_call_sse("call_1", "slow", '{"seconds": 60}')}]
    with ReplayServer(script) as server:
        proc = subprocess.Popen([CROW, *run_args(server, "--tools-dir", str(tools), "please wait")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=tmp_path)
        try:
            def tool_started() -> bool:
                if not default_db_path().exists():
                    return False
                with SessionStore() as store:
                    latest = store.latest()
                    return latest is not None and len(store.messages(latest.id)) == 2
            wait_for(tool_started)
            proc.kill()  # a crash: no handler runs
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
    with SessionStore() as store:
        info = store.latest()
        stored = store.messages(info.id)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == "call_1"

    result = await run_here([{"sse": text_stream("Sorry, that was cut off.")}], "are you there?", cwd=tmp_path,
                            continue_last=True)
    assert result.code == 0, result.stderr
    sent = result.requests[0]["messages"]
    assert sent == [*authorless(stored), {"role": "tool", "tool_call_id": "call_1",
                              "content": "Error: the tool call was interrupted; no result."},
                    {"role": "user", "content": "are you there?"}]


def test_crash_while_streaming_keeps_the_finished_turns(_isolated_home: Path) -> None:
    slow_text = text_stream("This answer streams very slowly and is never finished by the server at all.")
    script = [{"sse": tool_call_sse("call_1", "list_directory", "{}")}, {"sse": slow_text, "delay_ms": 600_000}]
    with ReplayServer(script) as server:
        proc = subprocess.Popen([CROW, *run_args(server, "look around")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            wait_for(lambda: len(server.requests) == 2)
            proc.kill()
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
    with SessionStore() as store:
        stored = store.messages(store.latest().id)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[2]["tool_call_id"] == "call_1"


def test_sigint_during_a_tool_stores_cancelled_results(_isolated_home: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "slow.py").write_text(SLOW_TOOL.replace("def slow", "async def slow").replace(
        "time.sleep(seconds)", "import asyncio; await asyncio.sleep(seconds)"))
    script = [{"sse": tool_call_sse("call_9", "slow", '{"seconds": 60}')}]
    with ReplayServer(script) as server:
        proc = subprocess.Popen([CROW, *run_args(server, "--tools-dir", str(tools), "wait")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            wait_for(lambda: proc.poll() is not None or "slow" in _peek_latest_roles())
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)  # bounds a hang
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    with SessionStore() as store:
        stored = store.messages(store.latest().id)
    assert stored[-1] == {"role": "tool", "tool_call_id": "call_9",
                          "content": "Error: the tool call was cancelled by the user; no result.",
                          "crow_outcome": "cancelled"}


def _peek_latest_roles() -> str:
    if not default_db_path().exists():
        return ""
    with SessionStore() as store:
        latest = store.latest()
        return json.dumps(store.messages(latest.id)) if latest else ""


# crow sessions


# The first and last run as `crow` processes (what cli.main makes of a command that ends, or fails); the rest
# as crow's typer app in this process (`crow_here`)
def test_sessions_commands(_isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = crow("sessions", "list")
    assert result.returncode == 0 and "no sessions yet" in result.stderr
    with SessionStore() as store:
        info = store.create(model="test-model")
        store.append(info.id, {"role": "user", "content": "what is ZEBRA?"})
        store.append(info.id, {"role": "assistant", "content": "A **striped** animal."})

    def here(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = crow_here("sessions", *args)
        return code, *capsys.readouterr()

    code, listed, _ = here("list")
    assert code == 0
    header, row = listed.splitlines()
    assert header.split() == ["ID", "UPDATED", "MESSAGES", "MODEL", "FOLDER", "TITLE"]
    assert row.startswith(info.id) and "2 messages  test-model  -       what is ZEBRA?" in row
    assert "## You\n\nwhat is ZEBRA?" in here("show", info.id[:3])[1]
    as_jsonl = here("export", info.id, "--format", "jsonl")[1]
    assert [json.loads(x)["role"] for x in as_jsonl.splitlines()] == ["user", "assistant"]
    out = tmp_path / "s.json"
    assert here("export", info.id, "-f", "json", "-o", str(out))[0] == 0
    assert json.loads(out.read_text())["session"]["id"] == info.id
    code, _, err = here("export", info.id, "-o", str(out))  # a file of the person's is never overwritten unasked
    assert code == 2 and err == f"crow: error: {str(out)!r} exists; crow does not overwrite it (--force replaces it)\n"
    assert here("export", info.id, "-o", str(out), "--force")[0] == 0 and out.read_text().startswith("# what is")
    code, _, err = here("export", info.id, "--format", "xml")
    assert code == 2 and err.startswith("crow: error: unknown format 'xml'")
    code, _, err = here("delete", info.id)
    assert code == 0 and f"deleted {info.id}" in err
    missing = crow("sessions", "show", info.id)
    assert missing.returncode == 1 and missing.stderr.startswith("crow: error: no session")


def test_sessions_list_imports_neither_openai_nor_rich(_isolated_home: Path) -> None:
    code = ("import sys\nsys.argv = ['crow', 'sessions', 'list']\nfrom crow_cli.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('openai', 'rich', 'prompt_toolkit', 'httpx') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ})
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


def test_chat_resume_of_an_unknown_session_is_one_line(_isolated_home: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayServer([]) as server:
        assert crow_here("chat", "--resume", "nosuch", "--base-url", server.base_url, "--model", "m") == 1
        assert capsys.readouterr().err == "crow: error: no session 'nosuch' (crow sessions list shows them)\n"
        assert server.requests == []


async def test_run_started_names_the_session(_isolated_home: Path, tmp_path: Path) -> None:
    first = await run_here([{"sse": text_stream("One.")}], "hello", cwd=tmp_path, json=True)
    second = await run_here([{"sse": text_stream("Two.")}], "hello", cwd=tmp_path, json=True, session=False)
    started = first.events()[0]
    with SessionStore() as store:
        assert started["session_id"] == store.latest().id
    assert second.events()[0]["session_id"] is None


def test_stores_opened_at_once_on_a_new_file_do_not_collide(tmp_path: Path) -> None:
    """Stores that create the same new file together (`crow run` and a reader) both open: none dies on 'table
    sessions already exists'. Threads (each its own connection) released by one barrier, many rounds."""
    import threading

    errors: list[BaseException] = []
    for round_no in range(40):
        db = tmp_path / f"race{round_no}" / "sessions.db"
        barrier = threading.Barrier(4)

        def open_store(path: Path = db, gate: threading.Barrier = barrier) -> None:
            gate.wait()
            try:
                SessionStore(path).close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_store) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []


# one writer per session

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


def _gated_tools(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir(exist_ok=True)
    (folder / "gated.py").write_text(GATED_TOOL)
    return folder


class _Holder:
    """A `crow run` whose tool waits on a flag file: it holds its session until `release()`."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.flag = tmp_path / "flag"
        script = [{"sse": tool_call_sse("call_A", "gated", json.dumps({"flag": str(self.flag)}))},
                  {"sse": text_stream("A done.")}]
        self.server = ReplayServer(script).__enter__()
        self.proc = subprocess.Popen([CROW, *run_args(self.server, "--tools-dir", str(_gated_tools(tmp_path)), *args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, cwd=tmp_path)
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


# A session in use by another crow is refused to writers, readers still see it, and its history stays valid.
# The holder is a `crow run` process; the crow refused is this process (`crow run`, `crow chat`, `crow sessions`
# as what they run): the lock holds across processes
async def test_a_session_in_use_is_refused_and_its_history_stays_valid(tmp_path: Path, _isolated_home: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    holder = _Holder(tmp_path, "A")
    try:
        sid, pid = holder.session_id, holder.proc.pid
        in_use = f"crow: error: session {sid} is in use by another crow (pid {pid})\n"
        for options in ({"session_id": sid}, {"continue_last": True}):
            second = await run_here([], "B", cwd=tmp_path, **options)
            assert (second.code, second.stderr, second.requests) == (1, in_use, [])
        with create_pipe_input() as pipe, pytest.raises(SessionInUse) as refused:  # `crow chat --resume ID`
            await ChatApp(Settings(model="m", api_key="k"), ChatOptions(resume=sid), pt_input=pipe,
                          pt_output=DummyOutput()).run()
        assert f"crow: error: {refused.value}\n" == in_use and refused.value.exit_code == 1
        with SessionStore() as own:  # `/resume ID` in a chat
            slash, server, _ = await chat([], f"/resume {sid}\r/exit\r", own)
        assert in_use.strip() in slash and server.requests == []
        for args in (["list"], ["show", sid], ["export", sid, "-f", "json"]):  # readers are never refused
            assert crow_here("sessions", *args) == 0
        capsys.readouterr()
        assert (crow_here("sessions", "delete", sid), capsys.readouterr().err) == (1, in_use)
        code, err = holder.release()
        assert code == 0, err
    finally:
        holder.close()
    assert not any(default_db_path().with_name("sessions.db.locks").iterdir())  # its lock file is gone too
    with SessionStore() as store:
        stored = store.messages(sid)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert_contract(stored)
    again = await run_here([{"sse": text_stream("C")}], "C", cwd=tmp_path, session_id=sid)  # free once A has ended
    assert again.code == 0, again.stderr


# The lock of a killed crow does not block the session
async def test_the_lock_of_a_killed_crow_does_not_block(tmp_path: Path, _isolated_home: Path) -> None:
    holder = _Holder(tmp_path, "A")
    try:
        sid = holder.session_id
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait(10)
    finally:
        holder.close()
    result = await run_here([{"sse": text_stream("resumed")}], "again", cwd=tmp_path, session_id=sid)
    assert result.code == 0, result.stderr
    with SessionStore() as store:
        stored = store.messages(sid)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user", "assistant"]
    assert_contract(stored)


# The store grants one writer per session
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


# `run_prompt` (what `crow run` runs) frees its session's lock and closes its store when it returns, however it
# ended: a caller in the same process (an editor through ACP, the tests) can continue the session it just wrote
async def test_a_run_leaves_its_session_free_however_it_ends(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    first = await run_here([{"sse": text_stream("one")}], "first", cwd=tmp_path, config=config)
    assert first.code == 0, first.stderr
    failed = await run_here([{"status": 500, "body": '{"error": {"message": "boom"}}'}], "second", cwd=tmp_path,
                            config=config, continue_last=True)
    assert (failed.code, len(failed.requests)) == (1, 1), failed.stderr
    refused = await run_here([], "third", cwd=tmp_path, config=config, continue_last=True, system="other")
    assert refused.code == 2 and "--system cannot change" in refused.stderr, refused.stderr
    locks = default_db_path().with_name("sessions.db.locks")
    with SessionStore() as store:
        sid = store.latest().id
        assert store.load(sid)[-1] == {"role": "user", "content": "second"}  # not refused: nobody holds it
    with contextlib.closing(sqlite3.connect(default_db_path())) as db, db:
        db.execute("UPDATE messages SET message = ? WHERE session_id = ? AND position = 1",
                   (DAMAGED_ROWS["no role"], sid))
    damaged = await run_here([], "fourth", cwd=tmp_path, config=config, session_id=sid)
    assert damaged.code == 1 and "damaged" in damaged.stderr, damaged.stderr
    assert not any(locks.iterdir())  # every lock file is gone with its lock
    assert _open_files_under(default_db_path().parent) == []  # and every store closed


def _open_files_under(folder: Path) -> list[str]:
    """The files under `folder` this process has open."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # the listing's own descriptor is closed by now
            target = os.readlink(fd)
            if target.startswith(f"{folder}/"):
                found.append(target)
    return found


# stored text cannot drive the terminal

HOSTILE = "look\x1b]0;HACKED\x07\x1b[2J here\x9b31m \x1b]52;c;aGk=\x07end"


def _on_pty(*args: str, here: bool = True) -> tuple[int, str]:
    """`crow ARGS` with stdout and stderr a pseudo-terminal: (exit code, what it showed). `here`: crow's typer
    app in this process (`crow_here`), its sys.stdout and sys.stderr the terminal; else a `crow` process."""
    master, slave = pty.openpty()
    shown = bytearray()

    def read() -> None:  # while crow writes: a full terminal would block it
        with contextlib.suppress(OSError):  # EIO: every writer closed the terminal
            while data := os.read(master, 65536):
                shown.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if here:
        with open(slave, "w", encoding="utf-8") as term, contextlib.redirect_stdout(term), \
                contextlib.redirect_stderr(term):
            code = crow_here(*args)
    else:
        proc = subprocess.Popen([CROW, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)
        code = proc.wait(60)
    reader.join(60)
    os.close(master)
    return code, shown.decode("utf-8", "replace")


def _controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 32 and c not in "\r\n\t") or 0x7F <= ord(c) <= 0x9F}


# The sessions commands neutralise control characters on a terminal
def test_sessions_commands_neutralise_control_characters_on_a_terminal(_isolated_home: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
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
    code, out = _on_pty("sessions", "export", info.id, "-f", "json", here=False)  # a crow process on a terminal
    assert code == 0 and not _controls(out), _controls(out)
    assert json.loads(out)["messages"] == messages  # the data stays exact
    capsys.readouterr()
    assert crow_here("sessions", "show", info.id) == 0
    assert HOSTILE in capsys.readouterr().out  # a pipe or file gets the text as stored
    code, out = _on_pty("sessions", "delete", info.id)
    assert code == 0 and "deleted" in out and not _controls(out), out


# private files and secrets


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# Session files are private; existing folders keep their mode
async def test_session_files_are_private_and_existing_folders_keep_their_mode(_isolated_home: Path,
                                                                             tmp_path: Path) -> None:
    share = _isolated_home / ".local" / "share"
    share.mkdir(parents=True)
    share.chmod(0o755)
    assert (await run_here([{"sse": text_stream("ok")}], "hello", cwd=tmp_path)).code == 0
    db = default_db_path()
    assert _mode(share) == 0o755  # it existed: left alone
    assert _mode(db.parent) == 0o700
    with SessionStore() as store:  # while open, the WAL files exist
        store.create()
        for path in db.parent.iterdir():
            if path.is_file():
                assert _mode(path) == 0o600, path


# An old world-readable store is made private
def test_an_old_world_readable_store_is_made_private(_isolated_home: Path) -> None:
    db = default_db_path()
    SessionStore().close()
    db.chmod(0o644)
    SessionStore().close()
    assert _mode(db) == 0o600


# Credentials in the base URL are never stored
async def test_credentials_in_the_base_url_are_never_stored(_isolated_home: Path, tmp_path: Path) -> None:
    assert public_url("http://user:sk-URLSECRET2@127.0.0.1:8080/v1?key=sk-Q") == "http://127.0.0.1:8080/v1"
    with ReplayServer([{"sse": text_stream("ok")}]) as srv, contextlib.chdir(tmp_path):  # `crow run` in process
        url = srv.base_url.replace("http://", "http://user:sk-URLSECRET2@")
        err = io.StringIO()
        options = RunOptions("hi", surface=SurfaceOptions(no_tools=True))
        code = await run_prompt(load_settings({"base_url": url}), options, io.StringIO(), err)
    assert code == 0 and len(srv.requests) == 1, err.getvalue()
    for path in _isolated_home.rglob("*"):
        if path.is_file():
            assert b"sk-URLSECRET2" not in path.read_bytes(), path


# The list has a header row and says "1 message", not "1 msgs"
def test_sessions_list_has_a_header_and_says_1_message(_isolated_home: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with SessionStore(default_db_path()) as store:
        store.append(store.create(model="m").id, {"role": "user", "content": "hi"})
    assert crow_here("sessions", "list") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.startswith("ID ") and "MESSAGES" in header
    assert " 1 message " in row and "msgs" not in row


# `crow sessions` says when older sessions are not shown
def test_sessions_list_says_when_older_sessions_are_not_shown(_isolated_home: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with SessionStore(default_db_path()) as store:
        for n in range(3):
            store.append(store.create(model="m").id, {"role": "user", "content": f"hi {n}"})
    assert crow_here("sessions", "list", "--limit", "2") == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 + 2 and "--limit 0" in err  # the header row and two sessions
    assert crow_here("sessions", "list", "--limit", "0") == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 + 3 and err == ""


# A stored row that is JSON but not a message is a one-line error in `sessions show/export`, `run --session` and
# ACP session/load: never an internal error, never sent to the server as it is
DAMAGED_ROWS = {
    "a string": '"hello"',
    "tool_calls not a list": '{"role": "assistant", "content": null, "tool_calls": {"id": "c"}}',
    "content a number": '{"role": "user", "content": 5}',
    "no role": '{"content": "hi"}',
    "object arguments": '{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", '
                        '"function": {"name": "f", "arguments": {"a": 1}}}]}',
}


def _store_with_damaged_row(path: Path, row: str) -> str:
    with SessionStore(path) as store:
        info = store.create(model="m", cwd=str(path.parent))
        store.append(info.id, {"role": "user", "content": "first"})
        store.append(info.id, {"role": "assistant", "content": "fine"})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE messages SET message = ? WHERE session_id = ? AND position = 1", (row, info.id))
    return info.id


@pytest.mark.parametrize("row", DAMAGED_ROWS.values(), ids=DAMAGED_ROWS.keys())
def test_a_damaged_stored_message_is_reported_in_one_line(tmp_path: Path, row: str) -> None:
    from crow_cli.sessions import SessionDamaged

    sid = _store_with_damaged_row(tmp_path / "s.db", row)
    with SessionStore(tmp_path / "s.db") as store, pytest.raises(SessionDamaged) as caught:
        store.messages(sid)
    message = str(caught.value)
    assert "\n" not in message and sid in message and "message 2" in message, message
    assert caught.value.exit_code == 1


# A damaged session that fails to load is not left locked: after a chat or an ACP connection tried to resume it,
# another crow is told it is damaged, not "in use"
def test_a_damaged_session_that_fails_to_load_is_not_left_locked(tmp_path: Path) -> None:
    from crow_cli.sessions import SessionDamaged

    sid = _store_with_damaged_row(tmp_path / "s.db", DAMAGED_ROWS["no role"])
    with SessionStore(tmp_path / "s.db") as tried, SessionStore(tmp_path / "s.db") as other:
        with pytest.raises(SessionDamaged):
            tried.load(sid)
        with pytest.raises(SessionDamaged):  # damaged, not "in use": nobody holds it
            other.load(sid)
        tried.lock(sid)
        with pytest.raises(SessionDamaged):
            tried.load(sid)  # a session its store held already stays held
        with pytest.raises(SessionError, match="in use"):
            other.lock(sid)


@pytest.mark.parametrize("command", ["show", "export", "run"])
async def test_commands_on_a_damaged_session_fail_in_one_line_and_send_nothing(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = _store_with_damaged_row(default_db_path(), DAMAGED_ROWS["object arguments"])
    if command == "run":  # `crow run --session ID`, in this process
        ran = await run_here([{"sse": text_sse("never")}], "go on", cwd=tmp_path, session_id=sid)
        code, err, sent = ran.code, ran.stderr, ran.requests
    else:
        code, err, sent = crow_here("sessions", command, sid), capsys.readouterr().err, []
    assert code == 1, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("crow: error: session ") and "damaged" in lines[0], lines
    assert "internal error" not in err and sent == []


# `crow sessions delete` by a prefix asks, or needs --yes where there is no terminal to ask on
def test_delete_by_a_prefix_asks_or_needs_yes(_isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SessionStore() as store:
        info = store.create(model="m")
    capsys.readouterr()
    assert crow_here("sessions", "delete", info.id[:2]) == 2  # no terminal to ask on
    err = capsys.readouterr().err
    assert err == f"crow: error: '{info.id[:2]}' is a prefix of session {info.id}: give the whole id, or --yes to " \
                  "delete it\n"
    with SessionStore() as store:
        assert store.get(info.id).id == info.id
    assert crow_here("sessions", "delete", info.id[:2], "--yes") == 0
    with SessionStore() as store, pytest.raises(SessionError):
        store.get(info.id)
    # the whole id, in capitals or with a space after it, is no prefix: deleted without asking
    with SessionStore() as store:
        other = store.create(model="m")
    assert crow_here("sessions", "delete", f"{other.id.upper()} ") == 0


# A stored title's bidi override is escaped in `crow sessions list` on a terminal, so it cannot reorder its line
def test_a_titles_bidi_override_is_escaped_in_the_list(_isolated_home: Path) -> None:
    with SessionStore() as store:
        info = store.create(model="m")
        store.append(info.id, {"role": "user", "content": "fix \u202egnp.exe"})
    code, out = _on_pty("sessions", "list")
    assert code == 0 and "fix \\u202egnp.exe" in out and "\u202e" not in out, out

BLOCKS = [{"type": "reasoning.text", "text": "Need the weather. ✓", "index": 0, "format": "anthropic-claude-v1",
           "signature": "EqQBCkYIBxgCKkB+/sig=="},
          {"type": "reasoning.encrypted", "data": "gAAAAB-opaque", "index": 0}]
SIG = {"google": {"thought_signature": "CiQB0e2K+/=="}}


def test_reasoning_blocks_signatures_and_extensions_survive_the_store_exactly(tmp_path: Path) -> None:
    turn = AssistantTurn(content="<think>hm</think>", tool_calls=[ToolCall("c1", "f", "{}", extra=SIG)],
                         fields={"reasoning": "Need the weather.", "reasoning_details": BLOCKS,
                                 "x_vendor": {"n": 1}})
    final = AssistantTurn(content="Sunny.", fields={"reasoning_content": "done", "extra_content": SIG})
    history = [user_message("weather?"), turn.to_message(), tool_message("c1", "sunny"), final.to_message()]
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m", base_url="http://h/v1", cwd="/w")
        for message in history:
            store.append(info.id, message)
    with SessionStore(tmp_path / "s.db") as store:
        loaded = store.load(info.id)
    assert json.dumps(loaded, ensure_ascii=False) == json.dumps(history, ensure_ascii=False)
    resumed = [*loaded, user_message("tomorrow?")]
    assert json.dumps(Outgoing("auto").messages(resumed)) == json.dumps([*history, user_message("tomorrow?")])

PNG = png() + bytes(range(141))  # 208 bytes: a whole PNG (an attachment is checked) and bytes after its end
URL = Image(PNG).data_url()


def prompt(text: str = "what is this?") -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}, image_part(Image(PNG))]}


def rows(db: Path) -> list[str]:
    with sqlite3.connect(db) as raw:
        return [r[0] for r in raw.execute("SELECT message FROM messages ORDER BY position")]


def test_an_image_is_stored_once_by_reference_and_loads_back(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        store.append(info.id, {"role": "assistant", "content": "a test pattern"})
        store.append(info.id, prompt("and again?"))  # the same image: the same file
        other = store.create(model="m")
        store.append(other.id, prompt())
    stored = rows(db)
    assert all(base64.b64encode(PNG).decode()[:40] not in r for r in stored)  # no row holds the image
    files = list((tmp_path / "images").iterdir())
    assert [f.name for f in files] == [f"{Image(PNG).sha256}.png"] and files[0].read_bytes() == PNG
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"
    part = json.loads(stored[0])["content"][1]
    assert part["image_url"]["url"] == IMAGE_REF + Image(PNG).sha256
    assert part["crow_image"] == {"file": files[0].name, "mime_type": "image/png", "bytes": len(PNG)}
    with SessionStore(db) as store:
        loaded = store.load(info.id)
    assert loaded[0] == prompt() and loaded[2] == prompt("and again?")  # as sent: a data URL part


def test_an_inline_image_of_an_older_crow_still_loads(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (info.id, json.dumps(prompt())))
    with SessionStore(db) as store:
        assert store.messages(info.id) == [prompt()]


def test_a_missing_image_file_becomes_a_note_and_the_session_loads(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
    for file in (tmp_path / "images").iterdir():
        file.unlink()
    with SessionStore(db) as store:
        (message,) = store.load(info.id)
    assert message["content"][1] == {"type": "text", "text": f"[image {Image(PNG).sha256}.png: missing from the "
                                                               "session store's images folder]"}


def test_exports_carry_the_reference_and_the_transcript_names_the_image(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        messages = store.messages(info.id)
        info = store.get(info.id)
    for fmt in ("json", "jsonl"):
        text = export_session(info, messages, fmt)
        assert URL not in text and IMAGE_REF + Image(PNG).sha256 in text
    md = export_session(info, messages, "md")
    assert f"## You\n\nwhat is this?\n[image: {Image(PNG).sha256}.png, 208 B]" in md


def test_a_checkpoint_view_stores_its_images_by_reference_too(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.add_checkpoint(info.id, 1, [prompt()], 100, 50)
        (checkpoint,) = store.checkpoints(info.id)
    assert checkpoint.view == [prompt()]
    with sqlite3.connect(db) as raw:
        (view,) = raw.execute("SELECT view FROM checkpoints").fetchone()
    assert URL not in view and IMAGE_REF in view


def named(text: str = "what is this?", name: str = "shot.png", data: bytes = PNG) -> dict:
    """A prompt with an image as `attachments.user_content` builds it: named by its file."""
    return {"role": "user", "content": [{"type": "text", "text": text}, image_part(Image(data), name)]}


def image_files(folder: Path) -> set[str]:
    images = folder / "images"
    return {f.name for f in images.iterdir()} if images.exists() else set()


def test_an_image_s_name_is_kept_in_its_reference_and_comes_back_with_it(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
        store.append(info.id, named())
        info = store.get(info.id)
        (loaded,) = store.messages(info.id)
        md = export_session(info, [loaded], "md")
        exported = json.loads(export_session(info, [loaded], "json"))
    ref = json.loads(rows(db)[0])["content"][1]["crow_image"]
    assert ref == {"file": f"{Image(PNG).sha256}.png", "mime_type": "image/png", "bytes": len(PNG), "name": "shot.png"}
    assert loaded == named()  # a resumed chat and an editor's replay name it too
    assert describe_part(loaded["content"][1]) == "[image: shot.png, 208 B]"
    assert "## You\n\nwhat is this?\n[image: shot.png, 208 B]" in md
    assert exported["messages"][0]["content"][1]["crow_image"]["name"] == "shot.png"


def test_an_image_stored_without_a_name_is_shown_as_before(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, prompt())
        (loaded,) = store.messages(info.id)
    assert loaded == prompt() and describe_part(loaded["content"][1]) == "[image: image/png, 208 B]"


# `crow run -f` through `crow sessions export`: the file's name reaches the transcript, never the server
def test_an_attached_file_s_name_reaches_the_export_and_not_the_server(
        _isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "screenshot.png").write_bytes(PNG)
    with ReplayServer([{"sse": text_sse("A test pattern.")}]) as server:
        assert crow_here(*run_args(server, "--no-tools", "-f", "screenshot.png", "what is this?")) == 0
    assert server.requests[0]["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": URL}}
    with SessionStore() as store:
        (info,) = store.recent()
    capsys.readouterr()
    assert crow_here("sessions", "export", info.id, "-f", "md") == 0
    assert "what is this?\n\n[image: screenshot.png, 208 B]\n" in capsys.readouterr().out  # once, where it is named
    assert crow_here("sessions", "export", info.id, "-f", "jsonl") == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["content"][1]["crow_image"]["name"] == "screenshot.png"


def test_deleting_a_session_removes_its_image_files_but_not_one_another_session_holds(tmp_path: Path) -> None:
    other_png = PNG + b"other"
    with SessionStore(tmp_path / "s.db") as store:
        one = store.create(model="m")
        store.append(one.id, named(name="shared.png"))
        store.append(one.id, named(name="own.png", data=other_png))
        store.add_checkpoint(one.id, 2, [named(name="own.png", data=other_png)], 100, 50)
        two = store.create(model="m")
        store.append(two.id, named(name="shared.png"))
        shared, own = f"{Image(PNG).sha256}.png", f"{Image(other_png).sha256}.png"
        assert image_files(tmp_path) == {shared, own}
        store.delete(one.id)
        assert image_files(tmp_path) == {shared}  # the other session's image stays, and still loads
        assert store.messages(two.id) == [named(name="shared.png")]
        store.delete(two.id)
    assert image_files(tmp_path) == set()


def with_image_and_empty(db: Path) -> tuple[str, str]:
    """The ids of two sessions in the store `db` (closed again): one holding `named()`, one empty."""
    with SessionStore(db) as store:
        holding = store.create(model="m")
        store.append(holding.id, named())
        return holding.id, store.create(model="m").id


def test_a_session_s_copied_rows_count_as_references(tmp_path: Path) -> None:
    # a fork or copy of a session may insert the stored rows as they are, never through `append`: the count is
    # over the rows, so the copy keeps the image alive
    db = tmp_path / "s.db"
    original, copy = with_image_and_empty(db)
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages SELECT ?, position, message FROM messages WHERE session_id = ?",
                    (copy, original))
    with SessionStore(db) as store:
        store.delete(original)
        assert store.messages(copy) == [named()]
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}


def test_a_checkpoint_s_reference_keeps_an_image_alive(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        one = store.create(model="m")
        store.append(one.id, named())
        two = store.create(model="m")
        store.add_checkpoint(two.id, 0, [named()], 100, 50)
        store.delete(one.id)
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}
        assert store.checkpoints(two.id)[0].view == [named()]


def test_dropping_the_end_of_a_session_removes_the_images_only_it_held(tmp_path: Path) -> None:
    other_png = PNG + b"later"
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        store.append(info.id, named())
        store.append(info.id, {"role": "assistant", "content": "a test pattern"})
        store.append(info.id, named("and these?", "later.png", other_png))
        store.append(info.id, named("and again?"))  # the first image once more, after the cut: still held
        store.truncate(info.id, 2)  # /retry, /undo
        assert image_files(tmp_path) == {f"{Image(PNG).sha256}.png"}


def test_a_damaged_row_does_not_stop_a_delete(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    holding, broken = with_image_and_empty(db)
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (broken, '{"content": [{"crow_image": '))
    with SessionStore(db) as store:
        store.delete(holding)
        store.delete(broken)
    assert image_files(tmp_path) == set()


def test_only_files_the_store_named_are_ever_removed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        info = store.create(model="m")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "notes.txt").write_text("mine")
    forged = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_REF + "0" * 64},
                                           "crow_image": {"file": "notes.txt", "mime_type": "image/png"}},
                                          {"type": "image_url", "image_url": {"url": IMAGE_REF + "0" * 64},
                                           "crow_image": {"file": "../s.db", "mime_type": "image/png"}}]}
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO messages VALUES (?, 0, ?)", (info.id, json.dumps(forged)))
    with SessionStore(db) as store:
        store.delete(info.id)
    assert (tmp_path / "images" / "notes.txt").read_text() == "mine" and db.exists()


def test_a_subagents_transcript_is_kept_linked_and_goes_with_its_session(tmp_path: Path) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    child = [{"role": "user", "content": "Look."}, {"role": "user", "content": [{"type": "text", "text": "a"}, image]},
             {"role": "assistant", "content": "Seen."}]
    with SessionStore(tmp_path / "s.db") as store:
        info = store.create(model="m")
        for text in ("one", "two", "three"):
            store.append(info.id, {"role": "user", "content": text})
        store.add_subagent_run(info.id, 1, "call_1", 0, "explorer", child)
        store.add_subagent_run(info.id, 3, "call_2", 1, "general", child[:1])
        (first, second) = store.subagent_runs(info.id)
        assert (first.position, first.call_id, first.call_index, first.agent) == (1, "call_1", 0, "explorer")
        assert first.messages[1]["content"][1] == {"type": "text", "text": "[image]"}  # no image file to keep
        store.truncate(info.id, 2)  # /retry: what came after position 2 goes, the runs of it too
        assert [r.call_id for r in store.subagent_runs(info.id)] == ["call_1"]
        store.delete(info.id)
        assert store.subagent_runs(info.id) == []
        assert second.messages == child[:1]
