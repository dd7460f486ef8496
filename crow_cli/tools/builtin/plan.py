"""Built-in tools for the model's own bookkeeping: its todo list (`todo_write`) and the end of plan mode
(`exit_plan_mode`). Neither changes a file or runs a command, so neither needs approval."""

from __future__ import annotations

from typing import Any

from ...errors import ToolError
from ...history import ToolDisplay
from ...todos import MAX_CONTENT, MAX_ITEMS, TODO_STATUSES, TODO_TOOL, checklist, parse_todos
from ..context import ToolContext
from ..tool import Tool, ToolOutput, tool

__all__ = ["exit_plan_mode", "todo_write"]

MAX_PLAN_CHARS = 60_000
"""Characters of a plan at most (the person reads it whole)."""
REVIEW_TIMEOUT_S = 7 * 24 * 3600.0
"""`exit_plan_mode` waits for the person's review as long as they take (the run's interrupts stop it)."""


def _todo_write(todos: Any) -> ToolOutput:
    try:
        items = parse_todos(todos)
    except ValueError as exc:
        raise ToolError(f"{exc}; the list was not changed. Send the whole list again") from None
    doing = next((item.content for item in items if item.status == "in_progress"), None)
    left = sum(item.status != "completed" for item in items)
    text = f"Todo list saved ({len(items)} items, {left} not completed)."
    if doing is not None:
        text += f" In progress: {doing}"
    return ToolOutput(f"{text}\n{checklist(items)}", ToolDisplay(todos=items))


todo_write = Tool(
    TODO_TOOL,
    "Write your todo list for a task of three steps or more: the whole list each time (it replaces the last one). "
    "Mark one step in_progress before you start it (one at a time) and completed as soon as it is done.",
    _todo_write,
    parameters={
        "type": "object",
        "properties": {"todos": {
            "type": "array", "maxItems": MAX_ITEMS, "description": "The whole list, in order.",
            "items": {"type": "object", "required": ["content", "status"], "properties": {
                "content": {"type": "string", "maxLength": MAX_CONTENT, "description": "The step, one line."},
                "status": {"type": "string", "enum": list(TODO_STATUSES)}}}}},
        "required": ["todos"],
    },
    parallel=False,
)
"""`todo_write(todos)`: the model's todo list, checked (`todos.parse_todos`), shown as a checklist."""


@tool(parallel=False, timeout_s=REVIEW_TIMEOUT_S, kind="plan")
async def exit_plan_mode(plan: str, context: ToolContext | None = None) -> str:
    """In plan mode only: hand your finished plan to the user for review. The user approves it (then you carry
    it out) or asks you to keep planning.

    Args:
        plan: the plan, in Markdown: the steps, the files each changes, how the result is checked.
    """
    if not plan.strip():
        raise ToolError("the plan is empty: write it in the plan argument")
    if len(plan) > MAX_PLAN_CHARS:
        raise ToolError(f"the plan is longer than {MAX_PLAN_CHARS:,} characters: make it shorter")
    if context is None or context.modes is None:
        raise ToolError("nobody can take a plan in this run; give it as your answer instead")
    return await context.modes.exit_plan(plan)
