"""Reading a server's refusal: which part of the request it names, and the change that makes it acceptable.

Every error body here is a real one, quoted from the public report named beside it (ids and values kept
as reported, only shortened where marked).

Properties guarded here:

- only a 400 or 422 is read; a change is returned only when its rules change the request, else None;
- each refusal maps to exactly the rules that make the part it names acceptable (schema keywords, refs,
  parameters dropped, set or renamed, sizes capped or cut, message shapes, roles folded, tool names);
- parameter rules never touch the request itself (`model`, `messages`, `stream`, `tools`), not even by a
  rename to one of them;
- `apply_rules` returns a new body and never changes the one given; a cut applies to tool results only;
- a folded role's text comes first in the first user message, or becomes one when there is none.
"""

from __future__ import annotations

import copy
import json

import pytest

from crow_cli.wire.change import change_for
from crow_cli.wire.rules import (
    NO_OUTPUT,
    AssistantContentText,
    AssistantToolContent,
    CapParam,
    CutToolResult,
    DropParam,
    DropSchemaKeyword,
    FoldRole,
    InlineSchemaRefs,
    RenameParam,
    RenameTools,
    Rule,
    SchemaTypeIntoBranches,
    SetParam,
    ToolContentBesideReasoning,
    ToolResultPlaceholder,
    apply_rules,
    rules_from_json,
)


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": parameters}}


ZOD_TOOL = tool("create_event", {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
    "properties": {"default": {"type": "string", "default": "x"},
                   "when": {"type": "string", "format": "date-time", "const": "now"},
                   "count": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 2},
                   "asset": {"$ref": "#/$defs/Asset", "description": "the asset"},
                   "mode": {"type": "string", "anyOf": [{"enum": ["a"]}, {"enum": ["b"]}]}},
    "required": ["default"],
    "$defs": {"Asset": {"type": "object", "description": "an asset", "properties": {"id": {"type": "string"}}}}})
PLAIN_TOOL = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
HISTORY = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": ""},
]


def body(**params) -> dict:
    return {"model": "m", "messages": copy.deepcopy(HISTORY), "stream": True,
            "tools": [copy.deepcopy(ZOD_TOOL), copy.deepcopy(PLAIN_TOOL)], **params}


def err(message, **extra) -> str:
    return json.dumps({"error": {"message": message, **extra}})


def rules(status: int, text: str, request: dict) -> list[Rule]:
    change = change_for(status, text, request)
    assert change is not None, text
    assert change.describe() and change.why
    return list(change.rules)


# ---- tool-schema keywords -------------------------------------------------------------------------

# Gemini's OpenAI-compatible endpoint behind one-api (Laisky/one-api#60)
GEMINI_ADDITIONAL = err("Invalid JSON payload received. Unknown name \"additionalProperties\" at "
                        "'tools[0].function_declarations[0].parameters': Cannot find field. (request id: 2025042002)")
# Gemini through google-adk, snake_case names (google/adk-python#1277)
GEMINI_SNAKE = json.dumps([{"error": {"code": 400, "message": "Invalid JSON payload received. Unknown name "
                                      "\"additional_properties\" at 'tools[0].function_declarations[0].parameters': "
                                      "Cannot find field.", "status": "INVALID_ARGUMENT"}}])
# antigravity/Gemini gateway (decolua/9router#2309)
GATEWAY_MULTIPLE_OF = err("Invalid JSON payload received. Unknown name \"multipleOf\" at 'request.tools[0]."
                          "function_declarations[25].parameters.properties[3].value.items': Cannot find field.")
# Gemini listing several keywords in one answer (openswarm-ai/openswarm#24, shortened)
GEMINI_MANY = err("Invalid JSON payload received. Unknown name \"$schema\" at 'tools[0].function_declarations[14]"
                  ".parameters': Cannot find field.\nInvalid JSON payload received. Unknown name \"const\" at "
                  "'tools[0].function_declarations[15].parameters.properties[1].value': Cannot find field.\nInvalid "
                  "JSON payload received. Unknown name \"exclusiveMinimum\" at 'tools[0].function_declarations[16]."
                  "parameters.properties[2].value': Cannot find field.", code=400, status="INVALID_ARGUMENT")
