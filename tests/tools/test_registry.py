"""The registry (`tools/registry`) and the plugin API.

Properties guarded here:

- schemas come from type hints and docstrings; tools load from plugin folders and the built-ins;
- plugin tools shipped as a package load through a real `*.dist-info` entry point on sys.path;
- the plugin API: what `crow_cli.tools` exports, and the context dispatch hands a tool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import crow_cli.tools
from crow_cli.errors import ConfigError, ToolError
from crow_cli.events import ToolResultReady
from crow_cli.history import ToolCall
from crow_cli.tools import ToolContext, ToolFailed, resolve_in_workspace, tool, workspace_root
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry, default_registry
from tests.support import CROW, TOOLS

ROOT = Path(__file__).resolve().parents[2]


def test_schema_comes_from_type_hints_and_docstring():
    @tool
    def search(query: str, limit: int = 10, tags: list[str] | None = None) -> str:
        """Search the notes.

        Longer explanation.

        Args:
            query: words to look for.
            limit: most results to return.
        """
        return query

    schema = search.schema()
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "search"
    assert fn["description"] == "Search the notes.\n\nLonger explanation."
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string", "description": "words to look for."}
    assert params["properties"]["limit"] == {"type": "integer", "default": 10, "description": "most results to return."}
    assert "tags" in params["properties"]
    assert search("x") == "x"  # still callable


def test_validate_reports_missing_and_wrong_types():
    @tool
    def f(n: int) -> int:
        """F."""
        return n

    assert f.validate({"n": "3"}) == {"n": 3}
    with pytest.raises(ToolError, match="n: Field required"):
        f.validate({})
    with pytest.raises(ToolError, match="arguments must be a JSON object"):
        f.validate([1])


def test_duplicate_names_get_a_suffix_and_keep_their_source(tmp_path):
    registry = ToolRegistry()
    registry.load_builtins()
    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        from crow_cli.tools import tool

        @tool
        def read_file(path: str) -> str:
            """My own read_file."""
            return path
    '''))
    registry.load_folder(tmp_path)
    assert registry.get("read_file").source == "builtin"
    assert registry.get("read_file_2").source == str(tmp_path / "mine.py")


def test_a_builtin_registered_after_the_plugins_keeps_its_name(tmp_path):
    """The built-ins a run adds after the plugins (`task`, `skill`) keep their names: a plugin tool that took
    one moves to a suffix, as it would had the built-in come first, and it is said."""
    from crow_cli.surfaces.task import Subagents

    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        from crow_cli.tools import tool

        @tool
        def task(prompt: str) -> str:
            """My own task."""
            return prompt
    '''))
    registry = default_registry([str(tmp_path)])
    registry.register(Subagents(lambda: None).tool, source="builtin")  # as the runtime adds it
    assert registry.get("task").source == "builtin"
    assert registry.get("task").description.startswith("Start a subagent")
    assert registry.get("task_2").source == str(tmp_path / "mine.py")
    assert registry.errors == [f"tool 'task' from {tmp_path / 'mine.py'} is named 'task_2': 'task' is taken (builtin)"]


def test_example_tools_folder_loads_and_runs():
    registry = default_registry([str(ROOT / "tools")], builtins=False)
    assert {t.name for t in registry} == {"roll_dice", "current_time"}
    assert registry.get("roll_dice")(sides=6, count=2).startswith("rolls: [")


def test_broken_plugin_file_is_reported_not_fatal(tmp_path):
    (tmp_path / "bad.py").write_text("raise RuntimeError('nope')\n")
    (tmp_path / "_private.py").write_text("raise RuntimeError('never imported')\n")
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    registry.load_folder(tmp_path / "missing")
    assert len(registry) == 0
    assert len(registry.errors) == 2 and "bad.py" in registry.errors[0] and "nope" in registry.errors[0]


def test_register_tools_hook_in_a_module(tmp_path):
    (tmp_path / "hooked.py").write_text(textwrap.dedent('''
        def ping() -> str:
            """Answer pong."""
            return "pong"

        def register_tools(register):
            register(ping)
    '''))
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    assert registry.get("ping").description == "Answer pong."


def test_crows_own_tools_come_through_the_plugin_hook_as_builtin(tmp_path, monkeypatch):
    # the built-ins are a plugin as any other (llm's default_plugins): a module named in DEFAULT_PLUGINS is
    # loaded by its register_tools hook, first, and each of crow's tools is registered as a copy of its own
    from crow_cli.tools import registry as registry_module
    from crow_cli.tools.builtin import BUILTIN_TOOLS

    (tmp_path / "crow_test_own.py").write_text(textwrap.dedent('''
        def ping() -> str:
            """Answer pong."""
            return "pong"

        def register_tools(register):
            register(ping)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_module, "DEFAULT_PLUGINS", ("crow_cli.tools.builtin", "crow_test_own"))
    registry = default_registry()
    names = [t.name for t in registry]
    assert names[: len(BUILTIN_TOOLS) + 1] == [*(t.name for t in BUILTIN_TOOLS), "ping"]
    assert {t.source for t in list(registry)[: len(BUILTIN_TOOLS) + 1]} == {"builtin"}
    assert all(registry.get(t.name) is not t for t in BUILTIN_TOOLS)


def test_entry_point_plugins_load_from_an_installed_distribution(tmp_path, monkeypatch):
    pkg = tmp_path / "crow_demo_plugin.py"
    pkg.write_text(textwrap.dedent('''
        from crow_cli.tools import tool

        @tool
        def wave(name: str) -> str:
            """Wave at someone."""
            return f"o/ {name}"
    '''))
    dist = tmp_path / "crow_demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: crow-demo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[crow_cli.tools]\ndemo = crow_demo_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = ToolRegistry()
    registry.load_entry_points()
    assert registry.get("wave").source == "entry point demo"
    sys.modules.pop("crow_demo_plugin", None)


async def test_sync_tools_run_in_a_worker_thread_and_async_on_the_loop():
    import threading

    main = threading.get_ident()

    @tool
    def where() -> str:
        """Thread."""
        return "main" if threading.get_ident() == main else "worker"

    @tool
    async def where_async() -> str:
        """Loop."""
        return "main" if threading.get_ident() == main else "worker"

    assert await where.invoke({}) == "worker"
    assert await where_async.invoke({}) == "main"
    assert await tool(lambda: {"a": 1}, name="obj").invoke({}) == '{"a": 1}'


# A plugin exiting at import is a load error, not crow's exit
def test_plugin_exiting_at_import_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(5)\n")
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    assert len(registry) == 0 and "SystemExit" in registry.errors[0]


class Weird:
    """An arbitrary class: pydantic has no schema for it."""


# A tool with a type no schema can describe is dropped with a reason
def test_tool_with_an_undescribable_type_is_dropped_with_a_reason() -> None:
    def weird(w: Weird) -> str:
        """Takes something pydantic cannot describe."""
        return "x"

    registry = ToolRegistry()
    registry.register(tool(weird))
    assert registry.schemas() == []
    assert "weird" in registry.errors[0] and "dropped" in registry.errors[0]


# The same tools folder given twice loads once
def test_same_folder_twice_loads_once() -> None:
    registry = ToolRegistry()
    registry.load_folder(TOOLS)
    registry.load_folder(str(TOOLS) + "/")
    assert sorted(t.name for t in registry) == ["current_time", "roll_dice"]


def test_plugin_names_servers_refuse_get_unique_wire_names_warned_once_each(tmp_path: Path) -> None:
    # One naming rule for every source of tools; OpenAI answers 400 for `tools[1].function.name`
    # outside ^[a-zA-Z0-9_-]+$ (hackers365/xiaozhi-esp32-server-golang#268)
    (tmp_path / "odd.py").write_text(textwrap.dedent('''
        from crow_cli.tools.tool import Tool

        def _f(**kw):
            return "ok"

        A = Tool("fs.read", "read a file (plugin)", _f, parameters={"type": "object", "properties": {}})
        B = Tool("fs_read", "read a file (other plugin)", _f, parameters={"type": "object", "properties": {}})
        C = Tool("fs/read", "read a file (third)", _f, parameters={"type": "object", "properties": {}})
    '''))
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    offered = {s["function"]["name"]: s["function"]["description"] for s in registry.schemas()}
    # a name servers take keeps it, whatever the order; the others are made unique
    assert offered == {"fs_read_2": "read a file (plugin)", "fs_read": "read a file (other plugin)",
                       "fs_read_3": "read a file (third)"}
    for wire, description in offered.items():
        found = registry.get(wire)
        assert found is not None and found.description == description
        assert registry.wire_name(found.name) == wire
    assert registry.get("fs.read").description == "read a file (plugin)"  # the registered name still works
    assert sum("offered to the model as" in e for e in registry.errors) == 2


def test_a_tools_dir_that_is_a_symlink_loop_is_reported(tmp_path):
    # `--tools-dir loop` (`ln -s loop loop`) is reported, not ignored silently
    (tmp_path / "loop").symlink_to("loop")
    registry = ToolRegistry()
    registry.load_folder(tmp_path / "loop")
    assert registry.errors == [f"tools folder {str(tmp_path / 'loop')!r} is a symlink loop"]

PLUGIN = '''
from crow_cli.tools import tool


@tool
def reverse(text: str) -> str:
    """Reverse some text.

    Args:
        text: what to reverse.
    """
    return text[::-1]


@tool(needs_approval=True, parallel=False)
def read_file(path: str) -> str:
    """A plugin tool whose name is taken by a built-in."""
    return path
'''

BROKEN = "raise ImportError('the plugin needs numpy')\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder laid out like site-packages: two packages, each with its dist-info and entry point."""
    for name, body in (("crow_reverse", PLUGIN), ("crow_broken", BROKEN)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
        info = tmp_path / f"{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[crow_cli.tools]\n{name.split('_')[1]} = {name}\n")
    return tmp_path


