"""`run_shell` with real subprocesses: output, workspace, caps, and killing the whole process group.

`run_shell`: secrets hidden by value, background processes that hold the output, `setsid` escapees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from crow_cli.errors import ToolError, ToolFailed
from crow_cli.tools.builtin import shell
from crow_cli.tools.builtin.shell import run_shell, shell_kill, shell_output
from crow_cli.tools.context import ToolContext, using_context
from crow_cli.tools.jobs import BUFFER_BYTES, BackgroundShells
from tests.replay_server import ReplayServer
from tests.support import (
    ChatTerminal,
    alive,
    argv,
    chunk,
    crow,
    run_here,
    script,
    sse,
    text_sse,
    tool_calls_sse,
    tool_delta,
    tool_messages,
    wait_for,
)


@pytest.fixture(autouse=True)
def _in_workspace(ws: Path) -> Path:
    return ws


async def _wait_gone(pid: int) -> bool:
    for _ in range(1200):  # up to 60 s: bounds a hang
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def _read_pid(path: Path) -> int:
    for _ in range(2400):  # up to 60 s: bounds a hang
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.025)
    raise AssertionError("the grandchild never wrote its pid")


async def test_output_exit_code_and_cwd(ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    with pytest.raises(ToolFailed) as failed:  # the model reads the output as it is; the call is failed
        await run_shell.invoke({"command": "pwd; ls; echo oops >&2; exit 3"})
    assert str(failed.value) == "exit code 3"
    assert failed.value.output.splitlines() == ["[exit code 3]", str(ws), "f.txt", "oops"]


# A command exiting non-zero shows as failed, with its exit status, in `crow run`, its `--json` tool_result
# (not ok, outcome "error") and `crow chat`: never ✓
async def test_a_command_exiting_non_zero_shows_as_failed_in_run_json_and_chat(tmp_path: Path) -> None:
    failing = script([("c1", "run_shell", {"command": "echo nope; exit 3"})], final="Done.")
    for json_mode in (False, True):
        ran = await run_here(failing, "go", yes=True, json=json_mode, cwd=tmp_path)  # `crow run --yes [--json] go`
        assert ran.code == 0, ran.stderr
        assert tool_messages(ran.requests[1])[0]["content"] == "[exit code 3]\nnope\n"  # unchanged for the model
        if json_mode:
            result = next(e["result"] for e in ran.events() if e["type"] == "tool_result")
            assert (result["ok"], result["outcome"], result["output"]) == (False, "error", "[exit code 3]\nnope\n")
        else:
            # the exit status on the end line, the output below it
            assert "  ✗ run_shell " in ran.stderr and "s · exit code 3\n    nope\n" in ran.stderr, ran.stderr
            assert "✓" not in ran.stderr
    # the chat's line for a finished call is drawn on a terminal (a pipe gets plain lines): a pty
    with ReplayServer(failing) as server, ChatTerminal(["--base-url", server.base_url, "--api-key", "sk-test",
                                                        "--model", "m", "--yes"], cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("✗ run_shell(echo nope; exit 3) error ")  # a command shown as the command
        term.expect(" · exit code 3")
        term.expect("    nope")
        term.expect("Done.")
        term.expect("›")  # the next prompt is up: a Ctrl-D sent before it can be lost
        term.send("\x04")
        assert term.wait() == 0


async def test_stdin_is_empty_and_secrets_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    out = await run_shell.invoke({"command": "cat; echo \"key=${OPENAI_API_KEY:-unset}\""})
    assert out == "[exit code 0]\nkey=unset\n"


async def test_output_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "MAX_OUTPUT_BYTES", 1000)
    out = await run_shell.invoke({"command": "head -c 5000 /dev/zero | tr '\\0' a"})
    assert out.splitlines()[1:] == ["a" * 667, "[output truncated: 4000 of 5000 bytes not shown]", "a" * 333]


async def test_capped_output_keeps_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # the cut keeps the end as well as the head: the end of a test run holds its summary
    monkeypatch.setattr(shell, "MAX_OUTPUT_BYTES", 3000)
    out = await run_shell.invoke({"command": "seq 1 5000; echo '== 3 failed, 97 passed =='"})
    lines = out.splitlines()
    assert lines[:3] == ["[exit code 0]", "1", "2"]
    assert lines[-2:] == ["5000", "== 3 failed, 97 passed =="]
    assert any(line.startswith("[output truncated: ") and line.endswith(" of 23919 bytes not shown]")
               for line in lines)


# A capped output keeps whole lines (no line cut in two), and its display counts the lines of the whole output,
# not of the capped text
async def test_a_capped_output_keeps_whole_lines_and_counts_all_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.surfaces.shown import display_lines

    monkeypatch.setattr(shell, "MAX_OUTPUT_BYTES", 3000)
    ran = await run_shell.run(run_shell.validate({"command": "seq 1 5000"}))
    kept = [line for line in ran.text.splitlines()[1:] if not line.startswith("[output truncated")]
    numbers = [int(line) for line in kept]
    assert numbers[:3] == [1, 2, 3] and numbers[-1] == 5000
    assert numbers == sorted(numbers) and numbers[:300] == list(range(1, 301))  # whole lines, none cut
    assert ran.display is not None and ran.display.lines == 5000
    shown = [text.strip() for text, _style in display_lines(ran.display)]
    assert "… 4990 lines …" in shown and shown[-1] == "5000"


async def test_timeout_kills_the_whole_group(ws: Path) -> None:
    pidfile = ws / "grandchild.pid"
    command = f"sh -c 'sleep 300 & echo $! > {pidfile}; wait' ; echo never"
    with pytest.raises(ToolFailed) as failed:
        await run_shell.invoke({"command": command, "timeout_s": 1})
    out = failed.value.output
    assert out.startswith("[timed out after 1 s; the command and its process group were killed]")
    assert "never" not in out
    assert await _wait_gone(int(pidfile.read_text()))


async def test_cancellation_kills_the_whole_group(ws: Path) -> None:
    pidfile = ws / "grandchild.pid"
    task = asyncio.create_task(run_shell.invoke({"command": f"sleep 300 & echo $! > {pidfile}; wait"}))
    pid = await _read_pid(pidfile)
    assert alive(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait_gone(pid)


async def test_background_processes_do_not_outlive_the_command(ws: Path) -> None:
    pidfile = ws / "bg.pid"
    out = await run_shell.invoke({"command": f"sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}; echo started"})
    assert out == "[exit code 0]\nstarted\n"
    assert await _wait_gone(int(pidfile.read_text()))


@pytest.mark.parametrize("timeout_s", [0, -5, float("nan")])
async def test_a_timeout_of_zero_or_less_is_refused_not_clamped(timeout_s: float) -> None:
    # timeout_s <= 0 is refused, not clamped to a tiny timeout that would kill the command at once
    from crow_cli.errors import ToolError

    with pytest.raises(ToolError, match="timeout_s must be more than 0 seconds"):
        await run_shell.invoke({"command": "echo hi", "timeout_s": timeout_s})

def _hiding(ws: Path, *secrets: str | None) -> ToolContext:
    """The context of a run whose secrets are `secrets` (passed to dispatch, no module-level set)."""
    return ToolContext.for_workspace(ws, secrets=secrets)


async def test_a_hidden_secret_leaves_the_environment_whatever_the_variable(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-CUSTOMVARSECRET")
    monkeypatch.setenv("AUTH_HEADER", "Bearer sk-CUSTOMVARSECRET")
    monkeypatch.setenv("HARMLESS", "visible")
    context = _hiding(ws, "sk-CUSTOMVARSECRET", None, "")
    assert context.secrets == ("sk-CUSTOMVARSECRET",)
    out = await run_shell.invoke({"command": "env; echo \"k=${MY_LLM_KEY:-unset}\""}, context)
    assert "CUSTOMVARSECRET" not in out
    assert "k=unset" in out and "HARMLESS=visible" in out and "MY_LLM_KEY" not in out and "AUTH_HEADER" not in out


async def test_proxy_variables_reach_commands_without_their_credentials(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the model's `env | grep -i proxy` sent `HTTP_PROXY`'s password to the model server and into the session
    monkeypatch.setenv("HTTP_PROXY", "http://proxyuser:pr0xy-pass@proxy.test:3128")
    monkeypatch.setenv("https_proxy", "proxyuser:pr0xy-pass@proxy.test:3129")
    out = await run_shell.invoke({"command": "env | grep -i _proxy= | sort"}, _hiding(ws, "pr0xy-pass"))
    assert "pr0xy-pass" not in out and "proxyuser" not in out
    assert "HTTP_PROXY=http://proxy.test:3128" in out and "https_proxy=proxy.test:3129" in out


async def test_without_the_secret_in_the_context_a_custom_variable_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-CUSTOMVARSECRET")  # the test above would pass for a broken `env`
    out = await run_shell.invoke({"command": "echo \"k=${MY_LLM_KEY:-unset}\""})
    assert out == "[exit code 0]\nk=sk-CUSTOMVARSECRET\n"


async def test_a_hidden_secret_is_masked_in_output(ws: Path) -> None:
    (ws / "config.toml").write_text('api_key = "sk-CUSTOMVARSECRET"\n')
    out = await run_shell.invoke({"command": "cat config.toml"}, _hiding(ws, "sk-CUSTOMVARSECRET"))
    assert out == '[exit code 0]\napi_key = "[REDACTED]"\n'


async def test_a_short_dummy_key_hides_only_an_equal_variable(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUMMY_KEY", "x")
    monkeypatch.setenv("SOMETHING", "xyz")
    out = await run_shell.invoke({"command": "echo \"${DUMMY_KEY:-unset} $SOMETHING\""}, _hiding(ws, "x"))
    assert out == "[exit code 0]\nunset xyz\n"


def _pids_running(cmdline: bytes) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == cmdline and alive(int(entry.name)):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


async def test_a_background_process_holding_the_output_does_not_delay_the_result() -> None:
    # the bug waited for the whole timeout (an hour here): the 120 s bound only stops a hang
    out = await asyncio.wait_for(run_shell.invoke({"command": "(sleep 3600.4242 &); echo server-started",
                                                   "timeout_s": 3600}), 120)
    assert out == "[exit code 0]\nserver-started\n"
    for _ in range(1200):  # up to 60 s for the kill to land
        if not _pids_running(b"sleep\x003600.4242\x00"):
            break
        await asyncio.sleep(0.05)
    assert not _pids_running(b"sleep\x003600.4242\x00")


SETSID_SCRIPT = """
import asyncio, sys
from pathlib import Path
from crow_cli.errors import ToolFailed
from crow_cli.tools.builtin.shell import run_shell
from crow_cli.tools.context import ToolContext
context = ToolContext(Path(sys.argv[1]))
try:
    print(asyncio.run(run_shell.invoke({"command": sys.argv[2], "timeout_s": float(sys.argv[3])}, context)))
