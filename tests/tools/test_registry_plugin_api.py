"""The plugin API: what `crow_cli.tools` exports, and the context dispatch hands a tool (issue 9)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

import crow_cli.tools
from crow_cli.errors import ConfigError
from crow_cli.events import ToolResultReady
from crow_cli.history import ToolCall
from crow_cli.tools import ToolContext, ToolFailed, resolve_in_workspace, tool, workspace_root
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry


def test_the_exported_names_are_the_plugin_api() -> None:
    # A declared plugin API, guarded (as httpx's test_exported_members guards its exports); (issue 9)
    # Compared with what the module really holds, so a name added or dropped without `__all__` fails (issue 18)
    public = {name for name, value in vars(crow_cli.tools).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert sorted(crow_cli.tools.__all__) == sorted(public) == [
        "Image", "OutsideWorkspace", "Tool", "ToolContext", "ToolError", "ToolFailed", "resolve_in_workspace", "tool",
        "workspace_root"]


@tool
def where(path: str, context: ToolContext) -> str:
    """Say where a path is and which secrets the run has.

    Args:
        path: a path in the workspace.
    """
    # the secrets reversed: dispatch masks them as they are in every tool's output
    return json.dumps([str(context.workspace), [s[::-1] for s in context.secrets], str(resolve_in_workspace(path)),
                       str(workspace_root())])


@tool
async def where_async(context: ToolContext | None = None) -> str:
    """The workspace, from an async tool."""
    assert context is not None
    return str(context.workspace)


async def _run(registry: ToolRegistry, call: ToolCall, context: ToolContext | None) -> str:
    events = [e async for e in dispatch([call], registry, context=context)]
    return next(e.result.output for e in events if isinstance(e, ToolResultReady))


async def test_dispatch_hands_the_run_context_to_a_tool_that_declares_it(tmp_path: Path) -> None:
    # The workspace and secrets travel in an explicit context passed to dispatch (issue 9)
    registry = ToolRegistry()
    registry.register(where)
    registry.register(where_async)
    assert "context" not in where.schema()["function"]["parameters"]["properties"]
    assert where.schema()["function"]["parameters"]["required"] == ["path"]
    assert where_async.schema()["function"]["parameters"]["properties"] == {}
    context = ToolContext.for_workspace(tmp_path, secrets=["sk-test-123456"])
    # what the model sends for `context` is ignored: dispatch fills it in
    call = ToolCall("c1", "where", json.dumps({"path": "sub/x", "context": "fake"}), 0)
    root, secrets, resolved, current = json.loads(await _run(registry, call, context))
    assert (root, secrets, current) == (str(tmp_path.resolve()), ["654321-tset-ks"], str(tmp_path.resolve()))
    assert resolved == str(tmp_path.resolve() / "sub" / "x")
    assert await _run(registry, ToolCall("c2", "where_async", "{}", 1), context) == str(tmp_path.resolve())


async def test_without_a_context_tools_run_in_the_working_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(where)
    monkeypatch.chdir(tmp_path)
    root, secrets, _resolved, _current = json.loads(
        await _run(registry, ToolCall("c1", "where", json.dumps({"path": "."}), 0), None))
    assert (root, secrets) == (str(tmp_path.resolve()), [])


def test_a_workspace_that_is_not_a_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not an existing folder"):
        ToolContext.for_workspace(tmp_path / "missing")


@tool
def lint(path: str) -> str:
    """Lint a file.

    Args:
        path: the file.
    """
    raise ToolFailed("2 problems", f"{path}:1: unused import\n{path}:3: line too long")


# noticed in issue 20's work: run_shell could say "it ran and failed" (ToolFailed), a plugin could not: its only
# way was ToolError, whose result the model reads as "Error: ..." instead of the tool's own output
async def test_a_plugin_tool_that_ran_and_failed_gives_its_output_as_a_failed_call() -> None:
    registry = ToolRegistry()
    registry.register(lint)
    events = [e async for e in dispatch([ToolCall("c1", "lint", json.dumps({"path": "a.py"}), 0)], registry)]
    result = next(e.result for e in events if isinstance(e, ToolResultReady))
    assert (result.output, result.outcome, result.ok) == ("a.py:1: unused import\na.py:3: line too long", "error",
                                                          False)


@tool
def lint_rows(path: str) -> str:
    """Lint a file, the problems as rows."""
    raise ToolFailed("2 problems", [{"file": path, "line": 1}, {"file": path, "line": 3}])  # type: ignore[arg-type]


@tool
async def lint_later(path: str) -> str:
    """Lint a file, asynchronously."""
    raise ToolFailed("1 problem", {"file": path, "line": 2})  # type: ignore[arg-type]


# found trying ToolFailed as a new plugin author: output that was not text (rows, as a tool may return them)
# ended the whole run with "internal error: ExceptionGroup" and no result for any call of the turn
async def test_a_failed_call_whose_output_is_not_text_gives_it_as_json() -> None:
    registry = ToolRegistry()
    registry.register(lint_rows)
    registry.register(lint_later)
    calls = [ToolCall("c1", "lint_rows", '{"path": "a.py"}', 0), ToolCall("c2", "lint_later", '{"path": "b.py"}', 1)]
    events = [e async for e in dispatch(calls, registry)]
    results = {e.result.call_id: e.result for e in events if isinstance(e, ToolResultReady)}
    assert json.loads(results["c1"].output) == [{"file": "a.py", "line": 1}, {"file": "a.py", "line": 3}]
    assert json.loads(results["c2"].output) == {"file": "b.py", "line": 2}
    assert {(r.outcome, r.ok) for r in results.values()} == {("error", False)}


@tool
def check() -> str:
    """Check the project."""
    raise ToolFailed("3 tests failed")


# tester4 (this session's changes, as a new user): ToolFailed("msg") without an output gave the model
# "TypeError: ... missing 1 required positional argument: 'output'"
async def test_a_tool_failed_without_an_output_gives_its_message() -> None:
    registry = ToolRegistry()
    registry.register(check)
    events = [e async for e in dispatch([ToolCall("c1", "check", "{}", 0)], registry)]
    result = next(e.result for e in events if isinstance(e, ToolResultReady))
    assert (result.output, result.outcome) == ("3 tests failed", "error")
