"""todo_write and exit_plan_mode: the model's own bookkeeping, through the orchestrator like every tool."""

from __future__ import annotations

import pytest

from crow_cli.errors import ToolError
from crow_cli.todos import TodoItem
from crow_cli.tools.builtin.plan import exit_plan_mode, todo_write
from crow_cli.tools.context import ToolContext


async def test_todo_write_returns_the_checklist_and_shows_the_list() -> None:
    output = await todo_write.run({"todos": [{"content": "a", "status": "in_progress"}, {"content": "b",
                                                                                         "status": "pending"}]})
    assert output.text == "Todo list saved (2 items, 2 not completed). In progress: a\n[~] a\n[ ] b"
    assert output.display is not None and output.display.todos == (TodoItem("a", "in_progress"), TodoItem("b"))
    assert not todo_write.needs_approval


async def test_todo_write_refuses_a_bad_list_saying_it_was_not_changed() -> None:
    with pytest.raises(ToolError, match="the list was not changed"):
        await todo_write.run({"todos": [{"content": "a", "status": "started"}]})


async def test_exit_plan_mode_refuses_an_empty_plan_and_a_run_nobody_decides_in() -> None:
    with pytest.raises(ToolError, match="the plan is empty"):
        await exit_plan_mode.run({"plan": "  "}, ToolContext())
    with pytest.raises(ToolError, match="nobody can take a plan"):
        await exit_plan_mode.run({"plan": "# Plan"}, ToolContext())
    assert not exit_plan_mode.needs_approval
