"""`crow tools`: the tools `crow run` would offer, as text or JSON, and why a tool is unusable."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import CROW, alive, crow, crow_here, wait_for

PLUGIN = '''
import socket

from crow_cli.tools import tool


@tool
def bad(conn: socket.socket) -> str:
    """Needs a socket, which no JSON schema describes."""
    return ""


@tool(needs_approval=True, kind="shell", parallel=False)
def good(count: int) -> str:
    """Count things.

    Args:
        count: how many.
    """
    return str(count)
'''


def crow_tools(capfd: pytest.CaptureFixture[str], cwd: Path, *args: str) -> tuple[str, str]:
    """What `crow tools ARGS` prints in `cwd` (crow's app in this process; `capfd`: stdout is descriptor 1, as
    `stdout.private_stdout` keeps it): stdout, stderr."""
    capfd.readouterr()
    with contextlib.chdir(cwd):
        code = crow_here("tools", *args)
    out, err = capfd.readouterr()
    assert code == 0, err
    return out, err


def _plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "mixed.py").write_text(PLUGIN)
    return folder


def test_a_tool_crow_run_would_drop_is_listed_as_unusable_with_why(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    # A tool `crow run` would drop (`bad`) is listed by `crow tools` as unusable, with why, never as usable
    stdout, stderr = crow_tools(capfd, tmp_path, "--tools-dir", str(_plugins(tmp_path)))
    usable, _, unusable = stdout.partition("unusable")
    assert "good" in usable and "bad" not in usable
    assert "bad" in unusable and "its schema cannot be derived" in unusable
    assert "bad" not in stderr  # said once, in the listing


def test_tools_json_describes_every_tool(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # `crow tools --json` gives each tool's source, kind, approval, parameters and, if unusable, the problem
    stdout, _ = crow_tools(capfd, tmp_path, "--json", "--tools-dir", str(_plugins(tmp_path)))
    tools = {t["name"]: t for t in json.loads(stdout)}
    assert tools["read_file"] | {"parameters": None, "description": None} == {
        "name": "read_file", "description": None, "source": "builtin", "kind": "read", "needs_approval": False,
        "parallel": True, "usable": True, "problem": None, "parameters": None}
    assert tools["read_file"]["parameters"]["required"] == ["path"]
    assert tools["good"]["kind"] == "shell" and tools["good"]["needs_approval"] and not tools["good"]["parallel"]
    assert tools["good"]["parameters"]["properties"]["count"] == {"description": "how many.", "type": "integer"}
    assert not tools["bad"]["usable"] and tools["bad"]["parameters"] is None
    assert tools["bad"]["problem"].startswith("its schema cannot be derived")


NOISY = '''
import os

from crow_cli.tools import tool

print("IMPORT-PRINT")
os.write(1, b"IMPORT-FD1\\n")


@tool
def noisy() -> str:
    """Noisy at import."""
    return ""
'''


def test_a_plugin_printing_at_import_never_reaches_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # What a plugin prints at import goes to stderr, so `crow tools --json` stays valid JSON
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "noisy.py").write_text(NOISY)
    proc = crow("tools", "--json", "--tools-dir", str(folder), cwd=tmp_path)  # a process: its own descriptor 1
    assert proc.returncode == 0, proc.stderr
    assert "IMPORT-" not in proc.stdout and "IMPORT-PRINT" in proc.stderr and "IMPORT-FD1" in proc.stderr
    assert any(t["name"] == "noisy" for t in json.loads(proc.stdout))
    stdout, stderr = crow_tools(capfd, tmp_path, "--tools-dir", str(folder))  # the listing as text, in this process
    assert "IMPORT-" not in stdout and "IMPORT-PRINT" in stderr and "IMPORT-FD1" in stderr
    assert "noisy" in stdout


def test_outside_text_in_the_listing_loses_its_control_characters(tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    # A plugin's folder and file name reach the terminal without their escapes
    folder = tmp_path / "plug\x1b]0;pwned\x07ins"
    folder.mkdir()
    (folder / "evil\x1b[2Jname.py").write_text(PLUGIN)
    stdout, _ = crow_tools(capfd, tmp_path, "--tools-dir", str(folder))
    assert "\x1b" not in stdout and "\x07" not in stdout and "evil[2Jname.py" in stdout
    rows = json.loads(crow_tools(capfd, tmp_path, "--json", "--tools-dir", str(folder))[0])
    assert any("evil\x1b[2Jname.py" in row["source"] for row in rows)  # JSON stays exact


# SIGTERM while `crow tools` lists the MCP servers' tools stops the servers and ends as crow run does (exit 143,
# one line)
def test_a_signal_while_mcp_servers_list_stops_them_and_exits_128_plus_n(tmp_path: Path) -> None:
    started = tmp_path / "pids"
    server = Path(__file__).parents[1] / "tools" / "mcp_fault_server.py"
    config = tmp_path / "c.toml"
    config.write_text(f'[mcp_servers.mute]\ncommand = {sys.executable!r}\nargs = [{str(server)!r}, "hang_list"]\n'
                      f'env = {{ FAULT_PID_FILE = {str(started)!r} }}\nstartup_timeout = 3000\n')
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([CROW, "tools", "--config", str(config)], cwd=tmp_path, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(started.exists)  # the server runs (and will never list its tools)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (143, "", "crow: interrupted (SIGTERM)\n")
    pid = int(started.read_text().split()[0])
    wait_for(lambda: not alive(pid))