except ToolFailed as failed:  # timed out
    print(failed.output)
"""


@pytest.mark.parametrize("timeout_s", [30, 1])
def test_a_setsid_escapee_is_killed_and_no_traceback_is_printed(ws: Path, timeout_s: int) -> None:
    pidfile = ws / "escaped.pid"
    wait = "; wait" if timeout_s == 1 else ""  # the short timeout kills the shell while it waits
    command = f"setsid sleep 93 & echo $! > {pidfile}; echo started{wait}"
    done = subprocess.run([sys.executable, "-c", SETSID_SCRIPT, str(ws), command, str(timeout_s)],
                          capture_output=True, text=True, timeout=60)
    assert done.stderr == ""
    assert "started" in done.stdout
    pid = int(pidfile.read_text())
    for _ in range(1200):  # up to 60 s for the kill to land
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid)


def test_an_escapee_that_clears_its_environment_delays_nothing_and_prints_no_traceback(ws: Path) -> None:
    pidfile = ws / "escaped.pid"
    command = f"setsid env -i sleep 94 & echo $! > {pidfile}; echo started"
    try:
        done = subprocess.run([sys.executable, "-c", SETSID_SCRIPT, str(ws), command, "3600"],
                              capture_output=True, text=True, timeout=120)  # would wait the hour if it hung
        assert done.stderr == ""
        assert done.stdout.startswith("[exit code 0]\nstarted")
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # this one escapes run_shell (documented)


async def test_an_escapee_that_keeps_forking_leaves_no_process_behind() -> None:
    # CI failure: one sweep of /proc can meet a process mid-exec (its environment reads as empty) or
    # miss one forked while the sweep runs. Before the repeated sweeps, 7 runs in 10 left survivors.
    loop_cmd = b"sh\x00-c\x00while :; do sleep 95.5 & done\x00"
    try:
        for _ in range(3):
            out = await run_shell.invoke({"command": "setsid sh -c 'while :; do sleep 95.5 & done' & "
                                                     "sleep 0.2; echo started", "timeout_s": 30})
            assert out == "[exit code 0]\nstarted\n"
            for _ in range(1200):  # up to 60 s for the kills to land; a survivor lives (or forks) on
                if not _pids_running(b"sleep\x0095.5\x00") + _pids_running(loop_cmd):
                    break
                await asyncio.sleep(0.05)
            assert _pids_running(b"sleep\x0095.5\x00") + _pids_running(loop_cmd) == []
    finally:
        for pid in _pids_running(b"sleep\x0095.5\x00") + _pids_running(loop_cmd):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# A key in a custom variable never reaches the model through run_shell
def test_a_key_from_a_custom_variable_never_reaches_the_model_through_run_shell(tmp_path: Path) -> None:
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


# Commands that keep running (`run_shell` with `background`, `shell_output`, `shell_kill`)

def _processes_with_args(*args: str) -> list[int]:
    """The pids whose command line is exactly `args` (a unique `sleep N` names the command under test)."""
    wanted = "\0".join(args).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == wanted and alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the command's processes in /proc")
def test_a_background_command_returns_at_once_is_read_later_and_is_gone_when_crow_exits(tmp_path: Path) -> None:
    """The background call is answered while its command still waits (for a file the test makes only after
    that answer reached the server), `shell_output` then returns what it printed and that it still runs, and
    when `crow run` ends the command is killed, with one line on stderr."""
    seconds = str(900_000 + os.getpid() % 90_000)  # a `sleep` no other process runs
    command = (f"echo first-line; while [ ! -e go ]; do sleep 0.02; done; echo second-line; touch said; "
               f"exec sleep {seconds}")
    steps = [{"sse": tool_calls_sse(("c1", "run_shell", {"command": command, "background": True}))},
             {"sse": tool_calls_sse(("c2", "shell_output", {"id": "bg1"})), "hold_after_events": 1},
             {"sse": text_sse("All done.")}]
    with ReplayServer(steps) as server:
        proc = subprocess.Popen(argv(server.base_url, "--yes", "start it"), cwd=tmp_path, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            wait_for(lambda: len(server.requests) >= 2 or proc.poll() is not None)
            assert len(server.requests) >= 2, proc.communicate()
            started = tool_messages(server.requests[1])[0]["content"]
            assert "started in the background as bg1" in started
            assert not (tmp_path / "said").exists()  # the command waits for `go`: the call did not
            (tmp_path / "go").touch()
            wait_for(lambda: (tmp_path / "said").exists())
            wait_for(lambda: bool(_processes_with_args("sleep", seconds)))
            server.release()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "All done."
    read = tool_messages(server.requests[2])[1]["content"]
    assert read.startswith("[bg1 is still running (")
    assert "first-line\nsecond-line" in read
    assert "stopped background command bg1" in err
    wait_for(lambda: not _processes_with_args("sleep", seconds))


async def test_shell_output_returns_only_new_output_and_the_exit_status(ws: Path) -> None:
    """Each read returns what came since the last one; once the command ended, its exit code."""
    shells = BackgroundShells()
    with using_context(replace(ToolContext.current(), background=shells)):
        await run_shell.invoke({"command": "echo one; while [ ! -e go ]; do sleep 0.02; done; echo two; exit 4",
                                "background": True})
        job = shells.get("bg1")
        while b"one" not in job.buffer:
            await asyncio.sleep(0.02)
        first = (await shell_output.invoke({"id": "bg1"}))
        assert first == "[bg1 is still running (0s)]\none\n"
        (ws / "go").touch()
        assert job.watcher is not None
        await job.watcher
        second = (await shell_output.invoke({"id": "bg1"}))
        assert second.startswith("[bg1 has ended (exit code 4) after ") and second.endswith("\ntwo\n")
        assert (await shell_output.invoke({"id": "bg1"})).endswith("(no new output)")


async def test_shell_kill_stops_the_whole_process_group_and_the_limit_holds(ws: Path) -> None:
    """`shell_kill` kills the command and what it started; no more than the limit run at once."""
    shells = BackgroundShells(limit=1)
    with using_context(replace(ToolContext.current(), background=shells)):
        await run_shell.invoke({"command": "sleep 600 & echo $! > child; wait", "background": True})
        child = await _read_pid(ws / "child")
        with pytest.raises(ToolError, match="already run in the background"):
            await run_shell.invoke({"command": "true", "background": True})
        stopped = (await shell_kill.invoke({"id": "bg1"}))
        assert stopped.startswith("[bg1 stopped after ")
        assert await _wait_gone(child)
        assert (await shell_output.invoke({"id": "bg1"})).startswith("[bg1 was stopped after ")
        await run_shell.invoke({"command": "true", "background": True})  # room again
        with pytest.raises(ToolError, match="no background command 'bg9'"):
            await shell_kill.invoke({"id": "bg9"})
        await shells.aclose()


async def test_the_output_kept_of_a_background_command_is_bounded(ws: Path) -> None:
    """A command printing more than the buffer keeps its last bytes, and the read says how many were dropped."""
    shells = BackgroundShells()
    with using_context(replace(ToolContext.current(), background=shells)):
        await run_shell.invoke({"command": f"head -c {BUFFER_BYTES * 2} /dev/zero | tr '\\0' x; echo; echo end",
                                "background": True})
        job = shells.get("bg1")
        assert job.watcher is not None
        await job.watcher
        assert len(job.buffer) <= BUFFER_BYTES
        text = (await shell_output.invoke({"id": "bg1"}))
        assert "earlier bytes of output not shown]" in text and text.endswith("\nend\n")
        assert len(text) < shell.MAX_OUTPUT_BYTES + 200


async def test_background_is_refused_where_the_run_keeps_no_commands(ws: Path) -> None:
    with pytest.raises(ToolError, match="cannot run in the background here"):
        await run_shell.invoke({"command": "true", "background": True})
