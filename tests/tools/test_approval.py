"""The approval matrix: policy × tool × whether someone can answer, plus allow/deny rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError, ToolDenied
from crow_cli.history import ToolCall
from crow_cli.tools.approval import Answer, ApprovalPolicy, Approvals, describe_call, make_approver
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.registry import Tool, ToolRegistry, tool

TOOLS = {t.name: t for t in BUILTIN_TOOLS}


@tool(needs_approval=True, parallel=False)
def deploy(target: str) -> str:
    """A plugin tool that needs approval."""
    return target


def _call(name: str, **args: object) -> ToolCall:
    return ToolCall("call_1", name, json.dumps(args), 0)


def _args(name: str) -> dict[str, object]:
    return {"write_file": {"path": "a.txt", "content": "x"},
            "edit_file": {"path": "a.txt", "old_string": "x", "new_string": "y"},
            "run_shell": {"command": "pytest -q"},
            "deploy": {"target": "prod"}}[name]


class Asker:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, call: ToolCall, t: Tool) -> Answer:
        self.asked.append(t.name)
        return self.answer


def _plugin(t: Tool) -> Tool:
    registry = ToolRegistry()
    return registry.register(t, source="entry point demo")


# expected outcome per (policy, tool) when the person answers "yes": "run" without asking, "ask" asks first
MATRIX = {
    ("ask", "write_file"): "ask", ("ask", "edit_file"): "ask", ("ask", "run_shell"): "ask", ("ask", "deploy"): "ask",
    ("auto-edit", "write_file"): "run", ("auto-edit", "edit_file"): "run", ("auto-edit", "run_shell"): "ask",
    ("auto-edit", "deploy"): "ask",
    ("yolo", "write_file"): "run", ("yolo", "edit_file"): "run", ("yolo", "run_shell"): "run",
    ("yolo", "deploy"): "run",
}


@pytest.mark.parametrize(("policy", "name"), sorted(MATRIX))
@pytest.mark.parametrize("interactive", [True, False], ids=["interactive", "no-terminal"])
async def test_matrix(policy: str, name: str, interactive: bool) -> None:
    t = TOOLS.get(name) or _plugin(deploy)
    asker = Asker("yes")
    approve = make_approver(policy, ask=asker if interactive else None)
    expected = MATRIX[(policy, name)]
    if expected == "run":
        assert await approve(_call(name, **_args(name)), t) is True
        assert asker.asked == []
    elif interactive:
        assert await approve(_call(name, **_args(name)), t) is True
        assert asker.asked == [name]
    else:
        with pytest.raises(ToolDenied, match="nobody can approve it"):
            await approve(_call(name, **_args(name)), t)


async def test_no_answer_and_always() -> None:
    asker = Asker("no")
    approve = make_approver("ask", ask=asker)
    with pytest.raises(ToolDenied, match="the user declined run_shell"):
        await approve(_call("run_shell", command="ls"), TOOLS["run_shell"])
    asker.answer = "always"
    assert await approve(_call("run_shell", command="ls"), TOOLS["run_shell"])
    assert await approve(_call("run_shell", command="make"), TOOLS["run_shell"])
    assert asker.asked == ["run_shell", "run_shell"]  # "always" stuck: the third call was not asked
    with pytest.raises(ToolDenied):  # always is per tool
        asker.answer = "no"
        await approve(_call("write_file", path="a", content=""), TOOLS["write_file"])


async def test_auto_edit_does_not_cover_a_plugin_named_like_a_builtin() -> None:
    fake = _plugin(Tool("edit_file", "fake", lambda: "", parameters={"type": "object", "properties": {}},
                        needs_approval=True))
    with pytest.raises(ToolDenied):
        await make_approver("auto-edit")(_call("edit_file"), fake)


@pytest.mark.parametrize(("command", "allowed"), [
    ("git status", True), ("git status -s", True), ("git  status", True), ("git statusx", False),
    ("git status && pytest -q", True), ("git status && rm x", False), ("git status; make", False),
    ("pytest -q > out.txt", False), ("pytest -q 2>&1", True), ("git status $(rm x)", False),
    ("echo `rm x`", False), ("git diff", False),
])
async def test_allow_prefix_rules(command: str, allowed: bool) -> None:
    approve = make_approver("ask", allow=["run_shell:git status", "run_shell:pytest"])
    call = _call("run_shell", command=command)
    if allowed:
        assert await approve(call, TOOLS["run_shell"])
    else:
        with pytest.raises(ToolDenied, match="nobody can approve"):
            await approve(call, TOOLS["run_shell"])


@pytest.mark.parametrize(("command", "denied"), [
    ("rm -rf build", True), ("cd x && rm -rf /", True), ("echo $(rm -rf ~)", True), ("rm -r x", False),
    ("echo rm -rf", False), ("rm  -rf  'a b'", True),
])
async def test_deny_prefix_rules_beat_yolo(command: str, denied: bool) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    call = _call("run_shell", command=command)
    if denied:
        with pytest.raises(ToolDenied, match="denied by the rule 'run_shell:rm -rf'"):
            await approve(call, TOOLS["run_shell"])
    else:
        assert await approve(call, TOOLS["run_shell"])


async def test_rules_by_tool_name() -> None:
    asker = Asker("yes")
    approve = make_approver("ask", allow=["write_file"], deny=["run_shell"], ask=asker)
    assert await approve(_call("write_file", path="a", content=""), TOOLS["write_file"])
    with pytest.raises(ToolDenied, match="denied by the rule 'run_shell'"):
        await approve(_call("run_shell", command="git status"), TOOLS["run_shell"])
    assert asker.asked == []


@pytest.mark.parametrize(("mode", "rule"), [("sometimes", "x"), ("ask", ""), ("ask", "run_shell:  ")])
def test_bad_policy_or_rule_is_a_config_error(mode: str, rule: str) -> None:
    with pytest.raises(ConfigError):
        make_approver(mode, allow=[rule])


async def test_prompts_are_one_at_a_time() -> None:
    import asyncio

    active, peak = 0, 0

    async def slow_ask(call: ToolCall, t: Tool) -> Answer:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        active -= 1
        return "yes"

    approve = Approvals(ApprovalPolicy("ask"), slow_ask)
    await asyncio.gather(*(approve(_call("run_shell", command=str(i)), TOOLS["run_shell"]) for i in range(4)))
    assert peak == 1


def test_describe_call(tmp_path: Path) -> None:
    from crow_cli.tools.workspace import set_workspace

    token = set_workspace(tmp_path)
    try:
        (tmp_path / "a.txt").write_text("one\ntwo\n")
        assert describe_call(_call("run_shell", command="make test")) == "$ make test"
        diff = describe_call(_call("edit_file", path="a.txt", old_string="two", new_string="2"))
        assert "-two\n+2\n" in diff
        assert (tmp_path / "a.txt").read_text() == "one\ntwo\n"
        assert describe_call(_call("write_file", path="b.txt", content="hi")).startswith("write b.txt (2 bytes)")
    finally:
        token.var.reset(token)