# Moonshot (MoonshotAI/kimi-cli#2061, #2531)
MOONSHOT_REF = err("tools.function.parameters is not a valid moonshot flavored json schema, details: <At path "
                   "'properties.assetRef': conflicting keywords found after $ref expansion: description>",
                   type="invalid_request_error")
MOONSHOT_ANY_OF = err("tools.function.parameters is not a valid moonshot flavored json schema, details: <At path "
                      "'root': when using anyOf, type should be defined in anyOf items instead of the parent schema>",
                      type="invalid_request_error")
# Gemini (langchain-ai/langchainjs#7935)
GEMINI_EMPTY_OBJECT = err("* GenerateContentRequest.tools[0].function_declarations[0].parameters.properties: should "
                          "be non-empty for OBJECT type")


@pytest.mark.parametrize(("text", "keywords"), [
    (GEMINI_ADDITIONAL, ["additionalProperties"]),
    (GEMINI_SNAKE, ["additionalProperties"]),
    (GATEWAY_MULTIPLE_OF, ["multipleOf"]),
    (GEMINI_MANY, ["$schema", "const", "exclusiveMinimum"]),
])
def test_a_named_schema_keyword_is_dropped_from_every_tool_schema(text: str, keywords: list[str]) -> None:
    request = body()
    found = rules(400, text, request)
    assert found == [DropSchemaKeyword(k) for k in keywords]
    sent = apply_rules(request, found)
    assert request == body()  # the request as built is never changed
    from crow_cli.wire.schema import keywords_used

    assert not keywords_used(sent["tools"][0]["function"]["parameters"]) & set(keywords)
    assert sent["tools"][1] == PLAIN_TOOL and sent["messages"] == HISTORY
    assert sent["tools"][0]["function"]["name"] == "create_event"


def test_a_path_ending_in_a_keyword_names_it_and_a_property_named_like_one_is_kept() -> None:
    # a path into the schema whose last step is the keyword
    text = err("Invalid value at 'tools[0].function.parameters.properties.when.const': unsupported keyword")
    sent = apply_rules(body(), rules(400, text, body()))
    props = sent["tools"][0]["function"]["parameters"]["properties"]
    assert props["when"] == {"type": "string", "format": "date-time"}
    found = rules(400, err('Invalid JSON payload received. Unknown name "default" at \'tools[0].function_declarations'
                           "[0].parameters.properties[0].value': Cannot find field."), body())
    props = apply_rules(body(), found)["tools"][0]["function"]["parameters"]["properties"]
    assert props["default"] == {"type": "string"}  # the property stays, its keyword goes


def test_refused_refs_are_inlined_and_defs_dropped() -> None:
    found = rules(400, MOONSHOT_REF, body())
    assert found == [InlineSchemaRefs()]
    params = apply_rules(body(), found)["tools"][0]["function"]["parameters"]
    assert "$defs" not in params
    assert params["properties"]["asset"] == {"type": "object", "description": "the asset",
                                             "properties": {"id": {"type": "string"}}}


def test_a_type_beside_any_of_moves_into_its_branches() -> None:
    found = rules(400, MOONSHOT_ANY_OF, body())
    assert found == [SchemaTypeIntoBranches()]
    params = apply_rules(body(), found)["tools"][0]["function"]["parameters"]
    assert params["properties"]["mode"] == {"anyOf": [{"enum": ["a"], "type": "string"},
                                                      {"enum": ["b"], "type": "string"}]}


def test_an_object_with_empty_properties_gets_the_shape_gemini_asks_for() -> None:
    request = {**body(), "tools": [tool("now", {"type": "object", "properties": {}})]}
    found = rules(400, GEMINI_EMPTY_OBJECT, request)
    assert apply_rules(request, found)["tools"][0]["function"]["parameters"] == {"type": "object"}


