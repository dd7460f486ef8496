"""Every conformance case through the real client (openai SDK + httpx, mocked on the wire by respx) and loop."""

from __future__ import annotations

import functools
import json

import httpx
import pytest
import respx

from crow_cli.errors import AuthError, ProviderError, ServerError
from crow_cli.events import RunFinished, TurnFinished
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import FINAL_ANSWER, CaseReplay, load_cases, needs_the_cli, text_sse

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
CASES = load_cases()


def client(**kw) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="test-model", api_key="sk-test", **kw))


async def _ran(name: str, **_: object) -> str:
    return f"ran {name}"


def stub_registry(case: dict) -> ToolRegistry:
    """A tool for every name the case expects, answering "ran NAME" (so a leaked name that cleans to one runs it)."""
    registry = ToolRegistry()
    for name in sorted({c["function"]["name"] for c in case["expected"].get("tool_calls") or []}):
        registry.register(Tool(name, "stub", functools.partial(_ran, name), parameters={"type": "object"}))
    return registry


async def run_case(case: dict, history: list | None = None):
    history = history if history is not None else [user_message("Please use the tools you need.")]
    events = []
    c = client(max_retries=2)
    try:
        async for event in react(history, c, stub_registry(case), LoopSettings(max_turns=4)):
            events.append(event)
    finally:
        await c.aclose()
    return history, events


@pytest.mark.parametrize("case", [c for c in CASES if c["expected"].get("tool_calls")], ids=lambda c: c["id"])
@respx.mock(assert_all_called=True, assert_all_mocked=True)
async def test_case_round_trip_keeps_ids_results_and_the_history_contract(case, respx_mock):
    if (why := needs_the_cli(case)) is not None:
        pytest.skip(f"runs through the CLI only: {why}")
    # Every request is checked against the history contract, as ../shared/conformance/run.py does (issue 10)
    replay = CaseReplay(case)
    respx_mock.post(URL).mock(side_effect=replay)
    history, events = await run_case(case)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed", events[-1]
    assert all(body["stream"] is True for body in replay.bodies)
    replay.assert_requests()
    replay.assert_tool_turn()
    calls = [e for e in events if isinstance(e, TurnFinished) and e.tool_calls][-1].tool_calls
    results = [m["content"] for m in replay.bodies[-1]["messages"][-len(calls):]]
    for call, result in zip(calls, results, strict=True):  # a cut-off call is not run; the others run their tool
        assert result.startswith("Error: the arguments") if call.cut_off else result == f"ran {call.name}"
    assert history[-1]["role"] == "assistant" and history[-1]["content"] == FINAL_ANSWER


@pytest.mark.parametrize("case", [c for c in CASES if not c["expected"].get("tool_calls")], ids=lambda c: c["id"])
@respx.mock
async def test_case_without_tool_calls_keeps_the_history_contract(case, respx_mock):
    if (why := needs_the_cli(case)) is not None:
        pytest.skip(f"runs through the CLI only: {why}")
    replay = CaseReplay(case)
    respx_mock.post(URL).mock(side_effect=replay)
    _, events = await run_case(case)
    assert events[-1].status == ("error" if (case.get("scenario") or {}).get("expect_failure") else "completed")
    replay.assert_requests()


@respx.mock(assert_all_called=True)
async def test_text_only_case_ends_the_loop(respx_mock):
    case = next(c for c in CASES if c["id"] == "vllm-empty-tool-calls-array")
    route = respx_mock.post(URL).mock(side_effect=CaseReplay(case))
    _, events = await run_case(case)
    assert route.call_count == 1
    assert events[-1] == RunFinished("completed", "The answer is 42.", 1)


@respx.mock
async def test_401_is_final_without_retry(respx_mock):
    case = next(c for c in CASES if c["id"] == "auth-401-no-retry")
    route = respx_mock.post(URL).mock(side_effect=CaseReplay(case))
    _, events = await run_case(case)
    assert route.call_count == 1
    assert events[-1].status == "error" and "401" in events[-1].error and "Incorrect API key" in events[-1].error


@respx.mock
async def test_inband_error_fails_the_turn_with_server_message(respx_mock):
    case = next(c for c in CASES if c["id"] == "vllm-inband-error-event")
    respx_mock.post(URL).mock(side_effect=CaseReplay(case))
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
async def test_the_body_goes_out_as_built(respx_mock):
    # issue: start-up cost: the body is crow's own JSON-ready dict, sent without an SDK transform of
    # the history: fields the SDK's types do not know (a server's extension) arrive unchanged.
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, content=text_sse("ok").encode(),
                                                                 headers={"content-type": "text/event-stream"}))
    c = client(params={"top_k": 5})
    history = [user_message("x"), {"role": "assistant", "content": "", "vendor_extra": {"a": [1, None]},
                                   "tool_calls": [{"id": "c1", "type": "function",
                                                   "function": {"name": "f", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    sent = c.request_body(history, None)
    assert [ch async for ch in c.stream(history)]
    assert json.loads(route.calls[0].request.content) == sent


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
