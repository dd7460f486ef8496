"""Dispatch: every call gets one result, whatever the tool raises or returns, and a hung tool cannot keep crow alive."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from crow_cli.history import ToolCall, ToolResult
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import tool
from tests.conftest import chunk, sse, text_sse, tool_delta
from tests.support import needs_sandbox, run_against


async def results_of(registry: ToolRegistry, *calls: ToolCall, timeout_s: float = 60.0) -> dict[str, ToolResult]:
    """Dispatch `calls`; their results by call id."""
    events = [e async for e in dispatch(list(calls), registry, timeout_s=timeout_s)]
    return {e.result.call_id: e.result for e in events if e.type == "tool_result"}


# found trying it as a new user
async def test_tool_raising_cancelled_error_gets_a_result_instead_of_hanging() -> None:
    @tool
    async def cancel_tool() -> str:
        """Raises CancelledError itself."""
        raise asyncio.CancelledError()

    registry = ToolRegistry()
    registry.register(cancel_tool)
    results = await asyncio.wait_for(results_of(registry, ToolCall("c", "cancel_tool", "{}")), 60)
    assert results["c"].output == "Error: cancel_tool raised CancelledError"


# found trying it as a new user
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
async def test_tool_raising_base_exceptions_gets_a_result(exc: BaseException) -> None:
    def bad() -> str:
        """Exits."""
        raise exc

    registry = ToolRegistry()
    registry.register(tool(bad))
    results = await results_of(registry, ToolCall("c", "bad", "{}"))
    assert results["c"].output.startswith(f"Error: bad raised {type(exc).__name__}")


# found trying it as a new user
async def test_a_tools_own_timeout_error_is_not_reported_as_ours() -> None:
    @tool
    async def own_timeout() -> str:
        """Upstream timeout."""
        raise TimeoutError("upstream socket timed out")

    registry = ToolRegistry()
    registry.register(own_timeout)
    results = await results_of(registry, ToolCall("c", "own_timeout", "{}"))
    assert results["c"].output == "Error: own_timeout raised TimeoutError: upstream socket timed out"


# found trying it as a new user
async def test_undecodable_text_in_tool_output_is_made_sendable() -> None:
    @tool
    def listing() -> str:
        """A file name that was not UTF-8."""
        return "bad\udcff.txt"

    registry = ToolRegistry()
    registry.register(listing)
    results = await results_of(registry, ToolCall("c", "listing", "{}"))
    assert results["c"].output == "bad\ufffd.txt"
    results["c"].output.encode("utf-8")


# found trying it as a new user
def test_sync_tool_past_its_timeout_does_not_keep_crow_alive(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hang.py").write_text(textwrap.dedent('''
        import time
        from crow_cli.tools import tool

        @tool
        def hang() -> str:
            """Never returns in time."""
            time.sleep(3600)
            return "late"
    '''))
    config = tmp_path / "c.toml"
    config.write_text("tool_timeout = 1\n")
    call = sse(chunk({"tool_calls": [tool_delta(0, "h1", "hang", "{}")]}), chunk({}, "tool_calls"))
    # it used to wait for the thread: the hour-long nap, cut by the subprocess timeout (a hang bound), fails it
    proc, requests = run_against([{"sse": call}, {"sse": text_sse("gave up")}], "--config", str(config),
                                 "--tools-dir", str(plugins), "go", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "gave up\n"
    assert "timed out after 1 s" in requests[1]["messages"][2]["content"]


# issue: a command the sandbox stopped is reported to the model with the reason, and the user may run it
# once outside the sandbox (an escalation question); where nobody can answer, that is a denial
@needs_sandbox()
@pytest.mark.parametrize("answer", ["yes", "no", None])
async def test_a_command_the_sandbox_stopped_runs_outside_it_only_with_a_yes(tmp_path: Path,
                                                                              answer: str | None) -> None:
    from crow_cli.tools.approval import UNCONFINED_MARK, make_approver
    from crow_cli.tools.builtin.shell import run_shell
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.sandbox import Sandbox

    (tmp_path / "ws").mkdir()
    asked: list[str] = []

    async def ask(call: ToolCall, t: object, preview: str) -> str:
        asked.append(preview)
        return str(answer)

    registry = ToolRegistry()
    registry.register(run_shell)
    context = ToolContext(tmp_path / "ws", sandbox=Sandbox("workspace-write", temp_dir=str(tmp_path / "ws")))
    approve = make_approver("yolo", ask=None if answer is None else ask)  # type: ignore[arg-type]
    call = ToolCall("c", "run_shell", json.dumps({"command": f"echo out > {tmp_path}/outside"}))
    events = [e async for e in dispatch([call], registry, approve=approve, context=context)]
    result = next(e.result for e in events if e.type == "tool_result")
    assert (tmp_path / "outside").exists() == (answer == "yes")
    if answer == "yes":
        assert result.output == "[exit code 0] (no output)"
        assert asked[0].startswith(f"{UNCONFINED_MARK}[the sandbox (workspace-write) refused a write outside")
        assert asked[0].endswith(f"$ echo out > {tmp_path}/outside")
    else:
        assert "Read-only file system" in result.output and not result.ok
        assert result.output.endswith("the sandbox (workspace-write) refused a write outside the workspace and the "
                                      "temp dir (or to .git): read-only file system. It was not "
                                      "run outside the sandbox. Do not retry it unchanged; work inside the "
                                      "workspace]")
    assert len(asked) == (0 if answer is None else 1)


# issue: a tool result records how it ended as a field, so no surface matches result strings
async def test_every_result_records_its_outcome() -> None:
    from crow_cli.errors import ToolDenied, ToolError, ToolFailed

    @tool(timeout_s=0.01)
    async def hangs() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    @tool
    def fails() -> str:
        """Fails."""
        raise ToolError("broken")

    @tool
    def refuses() -> str:
        """Refused by its own check."""
        raise ToolDenied("not here")

    @tool(needs_approval=True)
    def guarded() -> str:
        """Needs approval."""
        return "ran"

    @tool
    def fine() -> str:
        """Works."""
        return "yes"

    @tool
    def exits() -> str:
        """Ran and failed (noticed at the end of wave 3: run_shell exiting non-zero was shown ✓)."""
        raise ToolFailed("exit code 3", "[exit code 3]\nnope\n")

    registry = ToolRegistry()
    for t in (hangs, fails, refuses, guarded, fine, exits):
        registry.register(t)
    calls = [ToolCall(name, name, "{}", n) for n, name in enumerate(("hangs", "fails", "refuses", "guarded", "fine",
                                                                      "nope", "exits"))]
    calls.append(ToolCall("cut", "fine", "{}", 7, cut_off=True))
    results = await results_of(registry, *calls)
    assert {k: (r.outcome, r.ok) for k, r in results.items()} == {
        "hangs": ("timeout", False), "fails": ("error", False), "refuses": ("denied", False),
        "guarded": ("denied", False), "fine": ("ok", True), "nope": ("unknown_tool", False), "cut": ("error", False),
        "exits": ("error", False)}
    assert results["exits"].output == "[exit code 3]\nnope\n"  # the model reads it as it is, no "Error:"


# issue: run_shell masked known secrets, but read_file, search_files, MCP and plugin results did not: a .env
# holding the OpenAI key, read while talking to another server, sent the key to it
async def test_every_tools_output_is_masked_in_one_place(tmp_path: Path) -> None:
    from crow_cli.tools.builtin import BUILTIN_TOOLS
    from crow_cli.tools.context import ToolContext

    key = "sk-proj-openai-key-123456"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={key}\n")

    @tool
    def plugin() -> str:
        """Leaks."""
        return f"found {key}"

    registry = ToolRegistry()
    for t in (*BUILTIN_TOOLS, plugin):
        registry.register(t)
    calls = [ToolCall("read", "read_file", json.dumps({"path": ".env"}), 0),
             ToolCall("search", "search_files", json.dumps({"pattern": "OPENAI"}), 1),
             ToolCall("plugin", "plugin", "{}", 2)]
    events = [e async for e in dispatch(calls, registry, context=ToolContext(tmp_path, (key,)))]
    outputs = {e.result.call_id: e.result.output for e in events if e.type == "tool_result"}
    assert all(key not in out and "[REDACTED]" in out for out in outputs.values()), outputs