def test_a_keyword_already_gone_teaches_nothing() -> None:
    request = apply_rules(body(), [DropSchemaKeyword("additionalProperties")])
    assert change_for(400, GEMINI_ADDITIONAL, request) is None


# ---- request parameters -----------------------------------------------------------------------------

# OpenAI (teilomillet/gollm#33)
OPENAI_MAX_TOKENS = err("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                        "'max_completion_tokens' instead.", type="invalid_request_error", param="max_tokens",
                        code="unsupported_parameter")
# OpenAI / Azure (holoviz/lumen#1087)
OPENAI_TEMPERATURE = err("Unsupported value: 'temperature' does not support 0.2 with this model. Only the default "
                         "(1) value is supported.", type="invalid_request_error", param="temperature",
                         code="unsupported_value")
# OpenAI (openai/openai-python#1080)
OPENAI_LOGPROBS = err("Unrecognized request argument supplied: logprobs", type="invalid_request_error")
# vLLM (modelscope/ms-agent#489)
VLLM_EXTRA = json.dumps({"object": "error", "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'seed'), "
                         "'msg': 'Extra inputs are not permitted', 'input': 42}]", "type": "BadRequestError",
                         "param": None, "code": 400})
# LiteLLM proxy (kaiko-ai/eva#895, BerriAI/litellm#3923)
LITELLM_SEED = err("litellm.UnsupportedParamsError: anthropic does not support parameters: ['seed'], for "
                   "model=claude-3-7-sonnet-20250219. To drop these, set `litellm.drop_params=True` or for proxy:"
                   "\n\n`litellm_settings:\n drop_params: true`\n.", type=None, param=None, code="400")
# DashScope (OpenBMB/UltraRAG#287)
DASHSCOPE_THINKING = err("parameter.enable_thinking must be set to false for non-streaming calls",
                         type="invalid_request_error", param=None, code="invalid_parameter_error")
# xAI behind LiteLLM (BerriAI/litellm#14056)
XAI_CAMEL = err("litellm.BadRequestError: XaiException - {\"code\":\"Client specified an invalid argument\","
                "\"error\":\"Argument not supported on this model: frequencyPenalty\"}")
# vLLM on Gaudi (vllm-project/vllm-gaudi#1098)
GAUDI_LOGPROBS = json.dumps({"error": {"message": "Gaudi doesn't support logprobs. Please remove 'logprobs'/"
                                                  "'top_logprobs' from your request to receive a response.",
                                       "type": "BadRequestError", "param": None, "code": 400}})


@pytest.mark.parametrize(("text", "params", "expected"), [
    (OPENAI_LOGPROBS, {"logprobs": True, "temperature": 0.2}, [DropParam("logprobs")]),
    (VLLM_EXTRA, {"seed": 42, "top_p": 0.9}, [DropParam("seed")]),
    (LITELLM_SEED, {"seed": 1, "temperature": 0}, [DropParam("seed")]),
    (XAI_CAMEL, {"frequency_penalty": 0.5, "top_p": 1}, [DropParam("frequency_penalty")]),
])
def test_an_unsupported_parameter_is_dropped_and_only_it(text: str, params: dict, expected: list[Rule]) -> None:
    request = body(**params)
    found = rules(400, text, request)
    assert found == expected
    sent = apply_rules(request, found)
    assert {k: v for k, v in request.items() if k != expected[0].target} == sent


def test_several_parameters_named_at_once_are_dropped_at_once() -> None:
    request = body(logprobs=True, top_logprobs=3, seed=7)
    found = rules(400, GAUDI_LOGPROBS, request)
    assert found == [DropParam("logprobs"), DropParam("top_logprobs")]
    assert apply_rules(request, found)["seed"] == 7


def test_a_refused_value_is_set_to_the_value_the_server_names() -> None:
    assert rules(400, OPENAI_TEMPERATURE, body(temperature=0.2)) == [SetParam("temperature", 1)]
    assert rules(400, DASHSCOPE_THINKING, body(enable_thinking=True)) == [SetParam("enable_thinking",
                                                                               False)]


