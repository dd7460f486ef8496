"""A refusal naming a part of the request: that part changed, the request sent once more, the change remembered.

(issue: a new user pointing crow at Gemini, vLLM or LiteLLM stopped at the first `request rejected (400)` and had
to find the keyword or parameter themselves.)"""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import ContextOverflow, ProviderError
from crow_cli.events import Notice
from crow_cli.wire import facts
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import text_sse

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


def client(**kw) -> ChatClient:
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
        items = await drain(client(), history)
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices] == ["request_adapted"]
    assert "dropped parameter seed" in notices[0].message and "(400" in notices[0].message
    assert "(DropParam)" in notices[0].message  # the notice names the rule class (issue 29)
    first, second = sent(route, 0), sent(route, 1)
    assert first["seed"] == 7 and "seed" not in second
    assert {k: v for k, v in first.items() if k != "seed"} == second  # everything else unchanged
    assert history == HISTORY  # the history keeps what happened
    assert facts.recall(BASE, "m")["request_rules"] == [{"op": "drop_param", "target": "seed", "value": None}]
    assert "Extra inputs are not permitted" in facts.recall_all()[f"{BASE} m"]["why"]  # from which refusal
    # the next run against the same base URL + model applies it before its first request: no failed request
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        items = await drain(client())
    assert route.call_count == 1 and "seed" not in sent(route, 0) and sent(route, 0)["temperature"] == 0.2
    assert not [i for i in items if isinstance(i, Notice)]
    assert facts.recall(BASE, "other-model") == {}


async def test_a_schema_keyword_refusal_rewrites_the_tools_only_for_the_wire() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=GEMINI_DEFAULT), ok()])
        await drain(client())
    assert sent(route, 1)["tools"][0]["function"]["parameters"] == {"type": "object",
                                                                    "properties": {"path": {"type": "string"}}}
    assert sent(route, 0)["messages"] == sent(route, 1)["messages"] and sent(route, 1)["seed"] == 7
    assert TOOLS[0]["function"]["parameters"]["properties"]["path"]["default"] == "."  # the registry's schema stays


async def test_a_refusal_that_teaches_nothing_new_ends_the_request_with_the_servers_message() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)] * 3)
        with pytest.raises(ProviderError, match=r"request rejected \(400\).*extra_forbidden"):
            await drain(client())
    assert route.call_count == 2  # sent once more, never looped
    assert "request_rules" not in facts.recall(BASE, "m")  # not accepted: nothing learned


async def test_the_notice_promises_remembering_only_once_the_changed_request_is_accepted() -> None:
    # a new user's run: the notice said "remembered for this server and model" and the server then refused
    # the changed request too, so nothing was stored
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)] * 2)
        notices: list[Notice] = []
        with pytest.raises(ProviderError):
            async for item in client().stream(json.loads(json.dumps(HISTORY)), TOOLS):
                if isinstance(item, Notice):
                    notices.append(item)
    assert [n.code for n in notices] == ["request_adapted"]
    assert "remembered for this server and model once it accepts the changed request" in notices[0].message


async def test_adapt_requests_false_ends_at_the_first_refusal_and_applies_nothing_learned() -> None:
    facts.learn(BASE, "m", request_rules=[{"op": "drop_param", "target": "temperature", "value": None}])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED)])
        with pytest.raises(ProviderError, match=r"request rejected \(400\)"):
            await drain(client(adapt_requests=False))
    assert route.call_count == 1 and sent(route, 0)["temperature"] == 0.2


