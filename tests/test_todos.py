"""The model's todo list: its check, its checklist, and the list a stored history holds."""

from __future__ import annotations

import json

import pytest

from crow_cli.todos import TodoItem, checklist, latest_todos, parse_todos


def test_a_list_is_checked_whole_and_at_most_one_item_is_in_progress() -> None:
    items = parse_todos([{"content": " read\n the code ", "status": "completed"}, {"content": "fix"}])
    assert items == (TodoItem("read the code", "completed"), TodoItem("fix", "pending"))
    assert checklist(items) == "[x] read the code\n[ ] fix" and checklist(()) == "(empty)"
    for bad, said in (({"a": 1}, "must be an array"), ([{"content": ""}], "non-empty"),
                      ([{"content": "a", "status": "done"}], "must be one of pending, in_progress, completed"),
                      ([{"content": "a", "status": "in_progress"}] * 2, "at most one item may be in_progress")):
        with pytest.raises(ValueError, match=said):
            parse_todos(bad)


def _call(call_id: str, todos: object) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "todo_write", "arguments": json.dumps(
        {"todos": todos})}}


def test_the_list_of_a_history_is_the_last_todo_write_that_succeeded() -> None:
    first = [{"content": "a", "status": "pending"}]
    second = [{"content": "a", "status": "completed"}]
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": None, "tool_calls": [_call("1", first)]},
               {"role": "tool", "tool_call_id": "1", "content": "saved"},
               {"role": "assistant", "content": None, "tool_calls": [_call("2", second)]},
               {"role": "tool", "tool_call_id": "2", "content": "Error: no", "crow_outcome": "error"}]
    assert latest_todos(history) == (TodoItem("a", "pending"),)  # the failed one does not count
    history[-1] = {"role": "tool", "tool_call_id": "2", "content": "saved", "crow_outcome": "ok"}
    assert latest_todos(history) == (TodoItem("a", "completed"),)
    assert latest_todos(history[:1]) is None and latest_todos(history[:2]) is None  # no result yet: not written
