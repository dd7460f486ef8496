"""The model's todo list: its items, their check (`parse_todos`), the checklist shown, and the list a history
holds (`latest_todos`).

The list is the whole list each `todo_write` call sends, so a history holds it without a store of its own:
the arguments of the last `todo_write` call that succeeded (its tool result's recorded outcome `ok`). A
resumed session shows it, and compaction keeps it in what the model gets (`context.compact`). Pure: standard
library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["TODO_STATUSES", "TODO_TOOL", "TodoItem", "TodoStatus", "checklist", "latest_todos", "parse_todos"]

TODO_TOOL = "todo_write"
"""The built-in tool that writes the list (`tools.builtin.plan`)."""
TodoStatus = Literal["pending", "in_progress", "completed"]
TODO_STATUSES: tuple[TodoStatus, ...] = get_args(TodoStatus)
MAX_ITEMS = 100
"""Items a list holds at most."""
MAX_CONTENT = 500
"""Characters of one item at most."""
_MARKS: dict[TodoStatus, str] = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


@dataclass(frozen=True, slots=True)
class TodoItem:
    """One step of the model's todo list."""

    content: str
    """What the step is, one line."""
    status: TodoStatus = "pending"
    """`pending`, `in_progress` (at most one item of a list) or `completed`."""


def parse_todos(value: Any) -> tuple[TodoItem, ...]:
    """The todo list `value` (a JSON array of `{"content", "status"}` objects) stands for.

    Raises:
        ValueError: not such an array, an empty or too long item, an unknown status, more than one item
            `in_progress`, or more than `MAX_ITEMS` items (the message says which, for the model).
    """
    if not isinstance(value, list):
        raise ValueError("todos must be an array of {content, status} objects")
    if len(value) > MAX_ITEMS:
        raise ValueError(f"a todo list holds at most {MAX_ITEMS} items ({len(value)} given)")
    items: list[TodoItem] = []
    for n, raw in enumerate(value):
        if not isinstance(raw, Mapping):
            raise ValueError(f"todos[{n}] is not an object with content and status")
        content, status = raw.get("content"), raw.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"todos[{n}].content must be a non-empty string")
        if len(content) > MAX_CONTENT:
            raise ValueError(f"todos[{n}].content is longer than {MAX_CONTENT} characters")
        if status not in TODO_STATUSES:
            raise ValueError(f"todos[{n}].status must be one of {', '.join(TODO_STATUSES)} (got {status!r})")
        items.append(TodoItem(" ".join(content.split()), status))
    doing = sum(item.status == "in_progress" for item in items)
    if doing > 1:
        raise ValueError(f"at most one item may be in_progress ({doing} are): finish one before starting another")
    return tuple(items)


def checklist(items: Sequence[TodoItem]) -> str:
    """The list as lines `[x] done`, `[~] doing`, `[ ] to do`; `(empty)` for none."""
    return "\n".join(f"{_MARKS[item.status]} {item.content}" for item in items) or "(empty)"


def latest_todos(history: Sequence[Mapping[str, Any]]) -> tuple[TodoItem, ...] | None:
    """The list the last successful `todo_write` call of `history` wrote; None when none did.

    A call counts when its tool result (matched by position after its assistant message) records the
    outcome `ok`; its arguments are parsed again (`parse_todos`).
    """
    for at in range(len(history) - 1, -1, -1):
        message = history[at]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not isinstance(calls, list):
            continue
        for n in range(len(calls) - 1, -1, -1):
            call = calls[n]
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or function.get("name") != TODO_TOOL:
                continue
            result = history[at + 1 + n] if at + 1 + n < len(history) else None
            if result is None or result.get("role") != "tool" or result.get("crow_outcome", "ok") != "ok":
                continue
            try:
                return parse_todos(json.loads(function.get("arguments") or "{}").get("todos"))
            except (ValueError, AttributeError):
                continue
    return None
