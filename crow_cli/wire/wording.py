"""Servers' wording: every pattern crow reads a server's error text with, in one table (pure data, no I/O).

Each row is `(kind, pattern, source)`: what the words mean, the pattern that finds them, and where they were
seen (a server and the public report that quotes it). The readers name the kinds they read: `wire.refusal` (the
vocabulary of a refusal), `wire.change` (which part of a request it names), `wire.vision` (a refusal of image
parts) and the client's context-overflow reading (`CONTEXT_OVERFLOW`, `OVERFLOW_*`). A kind of several rows
matches where any row matches; rows that give numbers are tried in table order. A new server's wording is one
row here, beside its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CONTEXT_OVERFLOW", "OVERFLOW_NUMBERS", "OVERFLOW_PROMPT", "OVERFLOW_WINDOW", "WORDING", "Wording",
           "found", "patterns", "said"]

_I = re.IGNORECASE


@dataclass(frozen=True)
class Wording:
    """One row of the table: what the words mean (`kind`), the pattern that finds them, where they were seen."""

    kind: str
    pattern: re.Pattern[str]
    source: str


def _row(kind: str, pattern: str, source: str, flags: int = _I) -> Wording:
    return Wording(kind, re.compile(pattern, flags), source)


WORDING: tuple[Wording, ...] = (
    # -- the vocabulary of a refusal (`wire.refusal`) -------------------------------------------------------
    _row("asks_change", r"unsupported|not supported|unrecogni[sz]ed|unknown|not permitted|not allowed|extra_forbidden|"
         r"extra inputs?|invalid|cannot find field|does not support|doesn'?t support|not available|not enabled|"
         r"must be|only the default|please remove|remove|conflict|should|expected|not a valid|not accepted|"
         r"unexpected|forbidden|deprecated|instead|cannot|can.t|only one",
         "a part of the request is to change: the gate of every request-rule finder; parameters: OpenAI "
         "'Unrecognized request argument supplied: logprobs' (openai/openai-python#1080), vLLM 'Extra inputs are "
         "not permitted' (modelscope/ms-agent#489, 1Panel-dev/MaxKB#2912), LiteLLM 'anthropic does not support "
         "parameters: [seed]' (kaiko-ai/eva#895, BerriAI/litellm#3923), xAI 'Argument not supported on this "
         "model: frequencyPenalty' (BerriAI/litellm#14056), vLLM on Gaudi 'Please remove logprobs/top_logprobs "
         "from your request' (vllm-project/vllm-gaudi#1098); the other finders' sources are their rows below"),
    _row("field_refused", r"extra_forbidden|extra (inputs?|fields?)|not permitted|forbidden|unknown|unrecogni[sz]ed|"
         r"not allowed|unexpected|additional propert|not supported|unsupported|invalid field|no such field|"
         r"cannot find field",
         'Mistral/pydantic `extra_forbidden`, "Extra inputs are not permitted", strict OpenAI-compatible validators, '
         'Gemini \'Unknown name "x_vendor"\', JSON-schema "additional properties"; strict gateways refuse '
         "`reasoning_details`"),
    _row("field_demanded", r"must be passed back|must be (provided|included|present|sent|set|non-?empty)|is required|"
         r"required|missing|must (include|contain|have)|cannot be (empty|blank)|should not be empty|"
         r"must not be empty",
         'DeepSeek "The reasoning_content in the thinking mode must be passed back to the API.", Gemini '
         '"function_response.name: Name cannot be empty." / "name is required", pydantic `missing`'),
    _row("parameter_refused", r"extra inputs|extra_forbidden|unrecogni[sz]ed|unsupported parameter|unknown (parameter|"
         r"field|name|argument)|does not support parameters|argument not supported|please remove|"
         r"not supported with this model|cannot both|only one of|use only one|mutually exclusive|not both|"
         r"cannot find field",
         'the parameter itself, whatever its value: vLLM "Extra inputs are not permitted", OpenAI "Unsupported '
         'parameter", "Unrecognized request argument", LiteLLM "does not support parameters", Anthropic "cannot '
         'both be specified"'),
    _row("value_refused", r"\bvalue\b|\brange\b|maximum|minimum|\bbetween\b|greater|less than|\babove\b|\bbelow\b|"
         r"must be (in|at)|should be (in|at)|\bgot\b|out of bounds|too (large|small|high|low)",
         "a value, not its parameter: OpenAI \"Invalid 'temperature': decimal above maximum value. Expected a value "
         "<= 2, but got 5 instead.\" (decimal_above_max_value), \"Unsupported value: 'temperature' does not support "
         '0.5"; vLLM "temperature must be in [0, 2], got 5.0." / pydantic "Input should be less than or equal to 2"; '
         'Anthropic "temperature: range: 0..1"'),
    _row("tool_message_name", r"\b(tool|function)[ _]?(message|response|result|call_output)s?\b.{0,80}\bname\b|"
         r"\bname\b.{0,40}\b(tool|function)[ _]?(message|response|result)",
         '"tool messages need a name", Gemini "the name of the function response"', _I | re.DOTALL),
    _row("pydantic_errors", r"""['"]loc['"]:\s*[(\[]([^)\]]{0,200})[)\]].{0,200}?['"]msg['"]:\s*(['"])(.{1,200}?)\2""",
         "vLLM: pydantic's error list as Python text in a message (\"[{'type': 'extra_forbidden', 'loc': ('body', "
         "'seed'), 'msg': 'Extra inputs are not permitted', 'input': 7}]\", modelscope/ms-agent#489)", re.S),
    # -- message fields (`wire.change`, `rules.fields`) -------------------------------------------------------
    _row("id_context", r"tool_use\.id|tool_use_id|toolUseId|tool_call_id|tool[ _]?call[ _]?id|tool_calls\[\d+\]\.id|"
         r"tool_calls\.\d+\.id", "a refusal of tool-call ids: Anthropic-compatible, Bedrock, Mistral (rows below)"),
    _row("id_alnum_dash", r"\[a-zA-Z0-9_-\]|\[a-zA-Z0-9-_\]|\[A-Za-z0-9_-\]|\[a-z0-9A-Z_-\]",
         "Anthropic-compatible \"messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'\", "
         "Bedrock's toolUseId constraint (no pattern a server sends is compiled)", 0),
    _row("id_length", r"a-z, A-Z, 0-9,? with a length of (?P<length>\d{1,2})",
         'Mistral "Tool call id was functions.lookup_order:0 but must be a-z, A-Z, 0-9, with a length of 9."'),
    # -- sizes ----------------------------------------------------------------------------------------------
    _row("overflow_requested", r"maximum context length is (?P<window>\d+) tokens\. However, you requested \d+ tokens "
         r"\((?P<prompt>\d+) in the messages, \d+ in the completion\)",
         "vLLM (`serving_engine.py`, `_validate_input`) and OpenAI before 2024: \"This model's maximum context length "
         "is 4096 tokens. However, you requested 5000 tokens (1000 in the messages, 4000 in the completion). Please "
         'reduce the length of the messages or completion." (the room left, and an overflow\'s numbers)'),
    _row("room_left", r"is too large: \d+\. This model's maximum context length is (?P<window>\d+) tokens and your "
         r"request has (?P<prompt>\d+) input tokens",
         "newer vLLM: \"'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context "
         'length is 4096 tokens and your request has 1000 input tokens (5000 > 4096 - 1000)."'),
    _row("model_cap", r"supports at most (?P<cap>\d+) completion tokens",
         'OpenAI "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you '
         'provided 100000." (param max_tokens, code invalid_value)'),
    _row("model_cap", r"valid range of \w+ is \[\s*\d+\s*,\s*(?P<cap>\d+)\s*\]",
         'DeepSeek "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]"'),
    _row("model_cap", r"\d+ > (?P<cap>\d+), which is the maximum allowed number of output tokens",
         'Anthropic-compatible "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for '
         'claude-sonnet-4-20250514"'),
    _row("string_limit", r"'?messages\[(?P<at>\d+)\]\.content(?:\[\d+\]\.text)?'?: string too long\. Expected a "
         r"string with maximum length (?P<limit>\d+)",
         "OpenAI \"Invalid 'messages[3].content': string too long. Expected a string with maximum length 10485760, "
         'but got a string with length 12000000 instead." (param messages[3].content, code string_above_max_length)'),
    # -- tool schemas ---------------------------------------------------------------------------------------
    _row("schema_context", r"parameters|function_declarations|schema|tools\[\d+\]|tools\.\d+",
         "a refusal about tool schemas (the rows below)"),
    _row("schema_refs", r"\$ref|\breferences?\b|\$defs|\bdefinitions\b",
         'Moonshot "<At path \'properties.assetRef\': conflicting keywords found after $ref expansion: description>" '
         '(MoonshotAI/kimi-cli#2061, #1903), "references must start with #/$de..." (CommandCodeAI#594)'),
    _row("schema_branch_type", r"(any_?of|one_?of).{0,80}\btype\b|\btype\b.{0,80}(any_?of|one_?of)|"
         r"(alongside|beside|together with) (any_?of|one_?of)|(any_?of|one_?of).{0,60}only field",
         "Moonshot \"<At path 'root': when using anyOf, type should be defined in anyOf items instead of the parent "
         'schema>" (MoonshotAI/kimi-cli#2531)', _I | re.S),
    _row("schema_empty_properties", r"properties\W{0,5}(should|must) (be )?non-?empty|properties.{0,30}(non-?empty|"
         r"not be empty|cannot be empty|empty)",
         'Gemini "GenerateContentRequest.tools[0].function_declarations[0].parameters.properties: should be '
         'non-empty for OBJECT type" (langchain-ai/langchainjs#7935, BerriAI/litellm#18237)'),
    _row("schema_missing_properties", r"missing properties|properties.{0,20}(is )?(required|missing)",
         "OpenAI structured outputs \"Invalid schema for function 'f': ... object schema missing properties\""),
    _row("schema_keyword_named", r"\bkeywords?\s+[\"'`]?([A-Za-z_$][\w$]*)",
         "a keyword named after the word: OpenAI structured outputs \"In context=('properties', 'x'), 'format' is not "
         'permitted."'),
    _row("schema_keyword_named", r"([A-Za-z_$][\w$]*)[\"'`]?\s+keyword\b", "a keyword named before the word"),
    _row("schema_path", r"(?:parameters|properties|items|value|any_of|anyOf)(?:\[\d+\])?((?:\.[\w$]+(?:\[\d+\])?)+)",
         'Gemini (also behind one-api / new-api gateways) "Invalid JSON payload received. Unknown name '
         '\\"additionalProperties\\" at \'tools[0].function_declarations[0].parameters\': Cannot find field." '
         '(Laisky/one-api#60, google/adk-python#1277 "additional_properties", decolua/9router#2309 "multipleOf", '
         'openswarm-ai/openswarm#24 "$schema", "const", "exclusiveMinimum", "propertyNames"): a path into a schema '
         "ends with the keyword", 0),
    # -- tool names -----------------------------------------------------------------------------------------
    _row("tool_name_context", r"function[_ ]?name|function\.name|declarations\[\d+\]\.name|custom\.name|"
         r"tool names?\b|invalid (function|tool) name",
         'Gemini "GenerateContentRequest.tools[0].function_declarations[18].name: Invalid function name. Must start '
         "with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.) or dashes "
         '(-), with a maximum length of 64." (google-gemini/gemini-cli#2966); Moonshot refuses a digit first '
         "(MoonshotAI/kimi-cli#2531)"),
    _row("name_pattern", r"pattern[^'\"`]{0,20}['\"`]\^?(?P<pattern>[^'\"`]{1,100})",
         "OpenAI-style messages quote their pattern (\"Expected a string that matches the pattern "
         "'^[a-zA-Z0-9_-]+$'\", hackers365/xiaozhi-esp32-server-golang#268): only looked at, never compiled", 0),
    _row("name_letter_first", r"start with a letter", 'Gemini "Must start with a letter or an underscore"'),
    # -- message shapes -------------------------------------------------------------------------------------
    _row("message_context", r"\bcontent\b|messages?\b|\btool\b", "a refusal about messages (the rows below)"),
    _row("wants_string", r"<nil>|got null|\bnull\b|\bNone\b|must be a string|expected a string|invalid type: null|"
         r"content type",
         'content null beside tool calls: Ollama "invalid message content type: <nil>" (pydantic/pydantic-ai#5206, '
         "QwenLM/qwen-code#3350); gateways \"Invalid value for 'content': expected a string, got null.\" "
         "(docker/docker-agent#63, langchain4j/langchain4j#1105); LM Studio \"Invalid 'content': 'content' field "
         'must be a string or an array of objects." (lmstudio-ai/lmstudio-bug-tracker#261)'),
    _row("text_parts_only", r"should be 'text'|supported values are: 'text'|valid string",
         "thinking parts of assistant content (a session carried to another server): vLLM/pydantic \"Input should be "
         "'text' or 'refusal'\", OpenAI \"Invalid value: 'thinking'. Supported values are: 'text' and 'refusal'.\""),
    _row("wants_text", r"non-?empty|not be empty|cannot be empty|is empty|empty (string|text|content)|blank|"
         r"too short|at least 1 character|must have (some )?(content|text)",
         'content "" or a blank tool result: Anthropic-compatible endpoints and Bedrock-backed gateways "messages: '
         'text content blocks must be non-empty" (aliasrobotics/cai#182, anthropics/claude-code#59812, '
         "vercel/ai#14612)"),
    _row("role_refused", r"\b(system|developer)\b.{0,30}\broles?\b.{0,30}(not supported|unsupported|not allowed|"
         r"invalid|not permitted)|only user and assistant roles|roles must alternate|"
         r"invalid value: '(system|developer)'",
         'a chat template without a system role: Gemma on vLLM, SGLang, llama-cpp-python "System role not supported" '
         "(huggingface/chat-ui#1386, vllm-project/vllm#2964, sgl-project/sglang#892); Mistral's older templates "
         '"Only user and assistant roles are supported!", "Conversation roles must alternate '
         'user/assistant/user/assistant/..." (kubeai-project/kubeai#499)'),
    _row("both_content_and_thinking", r"cannot pass both content and (thinking|reasoning)",
         'gpt-oss\'s chat template on llama.cpp, a 500: "Jinja Exception: Cannot pass both content and thinking in '
         'an assistant message with tool calls! Put the analysis message in one or the other, but not both." '
         "(openclaw/openclaw#6514)"),
    # -- request parameters ---------------------------------------------------------------------------------
    _row("only_one", r"cannot both|only one of|use only one|mutually exclusive|not both",
         "Anthropic models (Bedrock via LiteLLM, Claude Sonnet 4.5+) \"`temperature` and `top_p` cannot both be "
         'specified for this model. Please use only one." (skydiscover-ai/skydiscover#15, langfuse/langfuse#9882): '
         "the first one named is kept"),
    _row("use_instead", r"""use\s+["'`]?(?P<name>[A-Za-z_][\w.]*)["'`]?\s+instead""",
         "OpenAI \"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
         'instead." (teilomillet/gollm#33)'),
    _row("only_value", r"only the default \(([^)]{1,40})\)|must be (?:set to |equal to )?([\w.\"'-]{1,40})"
         r"|(?:only|supports? only) (?:the )?value ([\w.\"'-]{1,40})",
         "OpenAI \"Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value "
         'is supported." (holoviz/lumen#1087); DashScope "parameter.enable_thinking must be set to false for '
         'non-streaming calls" (OpenBMB/UltraRAG#287)'),
    # -- context overflow (the client's `ContextOverflow`) --------------------------------------------------
    _row("context_overflow", r"context_length_exceeded|maximum context length",
         "OpenAI (code context_length_exceeded), vLLM, DeepSeek, OpenRouter, LiteLLM"),
    _row("context_overflow", r"exceed_context_size|context size", "llama.cpp (exceed_context_size_error)"),
    _row("context_overflow", r"ContextWindowExceeded|context window", "LiteLLM (ContextWindowExceededError)"),
    _row("context_overflow", r"prompt is too long", 'Anthropic-compatible "prompt is too long: N tokens > M maximum"'),
    _row("context_overflow", r"longer than the maximum model length",
         'vLLM "The prompt (length N) is longer than the maximum model length of M"'),
    _row("context_overflow", r"exceeds the maximum number of tokens",
         'Gemini "The input token count (N) exceeds the maximum number of tokens allowed (M)"'),
    _row("overflow_numbers", r"prompt contains (?P<prompt>\d+) tokens.*?(?P<window>\d+) maximum context length",
         'Mistral "Prompt contains N tokens ... too large for model with M maximum context length"', _I | re.S),
    _row("overflow_numbers", r"prompt is too long: (?P<prompt>\d+) tokens > (?P<window>\d+)", "Anthropic-compatible"),
    _row("overflow_numbers", r"prompt \(length (?P<prompt>\d+)\) is longer than the maximum model length of "
         r"(?P<window>\d+)", "vLLM"),
    _row("overflow_numbers", r"input token count \((?P<prompt>\d+)\) exceeds the maximum number of tokens allowed "
         r"\((?P<window>\d+)\)", "Gemini"),
    _row("overflow_window", r"maximum context length is (\d+) tokens",
         "OpenAI, vLLM, DeepSeek, OpenRouter, LiteLLM: the window, with the prompt size in an overflow_prompt row"),
    _row("overflow_prompt", r"\((\d+) in the messages", "OpenAI \"(N in the messages, M in the functions, ...)\"", 0),
    _row("overflow_prompt", r"resulted in (\d+) tokens", 'OpenAI "However, your messages resulted in N tokens"', 0),
    _row("overflow_prompt", r"requested (?:about )?(\d+) tokens", 'OpenAI "you requested about N tokens"', 0),
    # -- images (`wire.vision`) -------------------------------------------------------------------------------
    _row("images_refused", r"image_url is only supported by certain models",
         "OpenAI (gpt-3.5-turbo, gpt-4 via Azure, and gateways passing it on): 400 \"Invalid content type. image_url "
         "is only supported by certain models.\" (browser-use/web-ui#274, vllm-project/vllm#11629, "
         "danny-avila/LibreChat#6333)"),
    _row("images_refused", r"is not a multimodal model",
         'vLLM serving a text-only model: 400 "facebook/opt-125m is not a multimodal model None" '
         "(studio-dots-ai/dots.ocr#61, vllm-project/vllm#19144)"),
    _row("images_refused", r"image input is not supported",
         'llama-server without --mmproj: 500 "image input is not supported by this server" (ggml-org/llama.cpp#13566)'),
    _row("images_refused", r"not configured with a mmproj",
         'llama-cpp-python "Image input detected, but the loaded model is not configured with a mmproj module" '
         "(JamePeng/llama-cpp-python#165)"),
    _row("images_refused", r"not compiled for multimodal",
         "llamafile \"The server was not compiled for multimodal or the model projector can't be loaded\" "
         "(mozilla-ai/llamafile#298)"),
    _row("images_refused", r"(does not|doesn'?t) support (image|vision)|images? (are|is) not supported",
         'Ollama 400 "this model does not support image input" (ollama/ollama#17301), "This model does not support '
         'images" (ollama/ollama#13099)'),
    _row("images_refused", r"unknown variant .?image_url",
         "DeepSeek's API \"unknown variant `image_url`, expected `text`\""),
    _row("images_refused", r"vision is not supported|(no|not a) vision model|multimodal (input )?is not supported",
         "gateways in front of text-only models"),
    _row("image_parts_unnamed", r"input should be 'text'|expected `text`|invalid content type",
         "servers validating parts as text only (pydantic \"Input should be 'text'\" at content … type: "
         "thinking-machines-lab/tinker-feedback#83): a refusal of images only when it says image"),
)
"""The table (module docstring); `patterns`, `said` and `found` read it by kind."""

