"""Through the client on the wire (respx): what a server attached goes back on later requests, and what a
refusal teaches is applied at once, announced, and remembered per base URL + model for the next run."""

from __future__ import annotations

import json

import httpx
import respx

from crow_cli.events import Notice, RunFinished
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool
from crow_cli.wire import facts
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import authorless, chunk, sse, text_sse

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
BLOCKS = [{"type": "reasoning.text", "text": "Need it.", "index": 0, "signature": "S1+/="},
          {"type": "reasoning.encrypted", "data": "E1", "index": 0}]
SIG = {"google": {"thought_signature": "G1=="}}
# Gemini's OpenAI-compatible endpoint, a tool message without `name`
NAME_400 = [{"error": {"code": 400, "message": "* GenerateContentRequest.contents[2].parts[0].function_response.name: "
                       "Name cannot be empty.", "status": "INVALID_ARGUMENT"}}]


def streamed(body: str) -> httpx.Response:
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def tool_turn() -> httpx.Response:
    return streamed(sse(
        chunk({"role": "assistant", "reasoning_details": [{"type": "reasoning.text", "text": "Need", "index": 0}]}),
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": " it.", "index": 0}]}),
        chunk({"reasoning_details": [{"type": "reasoning.text", "signature": "S1+/=", "index": 0}]}),
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "E1", "index": 0}]}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "extra_content": SIG,
                               "function": {"name": "get_rate", "arguments": "{}"}}]}),
        chunk({}, "tool_calls")))


def registry() -> ToolRegistry:
    async def get_rate(**_: object) -> str:
        return "160"

    reg = ToolRegistry()
    reg.register(Tool("get_rate", "rate", get_rate, parameters={"type": "object"}))
    return reg


def client() -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))


def body(route: respx.Route, n: int) -> dict:
    return json.loads(route.calls[n].request.content)


async def run(history: list[dict], responses: list[httpx.Response]) -> tuple[respx.Route, list]:
    c = client()
    try:
        with respx.mock(assert_all_called=True) as mock:
            route = mock.post(URL).mock(side_effect=responses)
            events = [e async for e in react(history, c, registry(), LoopSettings())]
    finally:
        await c.aclose()
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed", events[-1]
    return route, events


async def test_blocks_and_call_extensions_go_back_exactly_on_every_later_request() -> None:
    history = [user_message("rate?")]
    route, _ = await run(history, [tool_turn(), streamed(text_sse("160 yen."))])
    assistant = body(route, 1)["messages"][1]
    assert assistant["reasoning_details"] == BLOCKS
    assert assistant["tool_calls"] == [{"id": "c1", "type": "function", "extra_content": SIG,
                                        "function": {"name": "get_rate", "arguments": "{}"}}]
    # the next prompt (chat, `crow run -c`): the tool exchange goes back byte for byte
    history.append(user_message("and USD?"))
    later, _ = await run(history, [streamed(text_sse("1 USD."))])
    sent = body(later, 0)["messages"]
    assert json.dumps(sent[:4]) == json.dumps([*body(route, 1)["messages"][:3], authorless(history[3])])


async def test_a_required_tool_message_name_is_added_once_announced_and_remembered_for_the_next_run() -> None:
    history = [user_message("rate?")]
    route, events = await run(history, [tool_turn(), httpx.Response(400, json=NAME_400),
                                        streamed(text_sse("160 yen."))])
    assert "name" not in body(route, 1)["messages"][2]
    assert body(route, 2)["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "160",
                                             "name": "get_rate"}
    notices = [e for e in events if isinstance(e, Notice) and e.code == "reasoning_echo"]
    assert len(notices) == 1 and "function name on tool messages" in notices[0].message
    assert facts.recall(BASE, "m")["tool_message_name"] is True
    assert "name" not in history[2]  # the stored history is as the loop made it
    history.append(user_message("and USD?"))  # a later run with a new client: no refused request
    later, _ = await run(history, [streamed(text_sse("1 USD."))])
    assert body(later, 0)["messages"][2]["name"] == "get_rate"


async def test_a_refused_field_is_remembered_so_the_next_run_does_not_pay_the_failed_request() -> None:
    refuse = {"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "reasoning_details"],
                          "msg": "Extra inputs are not permitted"}]}
    history = [user_message("rate?")]
    route, _ = await run(history, [tool_turn(), httpx.Response(422, json=refuse), streamed(text_sse("160 yen."))])
    assert "reasoning_details" in body(route, 1)["messages"][1]
    assert "reasoning_details" not in body(route, 2)["messages"][1]
    assert body(route, 1)["messages"][2:] == body(route, 2)["messages"][2:]
    assert facts.recall(BASE, "m")["refused_fields"] == ["reasoning_details"]
    history.append(user_message("and USD?"))
    later, _ = await run(history, [streamed(text_sse("1 USD."))])
    assert later.call_count == 1 and "reasoning_details" not in body(later, 0)["messages"][1]
    assert history[1]["reasoning_details"] == BLOCKS  # still kept: another server may want it


async def test_debug_traces_the_policy_each_field_change_and_why_and_the_fact_remembered() -> None:
    refuse = {"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "reasoning_details"],
                          "msg": "Extra inputs are not permitted"}]}
    history = [user_message("rate?")]
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0, trace=True))
    try:
        with respx.mock(assert_all_called=True) as mock:
            mock.post(URL).mock(side_effect=[tool_turn(), httpx.Response(422, json=refuse),
                                             streamed(text_sse("160 yen."))])
            events = [e async for e in react(history, c, registry(), LoopSettings(trace=True))]
    finally:
        await c.aclose()
    debug = [e.message for e in events if isinstance(e, Notice) and e.code in ("adapt_debug", "debug")]
    assert any("server profile 'generic'" in m for m in debug)
    assert any("reasoning_details pieces of one block" in m for m in debug)  # a block merged
    assert any("dropped reasoning_details" in m and "extra_forbidden" in m for m in debug)  # and why
    assert any("remembered for" in m and "refused_fields" in m for m in debug)


# Reasoning_content refused by server A at a URL and model made every later tool run against server B
# at the same URL and model fail for good, though B demands the field (DeepSeek thinking mode's 400) (issue 29)
async def test_a_demand_for_a_field_learned_as_refused_replaces_the_fact() -> None:
    facts.learn(BASE, "m", refused_fields=["reasoning_content"])
    demand = {"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API.",
                        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}
    history = [user_message("rate?")]
    route, _ = await run(history, [tool_turn(), httpx.Response(400, json=demand), streamed(text_sse("160."))])
    assert "reasoning_content" not in body(route, 1)["messages"][1]
    assert "reasoning_content" in body(route, 2)["messages"][1]  # sent once more with the fact undone
    known = facts.recall(BASE, "m")
    assert known["required_fields"] == ["reasoning_content"] and "reasoning_content" not in known["refused_fields"]
