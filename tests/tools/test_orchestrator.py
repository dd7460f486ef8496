"""The orchestrator: what a call runs under while the session plans (issue 43 §1)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from crow_cli.history import ToolCall
from crow_cli.tools.approval import make_approver
from crow_cli.tools.context import ToolContext
from crow_cli.tools.orchestrator import Orchestrator
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.sandbox import Sandbox
from crow_cli.tools.tool import tool


@contextlib.asynccontextmanager
async def _hold(exclusive: bool) -> AsyncIterator[None]:
    yield


def _shell_seeing(seen: list[str]) -> ToolRegistry:
    @tool(needs_approval=True, kind="shell", subject=lambda args: args["command"])
    def sh(command: str, context: ToolContext | None = None) -> str:
        """A shell tool that says which sandbox it was handed."""
        assert context is not None
        seen.append(context.sandbox.mode)
        return "ran"

    registry = ToolRegistry()
    registry.register(sh)
    return registry


async def test_a_read_only_command_runs_in_a_read_only_sandbox_while_planning_and_as_asked_otherwise() -> None:
    seen: list[str] = []
    registry = _shell_seeing(seen)
    context = ToolContext(sandbox=Sandbox("workspace-write"))
    call = ToolCall("c1", "sh", json.dumps({"command": "ls"}))
    planning = Orchestrator(registry, make_approver("plan"), context, _hold)
    result = await planning.run(call)
    assert result.ok, result.output
    working = Orchestrator(registry, make_approver("yolo"), context, _hold)
    assert (await working.run(call)).ok
    assert seen == ["read-only", "workspace-write"]


async def test_exit_plan_mode_reaches_the_approvals_of_the_run() -> None:
    from crow_cli.tools.builtin import BUILTIN_TOOLS

    registry = ToolRegistry()
    for builtin in BUILTIN_TOOLS:
        registry.register(builtin)
    approvals = make_approver("plan")
    orchestrator = Orchestrator(registry, approvals, ToolContext(), _hold)
    result = await orchestrator.run(ToolCall("p", "exit_plan_mode", json.dumps({"plan": "# Plan"})))
    assert result.ok and approvals.take_plan() == "# Plan"


async def test_a_call_that_may_write_runs_between_two_snapshots_and_a_read_takes_none() -> None:
    # issue 44 §3: /rewind needs the workspace as each call that may write found and left it; reads stay cheap
    taken: list[str] = []
    seen: list[str] = []

    async def snapshot(kind: str) -> None:
        taken.append(f"{kind} ({len(seen)} run)")

    @tool(kind="read")
    def look(path: str) -> str:
        """A read."""
        return path

    @tool(kind="other")
    def note(text: str) -> str:
        """An `other` tool that needs no approval (a todo list)."""
        return text

    registry = _shell_seeing(seen)
    registry.register(look)
    registry.register(note)
    context = ToolContext(sandbox=Sandbox("off"), snapshot=snapshot)
    orchestrator = Orchestrator(registry, make_approver("yolo"), context, _hold)
    for call in (ToolCall("c1", "sh", json.dumps({"command": "sed -i s/a/b/ f"})),
                 ToolCall("c2", "sh", json.dumps({"command": "ls -l"})), ToolCall("c3", "look", '{"path": "f"}'),
                 ToolCall("c4", "note", '{"text": "t"}')):
        assert (await orchestrator.run(call)).ok
    assert taken == ["before (0 run)", "after (1 run)"]  # the `sed -i` only
