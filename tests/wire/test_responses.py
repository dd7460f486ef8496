"""The Responses API wire (`wire.responses`, `[provider] wire_api = "responses"`): the same loop and contract as
the chat wire, over `POST /responses`, against the scripted server (tests/replay_server.py serves both paths)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crow_cli.history import REASONING_ITEMS_KEY
from crow_cli.wire.responses import ChunkTranslator, request_body
from tests.replay_server import text_stream
from tests.support import assemble, run_here


def rsse(*events: dict[str, Any]) -> str:
    """A Responses SSE body: each event as `event: TYPE` and its JSON `data:`, as OpenAI sends them."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def _completed(**usage: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "usage": usage or None}}


def _call_added(output: int, item_id: str, call_id: str, name: str) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": output,
            "item": {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": "",
                     "status": "in_progress"}}


def _args(output: int, item_id: str, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "output_index": output, "item_id": item_id,
            "delta": delta}


REASONING_ITEM = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Read both."}],
                  "encrypted_content": "gAAAA-opaque"}

TOOL_TURN = rsse(
    {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
    {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1",
                                                                       "summary": []}},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1", "summary_index": 0,
     "delta": "Read "},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1", "summary_index": 0,
     "delta": "both."},
    {"type": "response.output_item.done", "output_index": 0, "item": REASONING_ITEM},
    _call_added(1, "fc_1", "call_A", "read_file"),
    _call_added(2, "fc_2", "call_B", "read_file"),
    _args(1, "fc_1", '{"pa'),
    _args(2, "fc_2", '{"path": "b.txt"}'),
    _args(1, "fc_1", 'th": "a.txt"}'),
    {"type": "response.function_call_arguments.done", "output_index": 1, "item_id": "fc_1",
     "arguments": '{"path": "a.txt"}'},
    {"type": "response.function_call_arguments.done", "output_index": 2, "item_id": "fc_2",
     "arguments": '{"path": "b.txt"}'},
    {"type": "response.output_item.done", "output_index": 1,
     "item": {"type": "function_call", "id": "fc_1", "call_id": "call_A", "name": "read_file",
              "arguments": '{"path": "a.txt"}'}},
    _completed(input_tokens=100, input_tokens_details={"cached_tokens": 40}, output_tokens=20,
               output_tokens_details={"reasoning_tokens": 5}, total_tokens=120),
)


def text_turn(text: str) -> str:
    pieces = [text[i:i + 4] for i in range(0, len(text), 4)]
    return rsse({"type": "response.output_item.added", "output_index": 0,
                 "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}},
                *({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1", "content_index": 0,
                   "delta": p} for p in pieces),
                {"type": "response.output_item.done", "output_index": 0,
                 "item": {"type": "message", "id": "msg_1", "role": "assistant",
                          "content": [{"type": "output_text", "text": text}]}},
                _completed(input_tokens=10, output_tokens=3, total_tokens=13))


def _events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


def _translated(body: str) -> list[dict[str, Any]]:
    translator = ChunkTranslator()
    chunks = [c for e in _events(body) for c in translator.chunks(e)]
    translator.end()
    return chunks


def responses_config(folder: Path, **provider: Any) -> Path:
    path = folder / "crow.toml"
    table = {"wire_api": "responses", **provider}
    path.write_text("max_retries = 0\n[provider]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()))
    return path


def test_parallel_calls_in_fragments_assemble_as_chat_tool_calls_with_their_call_ids() -> None:
    """Function calls become tool calls keyed by their position among the calls, `call_id` as the id unchanged,
    arguments joined from their fragments (the `.done` repeat not appended); usage keeps cached tokens."""
    turn, _ = assemble(*_translated(TOOL_TURN))
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_A", "read_file", '{"path": "a.txt"}'), ("call_B", "read_file", '{"path": "b.txt"}')]
    assert turn.finish_reason == "tool_calls"
    assert turn.reasoning == "Read both."
    assert turn.fields[REASONING_ITEMS_KEY] == [REASONING_ITEM]
    assert turn.usage == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                          "prompt_tokens_details": {"cached_tokens": 40},
                          "completion_tokens_details": {"reasoning_tokens": 5}}


def test_arguments_sent_only_whole_in_done_events_are_kept_once() -> None:
    """A server that sends no argument deltas (only `.done` and `output_item.done`) still gives the arguments,
    once."""
    body = rsse(_call_added(0, "fc_1", "call_A", "read_file"),
                {"type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc_1",
                 "arguments": '{"path": "a"}'},
                {"type": "response.output_item.done", "output_index": 0,
                 "item": {"type": "function_call", "id": "fc_1", "call_id": "call_A", "name": "read_file",
                          "arguments": '{"path": "a"}'}},
                _completed())
    turn, _ = assemble(*_translated(body))
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("call_A", '{"path": "a"}')]


