"""MCP servers as a tool source, against real stdio servers written with the `mcp` package.

Properties guarded here:

- tools of a configured server are listed and called; results, errors and images come back as tool results;
- a server that misbehaves (tests/tools/mcp_fault_server.py) ends in one line, never a hang: one that never
  answers tools/list, an ordinary -32000 tool error (the server stays alive), a server gone between turns,
  one invalid tool (the others are kept), stderr bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError, ToolError
from crow_cli.export import export_session
from crow_cli.sessions import SessionStore
from crow_cli.tools.mcp import McpServers, cancellable, end_task
from crow_cli.tools.mcp_transport import TAIL_BYTES
from crow_cli.tools.registry import ToolRegistry
from tests.replay_server import ReplayServer
from tests.support import CROW, crow, crow_here, run_here, script, text_sse, tool_messages, wait_for

SERVER = str(Path(__file__).with_name("mcp_demo_server.py"))
FAULT_SERVER = str(Path(__file__).with_name("mcp_fault_server.py"))


MUTE = "cat >/dev/null"
"""`sh -c MUTE`: a stdio server that never answers (its stdout open, never written) and ends when its stdin
closes (`sleep` ignores that: the mcp client then waits 2 s before it terminates the server, idle time in
every test that stops one)."""


def _demo(name: str = "demo", **extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [SERVER, name], **extra}


async def test_tools_are_listed_and_called(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.load_builtins()
    cwd_file = tmp_path / "cwd.txt"
    async with McpServers({"demo": _demo(env={"DEMO_CWD_FILE": str(cwd_file)})}, workspace=tmp_path) as servers:
        await servers.register_tools(registry)
        assert registry.errors == ["MCP server 'demo': tool 'read_file' is offered as 'demo_read_file': "
                                   "'read_file' is taken (builtin)"]  # said, as a renamed plugin tool is
        mcp_tools = {t.name: t for t in registry if t.source == "mcp:demo"}
        assert sorted(mcp_tools) == ["add", "crash", "demo_read_file", "fail", "shout"]
        assert registry.get("read_file").source == "builtin"  # the built-in keeps its name
        assert mcp_tools["add"].parameters["required"] == ["a", "b"]
        assert mcp_tools["add"].needs_approval and not mcp_tools["add"].parallel
        assert not mcp_tools["shout"].needs_approval and mcp_tools["shout"].parallel
        assert await mcp_tools["add"].invoke({"a": 2, "b": 3}) == "5"
        assert await mcp_tools["demo_read_file"].invoke({"path": "x"}) == "mcp read x"
        with pytest.raises(ToolError, match="fail"):
            await mcp_tools["fail"].invoke({"reason": "nope"})
        with pytest.raises(ToolError):
            await mcp_tools["add"].invoke({"a": "not a number"})  # the server validates
        with pytest.raises(ToolError, match="connection was lost"):
            await mcp_tools["crash"].invoke({})
        assert servers.connections["demo"].client is None
        assert await mcp_tools["add"].invoke({"a": 1, "b": 1}) == "2"  # restarted
    assert cwd_file.read_text() == str(tmp_path)  # started in the workspace root


async def test_a_server_that_fails_to_start_is_one_line_and_the_rest_work() -> None:
    registry = ToolRegistry()
    tables = {
        "missing": {"command": "/nonexistent/mcp-server"},
        "crashes": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('cannot open the database')"]},
        "fine": {"command": sys.executable, "args": [FAULT_SERVER]},  # stdlib only: it starts at once
    }
    async with McpServers(tables) as servers:
        await servers.register_tools(registry)
        assert registry.errors == [
            "MCP server 'missing' failed to start: command not found (/nonexistent/mcp-server)",
            "MCP server 'crashes' failed to start: MCPError: Connection closed (stderr: cannot open the database)",
        ]
        assert await registry.get("echo").invoke({"text": "ok"}) == "ok"


async def test_streamable_http_server(tmp_path: Path) -> None:
    import asyncio
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, SERVER, "web", "--http", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # wait for the port (the server imports for a few seconds on a busy machine)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "the HTTP server exited"
                await asyncio.sleep(0.1)
        registry = ToolRegistry()
        async with McpServers({"web": {"url": f"http://127.0.0.1:{port}/mcp"}}) as servers:
            await servers.register_tools(registry)
            assert registry.errors == []
            assert registry.get("shout").source == "mcp:web"
            assert await registry.get("add").invoke({"a": 20, "b": 22}) == "42"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("table", [{}, {"command": "x", "url": "http://y"}, {"command": 3},
                                   {"url": "http://y", "headers": {}}, {"command": "x", "args": "a b"},
                                   # refused at load, not late (at start, or never)
                                   {"command": "x", "startup_timeout": -5}, {"command": "x", "startup_timeout": 0},
                                   {"command": "x", "startup_timeout": True}, {"url": "ftp://y/mcp"},
                                   {"url": "not a url"}, {"command": ""}, {"command": "x", "cwd": ""}])
def test_bad_tables_are_config_errors(table: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=r"\[mcp_servers.s\]"):
        McpServers({"s": table})


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"""
[mcp_servers.demo]
command = {sys.executable!r}
args = [{SERVER!r}]
startup_timeout = 600  # waits for the server (an event); 30 s was missed on a loaded machine

