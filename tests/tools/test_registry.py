"""The registry: schemas from hints and docstrings, plugin folders, entry points, built-ins."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.registry import ToolRegistry, default_registry
from crow_cli.tools.tool import tool
from tests.support import TOOLS

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


# found trying it as a new user
def test_plugin_exiting_at_import_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(5)\n")
    registry = ToolRegistry()
    registry.load_folder(tmp_path)
    assert len(registry) == 0 and "SystemExit" in registry.errors[0]


class Weird:
    """An arbitrary class: pydantic has no schema for it."""


# found trying it as a new user
def test_tool_with_an_undescribable_type_is_dropped_with_a_reason() -> None:
    def weird(w: Weird) -> str:
        """Takes something pydantic cannot describe."""
        return "x"

    registry = ToolRegistry()
    registry.register(tool(weird))
    assert registry.schemas() == []
    assert "weird" in registry.errors[0] and "dropped" in registry.errors[0]


# found trying it as a new user
def test_same_folder_twice_loads_once() -> None:
    registry = ToolRegistry()
    registry.load_folder(TOOLS)
    registry.load_folder(str(TOOLS) + "/")
    assert sorted(t.name for t in registry) == ["current_time", "roll_dice"]


def test_plugin_names_servers_refuse_get_unique_wire_names_warned_once_each(tmp_path: Path) -> None:
    # issue: one naming rule for every source of tools; OpenAI answers 400 for `tools[1].function.name`
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
    # issue: `--tools-dir loop` (`ln -s loop loop`) was ignored silently
    (tmp_path / "loop").symlink_to("loop")
    registry = ToolRegistry()
    registry.load_folder(tmp_path / "loop")
    assert registry.errors == [f"tools folder {str(tmp_path / 'loop')!r} is a symlink loop"]