_BY_KIND: dict[str, tuple[re.Pattern[str], ...]] = {}
for _w in WORDING:
    _BY_KIND[_w.kind] = (*_BY_KIND.get(_w.kind, ()), _w.pattern)


def patterns(*kinds: str) -> tuple[re.Pattern[str], ...]:
    """The patterns of the rows of `kinds`, each kind's rows in table order; a kind with no row is a `KeyError`."""
    return tuple(p for kind in kinds for p in _BY_KIND[kind])


def said(kind: str, text: str) -> bool:
    """Whether `text` holds the words of `kind` (any of its rows)."""
    return any(p.search(text) for p in _BY_KIND[kind])


def found(kind: str, text: str) -> re.Match[str] | None:
    """The match of the first row of `kind` (in table order) that finds its words in `text`, or None."""
    return next((m for p in _BY_KIND[kind] if (m := p.search(text)) is not None), None)


def _joined(kind: str) -> re.Pattern[str]:
    """The rows of `kind` as one pattern (a search finds what any row finds)."""
    rows = _BY_KIND[kind]
    return re.compile("|".join(f"(?:{p.pattern})" for p in rows), rows[0].flags)


CONTEXT_OVERFLOW = _joined("context_overflow")
"""Context-window overflow, as each provider words it (the client maps it to `ContextOverflow`)."""
OVERFLOW_NUMBERS = tuple((p, "window", "prompt") for p in patterns("overflow_numbers", "overflow_requested"))
"""(pattern, group of the window, group of the prompt size): what each provider's overflow message says."""
OVERFLOW_WINDOW = patterns("overflow_window")[0]
"""The window alone, with the prompt size in `OVERFLOW_PROMPT`."""
OVERFLOW_PROMPT = patterns("overflow_prompt")
