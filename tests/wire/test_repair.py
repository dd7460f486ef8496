"""Tool calls whose arguments the stream cut off: repaired for the history, run only when nothing was guessed.
"""

from __future__ import annotations

import json

import pytest

from crow_cli.events import ToolResultReady, WarningEvent
from crow_cli.history import ToolCall
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import tool
from crow_cli.wire.accumulate import StreamAccumulator
from crow_cli.wire.repair import repair_arguments
from tests.support import chunk, first_sse, load_cases, sse_chunks, tool_delta

CUT_MESSAGE = ("Error: the arguments of this call were cut off or not valid JSON (repaired only for the history); "
               "it was not run. Send the complete call again.")


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"path": "a.txt", "content": "x"', {"path": "a.txt", "content": "x"}),  # Qwen/DashScope: final brace dropped
    ('{"items": [1, 2, 3]', {"items": [1, 2, 3]}),
    ('{"a": {"b": [true, null, "s"]  \n', {"a": {"b": [True, None, "s"]}}),
    ('{"a": {"b": []}', {"a": {"b": []}}),
])
def test_only_missing_closers_leave_the_call_runnable(raw, expected):
    repaired = repair_arguments(raw)
    assert not repaired.cut_off and repaired.problem
    assert json.loads(repaired.text) == expected


@pytest.mark.parametrize("raw", [
    '{"path": "important.txt", "content": "line 1\\nline 2\\nline',  # an open string
    '{"path": "a.txt", "content": ',                                  # a dangling key
    '{"path": "a.txt", "content"',
    '{"path": "a.txt",',
    '{"count": 12',                                                   # a number may go on
    '{"flag": tru',
    "not json at all",                                                # falls back to {}
])
def test_any_other_repair_marks_the_call_cut_off(raw):
    repaired = repair_arguments(raw)
    assert repaired.cut_off and repaired.problem
    assert isinstance(json.loads(repaired.text), dict)


def test_complete_and_empty_arguments_are_neither_repaired_nor_cut():
    assert repair_arguments('{"a": 1}') == ('{"a": 1}', None, False)
    assert repair_arguments("") == ("{}", None, False)


def _assemble(*chunks):
    acc = StreamAccumulator()
    for c in chunks:
        acc.feed(c)
    return acc.finish()


def test_accumulator_marks_the_assembled_call_and_keeps_the_repaired_json_and_the_warning():
    cut = '{"path": "important.txt", "content": "line 1\\nline'
    turn, events = _assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "write_file", cut)]}),
        chunk({}, "length"),
    )
    call = turn.tool_calls[0]
    assert call.cut_off and json.loads(call.arguments) == {"path": "important.txt", "content": "line 1\nline"}
    assert "cut_off" not in json.dumps(call.to_wire()) and turn.to_message()["tool_calls"] == [call.to_wire()]
    assert any(isinstance(e, WarningEvent) and e.call_id == "c1" for e in events)


def test_vllm_case_with_finish_reason_tool_calls_is_cut_off_too():
    case = next(c for c in load_cases() if c["id"] == "vllm-truncated-args-tool-calls-finish")
    turn, _ = _assemble(*sse_chunks(first_sse(case)))
    assert turn.finish_reason == "tool_calls" and turn.tool_calls[0].cut_off


def test_a_dropped_final_brace_is_closed_and_the_call_stays_runnable():
    turn, _ = _assemble(chunk({"tool_calls": [tool_delta(0, "c1", "write_file", '{"path": "a", "content": "b"')]}),
                        chunk({}, "tool_calls"))
    assert not turn.tool_calls[0].cut_off and json.loads(turn.tool_calls[0].arguments) == {"path": "a", "content": "b"}


async def test_dispatch_does_not_run_a_cut_off_call_and_answers_it_once():
    ran: list[str] = []

    @tool
    def save(path: str, content: str) -> str:
        """Save."""
        ran.append(path)
        return "saved"

    registry = ToolRegistry()
    registry.register(save)
    calls = [ToolCall("c1", "save", '{"path": "a", "content": "line"}', 0, cut_off=True),
             ToolCall("c2", "save", '{"path": "b", "content": "whole"}', 1)]
    results = [e.result for e in [e async for e in dispatch(calls, registry)] if isinstance(e, ToolResultReady)]
    by_index = {r.index: r for r in results}
    assert ran == ["b"] and len(results) == 2
    assert by_index[0].output == CUT_MESSAGE and not by_index[0].ok and by_index[0].call_id == "c1"
    assert by_index[1].ok


def test_cli_keeps_the_old_file_when_write_file_arguments_were_cut(tmp_path):
    from tests.replay_server import ReplayServer
    from tests.support import crow, sse, text_sse, tool_messages

    target = tmp_path / "important.txt"
    target.write_text("precious\n")
    cut = sse(chunk({"tool_calls": [tool_delta(0, "call_w", "write_file",
                                               '{"path": "important.txt", "content": "line 1\\nline 2\\nline')]}),
              chunk({}, "length"))
    with ReplayServer([{"sse": cut}, {"sse": text_sse("ok")}]) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--model", "m", "--yes", "--no-session", "go", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "precious\n"
    assert tool_messages(srv.requests[1]) == [{"role": "tool", "tool_call_id": "call_w", "content": CUT_MESSAGE}]
    sent = next(m for m in srv.requests[1]["messages"] if m["role"] == "assistant")["tool_calls"][0]
    assert json.loads(sent["function"]["arguments"])["content"] == "line 1\nline 2\nline"
    assert "crow: warning:" in proc.stderr


@pytest.mark.parametrize(("raw", "says"), [
    ('{"path": "c10.txt", "content": "q"}}', "not valid JSON"),   # one brace too many: nothing was cut
    ('{"a": 1} {"b": 2', "not valid JSON"),
    ('[{"path": "c13.txt"', "not valid JSON"),
    ('{"path": "a.txt", "content": "li', "cut off"),
])
def test_the_warning_says_cut_off_only_when_the_text_ends_mid_value(raw, says):
    # only text ending mid-value is "cut off"; a stray closing brace is not "cut off mid-value (truncated JSON)"
    repaired = repair_arguments(raw)
    assert repaired.cut_off and says in repaired.problem
    assert ("cut off" in repaired.problem) == (says == "cut off")


# Arguments nested 100,000 `[` deep (valid JSON closed or not) are not run, never
# `crow: internal error: RecursionError`
@pytest.mark.parametrize("raw", ["[" * 100_000, '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                 '{"a": ' + "[" * 100_000])
def test_arguments_nested_deeper_than_the_parser_goes_are_not_run(raw: str) -> None:
    repaired = repair_arguments(raw)
    assert repaired.text == "{}" and repaired.cut_off and repaired.problem