def test_a_stream_without_response_completed_is_a_cut_stream() -> None:
    """The Responses stream has no `[DONE]`: ending before `response.completed` is a `StreamCut`."""
    from crow_cli.errors import StreamCut

    translator = ChunkTranslator()
    for event in _events(text_turn("partial"))[:-1]:
        translator.chunks(event)
    with pytest.raises(StreamCut):
        translator.end()


def test_failed_response_raises_the_servers_message() -> None:
    from crow_cli.errors import ServerError

    with pytest.raises(ServerError, match="quota gone"):
        ChunkTranslator().chunks({"type": "response.failed", "response": {
            "error": {"code": "server_error", "message": "quota gone"}}})


def test_history_converts_to_input_items_with_each_call_id_unchanged_and_one_output_per_call() -> None:
    """System → instructions; assistant tool calls → `function_call` items (call_id = the id), tool messages →
    `function_call_output` with the same call_id in order; tools in the Responses shape, not strict; store false;
    reasoning items only for their own author."""
    author = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    assistant = {"role": "assistant", "content": None, "crow_author": author, REASONING_ITEMS_KEY: [REASONING_ITEM],
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                                {"id": "", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}]}
    history: list[Any] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}, assistant,
                          {"role": "tool", "tool_call_id": "c1", "content": "one"},
                          {"role": "tool", "tool_call_id": "", "content": "two"}]
    sent = [{k: v for k, v in m.items() if k not in ("crow_author", REASONING_ITEMS_KEY)} for m in history]
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    chat = {"model": "m", "messages": sent, "stream": True, "tools": [tool], "max_tokens": 9,
            "stream_options": {"include_usage": True}}
    body = request_body(chat, history, author)
    assert body["instructions"] == "be brief"
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["max_output_tokens"] == 9 and "messages" not in body and "stream_options" not in body
    assert body["tools"] == [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                              "strict": False}]
    assert body["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        REASONING_ITEM,
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "", "name": "g", "arguments": "{\"a\":1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "", "output": "two"},
    ]
    other = request_body(chat, history, {"base_url": "http://elsewhere/v1", "model": "m"})
    assert REASONING_ITEM not in other["input"]  # encrypted reasoning goes to its own author only


async def test_tool_turn_over_responses_runs_both_calls_and_sends_each_call_id_back(tmp_path: Path) -> None:
    """End to end through `crow run`: parallel calls run, the second request's input carries each function_call
    and exactly one function_call_output with the same call_id, plus the reasoning item with its encrypted
    content; the answer is printed."""
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    ran = await run_here([{"sse": TOOL_TURN}, {"sse": text_turn("Both read.")}], "read a and b", cwd=tmp_path,
                         config=responses_config(tmp_path), yes=True)
    assert ran.code == 0, ran.stderr
    assert "Both read." in ran.stdout
    first, second = ran.requests
    assert first["stream"] is True and first["store"] is False and "messages" not in first
    assert {t["name"] for t in first["tools"]} >= {"read_file"}
    items = second["input"]
    calls = [i for i in items if i["type"] == "function_call"]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    assert [c["call_id"] for c in calls] == ["call_A", "call_B"]
    assert [o["call_id"] for o in outputs] == ["call_A", "call_B"]
    assert "alpha" in outputs[0]["output"] and "beta" in outputs[1]["output"]
    assert items.index(outputs[0]) > items.index(calls[1])
    assert REASONING_ITEM in items
    assert "previous_response_id" not in second  # store: false: the whole history goes every time


