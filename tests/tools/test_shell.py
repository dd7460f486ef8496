"""`run_shell` with real subprocesses: output, workspace, caps, and killing the whole process group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crow_cli.tools.builtin import shell
from crow_cli.tools.builtin.shell import run_shell
from tests.tools.cli_helpers import alive as _alive


@pytest.fixture(autouse=True)
def _in_workspace(ws: Path) -> Path:
    return ws


async def _wait_gone(pid: int) -> bool:
    for _ in range(200):
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def _read_pid(path: Path) -> int:
    for _ in range(400):
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.025)
    raise AssertionError("the grandchild never wrote its pid")


async def test_output_exit_code_and_cwd(ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    out = await run_shell.invoke({"command": "pwd; ls; echo oops >&2; exit 3"})
    assert out.splitlines() == ["[exit code 3]", str(ws), "f.txt", "oops"]


async def test_stdin_is_empty_and_secrets_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    out = await run_shell.invoke({"command": "cat; echo \"key=${OPENAI_API_KEY:-unset}\""})
    assert out == "[exit code 0]\nkey=unset\n"


async def test_output_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "MAX_OUTPUT_BYTES", 1000)
    out = await run_shell.invoke({"command": "head -c 5000 /dev/zero | tr '\\0' a"})
    assert out.splitlines()[1:] == ["a" * 667, "[output truncated: 4000 of 5000 bytes not shown]", "a" * 333]


async def test_capped_output_keeps_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 11 (friction): the end of a test run holds its summary; the cut kept only the head
    monkeypatch.setattr(shell, "MAX_OUTPUT_BYTES", 3000)
    out = await run_shell.invoke({"command": "seq 1 5000; echo '== 3 failed, 97 passed =='"})
    lines = out.splitlines()
    assert lines[:3] == ["[exit code 0]", "1", "2"]
    assert lines[-2:] == ["5000", "== 3 failed, 97 passed =="]
    assert any(line.startswith("[output truncated: ") and line.endswith(" of 23919 bytes not shown]")
               for line in lines)


async def test_timeout_kills_the_whole_group(ws: Path) -> None:
    pidfile = ws / "grandchild.pid"
    command = f"sh -c 'sleep 300 & echo $! > {pidfile}; wait' ; echo never"
    out = await run_shell.invoke({"command": command, "timeout_s": 1})
    assert out.startswith("[timed out after 1 s; the command and its process group were killed]")
    assert "never" not in out
    assert await _wait_gone(int(pidfile.read_text()))


async def test_cancellation_kills_the_whole_group(ws: Path) -> None:
    pidfile = ws / "grandchild.pid"
    task = asyncio.create_task(run_shell.invoke({"command": f"sleep 300 & echo $! > {pidfile}; wait"}))
    pid = await _read_pid(pidfile)
    assert _alive(pid)
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
    # issue 11 (smaller): timeout_s <= 0 was clamped to 0.1 s and the command killed at once
    from crow_cli.errors import ToolError

    with pytest.raises(ToolError, match="timeout_s must be more than 0 seconds"):
        await run_shell.invoke({"command": "echo hi", "timeout_s": timeout_s})