def test_use_x_instead_renames_keeping_the_value() -> None:
    found = rules(400, OPENAI_MAX_TOKENS, body(max_tokens=500, temperature=1))
    assert found == [RenameParam("max_tokens", "max_completion_tokens")]
    sent = apply_rules(body(max_tokens=500, temperature=1), found)
    assert sent["max_completion_tokens"] == 500 and "max_tokens" not in sent and sent["temperature"] == 1


def test_a_parameter_the_server_does_not_name_is_never_touched() -> None:
    assert change_for(400, OPENAI_LOGPROBS, body(temperature=0.2)) is None
    assert change_for(400, err("Invalid 'messages': something else entirely"), body(seed=1)) is None


# ---- sizes ------------------------------------------------------------------------------------------
# Bodies as each server words them (from the provider's server code and documented errors; numbers as in the
# examples they give).
# vLLM `serving_engine._validate_input` (also OpenAI's own wording before 2024): the room the prompt leaves
VLLM_ROOM = json.dumps({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, "
                        "you requested 5000 tokens (1000 in the messages, 4000 in the completion). Please reduce the "
                        "length of the messages or completion.", "type": "BadRequestError", "param": None,
                        "code": 400})
# vLLM since 0.8, the same check worded anew
VLLM_ROOM_NEW = json.dumps({"object": "error", "message": "'max_tokens' or 'max_completion_tokens' is too large: "
                            "5000. This model's maximum context length is 4096 tokens and your request has 1000 "
                            "input tokens (5000 > 4096 - 1000).", "type": "BadRequestError", "param": None,
                            "code": 400})
# OpenAI Chat Completions: the model's own completion limit
OPENAI_CAP = err("max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you "
                 "provided 100000.", type="invalid_request_error", param="max_tokens", code="invalid_value")
# DeepSeek: the model's own limit as a range
DEEPSEEK_CAP = err("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]",
                   type="invalid_request_error", param=None, code="invalid_request_error")
# Anthropic-compatible endpoints: the model's output limit
ANTHROPIC_CAP = err("max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for "
                    "claude-sonnet-4-20250514", type="invalid_request_error")
# a relay (OpenRouter, LiteLLM) naming the parameter only, in `param`
RELAY_PARAM = err("Provider returned error", param="max_tokens", code=400)
# OpenAI: one string (a tool result here) over the server's limit
OPENAI_STRING = err("Invalid 'messages[2].content': string too long. Expected a string with maximum length 2000, "
                    "but got a string with length 3000 instead.", type="invalid_request_error",
                    param="messages[2].content", code="string_above_max_length")


@pytest.mark.parametrize(("text", "cap"), [(OPENAI_CAP, 16384), (DEEPSEEK_CAP, 8192), (ANTHROPIC_CAP, 64000)])
@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_above_the_models_limit_is_lowered_to_it_and_held_for_later_requests(text: str, cap: int,
                                                                                        name: str) -> None:
    request = body(**{name: 100000, "temperature": 0.2})
    change = change_for(400, text, request)
    assert change is not None and not change.once  # the model's limit: every later request, learned
    assert list(change.rules) == [CapParam(name, cap)]
    assert f"from 100000 to {cap}" in change.describe(request)
    sent = apply_rules(request, change.rules)
    assert sent[name] == cap and {k: v for k, v in sent.items() if k != name} == \
        {k: v for k, v in request.items() if k != name}
    assert apply_rules(body(**{name: 100}), change.rules)[name] == 100  # a smaller cap stays as it is
    assert rules_from_json([r.to_json() for r in change.rules]) == list(change.rules)


@pytest.mark.parametrize("text", [VLLM_ROOM, VLLM_ROOM_NEW])
def test_max_tokens_above_the_room_the_prompt_leaves_is_lowered_for_that_request_only(text: str) -> None:
    request = body(max_tokens=5000)
    change = change_for(400, text, request)
    assert change is not None and change.once  # the room depends on the prompt: never learned
    assert list(change.rules) == [CapParam("max_tokens", 4096 - 1000)]
    assert apply_rules(request, change.rules)["max_tokens"] == 3096


