"""The hint of a call denied for want of a person to approve it names only what would allow it, as policies and
rules every surface shares, never a command-line flag (issue: an editor has no --yes)."""

from __future__ import annotations

import pytest

from crow_cli.errors import ToolDenied
from crow_cli.history import ToolCall
from crow_cli.tools.approval import make_approver
from crow_cli.tools.registry import ToolRegistry, default_registry
from crow_cli.tools.tool import tool
from tests.support import run_here, script, tool_messages


async def _denial(mode: str, name: str, arguments: str = "{}", registry: ToolRegistry | None = None) -> str:
    t = (registry or default_registry(())).get(name)
    assert t is not None
    with pytest.raises(ToolDenied) as info:
        await make_approver(mode)(ToolCall("c1", name, arguments), t)
    return str(info.value)


@pytest.mark.parametrize("mode", ["ask", "auto-edit"])
async def test_run_shell_hint_never_offers_auto_edit(mode):
    message = await _denial(mode, "run_shell", '{"command": "ls"}')
    assert "auto-edit" not in message and "--" not in message
    assert message.endswith("the yolo policy or an allow rule for run_shell (or for this command's prefix)")


async def test_a_file_edit_under_ask_is_offered_auto_edit():
    message = await _denial("ask", "write_file", '{"path": "a", "content": "b"}')
    assert message.endswith("the yolo policy, the auto-edit policy or an allow rule for write_file")


async def test_a_plugin_tool_is_offered_yes_or_its_allow_rule_only():
    @tool(needs_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "done"

    registry = ToolRegistry()
    registry.register(deploy)
    message = await _denial("auto-edit", "deploy", registry=registry)
    assert message.endswith("can approve such calls with the yolo policy or an allow rule for deploy")


async def test_cli_auto_edit_denial_of_run_shell_names_what_would_allow_it(tmp_path):
    ran = await run_here(script([("c1", "run_shell", {"command": "echo hi"})]), "go", cwd=tmp_path,
                         flags={"approval": "auto-edit"}, session=False)
    assert ran.code == 0, ran.stderr
    [result] = tool_messages(ran.requests[1])
    assert "needs approval" in result["content"] and "auto-edit" not in result["content"]