async def test_debug_traces_each_decision() -> None:
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok()])
        items = await drain(client(trace=True))
    notices = [i for i in items if isinstance(i, Notice)]
    assert [n.code for n in notices if n.code == "request_adapted"] == ["request_adapted"]
    assert any(n.code == "adapt_debug" and "drop_param" in n.message for n in notices)
    assert any(n.code == "adapt_debug" and "remembered for" in n.message and "request_rules" in n.message
               for n in notices)
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json={"error": {"message": "no such model"}})])
        c, seen = client(trace=True), []
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
    c = client()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=refusal), httpx.Response(
            200, content=call.encode(), headers={"content-type": "text/event-stream"})])
        items = [i async for i in c.stream(history, tools)]
        await c.aclose()
    assert sent(route, 1)["tools"][0]["function"]["name"] == "t_21st_magic"
    names = [tc["function"]["name"] for i in items if isinstance(i, dict) for ch in i["choices"]
             for tc in ch["delta"].get("tool_calls") or [] if "name" in tc.get("function", {})]
    assert names == ["21st_magic"]  # the loop runs the tool by its own name


# `temperature = 5` (a typo in the config) refused for its value was learned as "drop temperature"; fixed
# to 0.2, crow then silently sent no temperature at all (issue 29)
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
    # seen by a new-user tester (wave 6): temperature 0.3 refused ("Only the default (1) value is supported")
    # was learned as "set temperature to 1", and a later run configured with 0.7 silently sent 1
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
    # Crow probe said "remembered for later runs: usage_option_refused" but no run read it (issue 29)
    facts.learn(BASE, "m", usage_option_refused=True)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(client())
    assert "stream_options" not in sent(route, 0)


async def test_a_damaged_facts_file_is_one_notice_and_the_request_goes_out() -> None:
    path = facts.facts_path()
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok(), ok()])
        c = client()
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
    c = client()
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


# --debug says which layer each value of the server's profile came from (issue 29 §1)
async def test_debug_names_the_layer_of_each_profile_value() -> None:
    facts.learn(BASE, "m", request_rules=[{"op": "drop_param", "target": "seed", "value": None}])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        items = await drain(client(trace=True, provider={"reasoning_fields": ["thinking"]}))
    debug = " ".join(i.message for i in items if isinstance(i, Notice) and i.code == "adapt_debug")
    assert 'reasoning_fields ["thinking"] (config)' in debug
    assert "needs_key false (built-in)" in debug
    assert "rule drop_param seed dropped parameter seed (DropParam) (learned)" in debug
    assert "seed" not in sent(route, 0)


# A request rule in the config's [provider] table applies from the first request and is not learned (issue 29 §1)
async def test_a_configured_rule_applies_from_the_first_request() -> None:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[ok()])
        await drain(client(provider={"request_rules": [{"op": "drop_param", "target": "seed"}]}))
    assert "seed" not in sent(route, 0) and sent(route, 0)["temperature"] == 0.2
    assert "request_rules" not in facts.recall(BASE, "m")


# The client had three adapters (message fields, request rules, the usage option), each with its own notice; one
# reading of the refusal now gives one change of rule classes, and every notice names them (issue 29 §1)
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
        items = await drain(client(), history)
    notices = [i for i in items if isinstance(i, Notice)]
    assert [(n.code, n.status) for n in notices] == [("reasoning_echo", 422)]
    assert "(DropField)" in notices[0].message and "reasoning_content" in notices[0].message
    assert "reasoning_content" in sent(route, 0)["messages"][1]
    assert "reasoning_content" not in sent(route, 1)["messages"][1]
    assert history[1]["reasoning_content"] == "why"  # the stored session keeps the original
    assert facts.recall(BASE, "m")["refused_fields"] == ["reasoning_content"]  # stored as it always was


async def test_the_notice_is_one_plain_sentence_with_the_http_status() -> None:
    # before: "(400: [{'type': 'extra_forbidden', 'loc': ('body', 'seed'), …}]); dropped parameter seed (DropParam)
    # and sent it again (remembered …)", with `status: null` in the JSON event
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[httpx.Response(400, json=VLLM_SEED), ok()])
        items = await drain(client())
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
        await drain(client(provider={"request_rules": [{"op": "drop_field", "target": "x_vendor"}]}), history)
    assert "x_vendor" not in sent(route, 0)["messages"][1] and history[1]["x_vendor"] == 1