def test_a_prompt_that_leaves_too_little_room_is_the_overflow_it_is() -> None:
    # 4000 of 4096 in the messages: 96 tokens of room; the conversation is compacted instead (ContextOverflow)
    tight = VLLM_ROOM.replace("1000 in the messages", "4000 in the messages")
    assert change_for(400, tight, body(max_tokens=5000)) is None
    assert change_for(400, VLLM_ROOM_NEW, body()) is None  # no cap sent: nothing to lower, never a dropped param


def test_a_relay_naming_only_the_parameter_drops_it() -> None:
    assert rules(400, RELAY_PARAM, body(max_tokens=5000)) == [DropParam("max_tokens")]


def test_a_tool_result_over_the_servers_string_limit_is_cut_with_the_cut_output_marker() -> None:
    request = body()
    request["messages"][2]["content"] = "line\n" * 600  # 3000 characters
    change = change_for(400, OPENAI_STRING, request)
    assert change is not None and not change.once
    assert list(change.rules) == [CutToolResult(2000)]
    sent = apply_rules(request, change.rules)
    cut = sent["messages"][2]["content"]
    assert len(cut) <= 2000 and cut.startswith("line\n") and "[output truncated: " in cut
    assert sent["messages"][:2] == request["messages"][:2] and len(request["messages"][2]["content"]) == 3000
    parts = body()  # the text of a part, the same way
    parts["messages"][2]["content"] = [{"type": "text", "text": "x" * 3000}]
    assert len(apply_rules(parts, change.rules)["messages"][2]["content"][0]["text"]) <= 2000


def test_a_string_limit_on_a_message_that_is_no_tool_result_changes_nothing() -> None:
    request = body()
    request["messages"][0]["content"] = "y" * 3000  # the user's own words: never cut, nor another change made
    request["messages"][2]["content"] = "z" * 3000  # a long tool result the refusal does not name: not cut for it
    assert change_for(400, OPENAI_STRING.replace("messages[2]", "messages[0]"), request) is None


def test_a_stored_size_that_is_no_positive_int_is_left_out() -> None:
    stored = [{"op": "cap_param", "target": "max_tokens", "value": v} for v in (0, -5, True, "8192", 1 << 40, None)]
    assert rules_from_json([*stored, {"op": "cut_tool_result", "target": "", "value": 1.5}]) == []


# ---- message shapes ---------------------------------------------------------------------------------

# Ollama (pydantic/pydantic-ai#5206)
OLLAMA_NIL = json.dumps({"error": {"message": "invalid message content type: <nil>", "type": "invalid_request_error",
                                   "param": None, "code": None}})
# an OpenAI-compatible gateway (langchain4j/langchain4j#1105)
GATEWAY_NULL = err("Invalid value for 'content': expected a string, got null. (request id: 2024051502342742)",
                   type="invalid_request_error", param="messages.[1].content", code=None)
# LM Studio (lmstudio-ai/lmstudio-bug-tracker#261)
LMSTUDIO = err("Invalid 'content': 'content' field must be a string or an array of objects.")
# Anthropic-compatible endpoints (aliasrobotics/cai#182, anthropics/claude-code#59812)
ANTHROPIC_EMPTY = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "messages: text content blocks must be non-empty"}})


@pytest.mark.parametrize("text", [OLLAMA_NIL, GATEWAY_NULL, LMSTUDIO])
def test_null_content_beside_tool_calls_becomes_an_empty_string(text: str) -> None:
    request = body()
    found = rules(400, text, request)
    assert found == [AssistantToolContent("")]
    sent = apply_rules(request, found)
    assert sent["messages"][1]["content"] == "" and sent["messages"][1]["tool_calls"] == HISTORY[1]["tool_calls"]
    assert request["messages"] == HISTORY and sent["tools"] == request["tools"]


# llama.cpp's gpt-oss template, as a 500 (openclaw/openclaw#6514)
GPT_OSS_BOTH = json.dumps({"error": {"code": 500, "type": "server_error", "message": (
    "While executing CallExpression at line 296, column 36 in source: ... Error: Jinja Exception: Cannot pass both "
    "content and thinking in an assistant message with tool calls! Put the analysis message in one or the other, "
    "but not both.")}})


