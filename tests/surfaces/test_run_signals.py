"""SIGINT / SIGTERM through the CLI: the stream or the tools are cancelled, every call still gets a
result, the last JSONL event says `cancelled`, and the exit code is 130 / 143."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.replay_server import ReplayServer
from tests.support import argv, schema_validator, text_sse, tool_turn, wait_for, write_config

SLOW_TOOLS = '''
import asyncio
import time

from crow_cli.tools import tool


@tool
async def nap(seconds: float) -> str:
    """Sleep on the event loop."""
    await asyncio.sleep(seconds)
    return "rested"


@tool
def block(seconds: float) -> str:
    """Sleep in a worker thread (cannot be interrupted)."""
    time.sleep(seconds)
    return "done"
'''


def run_until(script: list[dict], args: list[str], cwd: Path, wait_for: str, sig: int) -> tuple[int, list[dict], str]:
    """Start `crow run --json`, send `sig` once an event of type `wait_for` is out, collect the rest."""
    config = write_config(cwd, max_retries=0, idle_timeout=60)
    with ReplayServer(script) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", *args, config=config), cwd=cwd, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        events = []
        assert proc.stdout is not None
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] == wait_for:
                proc.send_signal(sig)
                break
        try:
            rest, err = proc.communicate(timeout=120)  # bounds a hang: the stream and the tools run far longer
        finally:
            proc.kill()
    events += [json.loads(line) for line in rest.splitlines()]
    for event in events:
        schema_validator().validate(event)
    return proc.returncode, events, err


def test_sigint_during_a_stalled_stream(tmp_path: Path) -> None:
    stalled = {"sse": text_sse("Partial answer that stalls"), "delay_ms": 600_000}
    code, events, err = run_until([stalled], ["hi"], tmp_path, "text", signal.SIGINT)
    assert code == 130
    # smaller items: `turns` counts the turn cancelled mid-way (found trying it as a new user) (issue 11)
    assert events[-1] == {"type": "run_finished", "status": "cancelled", "final_text": "Parti", "turns": 1,
                          "error": "interrupted (SIGINT)", "exit_code": 130, "signal": 2, "output_errno": None}
    assert err.strip() == "crow: interrupted (SIGINT)"


def test_sigterm_during_parallel_tools_answers_every_call(tmp_path: Path) -> None:
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "slow.py").write_text(SLOW_TOOLS)
    turn = tool_turn(("call_a", "nap", '{"seconds": 60}'), ("", "block", '{"seconds": 60}'))
    code, events, err = run_until([{"sse": turn}, {"sse": text_sse("never")}],
                                  ["--tools-dir", str(tmp_path / "slow"), "nap"], tmp_path, "tool_call", signal.SIGTERM)
    assert code == 143, err
    assert "Traceback" not in err
    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert [(r["call_id"], r["index"], r["ok"]) for r in results] == [("call_a", 0, False), ("", 1, False)]
    assert all("cancelled" in r["output"] for r in results)
    assert events[-1]["status"] == "cancelled" and events[-1]["exit_code"] == 143 and events[-1]["turns"] == 1


def test_sigint_after_one_tool_finished_keeps_its_result_and_answers_each_call_once(tmp_path: Path) -> None:
    """Found by a tester: the finished call was reported and stored a second time, as cancelled."""
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "slow.py").write_text(SLOW_TOOLS)
    turn = tool_turn(("call_quick", "nap", '{"seconds": 0}'), ("call_slow", "nap", '{"seconds": 60}'))
    with ReplayServer([{"sse": turn}, {"sse": text_sse("never")}]) as server:
        config = write_config(tmp_path, max_retries=0, idle_timeout=60)
        proc = subprocess.Popen(argv(server.base_url, "--json", "--tools-dir", str(tmp_path / "slow"), "go",
                                     config=config), cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        events = []
        assert proc.stdout is not None
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] == "tool_result":  # the quick one is done, the slow one runs
                proc.send_signal(signal.SIGINT)
                break
        try:
            rest, _ = proc.communicate(timeout=120)  # bounds a hang
        finally:
            proc.kill()
    events += [json.loads(line) for line in rest.splitlines()]
    results = [(e["result"]["call_id"], e["result"]["ok"]) for e in events if e["type"] == "tool_result"]
    assert results == [("call_quick", True), ("call_slow", False)]
    assert proc.returncode == 130


def test_sigkill_keeps_the_results_of_tools_that_had_finished(tmp_path: Path) -> None:
    # The results of a turn used to be stored only when its whole batch had finished: after SIGKILL a
    # finished call was stored as "interrupted". Now each result is stored once the calls before it are.
    import contextlib
    import sqlite3

    from crow_cli.sessions import SessionStore, default_db_path

    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "slow.py").write_text(SLOW_TOOLS)
    turn = tool_turn(("call_quick", "nap", '{"seconds": 0}'), ("call_slow", "nap", '{"seconds": 60}'))
    config = write_config(tmp_path, max_retries=0, idle_timeout=60)
    with ReplayServer([{"sse": turn}, {"sse": text_sse("never")}]) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", "--tools-dir", str(tmp_path / "slow"), "go",
                                     config=config), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        def stored() -> int:
            assert proc.poll() is None
            uri = f"file:{default_db_path()}?mode=ro"
            with contextlib.suppress(sqlite3.OperationalError), \
                    contextlib.closing(sqlite3.connect(uri, uri=True)) as db:  # may not exist yet
                return int(db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
            return 0

        try:
            wait_for(lambda: stored() >= 3)  # user, assistant, the quick call's result
            assert stored() == 3
        finally:
            proc.kill()
            proc.wait()
    with SessionStore() as store:
        session = store.latest()
        assert session is not None
        messages = store.load(session.id)
    assert [(m.get("tool_call_id"), m["content"]) for m in messages[2:]] == [
        ("call_quick", "rested"), ("call_slow", "Error: the tool call was interrupted; no result.")]


def test_a_signal_right_after_run_started_ends_with_one_run_finished(tmp_path: Path) -> None:
    # found trying it as a new user (fourth round): between run_started and the driver's start (the client
    # being built, openai imported) a signal was unhandled: no run_finished, death by SIGTERM/SIGHUP
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        with ReplayServer([{"sse": text_sse("hello"), "delay_ms": 2000}]) as server:
            proc = subprocess.Popen(argv(server.base_url, "--json", "--no-tools", "hi"), cwd=tmp_path,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            first = proc.stdout.readline()  # run_started is out: the signal comes as early as a script can send it
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
        events = [json.loads(line) for line in [first, *out.splitlines()]]
        assert proc.returncode == code, (sig, err)
        types = [e["type"] for e in events]
        assert types[0] == "run_started" and types.count("run_finished") == 1
        assert events[-1]["status"] == "cancelled" and "Traceback" not in err
