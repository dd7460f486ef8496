"""Every conformance case through the real client (openai SDK + httpx, mocked on the wire by respx) and loop."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import AuthError, ProviderError, ServerError
from crow_cli.events import RunFinished
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.conftest import load_cases, text_sse

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
CASES = load_cases()


def client(**kw) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="test-model", api_key="sk-test", **kw))


def script(case: dict) -> list[httpx.Response]:
    steps = case.get("responses") or [{"sse": case["sse"]}]
    out = []
    for step in steps:
        if "status" in step:
            out.append(httpx.Response(step["status"], content=step.get("body", "").encode(),
                                      headers={"content-type": "application/json", **(step.get("headers") or {})}))
        else:
            out.append(httpx.Response(200, content=step["sse"].encode(), headers={"content-type": "text/event-stream"}))
    if "sse" in case and case["expected"].get("tool_calls"):
        out.append(httpx.Response(200, content=text_sse("All done.").encode(),
                                  headers={"content-type": "text/event-stream"}))
    return out


async def run_case(case: dict, history: list | None = None):
    history = history if history is not None else [user_message("Please use the tools you need.")]
    events = []
    c = client(max_retries=2)
    try:
        async for event in react(history, c, ToolRegistry(), LoopSettings(max_turns=4)):
            events.append(event)
    finally:
        await c.aclose()
    return history, events


@pytest.mark.parametrize("case", [c for c in CASES if c["expected"].get("tool_calls")], ids=lambda c: c["id"])
@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_case_round_trip_second_request_carries_ids_and_results(case, respx_mock):
    route = respx_mock.post(URL).mock(side_effect=script(case))
    history, events = await run_case(case)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    body = json.loads(route.calls[-1].request.content)
    assert body["stream"] is True
    msgs = body["messages"]
    assistant = msgs[1]
    expected = case["expected"]["tool_calls"]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == [c["id"] for c in expected]
    assert [c["type"] for c in assistant["tool_calls"]] == ["function"] * len(expected)
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [c["function"]["name"] for c in expected]
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == \
        [json.loads(c["function"]["arguments"]) for c in expected]
    results = msgs[2:]
    assert [m["role"] for m in results] == ["tool"] * len(expected)
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in expected]
    assert all("unknown tool" in m["content"] for m in results)  # none of these tools exist here
    assert history[-1]["role"] == "assistant" and history[-1]["content"].startswith("All done")


@respx.mock(assert_all_called=True)
async def test_text_only_case_ends_the_loop(respx_mock):
    case = next(c for c in CASES if c["id"] == "vllm-empty-tool-calls-array")
    route = respx_mock.post(URL).mock(side_effect=script(case))
    _, events = await run_case(case)
    assert route.call_count == 1
    assert events[-1] == RunFinished("completed", "The answer is 42.", 1)


@respx.mock
async def test_401_is_final_without_retry(respx_mock):
    case = next(c for c in CASES if c["id"] == "auth-401-no-retry")
    route = respx_mock.post(URL).mock(side_effect=script(case))
    _, events = await run_case(case)
    assert route.call_count == 1
    assert events[-1].status == "error" and "401" in events[-1].error and "Incorrect API key" in events[-1].error


@respx.mock
async def test_inband_error_fails_the_turn_with_server_message(respx_mock):
    case = next(c for c in CASES if c["id"] == "vllm-inband-error-event")
    respx_mock.post(URL).mock(side_effect=script(case))
    history, events = await run_case(case)
    assert events[-1].status == "error" and "overloaded" in events[-1].error and "503" in events[-1].error
    assert history == [user_message("Please use the tools you need.")]  # nothing half-done was appended


@respx.mock
async def test_stream_errors_map_to_provider_errors(respx_mock):
    respx_mock.post(URL).mock(return_value=httpx.Response(
        502, content=b"<html><body><h1>502 Bad Gateway</h1></body></html>", headers={"content-type": "text/html"}))
    c = client(max_retries=0)
    with pytest.raises(ServerError) as info:
        async for _ in c.stream([user_message("x")]):
            pass
    assert str(info.value) == "server error (502): 502 Bad Gateway"


@respx.mock
async def test_403_is_auth_error_and_404_names_base_url(respx_mock):
    respx_mock.post(URL).mock(side_effect=[httpx.Response(403, json={"error": {"message": "no"}}),
                                           httpx.Response(404, json={"error": {"message": "model x not found"}})])
    c = client(max_retries=0)
    with pytest.raises(AuthError):
        async for _ in c.stream([user_message("x")]):
            pass
    with pytest.raises(ProviderError) as info:
        async for _ in c.stream([user_message("x")]):
            pass
    assert "404" in str(info.value) and BASE in str(info.value)


@respx.mock
async def test_request_body_and_no_auth_header_without_key(respx_mock):
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, content=text_sse("ok").encode(),
                                                                 headers={"content-type": "text/event-stream"}))
    c = ChatClient(ClientSettings(base_url=BASE, model="m", params={"temperature": 0.1}))
    chunks = [ch async for ch in c.stream([user_message("x")], [{"type": "function", "function": {"name": "f"}}])]
    assert chunks and "authorization" not in route.calls[0].request.headers
    body = json.loads(route.calls[0].request.content)
    assert body["model"] == "m" and body["stream"] is True and body["temperature"] == 0.1
    assert body["stream_options"] == {"include_usage": True} and body["tools"][0]["function"]["name"] == "f"


@respx.mock
async def test_server_rejecting_stream_options_is_retried_without_it(respx_mock):
    route = respx_mock.post(URL).mock(side_effect=[
        httpx.Response(400, json={"error": {"message": "Unrecognized request argument: stream_options"}}),
        httpx.Response(200, content=text_sse("ok").encode(), headers={"content-type": "text/event-stream"}),
    ])
    c = client(max_retries=0)
    chunks = [ch async for ch in c.stream([user_message("x")])]
    assert chunks and "stream_options" not in json.loads(route.calls[1].request.content)


@respx.mock
async def test_openai_without_a_key_fails_at_once_without_a_request(respx_mock):
    # A new user with no key used to wait ~5 s for "cannot reach api.openai.com" (or a bare 401).
    route = respx_mock.post("https://api.openai.com/v1/chat/completions").mock(
        return_value=httpx.Response(401, json={"error": {"message": "no key"}}))
    c = ChatClient(ClientSettings(base_url="https://api.openai.com/v1", model="m"))
    with pytest.raises(AuthError, match=r"no API key for https://api\.openai\.com/v1: set OPENAI_API_KEY"):
        [ch async for ch in c.stream([user_message("x")])]
    assert not route.called
