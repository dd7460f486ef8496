"""`surfaces.runtime.Runtime`: one assembler of a run's parts, used by run, chat and acp."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.errors import ConfigError
from crow_cli.surfaces.options import SurfaceOptions
from crow_cli.surfaces.runtime import Runtime
from crow_cli.tools.registry import ToolRegistry
from tests.support import alive


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(model="m", base_url="http://llm.test/v1", api_key="sk-test", workspace=str(tmp_path),
                    **values)  # type: ignore[arg-type]


async def test_the_parts_come_in_order_and_a_model_switch_goes_through_the_runtime(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    (tmp_path / ".git").mkdir()
    async with Runtime(_settings(tmp_path), SurfaceOptions()) as runtime:
        assert runtime.workspace == tmp_path.resolve() and "Use tabs." in (runtime.settings.system or "")
        assert runtime.registry is not None and "read_file" in [t.name for t in runtime.registry]
        await runtime.start()
        driver = runtime.new_driver(None)
        first = runtime.client
        assert driver.client is first and driver.compactor is not None and driver.registry is runtime.registry
        await runtime.switch_model("other")
        assert runtime.settings.model == "other" and driver.client is runtime.client is not first
        assert runtime.driver is driver


# An editor session's parts come from the runtime: its own folder and tools, the run's secrets, sandbox and client
async def test_a_session_elsewhere_gets_the_runs_secrets_sandbox_and_client_with_its_own_tools(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    settings = _settings(tmp_path, secrets=("s3cret-value",), sandbox="read-only")
    async with Runtime(settings, SurfaceOptions()) as runtime:
        await runtime.start()
        context = runtime.context_for(folder, backup=lambda _path, _old, _sha: None)
        assert context.workspace == folder.resolve() != runtime.workspace
        assert "s3cret-value" in context.secrets and context.secrets == runtime.context.secrets
        assert context.sandbox.mode == "read-only" and context.sandbox == runtime.context.sandbox
        assert context.backup is not None and runtime.context.backup is None
        tools = ToolRegistry()
        driver = runtime.new_driver(None, context=context, tools=tools)
        assert driver.registry is tools and driver.context is context and driver.client is runtime.client
        with pytest.raises(ConfigError, match="not an existing folder"):
            runtime.context_for(tmp_path / "missing")


async def test_a_rule_naming_no_tool_is_refused_once_every_tool_is_known(tmp_path: Path) -> None:
    async with Runtime(_settings(tmp_path, deny=("no_such_tool",)), SurfaceOptions()) as runtime:
        with pytest.raises(ConfigError, match="no_such_tool"):
            await runtime.start()


async def test_no_tools_means_no_registry_and_no_instructions_when_off(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    async with Runtime(_settings(tmp_path), SurfaceOptions(no_tools=True, project_instructions=False)) as runtime:
        assert runtime.registry is None and "Use tabs." not in (runtime.settings.system or "")
        assert await runtime.start() == []


def _gated_mcp_server(tmp_path: Path, gate: Path, started: Path) -> dict[str, dict[str, object]]:
    """One `[mcp_servers]` table: the stdlib fault server, started only once `gate` exists (a server that is slow to
    start, held by an event rather than a time); `started` gets a line when its process begins."""
    server = Path(__file__).resolve().parents[1] / "tools" / "mcp_fault_server.py"
    wait = (f'echo $$ >> "{started}"; while [ ! -f "{gate}" ]; do sleep 0.02; done; '
            f'exec "{sys.executable}" "{server}" ""')
    return {"slow": {"command": "sh", "args": ["-c", wait]}}


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


# `crow run` starts its MCP servers while it reads its session and loads the SDK, not after
async def test_begin_starts_the_mcp_servers_before_start_is_awaited(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    settings = _settings(tmp_path, mcp_servers=_gated_mcp_server(tmp_path, gate, started))
    async with Runtime(settings, SurfaceOptions()) as runtime:
        assert runtime.mcp_pending == ["slow"]
        runtime.begin()
        await _until(started.exists)  # the server's process runs: nobody has awaited `start` yet
        assert runtime.mcp_pending == ["slow"]
        gate.touch()
        assert [w for w in await runtime.start() if "MCP" in w] == []
        assert runtime.mcp_pending == [] and runtime.registry is not None and runtime.registry.get("echo")


# Chat's prompt is up while its MCP servers start; their tools join when `mcp_ready` is awaited
async def test_start_without_waiting_for_mcp_leaves_their_tools_to_mcp_ready(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    settings = _settings(tmp_path, mcp_servers=_gated_mcp_server(tmp_path, gate, started), deny=("echo",))
    async with Runtime(settings, SurfaceOptions()) as runtime:
        assert runtime.registry is not None
        await runtime.start(wait_for_mcp=False)  # no wait, and the rule naming an MCP tool is not
        assert runtime.registry.get("echo") is None  # refused before it is known
        assert runtime.client is not None and runtime.mcp_pending == ["slow"]
        ready = asyncio.ensure_future(runtime.mcp_ready())
        await _until(started.exists)
        assert not ready.done()
        gate.touch()
        assert await ready == [] and runtime.registry.get("echo") is not None


# Leaving a runtime whose MCP servers are still starting stops them, the start cut short, and kills a stdio server
# that ignores the end of its stdin (a repeated cancellation must not break the client's shielded shutdown)
async def test_leaving_while_the_mcp_servers_start_stops_them(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    settings = _settings(tmp_path, mcp_servers=_gated_mcp_server(tmp_path, gate, started))
    async with Runtime(settings, SurfaceOptions()) as runtime:
        runtime.begin()
        await _until(lambda: started.exists() and started.read_text().endswith("\n"))
    assert runtime.mcp_pending == ["slow"]  # never listed: stopped while it started
    assert not alive(int(started.read_text()))  # a server that ignores the end of its stdin too


async def test_the_skill_tool_joins_only_when_there_are_skills_and_a_rule_may_name_it_anywhere(
        tmp_path: Path, _isolated_home: Path) -> None:
    # the skills' listing needs the built-in prompt; a `--deny skill` in a folder without skills is no typo
    async with Runtime(_settings(tmp_path, default_prompt=True, deny=("skill",)), SurfaceOptions()) as runtime:
        assert runtime.registry is not None and "skill" not in [t.name for t in runtime.registry]
        assert not runtime.skills and runtime.context.skills is None
        await runtime.start()  # the rule names no tool of this run, but one a run elsewhere has
    mine = _isolated_home / ".config/crow/skills/mine/SKILL.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("---\nname: mine\ndescription: Mine.\n---\nBody.\n")
    for values, offered in (({"default_prompt": True}, True), ({"default_prompt": False}, False),
                            ({"default_prompt": True, "system": ""}, False)):
        async with Runtime(_settings(tmp_path, **values), SurfaceOptions()) as runtime:
            assert runtime.registry is not None
            assert ("skill" in [t.name for t in runtime.registry]) is offered
            assert ("- mine: Mine." in (runtime.settings.system or "")) is offered
            assert (runtime.context.skills is None) is not offered
            assert runtime.context_for(tmp_path).skills is runtime.context.skills
    async with Runtime(_settings(tmp_path, default_prompt=True), SurfaceOptions(no_tools=True)) as runtime:
        assert not runtime.skills


def test_an_empty_system_prompt_file_is_one_warning_not_silence(tmp_path: Path) -> None:
    # an empty --system-file in run/chat sent no system prompt without a word
    (tmp_path / "empty.md").write_text("\n")
    said: list[str] = []
    runtime = Runtime(_settings(tmp_path, default_prompt=True, system_prompt_file=str(tmp_path / "empty.md")),
                      SurfaceOptions(project_instructions=False), warn=said.append)
    assert runtime.settings.system is None or runtime.settings.system == ""
    assert said == [f"the system prompt file '{tmp_path / 'empty.md'}' is empty: it replaces crow's built-in "
                    "system prompt with nothing"]
    quiet: list[str] = []
    Runtime(_settings(tmp_path, default_prompt=True), SurfaceOptions(project_instructions=False), warn=quiet.append)
    assert quiet == []
