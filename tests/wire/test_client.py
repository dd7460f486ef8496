"""The client (`wire/client`) on the wire: the openai SDK + httpx, mocked by respx.

Properties guarded here:

- every conformance case comes out right through the real client and loop;
- a refusal naming a part of the request changes that part, sends the request once more and remembers the
  change per base URL + model, announced, for the next run (Gemini, vLLM, LiteLLM keywords and parameters);
- what a server attached goes back on later requests;
- each provider's "the conversation no longer fits" error becomes one `ContextOverflow`, with the window and
  the prompt size when the server said them, told apart from any other 400;
- an API key a provider echoes in its error body never reaches what crow prints or stores;
- a server that accepts the request and never starts its response fails after `first_byte_timeout`, once,
  with a message that says what to set;
- reasoning goes back, or not, as the server needs: DeepSeek's thinking mode answers 400 unless an assistant
  message with tool calls carries its `reasoning_content`, Mistral (and LiteLLM before it) answers 422
  `extra_forbidden` when any message carries it; `reasoning_echo = "auto"` echoes it beside tool calls and
  adapts, once per request, to either answer; `always` / `never` do as they say;
- a base URL with a query string (Azure's `?api-version=…`) is where requests go, and is never shown.
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import respx

from crow_cli.config import load_settings
from crow_cli.errors import AuthError, ConfigError, ContextOverflow, ProviderError, ServerError
from crow_cli.events import Notice, RunFinished, TurnFinished
from crow_cli.history import AssistantTurn, ToolCall, assistant_message, tool_message, user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool
from crow_cli.wire import facts
from crow_cli.wire.client import ChatClient, ClientSettings, map_error
from crow_cli.wire.refusal import field_demanded, field_refused
from tests.support import (
    CROW,
    FINAL_ANSWER,
    CaseReplay,
    authorless,
    chunk,
    load_cases,
    needs_the_cli,
    run_here,
    sse,
    text_sse,
    tool_delta,
    write_config,
)

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
# vLLM (modelscope/ms-agent#489: the same answer for any extra body field)
VLLM_SEED = {"object": "error", "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'seed'), 'msg': 'Extra "
             "inputs are not permitted', 'input': 7}]", "type": "BadRequestError", "param": None, "code": 400}
# Gemini's OpenAI-compatible endpoint (Laisky/one-api#60)
GEMINI_DEFAULT = {"error": {"message": "Invalid JSON payload received. Unknown name \"default\" at 'tools[0]."
                            "function_declarations[0].parameters.properties[0].value': Cannot find field."}}
TOOLS = [{"type": "function", "function": {"name": "list_directory", "description": "List a folder.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "default": "."}}}}}]
HISTORY = [{"role": "user", "content": "hi"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function", "function": {"name": "list_directory", "arguments": "{}"}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]


def adapt_client(**kw) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                     params={"seed": 7, "temperature": 0.2}, **kw))


def ok() -> httpx.Response:
    return httpx.Response(200, content=text_sse("ok").encode(), headers={"content-type": "text/event-stream"})


def sent(route: respx.Route, n: int) -> dict:
    return json.loads(route.calls[n].request.content)


async def drain(c: ChatClient, messages: list | None = None) -> list:
    history = messages if messages is not None else json.loads(json.dumps(HISTORY))
    try:
        return [item async for item in c.stream(history, TOOLS)]
    finally:
        await c.aclose()


async def test_a_named_parameter_is_dropped_the_request_sent_once_more_and_the_change_remembered() -> None:
    history = json.loads(json.dumps(HISTORY))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok()])
        items = await drain(adapt_client(), history)
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["request_adapted"]
    assert "dropped parameter seed" in notices[0].message and "(400" in notices[0].message
    assert "(DropParam)" in notices[0].message  # the notice names the rule class
    first, second = sent(route, 0), sent(route, 1)
    assert first["seed"] == 7 and "seed" not in second
    assert {k: v for k, v in first.items() if k != "seed"} == second  # everything else unchanged
    assert history == HISTORY  # the history keeps what happened
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "drop_param", "target": "seed", "value": None}]
    provenance = facts.recall_all()[f"{BASE} m"]["provenance"]["request_rules drop_param seed"]
    assert "Extra inputs are not permitted" in provenance["why"]  # from which refusal
    # the next run against the same base URL + model applies it before its first request: no failed request
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        items = await drain(adapt_client())
    assert route.call_count == 1 and "seed" not in sent(route, 0) and sent(route, 0)["temperature"] == 0.2
    assert not [i for i in items if isinstance(i, Notice)]
    assert facts.recall(BASE, "other-model") == {}


async def test_a_schema_keyword_refusal_rewrites_the_tools_only_for_the_wire() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=GEMINI_DEFAULT), ok()])
        await drain(adapt_client())
    assert sent(route, 1)["tools"][0]["function"]["parameters"] == {"type": "object",
                                                                    "properties": {"path": {"type": "string"}}}
    assert sent(route, 0)["messages"] == sent(route, 1)["messages"] and sent(route, 1)["seed"] == 7
    assert TOOLS[0]["function"]["parameters"]["properties"]["path"]["default"] == "."  # the registry's schema stays


async def test_a_refusal_that_teaches_nothing_new_ends_the_request_with_the_servers_message() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)] * 3)
        with pytest.raises(ProviderError, match=r"request rejected \(400\).*extra_forbidden"):
            await drain(adapt_client())
    assert route.call_count == 2  # sent once more, never looped
    assert "request_rules" not in facts.recall(BASE, "m")  # not accepted: nothing learned


async def test_the_notice_promises_remembering_only_once_the_changed_request_is_accepted() -> None:
    # When the server refuses the changed request too, nothing is stored and no notice says "remembered for
    # this server and model"
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)] * 2)
        notices: list[Notice] = []
        with pytest.raises(ProviderError):
            async for item in adapt_client().stream(json.loads(json.dumps(HISTORY)), TOOLS):
                if isinstance(item, Notice):
                    notices.append(item)
    assert [n.code for n in notices] == ["request_adapted"]
    assert "remembered for this server and model once it accepts the changed request" in notices[0].message


async def test_adapt_requests_false_ends_at_the_first_refusal_and_applies_nothing_learned() -> None:
    facts.learn(BASE, "m", request_rules=[{"op": "drop_param", "target": "temperature", "value": None}])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)])
        with pytest.raises(ProviderError, match=r"request rejected \(400\)"):
            await drain(adapt_client(adapt_requests=False))
    assert route.call_count == 1 and sent(route, 0)["temperature"] == 0.2


async def test_debug_traces_each_decision() -> None:
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok()])
        items = await drain(adapt_client(trace=True))
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices if n.code == "request_adapted"] == ["request_adapted"]
    assert any(n.code == "adapt_debug" and "drop_param" in n.message for n in notices)
    assert any(n.code == "adapt_debug" and "remembered for" in n.message and "request_rules" in n.message
               for n in notices)
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json={"error": {"message": "no such model"}})])
        c, seen = adapt_client(trace=True), []
        with pytest.raises(ProviderError):
            async for item in c.stream(json.loads(json.dumps(HISTORY)), TOOLS):
                seen.append(item)
        await c.aclose()
    assert {i.code for i in seen} == {"adapt_debug"}
    assert any("dropped parameter seed" in i.message for i in seen)  # the learned rule, applied at once
    assert "is final" in seen[-1].message  # then why the refusal ends the request


async def test_a_renamed_tool_is_called_by_its_own_name_and_the_history_keeps_it() -> None:
    # Gemini: "Invalid function name. Must start with a letter or an underscore" (google-gemini/gemini-cli#2966)
    refusal = {"error": {"message": "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid "
                                    "function name. Must start with a letter or an underscore."}}
    tools = [{"type": "function", "function": {"name": "21st_magic", "description": "Make a component.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    from tests.support import chunk, sse, tool_delta

    call = sse(chunk({"tool_calls": [tool_delta(0, "call_9", "t_21st_magic", "{}")]}), chunk({}, "tool_calls"))
    history = [{"role": "user", "content": "make one"}]
    c = adapt_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=refusal), httpx.Response(
            200, content=call.encode(), headers={"content-type": "text/event-stream"})])
        items = [i async for i in c.stream(history, tools)]
        await c.aclose()
    assert sent(route, 1)["tools"][0]["function"]["name"] == "t_21st_magic"
    names = [tc["function"]["name"] for i in items if isinstance(i, dict) for ch in i["choices"]
             for tc in ch["delta"].get("tool_calls") or [] if "name" in tc.get("function", {})]
    assert names == ["21st_magic"]  # the loop runs the tool by its own name


# A configured value refused for its value (`temperature = 5`, a typo) is a one-line error naming the config
# key, never learned as "drop temperature" (which would silently drop the fixed 0.2 later)
@pytest.mark.parametrize("refusal", [
    # OpenAI (the platform's answer for a temperature above 2)
    {"error": {"message": "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 5 "
                          "instead.", "type": "invalid_request_error", "param": "temperature",
               "code": "decimal_above_max_value"}},
    # an OpenAI-compatible endpoint (Frrrrrrrrank/auto_job__find__chatgpt__rpa#40, there for 3.0)
    {"error": {"message": "5 is greater than the maximum of 2 - 'temperature'", "type": "invalid_request_error",
               "param": None, "code": None}},
])
async def test_a_refused_value_the_user_configured_ends_the_run_naming_it_and_is_not_learned(refusal) -> None:
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                  params={"temperature": 5}))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=refusal), ok()])
        with pytest.raises(ProviderError) as info:
            await drain(c)
    message = str(info.value)
    assert "temperature = 5" in message and "(400" in message and "[params]" in message and "\n" not in message
    assert route.call_count == 1
    assert facts.recall(BASE, "m") == {}


async def test_a_configured_value_set_to_the_one_the_server_names_holds_for_this_run_only() -> None:
    # A configured temperature refused ("Only the default (1) value is supported") is set to 1 for this run
    # only: not learned, so a later run configured with 0.7 sends 0.7
    refusal = {"error": {"message": "Unsupported value: 'temperature' does not support 0.3 with this model. Only "
                                    "the default (1) value is supported.", "type": "invalid_request_error",
                         "param": "temperature", "code": "unsupported_value"}}
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                  params={"temperature": 0.3}))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=refusal), ok(), ok()])
        notices = [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        await drain(c)  # the next turn of the same run keeps the value the server named
    assert [sent(route, n)["temperature"] for n in range(3)] == [0.3, 1, 1]
    assert any("for this run only" in n.message for n in notices if isinstance(n, Notice))
    assert facts.recall(BASE, "m") == {}
    later = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                      params={"temperature": 0.7}))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(later)
    assert sent(route, 0)["temperature"] == 0.7


async def test_a_recalled_usage_option_refusal_sends_no_stream_options() -> None:
    # A usage_option_refused fact (as crow probe remembers it) is read by the next run
    facts.learn(BASE, "m", usage_option_refused=True)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(adapt_client())
    assert "stream_options" not in sent(route, 0)


async def test_a_damaged_facts_file_is_one_notice_and_the_request_goes_out() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok(), ok()])
        c = adapt_client()
        items = [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        items += [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        await c.aclose()
    assert [i.code for i in items if isinstance(i, Notice)] == ["facts_damaged"]
    assert route.call_count == 2


# ---- sizes: a reply cap above what the server allows, a tool result above its string limit ----------------------
# (a user's `max_tokens = 100000` in [params] ended the run with "fix it in [params]" although the server named the
# number it takes; a 12 MB tool result was refused by OpenAI on every request of the session)
OPENAI_CAP = {"error": {"message": "max_tokens is too large: 100000. This model supports at most 16384 completion "
                                   "tokens, whereas you provided 100000.", "type": "invalid_request_error",
                        "param": "max_tokens", "code": "invalid_value"}}
VLLM_ROOM = {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested "
             "5000 tokens (1000 in the messages, 4000 in the completion). Please reduce the length of the messages or "
             "completion.", "type": "BadRequestError", "param": None, "code": 400}
OPENAI_STRING = {"error": {"message": "Invalid 'messages[2].content': string too long. Expected a string with maximum "
                                      "length 2000, but got a string with length 3000 instead.",
                           "type": "invalid_request_error", "param": "messages[2].content",
                           "code": "string_above_max_length"}}


def capped(max_tokens: int) -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                     params={"max_tokens": max_tokens}))


async def test_a_configured_max_tokens_above_the_models_limit_is_lowered_to_it_and_remembered() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=OPENAI_CAP), ok()])
        items = await drain(capped(100000))
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["request_adapted"]
    assert "from 100000 to 16384" in notices[0].message and "remembered" in notices[0].message
    assert sent(route, 0)["max_tokens"] == 100000 and sent(route, 1)["max_tokens"] == 16384
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "cap_param", "target": "max_tokens", "value": 16384}]
    with respx.mock(assert_all_called=True) as mock:  # the next run: no refused request
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(capped(100000))
    assert route.call_count == 1 and sent(route, 0)["max_tokens"] == 16384


async def test_max_tokens_above_the_room_the_prompt_leaves_is_lowered_for_that_request_only() -> None:
    c = capped(5000)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_ROOM), ok(), ok()])
        items = [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        items += [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]  # the next turn
        await c.aclose()
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["request_adapted"]
    assert "from 5000 to 3096" in notices[0].message and "for this request only" in notices[0].message
    assert [sent(route, n)["max_tokens"] for n in range(3)] == [5000, 3096, 5000]
    assert facts.recall(BASE, "m") == {}  # it depends on the prompt: never learned


async def test_a_prompt_that_leaves_too_little_room_is_a_context_overflow_not_a_refused_value() -> None:
    tight = {**VLLM_ROOM, "message": VLLM_ROOM["message"].replace("1000 in the messages", "4000 in the messages")}
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=tight)])
        with pytest.raises(ContextOverflow):
            await drain(capped(5000))
    assert route.call_count == 1


async def test_a_tool_result_over_the_servers_string_limit_is_cut_in_the_request_only_and_remembered() -> None:
    history = json.loads(json.dumps(HISTORY))
    history[2]["content"] = "z" * 3000
    kept = json.loads(json.dumps(history))
    c = adapt_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=OPENAI_STRING), ok(), ok()])
        items = [i async for i in c.stream(history, TOOLS)]
        items += [i async for i in c.stream(history, TOOLS)]
        await c.aclose()
    assert [i.code for i in items if isinstance(i, Notice)] == ["request_adapted"]
    for n in (1, 2):  # the retried request and every later one: cut, with the marker of any cut output
        result = sent(route, n)["messages"][2]["content"]
        assert len(result) <= 2000 and "[output truncated: " in result
    assert sent(route, 1)["messages"][:2] == sent(route, 0)["messages"][:2]
    assert history == kept  # the session keeps the whole result
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "cut_tool_result", "target": "", "value": 2000}]


async def test_a_relay_that_names_only_the_parameter_gets_it_dropped() -> None:
    relay = {"error": {"message": "Provider returned error", "code": 400, "param": "max_tokens"}}
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=relay), ok()])
        await drain(capped(5000))
    assert "max_tokens" not in sent(route, 1)


# --debug says which layer each value of the server's profile came from
async def test_debug_names_the_layer_of_each_profile_value() -> None:
    facts.learn(BASE, "m", request_rules=[{"op": "drop_param", "target": "seed", "value": None}])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        items = await drain(adapt_client(trace=True, provider={"reasoning_fields": ["thinking"]}))
    debug = " ".join(i.message for i in items if isinstance(i, Notice) and i.code == "adapt_debug")
    assert 'reasoning_fields ["thinking"] (config, replacing built-in: ["reasoning_content", "reasoning"])' in debug
    assert "needs_key false (built-in)" in debug
    assert "rule drop_param seed dropped parameter seed (DropParam) (learned)" in debug
    assert "seed" not in sent(route, 0)


# --debug says when a learned rule replaces a configured one
async def test_debug_says_what_a_learned_rule_replaced_of_the_config() -> None:
    facts.learn(BASE, "m", request_rules=[{"op": "cap_param", "target": "max_tokens", "value": 4096}])
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[ok()])
        items = await drain(adapt_client(trace=True, provider={"request_rules": [
            {"op": "cap_param", "target": "max_completion_tokens", "value": 8192}]}))
    debug = " ".join(i.message for i in items if isinstance(i, Notice) and i.code == "adapt_debug")
    assert ("rule cap_param max_tokens lowered parameter max_tokens to 4096 (CapParam) (learned, replacing config: "
            "lowered parameter max_completion_tokens to 8192 (CapParam))") in debug


# `adapt_requests = false` keeps the rules the user configured
async def test_a_configured_rule_applies_when_adapting_requests_is_off() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(adapt_client(adapt_requests=False,
                                 provider={"request_rules": [{"op": "drop_param", "target": "seed"}]}))
    assert "seed" not in sent(route, 0)


# A request rule in the config's [provider] table applies from the first request and is not learned
async def test_a_configured_rule_applies_from_the_first_request() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(adapt_client(provider={"request_rules": [{"op": "drop_param", "target": "seed"}]}))
    assert "seed" not in sent(route, 0) and sent(route, 0)["temperature"] == 0.2
    assert "request_rules" not in facts.recall(BASE, "m")


# With the facts store unwritable, the notice never says the change was "remembered for this server and
# model", and one line says it was not
async def test_a_change_that_cannot_be_remembered_says_so_once_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("")  # the state folder's place is a file: no facts store can be made there
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok(),
                                                 httpx.Response(400, json=GEMINI_DEFAULT), ok()])
        c = adapt_client()
        items = [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        items += [i async for i in c.stream(json.loads(json.dumps(HISTORY)), TOOLS)]
        await c.aclose()
    assert route.call_count == 4  # the run goes on
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["request_adapted", "facts_unwritable", "request_adapted"]
    warning = notices[1].message
    assert "could not be remembered" in warning and str(blocker) in warning and "\n" not in warning
    assert "File exists" in warning and "Error" not in warning  # the OS reason, no exception name

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


def attached_client() -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))


def body(route: respx.Route, n: int) -> dict:
    return json.loads(route.calls[n].request.content)


async def run(history: list[dict], responses: list[httpx.Response]) -> tuple[respx.Route, list]:
    c = attached_client()
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
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "tool_message_name", "target": "", "value": True}]
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
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "drop_field", "target": "reasoning_details",
                                                         "value": None}]
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
    assert any("remembered for" in m and "drop_field" in m for m in debug)


# A demand for a field learned as refused (server A refused reasoning_content; server B at the same URL and model
# demands it, DeepSeek thinking mode's 400) replaces the fact, so B's later tool runs go on
async def test_a_demand_for_a_field_learned_as_refused_replaces_the_fact() -> None:
    facts.learn(BASE, "m", refused_fields=["reasoning_content"])
    demand = {"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API.",
                        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}
    history = [user_message("rate?")]
    route, _ = await run(history, [tool_turn(), httpx.Response(400, json=demand), streamed(text_sse("160."))])
    assert "reasoning_content" not in body(route, 1)["messages"][1]
    assert "reasoning_content" in body(route, 2)["messages"][1]  # sent once more with the fact undone
    known = facts.recall(BASE, "m")
    assert known["request_rules"] == [{"op": "require_field", "target": "reasoning_content", "value": None}]
    assert known["refused_fields"] == []  # the old form's fact, undone


async def test_a_facts_file_of_the_old_form_still_reads_and_what_is_learned_next_is_stored_as_rules() -> None:
    # the form earlier versions wrote: message facts as lists and flags, request rules apart
    old = {f"{BASE.rstrip('/')} m": {"refused_fields": ["reasoning_details"], "required_fields": [],
                                     "tool_message_name": True, "learned_at": time.time(),
                                     "provenance": {"refused_fields reasoning_details": {"learned_at": time.time()}}}}
    facts.facts_path().parent.mkdir(parents=True, exist_ok=True)
    facts.facts_path().write_text(json.dumps(old))
    demand = {"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API.",
                        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}
    history = [user_message("rate?")]
    route, _ = await run(history, [tool_turn(), httpx.Response(400, json=demand), streamed(text_sse("160."))])
    assert "reasoning_details" not in body(route, 1)["messages"][1]  # the old form's facts apply
    assert body(route, 1)["messages"][2]["name"] == "get_rate"
    assert "reasoning_content" in body(route, 2)["messages"][1]
    known = facts.recall(BASE, "m")
    assert known["request_rules"] == [{"op": "drop_field", "target": "reasoning_details", "value": None},
                                      {"op": "tool_message_name", "target": "", "value": True},
                                      {"op": "require_field", "target": "reasoning_content", "value": None}]
    assert known["refused_fields"] == []
    history.append(user_message("and USD?"))  # a later run reads the rules
    later, _ = await run(history, [streamed(text_sse("1 USD."))])
    sent = body(later, 0)["messages"]
    assert "reasoning_details" not in sent[1] and "reasoning_content" in sent[1] and sent[2]["name"] == "get_rate"

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
    # Every request is checked against the history contract, as ../shared/conformance/run.py does
    replay = CaseReplay(case)
    respx_mock.post(URL).mock(side_effect=replay)
    history, events = await run_case(case)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed", events[-1]
    assert all(body["stream"] is True for body in replay.bodies)
    replay.assert_requests()
    replay.assert_tool_turn()
    calls = [e for e in events if isinstance(e, TurnFinished) and e.tool_calls][-1].tool_calls
    results = [m["content"] for m in replay.bodies[-1]["messages"][-len(calls):]]
    repeated = any("not run again" in n for n in (case.get("scenario") or {}).get("tool_result_must_contain", []))
    for call, result in zip(calls, results, strict=True):  # cut-off, custom and repeated calls are not run
        if call.cut_off:
            assert result.startswith("Error: the arguments")
        elif call.custom:
            assert "crow offers no custom tools" in result
        else:
            assert "so it was not run again" in result if repeated else result == f"ran {call.name}"
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


# A certificate that fails verification is final: no retries as "cannot connect" before the same error
@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl here to make a certificate")
async def test_a_certificate_that_fails_verification_is_final(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)

    async def never_reached(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # only after a handshake crow refuses

    server = await asyncio.start_server(never_reached, "127.0.0.1", 0, ssl=served)
    base = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = ChatClient(ClientSettings(base_url=base, model="m", api_key="sk-test", max_retries=2))
    items: list[object] = []
    try:
        with pytest.raises(ProviderError, match=f"^cannot reach {base}: .*CERTIFICATE_VERIFY_FAILED"):
            async for item in client.stream([user_message("x")]):
                items.append(item)
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert [i for i in items if isinstance(i, Notice) and i.code == "retrying"] == []


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
    # Start-up cost: the body is crow's own JSON-ready dict, sent without an SDK transform of
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
    # No key for api.openai.com is an error at once, no ~5 s wait for "cannot reach" or a bare 401
    route = respx_mock.post("https://api.openai.com/v1/chat/completions").mock(
        return_value=httpx.Response(401, json={"error": {"message": "no key"}}))
    c = ChatClient(ClientSettings(base_url="https://api.openai.com/v1", model="m"))
    with pytest.raises(AuthError, match=r"no API key for https://api\.openai\.com/v1: set OPENAI_API_KEY"):
        [ch async for ch in c.stream([user_message("x")])]
    assert not route.called

def error(message: str, **fields: object) -> dict:
    return {"error": {"message": message, **fields}}


OVERFLOWS = [
    pytest.param(400, error("This model's maximum context length is 128000 tokens. However, your messages resulted "
                            "in 130512 tokens. Please reduce the length of the messages.", type="invalid_request_error",
                            param="messages", code="context_length_exceeded"), 128000, 130512, id="openai"),
    pytest.param(400, {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you "
                       "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
                       "length of the messages or completion.", "type": "BadRequestError", "param": None,
                       "code": 400}, 4096, 4000, id="vllm"),
    pytest.param(400, error("The decoder prompt (length 5210) is longer than the maximum model length of 4096. Make "
                            "sure that `max_model_len` is no smaller than the number of text tokens.",
                            type="BadRequestError", code=400), 4096, 5210, id="vllm-new"),
    pytest.param(400, error("the request exceeds the available context size, try increasing it",
                            type="exceed_context_size_error", code=400, n_prompt_tokens=9000, n_ctx=8192),
                 8192, 9000, id="llama.cpp"),
    pytest.param(400, error("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: "
                            "OpenAIException - This model's maximum context length is 8192 tokens.",
                            type=None, code="400"), 8192, None, id="litellm"),
    pytest.param(400, error("prompt is too long: 210433 tokens > 200000 maximum", type="invalid_request_error"),
                 200000, 210433, id="anthropic-compatible"),
    pytest.param(400, error("This model's maximum context length is 65536 tokens. However, you requested 70313 tokens "
                            "(70313 in the messages, 0 in the completion). Please reduce the length of the messages "
                            "or completion.", type="invalid_request_error", code="invalid_request_error"),
                 65536, 70313, id="deepseek"),
    pytest.param(400, {"object": "error", "message": "Prompt contains 33655 tokens and 0 draft tokens, too large for "
                       "model with 32768 maximum context length", "type": "invalid_request_message_error",
                       "param": None, "code": "3051"}, 32768, 33655, id="mistral"),
    pytest.param(400, error("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                            status="INVALID_ARGUMENT", code=400), 1048576, 1200000, id="gemini"),
    pytest.param(413, error("Request too large for model: context_length_exceeded"), None, None, id="no-numbers"),
]


async def failure(response: httpx.Response) -> ProviderError:
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(return_value=response)
        with pytest.raises(ProviderError) as caught:
            try:
                [_ async for _ in c.stream([user_message("hi")])]
            finally:
                await c.aclose()
    return caught.value


@pytest.mark.parametrize(("status", "body", "n_ctx", "prompt_tokens"), OVERFLOWS)
async def test_a_context_overflow_is_named_with_its_numbers(status, body, n_ctx, prompt_tokens) -> None:
    err = await failure(httpx.Response(status, json=body))
    assert isinstance(err, ContextOverflow), err
    assert (err.n_ctx, err.prompt_tokens, err.status) == (n_ctx, prompt_tokens, status)
    assert str(err).startswith("the conversation is too long for the model's context window")
    if n_ctx:
        assert f"{n_ctx} tokens" in str(err)


async def test_an_overflow_reported_inside_the_stream_is_one_too() -> None:
    body = sse(chunk({"content": ""}), done=False) + "data: " + json.dumps(error(
        "This model's maximum context length is 4096 tokens. However, you requested 4500 tokens.", code=400)) + "\n\n"
    err = await failure(httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"}))
    assert isinstance(err, ContextOverflow) and err.n_ctx == 4096 and err.prompt_tokens == 4500


@pytest.mark.parametrize("message", ["Invalid value for 'temperature'", "max_tokens is too large: 99999",
                                     "context: unknown field"])
async def test_other_refusals_are_not_overflows(message) -> None:
    err = await failure(httpx.Response(400, json=error(message)))
    assert not isinstance(err, ContextOverflow)

KEY = "sk-SECRET-abc123"


def _status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    body = {"error": {"message": message, "code": "invalid_api_key"}}
    response = httpx.Response(status, json=body, request=request)
    return openai.APIStatusError(message, response=response, body=body)


def test_map_error_replaces_the_key_in_the_message():
    mapped = map_error(_status_error(401, f"Incorrect API key provided: {KEY}."), "http://x/v1", secret=KEY)
    assert isinstance(mapped, AuthError) and mapped.status == 401
    assert KEY not in str(mapped) and "Incorrect API key provided: [REDACTED]." in str(mapped)


# A final refusal with a `detail` list (Mistral's 422) is one plain line, not "request rejected (422): Error code:
# 422 - {'detail': [...]}", the SDK's dump of the body with the status twice
def test_a_refusal_saying_it_in_detail_is_one_plain_line():
    body = {"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "reasoning_content"],
                        "msg": "Extra inputs are not permitted", "input": "why"}]}
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx.Response(422, json=body, request=request)
    mapped = map_error(openai.APIStatusError(f"Error code: 422 - {body}", response=response, body=body), "http://x/v1")
    assert str(mapped) == "request rejected (422): Extra inputs are not permitted at body.messages.1.reasoning_content"


def test_a_key_cut_by_the_message_limit_is_redacted_too():
    mapped = map_error(_status_error(400, "x" * 190 + " key " + KEY), "http://x/v1", secret=KEY)
    assert "sk-S" not in str(mapped) and str(mapped).endswith("[REDACTED]…")


def test_errors_raised_inside_the_stream_are_redacted_and_short_keys_left_alone():
    mapped = map_error(ServerError(f"server error: bad key {KEY}", status=500), "http://x/v1", secret=KEY)
    assert isinstance(mapped, ServerError) and mapped.status == 500
    assert str(mapped) == "server error: bad key [REDACTED]"
    assert str(map_error(ServerError("an answer"), "u", secret="a")) == "an answer"


async def test_cli_error_line_and_json_event_carry_no_key(tmp_path):
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})
    for json_mode in (False, True):
        ran = await run_here([{"status": 401, "body": body}], json=json_mode, flags={"api_key": KEY}, model="m",
                             cwd=tmp_path, no_tools=True)
        assert ran.code == 1
        assert KEY not in ran.stdout + ran.stderr and "[REDACTED]" in ran.stderr
        if json_mode:
            finished = json.loads(ran.stdout.splitlines()[-1])
            assert finished["type"] == "run_finished" and "[REDACTED]" in finished["error"]


# A key in the base URL's query is redacted from errors
# (through the client in-process: the replay server, a verbatim copy of the shared one, answers 404 to a
# path with a query)
async def test_a_key_in_the_base_url_query_is_redacted_from_errors():
    query_key = "sk-QUERY-key-987654"
    body = {"error": {"message": f"invalid key {query_key}"}}
    for name in ("key", "api-key", "token", "sig"):
        settings = ClientSettings(base_url=f"http://llm.test/v1?api-version=1&{name}={query_key}", model="m",
                                  max_retries=0)
        client = ChatClient(settings)
        with respx.mock() as mock:
            mock.post(url__startswith="http://llm.test/v1/chat/completions").mock(
                return_value=httpx.Response(400, json=body))
            with pytest.raises(ProviderError) as caught:
                [_ async for _ in client.stream([{"role": "user", "content": "hi"}])]
        await client.aclose()
        assert query_key not in str(caught.value) and "[REDACTED]" in str(caught.value)


def test_map_error_redacts_every_secret_given():
    mapped = map_error(ServerError("bad a-secret-1 and b-secret-2", status=500), "u",
                       secret=["a-secret-1", "b-secret-2"])
    assert str(mapped) == "bad [REDACTED] and [REDACTED]"


# No credential (api-key, X-Api-Key, cookies, Authorization) follows a redirect to another host: crow follows
# no redirect and says so.
async def test_a_redirect_is_not_followed_and_no_credential_goes_elsewhere() -> None:
    import pytest
    import respx

    from crow_cli.errors import ProviderError
    from crow_cli.wire.client import ChatClient, ClientSettings

    client = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key=KEY, max_retries=0,
                                       headers={"api-key": "azure-key-123456", "X-Api-Key": "x-key-123456",
                                                "Cookie": "sid=cookie-123456"}))
    with respx.mock(assert_all_called=False) as router:
        router.post("http://llm.test/v1/chat/completions").respond(
            307, headers={"location": "http://evil.test/v1/chat/completions"})
        elsewhere = router.post("http://evil.test/v1/chat/completions").respond(200, text="data: [DONE]\n\n")
        with pytest.raises(ProviderError, match=r"redirected .*http://evil\.test/v1/chat/completions.* not "
                                                r"followed") as caught:
            async for _ in client.stream([{"role": "user", "content": "hi"}]):
                pass
        await client.aclose()
    assert elsewhere.call_count == 0 and caught.value.status == 307

async def test_no_response_within_the_first_byte_timeout_fails_without_retries() -> None:
    never, sent = asyncio.Event(), []

    async def hang(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        await never.wait()
        raise AssertionError("unreachable")

    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=3,
                                  first_byte_timeout_s=0.05))
    with respx.mock(assert_all_called=False) as mock:  # a cancelled call is not counted by respx
        mock.post(URL).mock(side_effect=hang)
        with pytest.raises(ProviderError, match=r"no response from http://llm.test/v1 within 0.05 s .*"
                                                r"first_byte_timeout.*CROW_FIRST_BYTE_TIMEOUT"):
            try:
                [_ async for _ in c.stream([user_message("hi")])]
            finally:
                await c.aclose()
    assert len(sent) == 1


def test_first_byte_timeout_comes_from_the_config_file_or_the_environment(tmp_path: Path) -> None:
    assert load_settings({}, env={}).first_byte_timeout_s == 60
    config = write_config(tmp_path, first_byte_timeout=2.5)
    assert load_settings({}, env={}, config_path=str(config)).first_byte_timeout_s == 2.5
    assert load_settings({}, env={"CROW_FIRST_BYTE_TIMEOUT": "7"}, config_path=str(config)).first_byte_timeout_s == 7
    with pytest.raises(ConfigError, match="CROW_FIRST_BYTE_TIMEOUT must be greater than 0"):
        load_settings({}, env={"CROW_FIRST_BYTE_TIMEOUT": "0"})


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections, reads, and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        listener.close()
        for conn in held:
            conn.close()


def test_crow_run_against_a_silent_server_fails_in_one_line(tmp_path: Path, silent_server: str) -> None:
    config = write_config(tmp_path, first_byte_timeout=0.5, max_retries=3)
    proc = subprocess.run([CROW, "run", "--base-url", silent_server, "--api-key", "sk-test", "--model", "m",
                           "--config", str(config), "hi"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("crow: error: no response from ")
    assert "first_byte_timeout" in proc.stderr and "retrying" not in proc.stderr

THOUGHT = "The user wants a conversion; use the rates tool."
# Mistral via LiteLLM, https://github.com/BerriAI/litellm/issues/30835
# (../shared/conformance/cases/mistral-reasoning-content-forbidden.json)
MISTRAL_422 = {"object": "error", "message": {"detail": [{"type": "extra_forbidden", "loc": [
    "body", "messages", 1, "assistant", "reasoning_content"], "msg": "Extra inputs are not permitted",
    "input": THOUGHT}]}, "type": "invalid_request_error", "param": None, "code": None}
# DeepSeek thinking mode with tools (api-docs.deepseek.com, "thinking mode" tool calls)
DEEPSEEK_400 = {"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API.",
                          "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}




def echo_tool_turn(reasoning_key: str | None = "reasoning_content") -> httpx.Response:
    thinking = [chunk({"role": "assistant", reasoning_key: THOUGHT})] if reasoning_key else []
    return streamed(sse(*thinking, chunk({"tool_calls": [tool_delta(0, "call_1", "get_rate", '{"to": "JPY"}')]}),
                        chunk({}, "tool_calls")))


def history_with_tool_turn(reasoning: str | None = THOUGHT) -> list[dict]:
    turn = AssistantTurn(content=None, reasoning=reasoning, tool_calls=[ToolCall("call_1", "get_rate", "{}")],
                         finish_reason="tool_calls")
    return [user_message("rate?"), turn.to_message(), tool_message("call_1", "160"),
            assistant_message("160 yen."), user_message("and USD?")]


def echoed(route: respx.Route, n: int) -> list[dict]:
    return json.loads(route.calls[n].request.content)["messages"]


def has_reasoning(messages: list[dict]) -> bool:
    return any("reasoning_content" in m or "reasoning" in m for m in messages)


async def drain_messages(c: ChatClient, messages: list[dict]) -> list:
    return [item async for item in c.stream(messages)]


def echo_client(echo: str = "auto") -> ChatClient:
    return ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0, reasoning_echo=echo))


def test_the_reasoning_of_a_turn_is_kept_with_its_message_under_the_servers_field() -> None:
    calls = [ToolCall("c", "f", "{}")]
    assert AssistantTurn(reasoning="r", tool_calls=calls).to_message()["reasoning_content"] == "r"
    assert AssistantTurn(tool_calls=calls, fields={"reasoning": "r"}).to_message()["reasoning"] == "r"
    # kept on every assistant message: whether it goes back is the client's decision (wire.outgoing)
    assert AssistantTurn(content="hi", reasoning="r").to_message()["reasoning_content"] == "r"
    assert AssistantTurn(content="hi", fields={"reasoning": "r"}).to_message()["reasoning"] == "r"
    assert "reasoning_content" not in AssistantTurn(tool_calls=calls).to_message()


async def test_auto_echoes_reasoning_beside_tool_calls_through_the_loop() -> None:
    history = [user_message("rate?")]
    c = echo_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[echo_tool_turn(), streamed(text_sse("160 yen."))])
        events = [e async for e in react(history, c, None, LoopSettings())]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assistant = echoed(route, 1)[1]
    assert assistant["reasoning_content"] == THOUGHT and assistant["tool_calls"][0]["id"] == "call_1"
    assert history[1]["reasoning_content"] == THOUGHT  # kept in the history (and so in the session)


async def test_a_server_streaming_reasoning_gets_it_back_under_that_name() -> None:
    c = echo_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[echo_tool_turn("reasoning"), streamed(text_sse("ok"))])
        history = [user_message("rate?")]
        [_ async for _ in react(history, c, None, LoopSettings())]
    assistant = echoed(route, 1)[1]
    assert assistant["reasoning"] == THOUGHT and "reasoning_content" not in assistant


async def test_auto_sends_reasoning_for_exchanges_that_used_tools_only() -> None:
    # the final answer after the tool results keeps its reasoning too (also on the next user prompt);
    # an exchange without tools sends none
    history = history_with_tool_turn()
    history[3] = {**history[3], "reasoning_content": "final thoughts"}
    history += [{"role": "assistant", "content": "ok", "reasoning_content": "plain thoughts"}, user_message("bye")]
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(return_value=streamed(text_sse("ok")))
        await drain_messages(echo_client(), history)
    messages = echoed(route, 0)
    assert messages[1]["reasoning_content"] == THOUGHT and messages[3]["reasoning_content"] == "final thoughts"
    assert "reasoning_content" not in messages[5]
    assert history[5]["reasoning_content"] == "plain thoughts"  # the history itself is never changed


# tests/cases/mistral-reasoning-content-forbidden.json: found in LiteLLM issue 30835
async def test_a_422_forbidding_the_field_drops_it_everywhere_retries_once_and_remembers() -> None:
    c = echo_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422), streamed(text_sse("ok")),
                                                 streamed(text_sse("again"))])
        items = await drain_messages(c, history_with_tool_turn())
        await drain_messages(c, history_with_tool_turn())
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["reasoning_echo"]
    assert "refuses reasoning_content" in notices[0].message and "(422)" in notices[0].message
    assert has_reasoning(echoed(route, 0))
    assert not has_reasoning(echoed(route, 1)) and not has_reasoning(echoed(route, 2))
    assert echoed(route, 0)[2:] == echoed(route, 1)[2:]  # nothing else changed


async def test_a_400_demanding_the_field_adds_it_beside_every_tool_call_retries_once_and_remembers() -> None:
    c = echo_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=DEEPSEEK_400), streamed(text_sse("ok")),
                                                 streamed(text_sse("again"))])
        items = await drain_messages(c, history_with_tool_turn(reasoning=None))
        await drain_messages(c, history_with_tool_turn(reasoning=None))
    assert [i.code for i in items if isinstance(i, Notice)] == ["reasoning_echo"]
    assert "reasoning_content" not in echoed(route, 0)[1]
    for n in (1, 2):  # on every assistant message
        assert echoed(route, n)[1]["reasoning_content"] == "" and echoed(route, n)[3]["reasoning_content"] == ""


async def test_never_more_than_one_resend_for_the_same_request() -> None:
    c = echo_client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422)] * 2)
        with pytest.raises(ProviderError, match=r"request rejected \(422\)"):
            await drain_messages(c, history_with_tool_turn())
    assert route.call_count == 2


async def test_never_strips_every_reasoning_field_and_always_keeps_them_whatever_the_server_says() -> None:
    history = history_with_tool_turn()
    history[0] = {**history[0], "reasoning": "x"}
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(return_value=streamed(text_sse("ok")))
        await drain_messages(echo_client("never"), history)
    assert not has_reasoning(echoed(route, 0))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_422)])
        with pytest.raises(ProviderError, match="422"):
            await drain_messages(echo_client("always"), history)
    assert echoed(route, 0)[1]["reasoning_content"] == THOUGHT and echoed(route, 0)[0]["reasoning"] == "x"


@pytest.mark.parametrize(("status", "body", "sent_fields", "refused"), [
    (422, json.dumps(MISTRAL_422), {"reasoning_content"}, "reasoning_content"),
    (400, '{"error": {"message": "Unrecognized field: messages[1].reasoning"}}', {"reasoning"}, "reasoning"),
    (400, '{"error": {"message": "additionalProperties: reasoning_content is not allowed"}}', {"reasoning_content"},
     "reasoning_content"),
    (422, json.dumps(MISTRAL_422), set(), None),  # not sent: nothing to drop
    (400, '{"error": {"message": "unknown model"}}', {"reasoning_content"}, None),
    (500, json.dumps(MISTRAL_422), {"reasoning_content"}, None),
])
def test_which_errors_refuse_a_reasoning_field(status, body, sent_fields, refused) -> None:
    assert field_refused(status, body, sorted(sent_fields)) == refused


@pytest.mark.parametrize(("status", "body", "wanted"), [
    (400, json.dumps(DEEPSEEK_400), "reasoning_content"),
    (400, '{"error": {"message": "Missing `reasoning_content` field in the assistant message at index 1"}}',
     "reasoning_content"),
    (400, '{"error": {"message": "messages: field required"}}', None),
    (422, json.dumps(DEEPSEEK_400), "reasoning_content"),
    (500, json.dumps(DEEPSEEK_400), None),
])
def test_which_errors_demand_a_reasoning_field(status, body, wanted) -> None:
    assert field_demanded(status, body, ["reasoning_content", "reasoning"]) == wanted


def test_an_unknown_reasoning_echo_value_is_refused() -> None:
    with pytest.raises(ValueError, match="reasoning_echo"):
        echo_client("sometimes")


def test_reasoning_echo_comes_from_the_config_file_and_its_profiles(tmp_path) -> None:
    from crow_cli.config import load_settings
    from crow_cli.errors import ConfigError

    config = tmp_path / "crow.toml"
    config.write_text('reasoning_echo = "never"\n[profiles.deepseek]\nreasoning_echo = "always"\n')
    assert load_settings({}, env={}).reasoning_echo == "auto"
    assert load_settings({}, env={}, config_path=str(config)).reasoning_echo == "never"
    assert load_settings({}, env={}, config_path=str(config), profile="deepseek").reasoning_echo == "always"
    config.write_text('reasoning_echo = "sometimes"\n')
    with pytest.raises(ConfigError, match="reasoning_echo must be one of auto, always, never"):
        load_settings({}, env={}, config_path=str(config))

# A base URL's query (`?api-version=…&key=…`) goes after the path of every request, never before it, and is
# never written to --record's files or shown in errors
AZURE_BASE = "http://llm.test/openai/deployments/gpt?api-version=2024-10-21&key=QUERY-SECRET-77"
AZURE_URL = "http://llm.test/openai/deployments/gpt/chat/completions"


def answer() -> httpx.Response:
    return httpx.Response(200, content=text_sse("ok").encode(), headers={"content-type": "text/event-stream"})


async def drain_hi(c: ChatClient) -> list:
    try:
        return [item async for item in c.stream([user_message("hi")])]
    finally:
        await c.aclose()


async def test_the_query_of_the_base_url_goes_with_every_request() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(AZURE_URL).mock(side_effect=[httpx.Response(503), answer()])
        await drain_hi(ChatClient(ClientSettings(base_url=AZURE_BASE, model="m", api_key="sk-test", max_retries=1)))
    for call in route.calls:
        assert call.request.url.path == "/openai/deployments/gpt/chat/completions"
        assert dict(call.request.url.params) == {"api-version": "2024-10-21", "key": "QUERY-SECRET-77"}


async def test_the_query_is_never_recorded(tmp_path: Path) -> None:
    with respx.mock(assert_all_called=True) as mock:
        mock.post(AZURE_URL).mock(return_value=answer())
        await drain_hi(ChatClient(ClientSettings(base_url=AZURE_BASE, model="m", api_key="sk-test", max_retries=0,
                                              record_dir=str(tmp_path))))
    meta = json.loads((tmp_path / "0001-meta.json").read_text())
    assert meta["url"] == AZURE_URL
    assert all("QUERY-SECRET-77" not in f.read_text() for f in tmp_path.iterdir())


@pytest.mark.parametrize("failure", [httpx.Response(404, json={"error": {"message": "no such deployment"}}),
                                     httpx.ConnectError("refused")])
async def test_errors_show_the_url_without_its_query(failure) -> None:
    with respx.mock() as mock:
        mock.post(AZURE_URL).mock(side_effect=[failure])
        with pytest.raises(ProviderError) as caught:
            await drain_hi(ChatClient(ClientSettings(base_url=AZURE_BASE, model="m", api_key="sk-test", max_retries=0)))
    assert "http://llm.test/openai/deployments/gpt" in str(caught.value)
    assert "QUERY-SECRET" not in str(caught.value) and "api-version" not in str(caught.value)



# One reading of a refusal gives one change of rule classes (message fields, request rules, the usage option),
# and every notice names them
MISTRAL_FIELD = {"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "reasoning_content"],
                             "msg": "Extra inputs are not permitted", "input": "why"}]}


def _depth(text: str) -> int:
    """The deepest nesting of parentheses and brackets in `text`."""
    depth = deepest = 0
    for char in text:
        depth += (char in "([" and 1) or -(char in ")]")
        deepest = max(deepest, depth)
    return deepest


async def test_a_refused_message_field_is_one_change_whose_notice_names_its_rule_class() -> None:
    history = json.loads(json.dumps(HISTORY))
    history[1]["reasoning_content"] = "why"
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(422, json=MISTRAL_FIELD), ok()])
        items = await drain(adapt_client(), history)
    notices = [i for i in items if isinstance(i, Notice)]
    assert [(n.code, n.status) for n in notices] == [("reasoning_echo", 422)]
    assert "(DropField)" in notices[0].message and "reasoning_content" in notices[0].message
    assert "reasoning_content" in sent(route, 0)["messages"][1]
    assert "reasoning_content" not in sent(route, 1)["messages"][1]
    assert history[1]["reasoning_content"] == "why"  # the stored session keeps the original
    # stored as a rule like the others
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "drop_field", "target": "reasoning_content",
                                                         "value": None}]


async def test_the_notice_is_one_plain_sentence_with_the_http_status() -> None:
    # before: "(400: [{'type': 'extra_forbidden', 'loc': ('body', 'seed'), …}]); dropped parameter seed (DropParam)
    # and sent it again (remembered …)", with `status: null` in the JSON event
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok()])
        items = await drain(adapt_client())
    notice = next(i for i in items if isinstance(i, Notice))
    assert notice.status == 400 and " | " not in notice.message and "\n" not in notice.message
    assert _depth(notice.message) == 1
    assert notice.message.count("Extra inputs are not permitted") == 1


async def test_a_refused_configured_value_names_the_table_it_came_from() -> None:
    refusal = {"object": "error", "message": "temperature must be in [0, 2], got 5.0.", "type": "BadRequestError",
               "param": None, "code": 400}
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="sk-test", max_retries=0,
                                  params={"temperature": 5}, params_from="[profiles.fast.params] in /tmp/c.toml"))
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=refusal)])
        with pytest.raises(ProviderError) as info:
            await drain(c)
    assert str(info.value) == ("the server refused temperature = 5 (400): temperature must be in [0, 2], got 5.0; "
                               "fix it in [profiles.fast.params] in /tmp/c.toml")


async def test_a_configured_message_field_rule_applies_to_the_messages_from_the_first_request() -> None:
    history = json.loads(json.dumps(HISTORY))
    history[1]["x_vendor"] = 1
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(adapt_client(provider={"request_rules": [{"op": "drop_field", "target": "x_vendor"}]}), history)
    assert "x_vendor" not in sent(route, 0)["messages"][1] and history[1]["x_vendor"] == 1