def test_a_template_500_refusing_content_beside_thinking_sends_that_content_as_null() -> None:
    """A 5xx is read only when its body is a chat template's refusal of the request's shape; the rule touches
    only tool-call messages that carry both, and nothing else of the request."""
    request = body()
    request["messages"][1] = {**request["messages"][1], "content": "Checking.", "reasoning_content": "think"}
    found = rules(500, GPT_OSS_BOTH, request)
    assert found == [ToolContentBesideReasoning()]
    sent = apply_rules(request, found)
    assert sent["messages"][1]["content"] is None and sent["messages"][1]["reasoning_content"] == "think"
    assert sent["messages"][2:] == request["messages"][2:] and request["messages"][1]["content"] == "Checking."
    assert change_for(500, err("internal error"), request) is None  # any other 500 is a fault to retry
    assert change_for(500, GPT_OSS_BOTH, body()) is None  # nothing to change: no message carries both


def test_a_blank_tool_result_gets_a_placeholder_and_empty_content_becomes_null() -> None:
    request = body()
    request["messages"][1]["content"] = ""
    found = rules(400, ANTHROPIC_EMPTY, request)
    assert found == [ToolResultPlaceholder(NO_OUTPUT), AssistantToolContent(None)]
    sent = apply_rules(request, found)
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": NO_OUTPUT}
    assert sent["messages"][1]["content"] is None
    other = {**request, "messages": [*request["messages"], {"role": "tool", "tool_call_id": "x", "content": "ok"}]}
    assert apply_rules(other, found)["messages"][3]["content"] == "ok"  # only blank results change


# Content sent as Mistral thinking parts (no text) beside tool calls is not blank, so a server's "content must
# not be null" rule (Ollama's, known by its port) never replaces the thinking the model must get back with ""
def test_content_parts_other_than_text_are_not_blank() -> None:
    thought = [{"type": "thinking", "thinking": [{"type": "text", "text": "t"}]}]
    request = body()
    request["messages"][1]["content"] = thought
    request["messages"][2]["content"] = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    for value in ("", None):
        sent = apply_rules(request, [AssistantToolContent(value),
                                     ToolResultPlaceholder(NO_OUTPUT)])
        assert sent["messages"][1]["content"] == thought and sent["messages"][2] == request["messages"][2]
    request["messages"][1]["content"] = [{"type": "text", "text": " "}]
    assert apply_rules(request, [AssistantToolContent("")])["messages"][1]["content"] == ""


VLLM_PARTS = ("[{'type': 'literal_error', 'loc': ('body', 'messages', 1, 'assistant', 'content', 'list[union["
              "ChatCompletionContentPartTextParam,ChatCompletionContentPartRefusalParam]]', 0, 'type'), 'msg': "
              "\"Input should be 'text' or 'refusal'\", 'input': 'thinking'}]")
OPENAI_PARTS = err("Invalid value: 'thinking'. Supported values are: 'text' and 'refusal'.",
                   param="messages[1].content[0].type", code="invalid_value")


# A session whose assistant content keeps Mistral's thinking parts, continued on a server that takes text parts
# only (`crow run -c --base-url …`), goes on: the refused parts go as the text of the content
@pytest.mark.parametrize("text", [err(VLLM_PARTS), OPENAI_PARTS,
                                  err("messages[1].content: assistant content must be a string")])
def test_refused_thinking_parts_go_as_the_text_of_the_content(text: str) -> None:
    thought = {"type": "thinking", "thinking": [{"type": "text", "text": "t"}]}
    request = body()
    request["messages"][1]["content"] = [thought]
    request["messages"].append({"role": "assistant", "content": [thought, {"type": "text", "text": "done"}]})
    found = rules(400, text, request)
    assert found == [AssistantContentText()]
    sent = apply_rules(request, found)
    assert sent["messages"][1]["content"] is None and sent["messages"][3]["content"] == "done"
    assert request["messages"][3]["content"][0] == thought  # the history is never changed
    assert rules_from_json([r.to_json() for r in found]) == found  # remembered
    again = change_for(400, text, apply_rules(request, found))  # a string wanted: then "" for the null beside calls
    assert again is None or again.rules == (AssistantToolContent(""),)