async def test_a_session_moves_from_chat_to_responses_and_back_with_continue(tmp_path: Path) -> None:
    """`-c` continues one session across wires: the Responses request carries the chat turn as input items, and
    the chat request after it carries the Responses turns as messages (the reasoning items never sent there)."""
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    chat = await run_here([{"sse": text_stream("first answer")}], "one", cwd=tmp_path)
    assert chat.code == 0, chat.stderr
    resp = await run_here([{"sse": TOOL_TURN}, {"sse": text_turn("second answer")}], "two", cwd=tmp_path,
                          config=responses_config(tmp_path), yes=True, continue_last=True)
    assert resp.code == 0, resp.stderr
    items = resp.requests[0]["input"]
    assert {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "first answer"}]} \
        in items
    back = await run_here([{"sse": text_stream("third answer")}], "three", cwd=tmp_path, continue_last=True)
    assert back.code == 0, back.stderr
    messages = back.requests[0]["messages"]
    assert [m["role"] for m in messages if m["role"] != "system"] == [
        "user", "assistant", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c["id"] for m in messages for c in m.get("tool_calls") or []] == ["call_A", "call_B"]
    assert not any(REASONING_ITEMS_KEY in m for m in messages)
    assert "gAAAA-opaque" not in json.dumps(back.requests[0])


async def test_an_error_event_ends_the_run_as_on_the_chat_wire(tmp_path: Path) -> None:
    """An `error` event fails the turn with the server's message, the exit code the chat wire's in-stream error
    gives."""
    error = {"type": "error", "code": "server_error", "message": "the model crashed", "param": None}
    resp = await run_here([{"sse": rsse(error)}], cwd=tmp_path,
                          config=responses_config(tmp_path))
    chat = await run_here([{"sse": 'data: {"error": {"message": "the model crashed", "code": "server_error"}}\n\n'}],
                          cwd=tmp_path, config=responses_config(tmp_path, wire_api="chat"))
    assert resp.code == chat.code != 0
    assert "the model crashed" in resp.stderr and "input" in resp.requests[0]
    failed = {"type": "response.failed", "response": {"id": "r", "status": "failed",
                                                      "error": {"code": "server_error", "message": "it broke"}}}
    ran = await run_here([{"sse": rsse(failed)}], cwd=tmp_path, config=responses_config(tmp_path))
    assert ran.code == chat.code and "it broke" in ran.stderr


async def test_a_cut_stream_ends_the_run_as_on_the_chat_wire(tmp_path: Path) -> None:
    """A connection dropped mid-answer: the exit code is the chat wire's, and stdout (not a terminal) holds no cut
    text, as on the chat wire."""
    body = text_turn("partial answer here")
    resp = await run_here([{"sse": body, "cut_after_events": 3}], cwd=tmp_path, config=responses_config(tmp_path))
    chat = await run_here([{"sse": text_stream("partial answer here"), "cut_after_events": 2}], cwd=tmp_path,
                          config=responses_config(tmp_path, wire_api="chat"))
    assert resp.code == chat.code != 0
    assert resp.stdout == chat.stdout == ""
    ended = await run_here([{"sse": rsse(*_events(body)[:-1])}], cwd=tmp_path, config=responses_config(tmp_path))
    assert ended.code == chat.code  # the body ended before response.completed: cut as well


