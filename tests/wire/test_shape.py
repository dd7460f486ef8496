"""Chunk shapes checked at the wire's edge: a field of the wrong type never reaches the accumulator or a surface."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from crow_cli.errors import ServerError
from crow_cli.events import RunFinished, TextDelta, WarningEvent
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.shape import check_chunk
from tests.support import chunk, sse, tool_delta

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
GOOD = chunk({"content": "hi"})
STOP = chunk({}, "stop")


def choice(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, **fields}]}


def call(**fields: Any) -> dict[str, Any]:
    return chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                  "function": {"name": "f", "arguments": "{}"}, **fields}]})


def fn(**fields: Any) -> dict[str, Any]:
    return chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}",
                                                                          **fields}}]})


# Wrong-typed fields (as a mutation run over the conformance corpus makes them) are each skipped with a warning,
# and the rest of the turn is kept: never `crow: internal error: AttributeError/TypeError`
WRONG_TYPED = {
    "error is an empty string": {"error": ""},
    "choices is a number": {"choices": -1},
    "choices is a string": {"choices": "x"},
    "choices is an object": {"choices": {"index": 0}},
    "a choice is a string": {"choices": ["x"]},
    "choice index is a list": {"choices": [{"index": [0], "delta": {"content": "!"}}]},
    "delta is a string": choice(delta="x"),
    "delta is a number": choice(delta=5),
    "delta is a list": choice(delta=[1]),
    "finish_reason is a number": choice(delta={}, finish_reason=5),
    "finish_reason is an object": choice(delta={}, finish_reason={"type": "stop"}),
    "content is a number": chunk({"content": 5}),
    "content is an object": chunk({"content": {"text": "x"}}),
    "a content part's text is a number": chunk({"content": [{"type": "text", "text": 5}]}),
    "a content part is a string": chunk({"content": ["x"]}),
    "refusal is a number": chunk({"refusal": 5}),
    "tool_calls is a string": chunk({"tool_calls": "x"}),
    "tool_calls is a number": chunk({"tool_calls": 5}),
    "a tool call is a string": chunk({"tool_calls": ["x"]}),
    "function is a string": call(function="x"),
    "function is a number": call(function=5),
    "function is a list": call(function=[1]),
    "index is a string": call(index="0"),
    "index is a list": call(index=[0]),
    "index is a float": call(index=0.5),
    "index is a boolean": call(index=True),
    "id is a number": call(id=5),
    "type is a number": call(type=5),
    "name is a number": fn(name=5),
    "arguments is a number": fn(arguments=5),
    "arguments is a list": fn(arguments=[1]),
    "usage is a string": {"choices": [], "usage": "x"},
    "usage is a number": {"choices": [], "usage": 5},
    "usage is a list": {"choices": [], "usage": [1]},
    "a token count is a string": {"choices": [], "usage": {"prompt_tokens": "x", "completion_tokens": 2}},
    "a token count is a list": {"choices": [], "usage": {"completion_tokens": [1]}},
}


async def run(body: str) -> list[Any]:
    """The loop's events for one streamed answer (no tools), through the real client."""
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(return_value=httpx.Response(200, content=body.encode(),
                                                        headers={"content-type": "text/event-stream"}))
        try:
            return [e async for e in react([user_message("x")], c, None, LoopSettings(max_turns=1))]
        finally:
            await c.aclose()


@pytest.mark.parametrize("bad", WRONG_TYPED.values(), ids=WRONG_TYPED.keys())
async def test_a_wrong_typed_field_is_skipped_with_one_warning(bad):
    events = await run(sse(bad, GOOD, bad, STOP))
    warnings = [e.message for e in events if isinstance(e, WarningEvent) and "sent a chunk whose" in e.message]
    assert len(warnings) == 1 and "skipped" in warnings[0], warnings
    assert "hi" in "".join(e.text for e in events if isinstance(e, TextDelta))
    # a call the skipped field left without a name is dropped; one that kept it is offered to no tool
    assert events[-1].status in ("completed", "max_turns"), events[-1]


# well-formed chunks skip the path-naming checker (once per chunk, the stream's hot path): that shortcut must
# never pass a chunk the checker would clean
@pytest.mark.parametrize("bad", WRONG_TYPED.values(), ids=WRONG_TYPED.keys())
def test_every_wrong_typed_field_is_named_by_check_chunk(bad):
    assert check_chunk(json.loads(json.dumps(bad)))


@pytest.mark.parametrize("bad", [{"choices": -1}, choice(delta="x"), {"choices": ["x"], "usage": 5}],
                         ids=["choices", "delta", "choice"])
async def test_a_turn_with_no_chunk_of_the_right_shape_fails_with_one_line(bad):
    events = await run(sse(bad, bad))
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "error", finished
    assert "\n" not in finished.error and "shape" in finished.error


def test_a_chunk_of_the_right_shape_is_left_as_it_is():
    good = call()
    good["usage"] = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4, "cost": 0.01,
                     "prompt_tokens_details": {"cached_tokens": 0}}
    before = json.loads(json.dumps(good))
    assert check_chunk(good) == []
    assert good == before


def test_the_bare_tool_call_and_the_object_arguments_servers_send_are_of_the_right_shape():
    # a call sent bare instead of in a list; MiniMax's object-valued arguments; Gemini's missing index
    bare = chunk({"tool_calls": {"index": 0, "id": "c", "function": {"name": "f", "arguments": {"a": 1}}}})
    missing = chunk({"tool_calls": [tool_delta(None, "c", "f", "{}")]})
    assert check_chunk(bare) == [] and check_chunk(missing) == []


def test_each_problem_names_its_field_and_the_field_is_gone():
    bad = call(index="0", function="x")
    problems = check_chunk(bad)
    assert problems == ["choices[0].delta.tool_calls[0].index is a string, not an integer",
                        "choices[0].delta.tool_calls[0].function is a string, not an object"]
    assert bad["choices"][0]["delta"]["tool_calls"] == [{"id": "call_1", "type": "function"}]


async def test_the_same_problem_in_every_chunk_is_said_once():
    body = sse(*[chunk({"content": str(n)}, usage="x") for n in range(5)], STOP)
    events = await run(body)
    assert sum(isinstance(e, WarningEvent) for e in events) == 1
    assert events[-1].final_text == "01234"


async def test_a_completion_with_wrong_typed_choices_is_an_error_not_a_crash():
    # a server that ignored stream: true and sent a chat.completion whose choices are damaged
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))
    for completion in ({"choices": -1}, {"choices": ["x"]}, {"choices": [{"message": "x"}]}):
        with respx.mock() as mock:
            mock.post(URL).mock(return_value=httpx.Response(200, json=completion))
            with pytest.raises(ServerError):
                [_ async for _ in c.stream([user_message("x")])]
    await c.aclose()