def test_json_nulls_of_the_error_object_are_not_read_as_the_message() -> None:
    # "param": null must not read as "content null": the refusal names nothing in the messages
    assert change_for(400, json.dumps({"error": {"message": "Something about messages", "param": None}}), body()) \
        is None


# ---- more shapes of the same kinds ------------------------------------------------------------------


def test_an_unquoted_camel_case_keyword_and_keyword_x_are_read() -> None:
    # a gateway's plain-text wording; camelCase names can only be keywords
    text = "tools[0].function.parameters: additionalProperties is not supported by this model"
    assert rules(400, text, body()) == [DropSchemaKeyword("additionalProperties")]
    text = err("function parameters schema uses unsupported keyword const")
    assert rules(400, text, body()) == [DropSchemaKeyword("const")]


def test_vertex_any_of_must_be_the_only_field_moves_the_type_into_the_branches() -> None:
    # Vertex AI: "... schema specified other fields alongside any_of. When using any_of, it must be the only
    # field set." (google-gemini/gemini-cli reports on Vertex)
    text = err("Unable to submit request because `create_event` functionDeclaration `parameters.mode` schema "
               "specified other fields alongside any_of. When using any_of, it must be the only field set.")
    assert rules(400, text, body()) == [SchemaTypeIntoBranches()]


# vLLM serving Gemma 2 (vllm-project/vllm#2964, huggingface/chat-ui#1386)
GEMMA_SYSTEM = json.dumps({"object": "error", "message": "System role not supported", "type": "BadRequestError",
                           "param": None, "code": 400})


def test_a_refused_system_role_is_folded_into_the_first_user_message() -> None:
    request = {**body(), "messages": [{"role": "system", "content": "Be brief."}, *copy.deepcopy(HISTORY)]}
    found = rules(400, GEMMA_SYSTEM, request)
    assert found == [FoldRole("system")]
    sent = apply_rules(request, found)
    assert sent["messages"][0] == {"role": "user", "content": "Be brief.\n\ngo"}
    assert sent["messages"][1:] == HISTORY[1:] and request["messages"][0]["role"] == "system"
    # Mistral's older template (kubeai-project/kubeai#499 quotes it)
    assert rules(400, err("Conversation roles must alternate user/assistant/user/assistant/..."), request) == found
    assert change_for(400, GEMMA_SYSTEM, body()) is None  # no system message: nothing to change


# ---- tool names the wire rule does not cover ----------------------------------------------------------

# Gemini (google-gemini/gemini-cli#2966)
GEMINI_NAME = err("* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name. Must "
                  "start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.) "
                  "or dashes (-), with a maximum length of 64.")


def test_a_name_starting_with_a_digit_gets_a_letter_first_in_tools_and_history() -> None:
    # MoonshotAI/kimi-cli#2531: MCP tools named 21st_magic_component_builder
    request = body()
    request["tools"][1]["function"]["name"] = "21st_magic"
    request["messages"][1]["tool_calls"][0]["function"]["name"] = "21st_magic"
    found = rules(400, GEMINI_NAME, request)
    assert found == [RenameTools("letter_first")]
    sent = apply_rules(request, found)
    assert [t["function"]["name"] for t in sent["tools"]] == ["create_event", "t_21st_magic"]
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "t_21st_magic"
    assert request["tools"][1]["function"]["name"] == "21st_magic"  # the request as built is untouched
    assert change_for(400, GEMINI_NAME, body()) is None  # every name fine already: nothing to change


def test_a_quoted_name_pattern_is_the_rule_renames_follow() -> None:
    text = err("Invalid 'tools[1].function.name': string does not match pattern. Expected a string that matches the "
               "pattern '^[a-zA-Z0-9_]+$'.", param="tools[1].function.name", code="invalid_value")
    request = body()
    request["tools"][1]["function"]["name"] = "read-file"
    found = rules(400, text, request)
    assert [t["function"]["name"] for t in apply_rules(request, found)["tools"]] == ["create_event", "read_file"]