async def test_a_responses_only_model_refused_on_chat_names_the_key_that_fixes_it(tmp_path: Path) -> None:
    """OpenAI's 404 "only supported in v1/responses" says, in its one line, `wire_api = "responses"`."""
    body = json.dumps({"error": {"message": "This model is only supported in v1/responses and not in "
                                            "v1/chat/completions.", "type": "invalid_request_error", "code": None}})
    ran = await run_here([{"status": 404, "body": body}], cwd=tmp_path)
    assert ran.code != 0
    lines = [line for line in ran.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and 'wire_api = "responses"' in lines[0] and "[provider]" in lines[0], ran.stderr


async def test_wire_api_is_validated(tmp_path: Path) -> None:
    """A `wire_api` other than chat or responses is one line naming the key, before anything is sent."""
    config = tmp_path / "crow.toml"
    config.write_text('[provider]\nwire_api = "soap"\n')
    ran = await run_here([], cwd=tmp_path, config=config)
    assert ran.code != 0 and ran.requests == []
    assert "wire_api" in ran.stderr and "responses" in ran.stderr and "Traceback" not in ran.stderr


async def test_a_profile_may_choose_the_responses_wire(tmp_path: Path) -> None:
    """`[profiles.NAME.provider] wire_api = "responses"` sends that profile's turns to /responses."""
    config = tmp_path / "crow.toml"
    config.write_text('max_retries = 0\nprofile = "codex"\n[profiles.codex.provider]\nwire_api = "responses"\n')
    ran = await run_here([{"sse": text_turn("hello")}], cwd=tmp_path, config=config)
    assert ran.code == 0, ran.stderr
    assert "input" in ran.requests[0] and "hello" in ran.stdout


def test_summary_parts_show_as_paragraphs_and_a_refusal_as_the_models_refusal() -> None:
    """Reasoning summary parts are shown a paragraph apart (not run together); `response.refusal.delta` is the
    turn's refusal, as `delta.refusal` on the chat wire."""
    def summary(index: int, text: str) -> dict[str, Any]:
        return {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": index,
                "delta": text}

    body = rsse(summary(0, "First."), summary(1, "Second."),
                {"type": "response.refusal.delta", "output_index": 1, "delta": "I can't help with that."},
                _completed())
    turn, _ = assemble(*_translated(body))
    assert turn.reasoning == "First.\n\nSecond."
    assert turn.refusal == "I can't help with that."


@pytest.mark.parametrize(("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")])
def test_an_incomplete_response_ends_with_the_chat_finish_reason_for_its_reason(reason: str, finish: str) -> None:
    """`response.incomplete` is a finished stream whose finish_reason says why it stopped, as on the chat wire."""
    body = rsse({"type": "response.output_text.delta", "output_index": 0, "delta": "Part"},
                {"type": "response.incomplete", "response": {"incomplete_details": {"reason": reason}}})
    turn, _ = assemble(*_translated(body))
    assert (turn.content, turn.finish_reason) == ("Part", finish)


def test_a_call_opened_whole_keeps_its_arguments_once() -> None:
    """A server that sends the function call whole in `output_item.added` (and again in `.done`) gives the
    arguments once, not dropped and not doubled."""
    added = _call_added(0, "fc_1", "call_A", "read_file")
    added["item"]["arguments"] = '{"path": "a"}'
    done = {"type": "response.output_item.done", "output_index": 0, "item": {**added["item"], "status": "completed"}}
    turn, _ = assemble(*_translated(rsse(added, done, _completed())))
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("call_A", '{"path": "a"}')]


async def test_with_store_true_the_next_request_chains_on_the_stored_response(tmp_path: Path) -> None:
    """`[params] store = true`: the request after a stored response sends `previous_response_id` and only what
    came after it (each function_call_output, its call_id unchanged), with the instructions again."""
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    config = responses_config(tmp_path)
    config.write_text(config.read_text().replace("[provider]", "[params]\nstore = true\n[provider]"))
    ran = await run_here([{"sse": TOOL_TURN}, {"sse": text_turn("Both read.")}], "read a and b", cwd=tmp_path,
                         config=config, yes=True, flags={"system": "Be brief."})
    assert ran.code == 0, ran.stderr
    first, second = ran.requests
    assert first["store"] is True and "Be brief." in first["instructions"] and "previous_response_id" not in first
    assert second["previous_response_id"] == "resp_1"
    assert [(i["type"], i["call_id"]) for i in second["input"]] == [
        ("function_call_output", "call_A"), ("function_call_output", "call_B")]
    assert second["instructions"] == first["instructions"]