[mcp_servers.missing]
command = "/nonexistent/mcp-server"
""")
    return cfg


def crow_tools(cwd: Path, config: Path, capfd: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """What `crow tools --config CONFIG` prints in `cwd` (crow's app in this process): stdout, stderr."""
    with contextlib.chdir(cwd):
        code = crow_here("tools", "--config", str(config))
    out, err = capfd.readouterr()
    assert code == 0, err
    return out, err


def test_crow_tools_lists_mcp_tools_with_their_source(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    stdout, stderr = crow_tools(tmp_path, _config(tmp_path), capfd)
    assert "add             Add two integers.\n                source: mcp:demo [needs approval]" in stdout
    assert "shout" in stdout and "source: mcp:demo\n" in stdout
    assert "demo_read_file" in stdout
    assert stderr.strip().splitlines() == [
        "crow: warning: MCP server 'demo': tool 'read_file' is offered as 'demo_read_file': 'read_file' is taken "
        "(builtin)",
        "crow: warning: MCP server 'missing' failed to start: command not found (/nonexistent/mcp-server)"]


CALLS = [("call_a", "add", {"a": 2, "b": 40}), ("call_s", "shout", {"text": "quiet"}),
         ("call_r", "demo_read_file", {"path": "notes.md"})]


def assert_quiet_run(code: int, stdout: str, stderr: str) -> None:
    """A run that used the MCP tools: the answer, and no library noise on stderr."""
    assert code == 0, stderr
    assert stdout == "All done.\n"
    for noise in ("Traceback", "Task was destroyed", "cancel scope", "RuntimeError", "ERROR"):
        assert noise not in stderr
    assert "crow: warning: MCP server 'missing' failed to start" in stderr
    assert "MCP server 'demo' failed" not in stderr


def test_crow_run_calls_mcp_tools_end_to_end(tmp_path: Path) -> None:
    with ReplayServer(script(CALLS)) as server:
        proc = crow("run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                    "--config", str(_config(tmp_path)), "--yes", "use the tools", cwd=tmp_path,
                    timeout=600)
    assert_quiet_run(proc.returncode, proc.stdout, proc.stderr)
    results = tool_messages(server.requests[1])
    assert [m["tool_call_id"] for m in results] == ["call_a", "call_s", "call_r"]
    assert [m["content"] for m in results] == ["42", "QUIET", "mcp read notes.md"]


async def test_without_a_terminal_only_the_read_only_mcp_tool_runs(tmp_path: Path) -> None:
    # what `crow run` (no --yes, no terminal) does with the MCP tools, in this process
    ran = await run_here(script(CALLS), "use the tools", cwd=tmp_path, config=_config(tmp_path))
    assert_quiet_run(ran.code, ran.stdout, ran.stderr)
    results = tool_messages(ran.requests[1])
    assert [m["tool_call_id"] for m in results] == ["call_a", "call_s", "call_r"]
    assert results[1]["content"] == "QUIET"  # only the read-only tool ran; the others needed approval
    for m in (results[0], results[2]):
        assert "needs approval and nobody can approve it" in m["content"]


# SIGINT while an MCP server starts ends the run promptly
def test_sigint_while_an_mcp_server_starts_ends_the_run_promptly(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[mcp_servers.mute]\ncommand = "sh"\nargs = ["-c", "{MUTE}"]\nstartup_timeout = 3000\n')
    with ReplayServer([{"sse": text_sse("never")}]) as srv:
        proc = subprocess.Popen([CROW, "run", "--json", "--config", str(config), "--base-url", srv.base_url, "hi"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path)
        try:
            assert proc.stdout is not None
            first = json.loads(proc.stdout.readline())  # run_started: now the servers are starting
            assert first["type"] == "run_started"
            wait_for(lambda: any(_command(pid) == "sh" for pid in _children(proc.pid)))  # the server runs
            proc.send_signal(signal.SIGINT)
            # it used to run on until the server's startup timeout (here 50 minutes: a hang, cut by this bound)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    last = json.loads(out.splitlines()[-1])
    assert proc.returncode == 130, err
    assert last["type"] == "run_finished" and last["status"] == "cancelled"
    assert "Traceback" not in err


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in task.read_text().split()]
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


# An MCP server's startup timeout is honoured
def test_mcp_startup_timeout_is_honoured(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"  # a server that never answers: the smallest timeout shows it is honoured
    config.write_text(f'[mcp_servers.mute]\ncommand = "sh"\nargs = ["-c", "{MUTE}"]\nstartup_timeout = 0.01\n')
    stdout, stderr = crow_tools(tmp_path, config, capfd)
    assert "read_file" in stdout
    assert "did not start within 0.01 s" in stderr and "Traceback" not in stderr


# a server past its startup timeout gets no clean stop (no 10 s more of waiting)
async def test_a_server_past_its_startup_timeout_gets_no_clean_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools import mcp

    monkeypatch.setattr(mcp, "_STOP_TIMEOUT_S", 3600.0)  # no public knob: a clean stop would now hang
    registry = ToolRegistry()
    async with asyncio.timeout(120):  # bounds that hang
        async with McpServers({"mute": {"command": "sh", "args": ["-c", MUTE], "startup_timeout": 0.01}}) as servers:
            await servers.register_tools(registry)
    assert any("did not start within 0.01 s" in error for error in registry.errors), registry.errors


# Ctrl-C while an MCP server starts ends the run at once: a server that never answered `initialize` gets no
# 10 s clean stop
async def test_a_start_cut_short_gets_no_clean_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools import mcp

    monkeypatch.setattr(mcp, "_STOP_TIMEOUT_S", 3600.0)  # no public knob: a clean stop would now hang
    async with asyncio.timeout(120):  # bounds that hang
        async with McpServers({"mute": {"command": "sh", "args": ["-c", MUTE], "startup_timeout": 3000}}) as servers:
            starting = asyncio.ensure_future(servers.register_tools(ToolRegistry()))
            while not any(_command(pid) == "sh" for pid in _children(os.getpid())):
                await asyncio.sleep(0.02)
            starting.cancel()  # what Ctrl-C does to the run
            with contextlib.suppress(asyncio.CancelledError):
                await starting


IMAGE_SERVER = str(Path(__file__).with_name("mcp_image_server.py"))


async def test_an_image_block_is_kept_as_an_image() -> None:
    # An MCP image reaches the model as an image, not as "[image content: image/png]"
    registry = ToolRegistry()
    async with McpServers({"img": {"command": sys.executable, "args": [IMAGE_SERVER]}}) as servers:
        await servers.register_tools(registry)
        out = await registry.get("snapshot").run({"caption": "the home page"})
    assert out.text == "the home page\n[image: image/png, 32 B]"
    assert [(i.mime_type, i.data[:8]) for i in out.images] == [("image/png", b"\x89PNG\r\n\x1a\n")]


async def test_crow_run_shows_an_mcp_image_to_the_model(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[mcp_servers.img]\ncommand = {json.dumps(sys.executable)}\n"
                      f"args = [{json.dumps(IMAGE_SERVER)}]\n")
    ran = await run_here(script([("call_img", "snapshot", {"caption": "c"})]), "look", cwd=tmp_path, config=config,
                         session=False)
    assert ran.code == 0, ran.stderr
    messages = ran.requests[1]["messages"]
    assert [m["role"] for m in messages][-3:] == ["assistant", "tool", "user"]
    assert messages[-2]["content"] == "c\n[image: image/png, 32 B]"
    assert messages[-1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


async def test_an_mcp_image_is_named_after_its_tool_in_the_session(tmp_path: Path) -> None:
    # the session's transcript said `[image: image/png, 32 B]`: an image block has no file name, its tool names it
    config = tmp_path / "config.toml"
    config.write_text(f"[mcp_servers.img]\ncommand = {json.dumps(sys.executable)}\n"
                      f"args = [{json.dumps(IMAGE_SERVER)}]\n")
    ran = await run_here(script([("call_img", "snapshot", {"caption": "c"})]), "look", cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    assert set(ran.requests[1]["messages"][-1]["content"][1]) == {"type", "image_url"}  # the name is never sent
    with SessionStore() as store:
        (info,) = store.recent()
        md = export_session(info, store.messages(info.id), "md")
    assert "snapshot (call_img): [image: image/png, 32 B]\n[image: from snapshot, 32 B]" in md

def fault(*faults: str, pid_file: Path | None = None, **extra: object) -> dict[str, object]:
    table: dict[str, object] = {"command": sys.executable, "args": [FAULT_SERVER, ",".join(faults)], **extra}
    if pid_file is not None:
        table["env"] = {"FAULT_PID_FILE": str(pid_file)}
    return table


def pids(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(60):  # bounds a hang; the condition is what is waited for
        while not condition():
            await asyncio.sleep(0.02)


async def test_a_server_that_never_answers_tools_list_is_dropped_after_its_startup_timeout() -> None:
    registry = ToolRegistry()
    async with asyncio.timeout(120):  # it used to hang here forever
        async with McpServers({"mute": fault("hang_list", startup_timeout=3000)}) as servers:
            conn = servers.connections["mute"]
            await conn.ensure_started()  # it answered `initialize`: what is left is tools/list, never answered
            conn.config = replace(conn.config, startup_timeout_s=0.01)  # the smallest timeout, not a margin
            await servers.register_tools(registry)
    assert [e for e in registry.errors if "mute" in e] == [
        "MCP server 'mute' did not list its tools within 0.01 s (startup_timeout); not used"]


async def test_an_application_error_with_code_32000_keeps_the_server_running(tmp_path: Path) -> None:
    started = tmp_path / "pids"
    registry = ToolRegistry()
    async with McpServers({"f": fault(pid_file=started)}) as servers:
        await servers.register_tools(registry)
        with pytest.raises(ToolError) as error:
            await registry.get("app_error").invoke({})
        assert "the database is locked" in str(error.value) and "connection was lost" not in str(error.value)
        assert await registry.get("echo").invoke({"text": "still here"}) == "still here"
        assert len(pids(started)) == 1  # the same process: not killed and restarted


async def test_a_server_that_crashes_mid_call_is_restarted_by_the_next_call(tmp_path: Path) -> None:
    started = tmp_path / "pids"
    registry = ToolRegistry()
    async with McpServers({"f": fault(pid_file=started)}) as servers:
        await servers.register_tools(registry)
        with pytest.raises(ToolError, match="connection was lost"):
            await registry.get("crash").invoke({})
        assert await registry.get("echo").invoke({"text": "back"}) == "back"
        assert len(pids(started)) == 2


async def test_a_server_that_exits_between_turns_is_restarted_by_the_next_call(tmp_path: Path) -> None:
    started = tmp_path / "pids"
    registry = ToolRegistry()
    async with McpServers({"f": fault(pid_file=started)}) as servers:
        await servers.register_tools(registry)
        assert await registry.get("quit").invoke({"text": "bye"}) == "bye"  # answers, then exits
        await until(lambda: servers.connections["f"].watch.closed)  # the turn ends; the server is gone
        assert await registry.get("echo").invoke({"text": "next turn"}) == "next turn"
        assert len(pids(started)) == 2


async def test_an_invalid_tool_is_dropped_with_one_line_naming_it() -> None:
    registry = ToolRegistry()
    async with McpServers({"f": fault("bad_tool")}) as servers:
        await servers.register_tools(registry)
    assert registry.errors == ["MCP server 'f': tool 'broken': its inputSchema is not an object; dropped it",
                               "MCP server 'f': tool 'empty': its inputSchema has type None, not 'object'; dropped it",
                               "MCP server 'f': tool 'no_output_type': outputSchema.type: Field required; dropped it",
                               "MCP server 'f': tool #8 (no name): it has no name; dropped it"]
    assert sorted(t.name for t in registry if t.source == "mcp:f") == ["app_error", "crash", "echo", "quit"]


async def test_a_tool_too_big_to_send_with_every_request_is_dropped_with_one_line() -> None:
    # a tool's description is bounded: a 2 MB one would be sent with every request (half a million tokens)
    registry = ToolRegistry()
    async with McpServers({"f": fault("bloated")}) as servers:
        await servers.register_tools(registry)
    assert [e.split(": its definition")[0] for e in registry.errors] == ["MCP server 'f': tool 'long_doc'",
                                                                        "MCP server 'f': tool 'big_schema'"]
    assert all(e.endswith("; dropped it") and "32768 characters" in e for e in registry.errors)
    assert sorted(t.name for t in registry if t.source == "mcp:f") == ["app_error", "crash", "echo", "quit"]


async def test_a_chatty_server_keeps_only_the_tail_of_its_stderr() -> None:
    registry = ToolRegistry()
    async with McpServers({"f": fault("chatty")}) as servers:
        await servers.register_tools(registry)
        for n in range(20):  # 64 KiB of stderr per request: 1.3 MB in all
            assert await registry.get("echo").invoke({"text": str(n)}) == str(n)
        tail = servers.connections["f"].tail
        assert tail is not None and tail.last_line().startswith("xxx")
        assert tail.kept() <= 2 * TAIL_BYTES


async def test_warnings_for_renamed_tools_too_many_tools_and_an_endless_listing() -> None:
    registry = ToolRegistry()
    registry.load_builtins()
    async with McpServers({"f": fault("read_file", "many"), "g": fault("endless")}) as servers:
        await servers.register_tools(registry)
    assert "MCP server 'f': tool 'read_file' is offered as 'f_read_file': 'read_file' is taken (builtin)" \
        in registry.errors
    assert any(e.startswith("MCP server 'g' still had more tools after 100 pages") for e in registry.errors)
    assert any("tools are offered to the model; OpenAI accepts at most 128" in e for e in registry.errors)


def test_a_server_writing_non_json_to_stdout_gets_one_line_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[mcp_servers.noisy]\ncommand = {sys.executable!r}\nargs = [{FAULT_SERVER!r}, "noise"]\n')
    proc = crow("tools", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0 and "echo" in proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    # with several MCP servers, the warning names the one that wrote the bad line
    assert len(lines) == 1 and lines[0].startswith(
        "crow: warning: MCP server 'noisy': Failed to parse JSONRPC message"), lines



async def _absorbs_one_cancellation(waiting: asyncio.Event) -> str:
    """What the mcp client did once in 60 `crow acp` connections ended during start-up: a cancellation that
    arrived as one of its cancel scopes unwound was absorbed, and it waited on for an answer."""
    try:
        waiting.set()
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        pass
    await asyncio.Event().wait()  # the server never answers
    return "listed"


# a request that absorbs a cancellation (the start task's tools/list) still ends when its caller is cancelled
async def test_a_request_that_absorbs_a_cancellation_still_ends_when_its_caller_is_cancelled() -> None:
    waiting = asyncio.Event()
    caller = asyncio.create_task(cancellable(_absorbs_one_cancellation(waiting)))
    await waiting.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(60):  # bounds the hang this was (a TimeoutError then)
            await caller


async def test_a_request_that_ends_gives_its_result_or_its_error() -> None:
    async def lists() -> str:
        return "listed"

    async def fails() -> None:
        raise ValueError("bad")

    assert await cancellable(lists()) == "listed"
    with pytest.raises(ValueError, match="bad"):
        await cancellable(fails())


# a SIGTERM while an MCP server's initialize is unanswered ends the wait: the connection's task cannot absorb
# its one cancellation
async def test_a_task_that_absorbs_a_cancellation_is_ended() -> None:
    waiting = asyncio.Event()
    task = asyncio.create_task(_absorbs_one_cancellation(waiting))
    await waiting.wait()
    async with asyncio.timeout(60):  # bounds the hang this was
        await end_task(task)
    assert task.cancelled()


async def test_ending_a_task_reads_its_failure() -> None:
    async def fails() -> None:
        raise ValueError("bad")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await end_task(task)  # no "exception was never retrieved" later; not raised here
    assert isinstance(task.exception(), ValueError)
