"""`crow run --json`: every stdout line is a schema-valid event; plain mode and --quiet.

One run goes end to end through a `crow run --json` process; the others run `run_prompt` in this process
(`run_here`: what `crow run` runs), against the replay server over real sockets."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import typing
from pathlib import Path

import pytest

from crow_cli import events as ev
from crow_cli.history import ToolCall, ToolDisplay, ToolResult
from crow_cli.surfaces.jsonl import event_schema, event_to_json
from crow_cli.todos import TodoItem
from tests.replay_server import ReplayServer
from tests.support import (
    TOOLS,
    assert_contract,
    chunk,
    crow,
    run_args,
    run_crow,
    run_here,
    schema_validator,
    sse,
    text_sse,
    tool_delta,
    tool_turn,
    write_config,
)

USAGE = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "test-model", "choices": [],
         "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}}


def parallel_script() -> list[dict]:
    first = tool_turn(("call_dice_1", "roll_dice", '{"sides": 6, "count": 2}'),
                      ("call_time_2", "current_time", '{"timezone": "UTC"}'))
    return [{"sse": first.replace("data: [DONE]", f"data: {json.dumps(USAGE)}\n\ndata: [DONE]")},
            {"sse": text_sse("Rolled and timed.")}]


def test_two_parallel_tool_calls_as_schema_valid_events(tmp_path: Path) -> None:
    ran = run_crow(parallel_script(), "--json", "--tools-dir", str(TOOLS), "Roll two dice, tell the time",
                   cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert ran.stderr == ""
    events = ran.events()
    types = [e["type"] for e in events]
    assert types[0] == "run_started" and events[0]["schema_version"] == event_schema()["version"]
    assert events[0]["model"] == "test-model" and len(events[0]["session_id"]) == 6  # recorded (crow sessions)
    assert types[-1] == "run_finished" and types.count("run_finished") == 1
    assert events[-1] == {"type": "run_finished", "status": "completed", "final_text": "Rolled and timed.",
                          "turns": 2, "error": None, "exit_code": 0, "signal": None, "output_errno": None,
                          "changes_refused": 0}
    calls = [e["call"] for e in events if e["type"] == "tool_call"]
    results = {e["result"]["call_id"]: e["result"] for e in events if e["type"] == "tool_result"}
    assert [(c["id"], c["name"]) for c in calls] == [("call_dice_1", "roll_dice"), ("call_time_2", "current_time")]
    assert json.loads(calls[0]["arguments"]) == {"sides": 6, "count": 2}
    assert set(results) == {"call_dice_1", "call_time_2"} and all(r["ok"] for r in results.values())
    assert results["call_dice_1"]["output"].startswith("rolls: [")
    position = {(e["type"], (e.get("call") or e.get("result") or {}).get("id") or e.get("result", {}).get("call_id")): i
                for i, e in enumerate(events)}
    for call in calls:  # each result comes after its call
        assert position[("tool_call", call["id"])] < position[("tool_result", call["id"])]
    first_turn = next(e for e in events if e["type"] == "turn_finished")
    assert first_turn["finish_reason"] == "tool_calls" and first_turn["usage"]["total_tokens"] == 59
    assert "".join(e["text"] for e in events if e["type"] == "text") == "Rolled and timed."
    assert_contract(ran.requests[1]["messages"])


async def test_plain_mode_stdout_is_the_answer_and_quiet_hides_tool_activity(tmp_path: Path) -> None:
    loud = await run_here(parallel_script(), "Roll", tools_dirs=(str(TOOLS),), cwd=tmp_path)
    quiet = await run_here(parallel_script(), "Roll", quiet=True, tools_dirs=(str(TOOLS),), cwd=tmp_path)
    for ran in (loud, quiet):
        assert ran.code == 0, ran.stderr
        assert ran.stdout == "Rolled and timed.\n"
    assert "→ roll_dice(" in loud.stderr and "current_time" in loud.stderr
    assert quiet.stderr == ""


async def test_oversized_tool_output_is_capped_with_a_marker(tmp_path: Path) -> None:
    tools = tmp_path / "bigtools"
    tools.mkdir()
    (tools / "big.py").write_text(
        "from crow_cli.tools import tool\n\n\n@tool\ndef big(n: int) -> str:\n"
        '    """Return n characters."""\n    return "x" * n\n')
    config = write_config(tmp_path, max_output_chars=100, max_retries=0)
    ran = await run_here([{"sse": tool_turn(("call_big", "big", '{"n": 5000}'))}, {"sse": text_sse("ok")}], "big",
                         json=True, tools_dirs=(str(tools),), cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    sent = [m for m in ran.requests[1]["messages"] if m["role"] == "tool"]
    assert len(sent) == 1 and sent[0]["tool_call_id"] == "call_big"
    assert sent[0]["content"].startswith("x" * 100 + "\n[output truncated: 4900 of 5000 characters")
    assert "x" * 101 not in sent[0]["content"]
    result = next(e["result"] for e in ran.events() if e["type"] == "tool_result")
    assert result["output"] == sent[0]["content"]


WRITTEN = [ev.RunStarted, ev.TextDelta, ev.ReasoningDelta, ev.ToolCallStarted, ev.ToolCallDelta, ev.WarningEvent,
           ev.Notice, ev.TurnFinished, ev.ToolRunStarted, ev.ToolResultReady, ev.RunFinished, ev.HookRan,
           ev.SubagentStarted, ev.SubagentEvent, ev.SubagentFinished,
           ev.TodoUpdated, ev.PlanReady]


def test_every_event_written_is_in_the_union_and_the_schema() -> None:
    written = {cls for cls in typing.get_args(ev.Event)} - {ev.MessageAppended}
    assert written == set(WRITTEN)
    defs = event_schema()["$defs"]
    for cls in WRITTEN:
        kind = cls.__dataclass_fields__["type"].default
        props = defs[kind]["properties"]
        assert set(props) == {f.name for f in dataclasses.fields(cls)}, kind  # schema drift guard
        assert set(defs[kind]["required"]) == set(props)


@pytest.mark.parametrize("event", [
    ev.RunStarted("m"), ev.TextDelta("h\u00e9 \U0001f600"), ev.ReasoningDelta("r"), ev.ToolCallStarted(0, "", "x"),
    ev.ToolCallDelta(None, None, "x", '{"a'), ev.WarningEvent("w", "c"), ev.Notice("n", "turn_restarted"),
    ev.Notice("crow: rate limited (429); retrying in 2 s (attempt 2 of 3)", "retrying", attempt=2, wait_s=2.0,
              status=429),
    ev.TurnFinished(1, "tool_calls", None, None, (ToolCall("", "x", "{}"),)),
    ev.ToolRunStarted(ToolCall("id", "x", "{}", 1)), ev.ToolResultReady(ToolResult("id", "x", "out", False, 0.5, 1)),
    ev.ToolResultReady(ToolResult("id", "run_shell", "[exit code 1]\nx\n", False, 0.5, 0,
                                  display=ToolDisplay(output="x\n", exit_code=1, status="exit code 1"))),
    ev.ToolResultReady(ToolResult("id", "edit_file", "edited", display=ToolDisplay(diff="--- a/f\n+++ b/f\n"))),
    ev.RunFinished("cancelled", "", 0, "interrupted (SIGINT)", 130),
    ev.HookRan("PreToolUse", "./check.sh", "blocked", 0.02, "/p/.crow/settings.toml", 2, "no rm", "call_1"),
    ev.SubagentStarted("call_1", 0, "explorer", "find x", "small-model"),
    ev.SubagentEvent("call_1", 0, "explorer", ev.ToolRunStarted(ToolCall("c", "read_file", "{}"))),
    ev.SubagentEvent("call_1", 0, "explorer", ev.Notice("crow: waiting", "queued")),
    ev.SubagentFinished("", 1, "general", "cancelled", 2, "interrupted"),
    ev.TodoUpdated((TodoItem("read the code", "completed"), TodoItem("fix it", "in_progress"), TodoItem("test"))),
    ev.ToolResultReady(ToolResult("id", "todo_write", "saved", display=ToolDisplay(todos=(TodoItem("a"),)))),
    ev.PlanReady("# Plan\n1. read\n2. fix"),
])
def test_each_event_line_is_ascii_json_valid_against_the_schema(event: ev.Event) -> None:
    line = event_to_json(event)
    assert line.isascii() and "\n" not in line
    decoded = json.loads(line)
    assert next(iter(decoded)) == "type"
    schema_validator().validate(decoded)
    assert decoded == json.loads(json.dumps(dataclasses.asdict(event)))


def test_the_schema_of_a_results_display_has_every_field_of_tool_display() -> None:
    # What the person sees of a call rides on the result; the schema must follow its fields
    result = event_schema()["$defs"]["tool_result"]["properties"]["result"]
    assert set(result["properties"]) == {f.name for f in dataclasses.fields(ToolResult)} == set(result["required"])
    assert set(result["properties"]["display"]["properties"]) == {f.name for f in dataclasses.fields(ToolDisplay)}


def test_schema_rejects_a_renamed_field() -> None:
    from jsonschema import ValidationError

    with pytest.raises(ValidationError):
        schema_validator().validate({"type": "tool_call", "tool_call": {"id": "a", "name": "b", "arguments": "{}"}})


# that the built wheel ships this schema is checked by tests/test_wheel.py, with the one build it makes


async def test_fragments_no_call_can_take_are_a_warning_event(tmp_path: Path) -> None:
    # Two calls open (headers at index 1 and 2), arguments at index 0 that never opened a call
    headers = [tool_delta(1, "call_f", "roll_dice", ""), tool_delta(2, "call_g", "roll_dice", "")]
    turn = sse(chunk({"tool_calls": headers}),
               chunk({"tool_calls": [tool_delta(0, arguments='{"sides": 6}')]}), chunk({}, "tool_calls"))
    ran = await run_here([{"sse": turn}, {"sse": text_sse("Rolled.")}], "Roll", json=True, tools_dirs=(str(TOOLS),),
                         cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    events = ran.events()
    assert [e for e in events if e["type"] == "warning" and "index 0, which never opened a call" in e["message"]]
    assert [c["id"] for c in ran.requests[1]["messages"][-3]["tool_calls"]] == ["call_f", "call_g"]


# A usage error with --json prints no event and stores no session
def test_usage_errors_with_json_print_no_event_and_store_no_session(tmp_path: Path, _isolated_home: Path) -> None:
    for args in (["--approval", "bogus"], ["--workspace", str(tmp_path / "nope")]):
        proc = crow("run", "--json", "--base-url", "http://127.0.0.1:9/v1", *args, "hi")
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    for db in _isolated_home.rglob("sessions.db"):
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT id FROM sessions").fetchall() == []


# --json on an unknown session still emits run_started and run_finished
async def test_json_run_on_an_unknown_session_starts_and_finishes(tmp_path: Path) -> None:
    result = await run_here([], json=True, session_id="nope", cwd=tmp_path)  # `crow run --json --session nope hi`
    assert result.requests == []
    assert result.code == 1
    events = result.events()  # each validated against the schema
    assert [e["type"] for e in events] == ["run_started", "run_finished"]
    assert events[1]["status"] == "error" and events[1]["exit_code"] == 1
    assert events[1]["error"] == "no session 'nope' (crow sessions list shows them)"
    assert result.stderr == "crow: error: no session 'nope' (crow sessions list shows them)\n"
    with ReplayServer([]) as server:  # a conflict of flags: crow run's own usage error
        conflict = crow(*run_args(server, "-c", "--session", "abc", "hi"))
        assert server.requests == []
    assert conflict.returncode == 2 and conflict.stdout == ""
    assert conflict.stderr == "crow: error: --continue and --session cannot be combined\n"
