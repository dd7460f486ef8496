"""The orchestrator (`tools.orchestrator`), the one owner of a call's fate: each step in its order (validate →
`PreToolUse` hooks → approval → run in the sandbox → the escalation question), and what a plan runs under."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crow_cli.history import ToolCall
from crow_cli.tools.approval import Answer, Question, make_approver
from crow_cli.tools.context import ToolContext
from crow_cli.tools.hooks import Hooks, parse_hooks
from crow_cli.tools.orchestrator import Orchestrator
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.sandbox import Sandbox, SandboxBlocked
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


class Asker:
    """A surface's question: records each `Question` and answers with the next of `answers`."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[Question] = []

    async def __call__(self, question: Question) -> Answer:
        self.asked.append(question)
        return Answer(self.answers.pop(0))


def _confined(runs: list[str], *, needs_approval: bool = False) -> ToolRegistry:
    """A tool the sandbox stops whenever it runs confined (what `run_shell` raises then), and which runs outside."""
    @tool(needs_approval=needs_approval, kind="shell", subject=lambda args: args["command"])
    def sh(command: str, context: ToolContext | None = None) -> str:
        """Runs `command`; the sandbox refuses it."""
        assert context is not None
        runs.append(context.sandbox.mode)
        if context.sandbox.confines:
            raise SandboxBlocked("the sandbox refused a write outside the workspace", "[exit code 1]\nEROFS")
        return "ran outside"

    registry = ToolRegistry()
    registry.register(sh)
    return registry


CONFINED = ToolContext(sandbox=Sandbox("workspace-write"))
CALL = ToolCall("c1", "sh", json.dumps({"command": "touch /elsewhere"}))


@pytest.mark.parametrize("policy", ["ask", "auto-edit", "yolo"])
async def test_a_call_the_sandbox_stopped_runs_outside_it_only_after_a_yes_to_that_question(policy: str) -> None:
    # no policy, `yolo` included, runs a call outside the sandbox by itself: only a yes to the question about
    # leaving it does, and it is asked after the confined run, with no "always" offered
    for answer, outside in (("no", False), ("yes", True)):
        runs: list[str] = []
        asker = Asker(answer)
        orchestrator = Orchestrator(_confined(runs), make_approver(policy, ask=asker), CONFINED, _hold)
        result = await orchestrator.run(CALL)
        assert runs == (["workspace-write", "off"] if outside else ["workspace-write"])
        [question] = asker.asked
        assert question.outside and question.choices == ("yes", "no")
        assert (result.ok, result.outcome) == ((True, "ok") if outside else (False, "denied"))
        assert (result.output == "ran outside") if outside else ("It was not run outside the sandbox" in result.output)


@pytest.mark.parametrize("policy", ["yolo", "read-only", "plan"])
async def test_with_nobody_to_ask_or_a_policy_that_stays_inside_nothing_runs_outside_the_sandbox(policy: str) -> None:
    runs: list[str] = []
    asker = Asker("yes")
    ask = None if policy == "yolo" else asker
    orchestrator = Orchestrator(_confined(runs), make_approver(policy, ask=ask), CONFINED, _hold)
    result = await orchestrator.run(CALL)
    assert runs == ["read-only" if policy == "plan" else "workspace-write"] and asker.asked == []
    assert (result.ok, result.outcome) == (False, "denied")
    nobody = Orchestrator(_confined(runs := []), None, CONFINED, _hold)
    assert (await nobody.run(CALL)).outcome == "denied" and runs == ["workspace-write"]


async def test_a_call_that_needs_approval_runs_only_after_a_yes_and_a_no_is_a_denial() -> None:
    runs: list[str] = []
    context = ToolContext(sandbox=Sandbox("off"))
    for answer, ran in (("no", []), ("yes", ["off"])):
        asker = Asker(answer)
        orchestrator = Orchestrator(_confined(runs, needs_approval=True), make_approver("ask", ask=asker), context,
                                    _hold)
        result = await orchestrator.run(CALL)
        assert runs == ran and len(asker.asked) == 1 and not asker.asked[0].outside
        assert result.outcome == ("ok" if ran else "denied")


async def test_arguments_are_validated_before_anyone_is_asked() -> None:
    runs: list[str] = []
    asker = Asker("yes")
    orchestrator = Orchestrator(_confined(runs, needs_approval=True), make_approver("ask", ask=asker), CONFINED, _hold)
    for arguments in (json.dumps({"command": 3}), json.dumps({})):
        result = await orchestrator.run(ToolCall("c1", "sh", arguments))
        assert (result.ok, result.outcome) == (False, "error")
    assert asker.asked == [] and runs == []


async def test_a_pretooluse_hook_that_blocks_answers_before_anyone_is_asked(tmp_path: Path) -> None:
    runs: list[str] = []
    asker = Asker("yes")
    hooks = Hooks(parse_hooks({"PreToolUse": [{"command": "cat >/dev/null; echo 'not today' >&2; exit 2"}]},
                              "crow.toml"), cwd=tmp_path)
    context = ToolContext(tmp_path, sandbox=Sandbox("off"), hooks=hooks)
    orchestrator = Orchestrator(_confined(runs, needs_approval=True), make_approver("ask", ask=asker), context, _hold)
    result = await orchestrator.run(CALL)
    assert (result.outcome, runs, asker.asked) == ("denied", [], [])
    assert "not today" in result.output


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
    # /rewind needs the workspace as each call that may write found and left it; reads stay cheap
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