def test_entry_points_load_in_process(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(site))
    registry = ToolRegistry()
    registry.load_builtins()
    registry.load_entry_points()
    reverse = registry.get("reverse")
    assert reverse is not None and reverse.source == "entry point reverse"
    assert reverse.schema()["function"]["parameters"] == {"type": "object", "required": ["text"],
                                  "properties": {"text": {"type": "string", "description": "what to reverse."}}}
    assert registry.get("read_file").source == "builtin"
    assert registry.get("read_file_2").source == "entry point reverse"
    assert sorted(registry.errors) == [
        "tool 'read_file' from entry point reverse is named 'read_file_2': 'read_file' is taken (builtin)",
        "tool plugin 'broken' failed to load: ImportError: the plugin needs numpy",
    ]


def test_crow_tools_lists_entry_point_tools(site: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([str(CROW), "tools"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "reverse         Reverse some text.\n                source: entry point reverse\n" in proc.stdout
    assert "read_file_2" in proc.stdout
    assert "crow: warning: tool plugin 'broken' failed to load: ImportError: the plugin needs numpy\n" in proc.stderr
    assert "crow: warning: tool 'read_file' from entry point reverse is named 'read_file_2'" in proc.stderr

def test_the_exported_names_are_the_plugin_api() -> None:
    # A declared plugin API, guarded (as httpx's test_exported_members guards its exports);
    # Compared with what the module really holds, so a name added or dropped without `__all__` fails
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
    # The workspace and secrets travel in an explicit context passed to dispatch
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


# A plugin can say "it ran and failed" (ToolFailed) as run_shell does: the model reads the tool's own output,
# not the "Error: ..." of a ToolError
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


# A ToolFailed whose output is not text (rows, as a tool may return them) gives it as JSON: every call of the
# turn gets its result, no "internal error: ExceptionGroup"
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


# ToolFailed("msg") without an output gives the model its message, not "TypeError: ... missing 1 required
# positional argument: 'output'"
async def test_a_tool_failed_without_an_output_gives_its_message() -> None:
    registry = ToolRegistry()
    registry.register(check)
    events = [e async for e in dispatch([ToolCall("c1", "check", "{}", 0)], registry)]
    result = next(e.result for e in events if isinstance(e, ToolResultReady))
    assert (result.output, result.outcome) == ("3 tests failed", "error")
