"""MCP servers as a tool source, against a real stdio server written with the `mcp` package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError, ToolError
from crow_cli.tools.mcp import McpServers
from crow_cli.tools.registry import ToolRegistry
from tests.replay_server import ReplayServer
from tests.tools.cli_helpers import HERE, run_crow, script, tool_messages

SERVER = str(HERE / "mcp_demo_server.py")


def _demo(name: str = "demo", **extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [SERVER, name], **extra}


async def test_tools_are_listed_and_called(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.load_builtins()
    cwd_file = tmp_path / "cwd.txt"
    async with McpServers({"demo": _demo(env={"DEMO_CWD_FILE": str(cwd_file)})}, workspace=tmp_path) as servers:
        await servers.register_tools(registry)
        assert registry.errors == []
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
        "demo": _demo(),
    }
    async with McpServers(tables) as servers:
        await servers.register_tools(registry)
        assert registry.errors == [
            "MCP server 'missing' failed to start: command not found (/nonexistent/mcp-server)",
            "MCP server 'crashes' failed to start: MCPError: Connection closed (stderr: cannot open the database)",
        ]
        assert await registry.get("shout").invoke({"text": "ok"}) == "OK"


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
                                   {"url": "http://y", "headers": {}}, {"command": "x", "args": "a b"}])
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


def test_crow_tools_lists_mcp_tools_with_their_source(tmp_path: Path) -> None:
    proc = run_crow(["tools", "--config", str(_config(tmp_path))], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "add             Add two integers.\n                source: mcp:demo [needs approval]" in proc.stdout
    assert "shout" in proc.stdout and "source: mcp:demo\n" in proc.stdout
    assert "demo_read_file" in proc.stdout
    assert proc.stderr.strip() == ("crow: warning: MCP server 'missing' failed to start: command not found "
                                   "(/nonexistent/mcp-server)")


@pytest.mark.parametrize("yes", [True, False], ids=["yes", "no-terminal"])
def test_crow_run_calls_mcp_tools_end_to_end(tmp_path: Path, yes: bool) -> None:
    calls = [("call_a", "add", {"a": 2, "b": 40}), ("call_s", "shout", {"text": "quiet"}),
             ("call_r", "demo_read_file", {"path": "notes.md"})]
    with ReplayServer(script(calls)) as server:
        proc = run_crow(["run", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                         "--config", str(_config(tmp_path)), *(["--yes"] if yes else []), "use the tools"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "All done.\n"
    results = tool_messages(server.requests[1])
    assert [m["tool_call_id"] for m in results] == ["call_a", "call_s", "call_r"]
    if yes:
        assert [m["content"] for m in results] == ["42", "QUIET", "mcp read notes.md"]
    else:  # only the read-only tool ran; the others needed approval nobody could give
        assert results[1]["content"] == "QUIET"
        for m in (results[0], results[2]):
            assert "needs approval and nobody can approve it" in m["content"]
    for noise in ("Traceback", "Task was destroyed", "cancel scope", "RuntimeError", "ERROR"):
        assert noise not in proc.stderr
    assert "crow: warning: MCP server 'missing' failed to start" in proc.stderr
