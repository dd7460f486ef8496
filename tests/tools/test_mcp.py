"""MCP servers as a tool source, against a real stdio server written with the `mcp` package."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError, ToolError
from crow_cli.export import export_session
from crow_cli.sessions import SessionStore
from crow_cli.tools.mcp import McpServers
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
                                   # issue: these were accepted and failed late (at start, or never)
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


def test_crow_run_calls_mcp_tools_end_to_end(tmp_path: Path) -> None:
    with ReplayServer(script(CALLS)) as server:
        proc = crow("run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                    "--config", str(_config(tmp_path)), "--yes", "use the tools", cwd=tmp_path)
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


# found trying it as a new user (second round)
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


# found trying it as a new user (second round)
def test_mcp_startup_timeout_is_honoured(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"  # a server that never answers: the smallest timeout shows it is honoured
    config.write_text(f'[mcp_servers.mute]\ncommand = "sh"\nargs = ["-c", "{MUTE}"]\nstartup_timeout = 0.01\n')
    stdout, stderr = crow_tools(tmp_path, config, capfd)
    assert "read_file" in stdout
    assert "did not start within 0.01 s" in stderr and "Traceback" not in stderr


# found trying it as a new user (second round): past its startup timeout, crow waited 10 s more for a clean stop
async def test_a_server_past_its_startup_timeout_gets_no_clean_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools import mcp

    monkeypatch.setattr(mcp, "_STOP_TIMEOUT_S", 3600.0)  # no public knob: a clean stop would now hang
    registry = ToolRegistry()
    async with asyncio.timeout(120):  # bounds that hang
        async with McpServers({"mute": {"command": "sh", "args": ["-c", MUTE], "startup_timeout": 0.01}}) as servers:
            await servers.register_tools(registry)
    assert any("did not start within 0.01 s" in error for error in registry.errors), registry.errors


# found trying it as a new user (wave 3): Ctrl-C while an MCP server was starting took 12 s to end the run: the
# server that never answered `initialize` was still given its 10 s clean stop
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
    # An MCP image used to be replaced by "[image content: image/png]" and never reached the model (issue 33 §2)
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
