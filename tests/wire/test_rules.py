"""The request rules (`wire.rules`): each kind applies exactly its change, says what it did and round-trips
through its stored form.

Properties guarded here:

- every rule class, on a request it changes, makes exactly its change and leaves the request given untouched; on
  one it does not apply to, gives the same object back; its words and stored form are its own;
- rules round-trip through JSON (damaged entries left out); known rules come by host and model family;
- message-field rules apply to a request on their own and read and write the facts earlier versions stored.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from crow_cli.wire.change import FieldPolicy, change_for
from crow_cli.wire.rules import (
    NO_OUTPUT,
    AssistantContentText,
    AssistantToolContent,
    CapParam,
    CutToolResult,
    DropField,
    DropParam,
    DropSchemaKeyword,
    FoldRole,
    InlineSchemaRefs,
    MapToolCallIds,
    RenameParam,
    RenameTools,
    RequireField,
    Rule,
    SchemaEmptyObject,
    SchemaTypeIntoBranches,
    SetParam,
    ToolContentBesideReasoning,
    ToolMessageName,
    ToolResultPlaceholder,
    apply_rules,
    field_facts,
    field_rules,
    known_rules,
    rules_from_json,
)

# ---- stored and known rules -------------------------------------------------------------------------


def test_rules_round_trip_through_json_and_damaged_entries_are_left_out() -> None:
    stored = [DropParam("seed").to_json(), {"op": "explode"}, "x", InlineSchemaRefs().to_json()]
    assert rules_from_json(json.loads(json.dumps(stored))) == [DropParam("seed"), InlineSchemaRefs()]
    assert rules_from_json(None) == []


def test_rules_known_in_advance_by_host_and_model_family() -> None:
    assert DropSchemaKeyword("additionalProperties") in known_rules(
        "https://generativelanguage.googleapis.com/v1beta/openai", "gemini-2.5-flash")
    assert known_rules("https://api.moonshot.ai/v1", "kimi-k2")[0] == InlineSchemaRefs()
    assert known_rules("http://localhost:11434/v1", "qwen3") == [AssistantToolContent("")]
    assert known_rules("https://api.openai.com/v1", "o3-mini") == [RenameParam("max_tokens",
                                                                        "max_completion_tokens")]
    assert known_rules("https://api.openai.com/v1", "gpt-4o") == []
    assert known_rules("http://127.0.0.1:8080/v1", "test-model") == []
    assert known_rules("https://evil-generativelanguage.googleapis.com.example/v1", "m") == []


# Every request rule is one small class with apply and describe: each kind, on a request it
# changes (the change exactly) and on one it leaves alone (the same object back), with its words and stored form
def _tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


_SCHEMA = {"type": "object", "$defs": {"P": {"type": "string"}}, "additionalProperties": False,
           "properties": {"p": {"$ref": "#/$defs/P"}, "q": {"type": "string", "anyOf": [{"minLength": 1}]},
                          "o": {"type": "object", "properties": {}}, "e": {"type": "object"}}}
_CALL = {"id": "c1", "type": "function", "function": {"name": "my.tool", "arguments": "{}"}}
_FULL = {"model": "m", "stream": True, "seed": 7, "max_tokens": 9000, "temperature": 0.2,
         "tools": [_tool("my.tool", _SCHEMA)],
         "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                                        {"type": "text", "text": "ok"}]},
                      {"role": "assistant", "content": None, "tool_calls": [_CALL]},
                      {"role": "tool", "tool_call_id": "c1", "content": ""},
                      {"role": "tool", "tool_call_id": "c1", "content": "x" * 3000}]}
_BARE = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def _expect(rule: Rule) -> tuple[Any, str]:
    """What `rule` makes of `_FULL` (computed here by hand, a part at a time) and its words."""
    full, msgs = copy.deepcopy(_FULL), copy.deepcopy(_FULL["messages"])
    params = full["tools"][0]["function"]["parameters"]
    match rule:
        case DropParam():
            del full["seed"]
            return full, "dropped parameter seed"
        case SetParam():
            full["temperature"] = 1
            return full, "set parameter temperature to 1"
        case RenameParam():
            return {("max_completion_tokens" if k == "max_tokens" else k): v for k, v in full.items()}, \
                "renamed parameter max_tokens to max_completion_tokens"
        case CapParam():
            full["max_tokens"] = 4096
            return full, "lowered parameter max_tokens from 9000 to 4096"
        case DropSchemaKeyword():
            del params["additionalProperties"]
            return full, "dropped the schema keyword additionalProperties from tool parameters"
        case InlineSchemaRefs():
            del params["$defs"]
            params["properties"]["p"] = {"type": "string"}
            return full, "inlined the $refs of tool parameters (no $defs)"
        case SchemaTypeIntoBranches():
            params["properties"]["q"] = {"anyOf": [{"minLength": 1, "type": "string"}]}
            return full, "moved the type beside anyOf/oneOf into their branches"
        case SchemaEmptyObject():
            params["properties"]["e"] = {"type": "object", "properties": {}}
            return full, "gave object schemas without properties an empty properties object"
        case AssistantToolContent():
            msgs[3]["content"] = ""
            return {**full, "messages": msgs}, 'sent content "" on assistant messages with tool calls'
        case ToolContentBesideReasoning():  # the tool-call message of _FULL has no content: nothing to null
            return full, "sent content null on assistant messages with tool calls that carry reasoning"
        case ToolResultPlaceholder():
            msgs[4]["content"] = NO_OUTPUT
            return {**full, "messages": msgs}, 'sent blank tool results as "(no output)"'
        case AssistantContentText():
            msgs[2]["content"] = "ok"
            return {**full, "messages": msgs}, \
                "sent the content of assistant messages as text, without its thinking parts"
        case CutToolResult():
            assert len(apply_rules(_FULL, [rule])["messages"][5]["content"]) <= 2000
            msgs[5]["content"] = apply_rules(_FULL, [rule])["messages"][5]["content"]
            return {**full, "messages": msgs}, ("cut tool results longer than 2000 characters to fit (the "
                                                "server's limit; the session keeps them whole)")
        case FoldRole():
            return {**full, "messages": [{"role": "user", "content": "Be brief.\n\nhi"}, *msgs[2:]]}, \
                "sent system messages as part of the first user message"
        case RenameTools():
            full["tools"][0]["function"]["name"] = "my_tool"
            msgs[3]["tool_calls"][0]["function"]["name"] = "my_tool"
            return {**full, "messages": msgs}, \
                "renamed tools whose names do not match [A-Za-z0-9_-]{1,64} (mapped back when called)"
        case DropField():  # no message of _FULL has an optional field: test_a_dropped_field_… has it dropped
            return full, "dropped x_vendor from every message and tool call"
        case RequireField():
            msgs[2]["reasoning_content"] = msgs[3]["reasoning_content"] = ""
            return {**full, "messages": msgs}, "sent reasoning_content on every assistant message"
        case ToolMessageName():  # the second tool message answers no call: no name to give it
            msgs[4]["name"] = "my.tool"
            return {**full, "messages": msgs}, "sent the function name on tool messages"
        case MapToolCallIds():
            new = MapToolCallIds("alnum", 9).mapped("c1")
            msgs[3]["tool_calls"][0]["id"] = msgs[4]["tool_call_id"] = msgs[5]["tool_call_id"] = new
            return {**full, "messages": msgs}, \
                "sent tool-call ids other models wrote as ids matching [A-Za-z0-9]+ of length 9 (in the request only)"
    raise AssertionError(rule)


EVERY_RULE = [DropParam("seed"), SetParam("temperature", 1), RenameParam("max_tokens", "max_completion_tokens"),
              CapParam("max_tokens", 4096), DropSchemaKeyword("additionalProperties"), InlineSchemaRefs(),
              SchemaTypeIntoBranches(), SchemaEmptyObject("add"), AssistantToolContent(""),
              ToolContentBesideReasoning(), ToolResultPlaceholder(NO_OUTPUT), AssistantContentText(),
              CutToolResult(2000), FoldRole("system"),
              RenameTools("strict"), DropField("x_vendor"), RequireField("reasoning_content"), ToolMessageName(True),
              MapToolCallIds("alnum", 9)]


@pytest.mark.parametrize("rule", EVERY_RULE, ids=lambda r: type(r).__name__)
def test_every_rule_class_applies_exactly_its_change_and_says_what_it_did(rule: Rule) -> None:
    from crow_cli.wire.rules import RULES, rule_from_json

    before = copy.deepcopy(_FULL)
    expected, words = _expect(rule)
    assert rule.apply(_FULL) == expected
    assert before == _FULL  # the request given is never changed
    assert rule.describe(_FULL.get(rule.target)) == words
    assert rule.apply(_BARE) is _BARE  # nothing of its kind in the request: the request itself
    assert rule_from_json(json.loads(json.dumps(rule.to_json()))) == rule  # stored and read back as itself
    assert RULES[rule.op] is type(rule)


def test_every_rule_kind_is_covered_by_the_test_above() -> None:
    from crow_cli.wire.rules import RULES

    assert {type(r) for r in EVERY_RULE} == set(RULES.values())


def test_a_rule_is_a_value_of_its_class() -> None:
    from crow_cli.wire.rules import rule_from_json

    assert DropParam("seed") != DropSchemaKeyword("seed")  # same fields, another kind
    assert len({DropParam("seed"), DropParam("seed")}) == 1
    assert rule_from_json({"op": "cap_param", "target": "max_tokens", "value": True}) is None  # no size
    assert rule_from_json({"op": "drop_param", "target": 3}) is None
    # an op that is a list is a damaged entry (None), not a TypeError
    assert rule_from_json({"op": ["drop_param"], "target": "seed"}) is None
    assert rule_from_json({"op": "schema_empty_object", "target": "", "value": "drop"}) == \
        SchemaEmptyObject("drop")
    assert SchemaEmptyObject("drop").apply({"tools": [_tool("f", {"type": "object", "properties": {}})]}) == \
        {"tools": [_tool("f", {"type": "object"})]}
    assert SchemaEmptyObject("drop").describe() == "dropped empty properties of object schemas"


# The message-field rules are of the same family as the request rules (the notice names the rule class): each
# applies to a request on its own, and its stored form is the facts
# earlier versions wrote (`refused_fields`, `required_fields`, `tool_message_name`, `tool_call_id_rule`)
def test_a_dropped_field_goes_from_messages_calls_and_functions_but_never_a_core_key() -> None:
    call = {"id": "c1", "type": "function", "x": 1, "function": {"name": "f", "arguments": "{}", "x": 2}}
    request = {"messages": [{"role": "assistant", "content": None, "x": 0, "tool_calls": [call]},
                            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    out = DropField("x").apply(request)
    assert out["messages"][0] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    assert out["messages"][1] is request["messages"][1] and request["messages"][0]["x"] == 0
    for core in ("content", "tool_call_id", "id", "arguments"):
        assert DropField(core).apply(request) is request


def test_a_required_field_takes_the_text_of_another_reasoning_field() -> None:
    request = {"messages": [{"role": "assistant", "content": "a", "reasoning": "why"},
                            {"role": "user", "content": "u"}]}
    out = RequireField("reasoning_content").apply(request)
    assert out["messages"][0]["reasoning_content"] == "why" and "reasoning_content" not in out["messages"][1]


def test_tool_messages_lose_the_name_under_a_false_tool_message_name_rule() -> None:
    request = {"messages": [{"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "f"}]}
    assert ToolMessageName(False).apply(request)["messages"] == [{"role": "tool", "tool_call_id": "c1",
                                                                  "content": "ok"}]


def test_mapped_ids_are_derived_and_ids_that_fit_are_kept() -> None:
    rule = MapToolCallIds("alnum_dash")
    assert rule.mapped("functions.f:0") == rule.mapped("functions.f:0")
    assert rule.fits(rule.mapped("functions.f:0")) and rule.fits("call_1") and not rule.fits("functions.f:0")
    request = {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}
    assert rule.apply(request) is request


@pytest.mark.parametrize("item", [
    {"op": "map_tool_call_ids", "target": "^[a-z]+$", "value": None},  # a server's pattern: never a shape
    {"op": "map_tool_call_ids", "target": "alnum", "value": 65},
    {"op": "tool_message_name", "target": "", "value": "yes"},
    {"op": "require_field", "target": "content", "value": None},  # the message itself: never a reasoning field
    {"op": "drop_field", "target": "", "value": None},
])
def test_a_damaged_field_rule_is_left_out(item: dict) -> None:
    from crow_cli.wire.rules import rule_from_json

    assert rule_from_json(item) is None


def test_field_rules_read_and_write_the_facts_earlier_versions_stored() -> None:
    stored = {"refused_fields": ["reasoning_details", "name"], "required_fields": ["reasoning_content"],
              "tool_message_name": False, "tool_call_id_rule": {"chars": "alnum", "length": 9}}
    rules = field_rules(stored)
    assert rules == [DropField("reasoning_details"), DropField("name"), RequireField("reasoning_content"),
                     ToolMessageName(False), MapToolCallIds("alnum", 9)]
    assert field_facts(rules) == stored
    assert field_facts([]) == {"refused_fields": [], "required_fields": []}
    assert field_rules({"tool_call_id_rule": {"chars": "[a-z]", "length": None}, "refused_fields": [3]}) == []


_MISTRAL_FIELD = json.dumps({"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1,
                                                                            "reasoning_content"],
                                         "msg": "Extra inputs are not permitted"}]})
_DEEPSEEK_FIELD = json.dumps({"error": {"message": "The reasoning_content in the thinking mode must be passed back "
                                                   "to the API.", "type": "invalid_request_error"}})
_GEMINI_NAME = json.dumps([{"error": {"code": 400, "message": "* GenerateContentRequest.contents[2].parts[0]."
                                                              "function_response.name: Name cannot be empty.",
                                      "status": "INVALID_ARGUMENT"}}])
_FIELDS_BODY = {"model": "m", "stream": True, "seed": 7, "messages": [
    {"role": "user", "content": "rate?"},
    {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_rate", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "160"}]}


def test_one_reading_of_a_refusal_gives_message_field_rules_too() -> None:
    policy = FieldPolicy()
    refused = change_for(422, _MISTRAL_FIELD, _FIELDS_BODY, policy)
    assert refused is not None and refused.rules == (DropField("reasoning_content"),) and refused.fields
    assert refused.kinds() == "DropField" and refused.why == "Extra inputs are not permitted at body.messages.1." \
                                                            "reasoning_content"
    bare = {**_FIELDS_BODY, "messages": [{k: v for k, v in m.items() if k != "reasoning_content"}
                                         for m in _FIELDS_BODY["messages"]]}
    demanded = change_for(400, _DEEPSEEK_FIELD, bare, policy)
    assert demanded is not None and demanded.rules == (RequireField("reasoning_content"),)
    named = change_for(400, _GEMINI_NAME, _FIELDS_BODY, policy)
    assert named is not None and named.rules == (ToolMessageName(True),)
    # what the policy holds already is no change; without a policy the messages' fields are not read
    assert change_for(400, _DEEPSEEK_FIELD, bare, FieldPolicy(rules=(RequireField("reasoning_content"),),
                                                              text_fields=("reasoning_content",))) is None
    assert change_for(422, _MISTRAL_FIELD, _FIELDS_BODY) is None


def test_a_refused_name_on_tool_messages_is_dropped_and_no_longer_given() -> None:
    body = {**_FIELDS_BODY, "messages": [*_FIELDS_BODY["messages"][:2], {**_FIELDS_BODY["messages"][2],
                                                                         "name": "get_rate"}]}
    refusal = json.dumps({"error": {"message": 'messages[2]: unknown field "name"'}})
    change = change_for(400, refusal, body, FieldPolicy(rules=(ToolMessageName(True),)))
    assert change is not None and change.rules == (DropField("name"), ToolMessageName(False))


def test_with_adapting_off_only_a_refused_stream_option_is_read_and_never_learned() -> None:
    body = {**_FIELDS_BODY, "stream_options": {"include_usage": True}}
    refusal = json.dumps({"error": {"message": "Unrecognized request argument supplied: stream_options"}})
    change = change_for(400, refusal, body, adapting=False)
    assert change is not None and change.rules == (DropParam("stream_options"),) and not change.learned
    seed = json.dumps({"error": {"message": "Unrecognized request argument supplied: seed"}})
    assert change_for(400, seed, body, adapting=False) is None
    assert change_for(400, seed, body) is not None
