"""Session scope and hygiene (issue 13: "`crow run -c` continues the most recent session from any
folder, often another project's or a one-message session left by a failed run")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer, text_stream
from tests.support import CROW, run_crow, write_config


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "project-a", tmp_path / "project-b"
    a.mkdir()
    b.mkdir()
    return a, b


def test_continue_takes_the_latest_session_of_this_folder_only(tmp_path: Path) -> None:
    a, b = _folders(tmp_path)
    config = write_config(tmp_path, max_retries=0)
    assert run_crow([{"sse": text_stream("in a")}], "question in a", cwd=a, config=config).code == 0
    assert run_crow([{"sse": text_stream("in b")}], "question in b", cwd=b, config=config).code == 0
    ran = run_crow([{"sse": text_stream("again a")}], "-c", "more in a", cwd=a, config=config)
    assert ran.code == 0, ran.stderr
    assert [m["content"] for m in ran.requests[0]["messages"]] == ["question in a", "in a", "more in a"]


def test_continue_with_no_session_in_this_folder_says_so_and_exits_1(tmp_path: Path) -> None:
    a, b = _folders(tmp_path)
    config = write_config(tmp_path, max_retries=0)
    assert run_crow([{"sse": text_stream("in a")}], "question in a", cwd=a, config=config).code == 0
    ran = run_crow([], "-c", "more", cwd=b, config=config)
    assert ran.code == 1 and ran.requests == []
    assert f"no session to continue in {b}" in ran.stderr
    with SessionStore() as store:
        sid = store.latest().id
    ran = run_crow([{"sse": text_stream("reached")}], "--session", sid, "from b", cwd=b, config=config)
    assert ran.code == 0 and ran.requests[0]["messages"][0]["content"] == "question in a"
    chat = subprocess.run([CROW, "chat", "--resume", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
                          capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=60)
    assert chat.returncode == 1 and f"no session to continue in {tmp_path}" in chat.stderr


def test_a_run_that_fails_before_the_model_said_anything_leaves_no_session(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    for step in ({"status": 404, "body": '{"error": {"message": "model not found"}}'},
                 {"status": 401, "body": '{"error": {"message": "bad key"}}'}):
        assert run_crow([step], "hello", cwd=tmp_path, config=config).code == 1
    unreachable = subprocess.run([CROW, "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--config",
                                  str(config), "hello"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert unreachable.returncode == 1
    with SessionStore() as store:
        assert store.recent() == []


def test_continuing_with_another_model_says_so_once(tmp_path: Path) -> None:
    config = write_config(tmp_path, max_retries=0)
    assert run_crow([{"sse": text_stream("hi")}], "hello", cwd=tmp_path, config=config).code == 0  # test-model
    with ReplayServer([{"sse": text_stream("a")}, {"sse": text_stream("b")}]) as server:
        argv = [CROW, "run", "--base-url", server.base_url, "--model", "other-model", "--config", str(config),
                "--json", "-c"]
        first = subprocess.run([*argv, "again"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        second = subprocess.run([*argv, "and again"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    notices = [json.loads(line) for line in first.stdout.splitlines() if '"notice"' in line]
    assert [n["code"] for n in notices] == ["model_changed"]
    assert "was using test-model; continuing with other-model" in notices[0]["message"]
    assert '"model_changed"' not in second.stdout
