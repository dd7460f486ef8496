"""Defects a second tester found in the surfaces; each failing input kept as a test."""

from __future__ import annotations

import io
import json
import signal
import sqlite3
import subprocess
import time

from crow_cli.events import TextDelta
from crow_cli.surfaces.run import PlainPrinter as _Printer
from crow_cli.text import public_url, strip_controls
from tests.conftest import text_sse
from tests.replay_server import ReplayServer
from tests.test_cli import CROW, crow


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_model_text_cannot_drive_the_terminal():
    hostile = "ok\x1b[2J\x1b[H\x1b]0;PWNED\x07 done\r\n"
    assert strip_controls(hostile) == "ok[2J[H]0;PWNED done\n"
    out, err = _Terminal(), io.StringIO()
    _Printer(out, err, debug=False).handle(TextDelta(hostile))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    piped = io.StringIO()
    _Printer(piped, err, debug=False).handle(TextDelta(hostile))
    assert piped.getvalue() == hostile  # a pipe gets the text as the model sent it


def test_usage_errors_with_json_print_no_event_and_store_no_session(tmp_path, _isolated_home):
    for args in (["--approval", "bogus"], ["--workspace", str(tmp_path / "nope")]):
        proc = crow("run", "--json", "--base-url", "http://127.0.0.1:9/v1", *args, "hi")
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert all(not _stored_sessions(db) for db in _isolated_home.rglob("sessions.db"))


def _stored_sessions(db):
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id FROM sessions").fetchall()


def test_credentials_in_the_base_url_are_never_stored(_isolated_home):
    assert public_url("http://user:sk-URLSECRET2@127.0.0.1:8080/v1?key=sk-Q") == "http://127.0.0.1:8080/v1"
    with ReplayServer([{"sse": text_sse("ok")}]) as srv:
        url = srv.base_url.replace("http://", "http://user:sk-URLSECRET2@")
        proc = crow("run", "--base-url", url, "--no-tools", "hi")
    assert proc.returncode == 0, proc.stderr
    for path in _isolated_home.rglob("*"):
        if path.is_file():
            assert b"sk-URLSECRET2" not in path.read_bytes(), path


def test_sigint_while_an_mcp_server_starts_ends_the_run_promptly(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[mcp_servers.mute]\ncommand = "sleep"\nargs = ["60"]\nstartup_timeout = 30\n')
    with ReplayServer([{"sse": text_sse("never")}]) as srv:
        proc = subprocess.Popen([str(CROW), "run", "--json", "--config", str(config), "--base-url", srv.base_url,
                                 "hi"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path)
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # run_started: now the servers are starting
        assert first["type"] == "run_started"
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - started
    last = json.loads(out.splitlines()[-1])
    assert proc.returncode == 130, err
    assert last["type"] == "run_finished" and last["status"] == "cancelled"
    assert elapsed < 20  # it used to run on until the server's startup timeout and then exit 0
    assert "Traceback" not in err


def test_a_key_from_a_custom_variable_never_reaches_the_model_through_run_shell(tmp_path, _isolated_home):
    from tests.conftest import chunk, sse, tool_delta

    config = tmp_path / "c.toml"
    config.write_text('api_key_env = "MY_LLM_KEY"\n')
    call = sse(chunk({"tool_calls": [tool_delta(0, "s1", "run_shell", '{"command": "env; echo $MY_LLM_KEY"}')]}),
               chunk({}, "tool_calls"))
    with ReplayServer([{"sse": call}, {"sse": text_sse("ok")}]) as srv:
        proc = crow("run", "--config", str(config), "--base-url", srv.base_url, "--yes", "go", cwd=tmp_path,
                    env={"MY_LLM_KEY": "sk-CUSTOMVARSECRET"})
        requests = srv.requests
    assert proc.returncode == 0, proc.stderr
    result = requests[1]["messages"][-1]
    assert result["tool_call_id"] == "s1" and "[exit code 0]" in result["content"]
    assert "sk-CUSTOMVARSECRET" not in json.dumps(requests)


def test_mcp_startup_timeout_is_honoured(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[mcp_servers.mute]\ncommand = "sleep"\nargs = ["60"]\nstartup_timeout = 2\n')
    started = time.monotonic()
    proc = crow("tools", "--config", str(config), cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0 and "read_file" in proc.stdout
    assert "did not start within 2 s" in proc.stderr and "Traceback" not in proc.stderr
    assert elapsed < 11, elapsed  # 2 s + start-up on a loaded CI; it used to wait another 10 s for a clean stop


def test_sessions_list_says_when_older_sessions_are_not_shown(_isolated_home):
    from crow_cli.sessions import SessionStore, default_db_path

    with SessionStore(default_db_path()) as store:
        for n in range(3):
            store.append(store.create(model="m").id, {"role": "user", "content": f"hi {n}"})
    proc = crow("sessions", "list", "--limit", "2")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2
    assert "--limit 0" in proc.stderr
    proc = crow("sessions", "list", "--limit", "0")
    assert len(proc.stdout.splitlines()) == 3 and proc.stderr == ""
