"""Recording a history in the session store as it grows (closing a cancelled one: tests/test_loop.py).

Session scope and hygiene: `crow run -c` continues this folder's most recent session, never another
project's or a one-message session left by a failed run. `crow run` runs in this
process (`run_here`); the CLI's own handling of `-c` / `--session` is covered by tests/test_sessions.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.errors import SessionError
from crow_cli.history import assistant_message, user_message
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatApp, ChatOptions
from crow_cli.surfaces.persist import SessionRecorder
from tests.replay_server import text_stream
from tests.support import run_here, write_config


def test_recorder_creates_the_session_lazily_and_stores_only_new_messages(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        recorder = SessionRecorder(store, Settings(model="m", base_url="http://h/v1", api_key="sk-secret"))
        history: list = []
        recorder.sync(history)
        assert recorder.session_id is None and store.recent() == []
        history += [user_message("one"), assistant_message("two")]
        recorder.sync(history)
        recorder.sync(history)
        assert store.messages(recorder.session_id) == history
        recorder.truncate(history, 1)
        history.append(assistant_message("again"))
        recorder.sync(history)
        assert store.messages(recorder.session_id) == [user_message("one"), assistant_message("again")]
        info = store.get(recorder.session_id)
        assert (info.model, info.base_url) == ("m", "http://h/v1")
    assert b"sk-secret" not in (tmp_path / "s.db").read_bytes()

def _folders(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "project-a", tmp_path / "project-b"
    a.mkdir()
    b.mkdir()
    return a, b


async def test_continue_takes_the_latest_session_of_this_folder_only(tmp_path: Path) -> None:
    a, b = _folders(tmp_path)
    config = write_config(tmp_path, max_retries=0)
    assert (await run_here([{"sse": text_stream("in a")}], "question in a", cwd=a, config=config)).code == 0
    assert (await run_here([{"sse": text_stream("in b")}], "question in b", cwd=b, config=config)).code == 0
    ran = await run_here([{"sse": text_stream("again a")}], "more in a", cwd=a, config=config, continue_last=True)
    assert ran.code == 0, ran.stderr
    assert [m["content"] for m in ran.requests[0]["messages"]] == ["question in a", "in a", "more in a"]


async def test_continue_with_no_session_in_this_folder_says_so_and_exits_1(tmp_path: Path) -> None:
    a, b = _folders(tmp_path)
    config = write_config(tmp_path, max_retries=0)
    assert (await run_here([{"sse": text_stream("in a")}], "question in a", cwd=a, config=config)).code == 0
    ran = await run_here([], "more", cwd=b, config=config, continue_last=True)
    assert ran.code == 1 and ran.requests == []
    assert f"no session to continue in {b}" in ran.stderr
    # the line names `--session ID`, not `--resume`, which crow run does not have
    assert "crow run --session ID" in ran.stderr and "crow run --resume" not in ran.stderr
    with SessionStore() as store:
        sid = store.latest().id
    ran = await run_here([{"sse": text_stream("reached")}], "from b", cwd=b, config=config, session_id=sid)
    assert ran.code == 0 and ran.requests[0]["messages"][0]["content"] == "question in a"
    # `crow chat --resume` with no terminal to pick on (no id: the latest here); a CrowError is its one error line
    # and exit 1
    with contextlib.chdir(tmp_path), pytest.raises(SessionError) as refused:
        await ChatApp(Settings(base_url="http://127.0.0.1:9/v1", model="m"), ChatOptions(resume="")).run()
    assert f"no session to continue in {tmp_path}" in str(refused.value) and refused.value.exit_code == 1


async def test_a_run_that_fails_before_the_model_said_anything_leaves_no_session(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    for step in ({"status": 404, "body": '{"error": {"message": "model not found"}}'},
                 {"status": 401, "body": '{"error": {"message": "bad key"}}'}):
        assert (await run_here([step], "hello", cwd=tmp_path, config=config)).code == 1
    unreachable = await run_here([], "hello", cwd=tmp_path, config=config, base_url="http://127.0.0.1:9/v1")
    assert unreachable.code == 1, unreachable.stderr
    with SessionStore() as store:
        assert store.recent() == []


async def test_continuing_with_another_model_says_so_once(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    assert (await run_here([{"sse": text_stream("hi")}], "hello", cwd=tmp_path, config=config)).code == 0  # test-model
    first, second = [await run_here([{"sse": text_stream(answer)}], prompt, cwd=tmp_path, config=config,
                                    model="other-model", json=True, continue_last=True)
                     for answer, prompt in (("a", "again"), ("b", "and again"))]
    assert (first.code, second.code) == (0, 0), first.stderr + second.stderr
    notices = [event for event in first.events() if event["type"] == "notice"]
    assert [n["code"] for n in notices] == ["model_changed"]
    assert "was using test-model; continuing with other-model" in notices[0]["message"]
    assert '"model_changed"' not in second.stdout


def test_a_continued_session_runs_under_the_stricter_modes_unless_a_flag_names_one() -> None:
    from crow_cli.sessions import SessionInfo
    from crow_cli.surfaces.persist import RunModes, kept_modes

    loose = RunModes("yolo", "off")
    stored = SessionInfo("abc234", "", 0.0, 0.0, "m", "", "/w", approval="read-only", sandbox="read-only")
    assert kept_modes(stored, loose) == RunModes("read-only", "read-only")
    assert kept_modes(stored, RunModes("read-only", "workspace-write")) == RunModes("read-only", "read-only")
    assert kept_modes(stored, loose, given=frozenset({"approval"})) == RunModes("yolo", "read-only")
    assert kept_modes(stored, loose, given=frozenset({"approval", "sandbox"})) == loose
    stricter_now = SessionInfo("abc234", "", 0.0, 0.0, "m", "", "/w", approval="yolo", sandbox="off")
    assert kept_modes(stricter_now, RunModes("ask", "read-only")) == RunModes("ask", "read-only")
    older = SessionInfo("abc234", "", 0.0, 0.0, "m", "", "/w")  # stored by an older crow: nothing to keep
    assert kept_modes(older, loose) == loose and kept_modes(None, loose) == loose