def test_two_parameters_of_which_only_one_may_be_sent_keep_the_first_named() -> None:
    # Bedrock via LiteLLM (skydiscover-ai/skydiscover#15)
    text = err("litellm.BadRequestError: BedrockException - {\"message\":\"The model returned the following errors: "
               "`temperature` and `top_p` cannot both be specified for this model. Please use only one.\"}")
    request = body(top_p=0.9, temperature=0.2, seed=3)
    assert rules(400, text, request) == [DropParam("top_p")]


def test_an_anthropic_compatible_name_pattern_renames_what_fails_it() -> None:
    # Anthropic-compatible endpoint (apify/tester-mcp-client#11)
    text = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": "tools.7.custom.name: "
                                                  "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"}})
    request = body()
    request["tools"][1]["function"]["name"] = "josef.prochazka--webpage-singer"
    found = rules(400, text, request)
    assert found == [RenameTools("strict")]
    assert apply_rules(request, found)["tools"][1]["function"]["name"] == "josef_prochazka--webpage-singer"


# A 400 whose body nests 100,000 deep names no change (the server's refusal stands), never
# `crow: internal error: RecursionError`
def test_a_refusal_nested_deeper_than_the_parser_goes_names_nothing() -> None:
    deep = '{"error": {"message": "x", "param": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    assert change_for(400, deep, {"model": "m", "messages": []}) is None


# A refusal's quoted "pattern '…'" is never compiled nor run on the event loop nor stored, only a known rule
# chosen: a catastrophic one (here nested quantifiers against a long name) would never finish
def test_a_servers_name_pattern_is_never_compiled_only_a_known_rule_chosen() -> None:
    hostile = "(a+)+" * 2000 + "b"
    text = err(f"Invalid 'tools[1].function.name': Expected a string that matches the pattern '^{hostile}$'.")
    request = body()
    request["tools"][1]["function"]["name"] = "read.file" + "a" * 50
    found = rules(400, text, request)
    assert found == [RenameTools("strict")]
    assert len(json.dumps(found[0].to_json())) < 100  # what is stored is the rule's name, not the pattern
    assert apply_rules(request, found)["tools"][1]["function"]["name"] == "read_file" + "a" * 50


def test_a_stored_pattern_of_an_earlier_version_is_read_as_a_known_rule_or_strict() -> None:
    from crow_cli.wire.rules import name_rule

    assert name_rule("[A-Za-z_][A-Za-z0-9_-]{0,63}") == "letter_first"
    assert name_rule("[a-zA-Z0-9_]+") == "word"
    assert name_rule("(a+)+" * 1000) == "strict"
    assert name_rule(None) == "letter_first"


# provenance: a mutation check (w5) — parameter rules touching the request's own fields, a status other than
# 400/422 read, a cut of a message that is no tool result, and a folded role lost without a user message each
# passed every test of this file
def test_parameter_rules_never_touch_the_request_itself() -> None:
    request = body(max_tokens=5)
    assert apply_rules(request, [DropParam("messages"), SetParam("model", "x"),
                                 RenameParam("stream", "s"), RenameParam("max_tokens", "model")]
                       ) == request


@pytest.mark.parametrize("status", [401, 404, 429, 500])
def test_only_a_400_or_422_is_read(status: int) -> None:
    assert change_for(status, OPENAI_LOGPROBS, body(logprobs=True)) is None


def test_a_cut_applies_to_tool_results_only() -> None:
    request = body()
    request["messages"][0]["content"] = "y" * 3000
    assert apply_rules(request, [CutToolResult(2000)]) == request


def test_a_folded_role_without_a_user_message_becomes_one() -> None:
    request = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "assistant", "content": "ok"}]}
    assert apply_rules(request, [FoldRole("system")]) == {
        "messages": [{"role": "user", "content": "Be brief."}, {"role": "assistant", "content": "ok"}]}
