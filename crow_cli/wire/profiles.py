"""What crow knows about providers, as data: hosts, field names, policies and request rules known in advance.

One place for provider knowledge (the way pydantic-ai keeps `profiles/`): the wire code, the config and
the tool-name cleaner read these tables instead of naming providers themselves; the wording of their errors is
the table of `wire.wording`. A `Profile` says what
is known of a provider in advance (matched by the base URL's host), `KNOWN_REQUEST_RULES` the request
rules known for a host and model family: together the built-in layer of a server's profile, which
`wire.profile.build_profile` overlays with the config's `[provider]` table and what a server taught
(`wire.facts`). Pure data and pure functions: no I/O.
Sources are given beside each entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "BLOCK_TEXT_FIELDS",
    "FIELD_NAME",
    "KEYED_HOSTS",
    "KNOWN_REQUEST_RULES",
    "LEAKED_TOKEN",
    "OWNED_PARAMS",
    "PROFILES",
    "PROFILE_FIELDS",
    "REASONING_BLOCK_FIELDS",
    "REASONING_FIELDS",
    "REQUEST_CORE",
    "TOOL_NAMESPACE",
    "WIRE_APIS",
    "Profile",
    "check_overrides",
    "profile_for",
]

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Delta / message fields that carry a turn's reasoning as text: `reasoning_content` (DeepSeek, vLLM,
SGLang, LiteLLM), `reasoning` (OpenRouter, Ollama, LM Studio, newer vLLM)."""

REASONING_BLOCK_FIELDS = ("reasoning_details", "thinking_blocks")
"""Fields of typed reasoning blocks, streamed in pieces and sent back as merged: `reasoning_details`
(`reasoning.text`, `reasoning.summary`, `reasoning.encrypted`, each piece with its `index`: OpenRouter and
gateways in front of Anthropic, Gemini and OpenAI o-series) and `thinking_blocks` (LiteLLM in front of
Anthropic, Bedrock and Vertex: `thinking` pieces without an index, then a signature-only piece;
`redacted_thinking` blocks carry `data`)."""

BLOCK_TEXT_FIELDS = ("text", "summary", "thinking")
"""Block fields streamed in pieces and joined; every other block field keeps its first non-empty value."""

@dataclass(frozen=True)
class Profile:
    """What crow knows of one provider before sending it anything.

    Attributes:
        name: a short name, shown by `--debug`.
        hosts: base-URL host names it applies to (exact match).
        needs_key: the API refuses every request without a key (a keyless run stops before sending).
        reasoning_fields: delta fields that carry reasoning text, joined per name.
        tool_message_name: True: tool messages carry the function `name`; False: never; None: as stored.
        refused_fields: message / tool-call fields the server refuses (never sent).
        required_fields: reasoning fields wanted on every assistant message (`""` when none was kept).
        recover_tool_calls: tool calls a turn's text ends with, in a format known from open models, are run
            as calls when the server's parser missed them (`wire.textcalls`).
        wire_api: the endpoint turns go to (`WIRE_APIS`, Codex's key and values): `chat` (`/chat/completions`)
            or `responses` (`/responses`, `wire.responses`).
    """

    name: str = "generic"
    hosts: tuple[str, ...] = ()
    needs_key: bool = False
    reasoning_fields: tuple[str, ...] = REASONING_FIELDS
    tool_message_name: bool | None = None
    refused_fields: tuple[str, ...] = ()
    required_fields: tuple[str, ...] = ()
    recover_tool_calls: bool = True
    wire_api: str = "chat"


WIRE_APIS = ("chat", "responses")
"""The values of `[provider] wire_api`: Chat Completions (the default) or the Responses API."""

PROFILES: tuple[Profile, ...] = (
    Profile("openai", hosts=("api.openai.com",), needs_key=True),
    Profile("openrouter", hosts=("openrouter.ai",), needs_key=True),  # reasoning_details: sent back as merged
    Profile("dashscope", hosts=("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"), needs_key=True),
    # Gemini's OpenAI-compatible endpoint: "function_response.name: Name cannot be empty" without it
    Profile("gemini", hosts=("generativelanguage.googleapis.com",), needs_key=True, tool_message_name=True),
)
"""Known providers. Anything else is `Profile()`: reasoning under the usual names, learned as it goes."""

KEYED_HOSTS = tuple(host for profile in PROFILES if profile.needs_key for host in profile.hosts)
"""Hosted APIs that refuse every request without a key (local servers often need none)."""

PROFILE_FIELDS: dict[str, type] = {"needs_key": bool, "reasoning_fields": list, "tool_message_name": bool,
                                   "refused_fields": list, "required_fields": list, "request_rules": list,
                                   "recover_tool_calls": bool, "wire_api": str}
"""The fields the config's `[provider]` table may override, with their TOML types."""


OWNED_PARAMS = ("model", "messages", "stream", "stream_options", "tools")
"""Body fields crow sets itself, which the config's `[params]` may not set."""
REQUEST_CORE = frozenset(OWNED_PARAMS) - {"stream_options"}
"""Body fields no request rule drops, sets or renames: the request itself (`stream_options` is crow's own, and
dropped where a server refuses it)."""

MESSAGE_FIELDS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name", "id", "type", "function",
                            "arguments", "refusal", "audio"})
"""Fields of the Chat Completions message itself: never a reasoning field, never dropped or demanded as one
(`reasoning_fields = ["content"]` would send the prompt as reasoning, that is, not at all)."""
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
"""A field name the config may give (`reasoning_fields`, `drop_field` …): letters, digits, `_ . : -`, at most 64."""
_MAX_NAMES = 32


def _rules_shape(value: Any) -> str | None:
    """What is wrong with the shape of `[provider] request_rules` (tables of bounded names), or None; which rules
    crow knows is checked by `wire.profile.rules_problem`."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return "[provider] request_rules must be a list of tables (op, target, value)"
    if len(value) > _MAX_NAMES:
        return f"[provider] request_rules may hold at most {_MAX_NAMES} rules"
    for i, item in enumerate(value):  # what each kind's target may be is checked with the kind
        for name in (item.get("op"), item.get("target")):
            if name is not None and (not isinstance(name, str) or len(name) > 64):
                return f"[provider] request_rules[{i}]: {str(name)[:64]!r} is not a name of at most 64 characters"
    return None


def check_overrides(table: Mapping[str, Any]) -> str | None:
    """What is wrong with a config `[provider]` table (one line naming the key), or None: known keys, their
    TOML types, list items names of at most 64 characters, at most 32 of them, none of `MESSAGE_FIELDS`."""
    for key, value in table.items():
        if key == "request_rules":
            problem = _rules_shape(value)
            if problem:
                return problem
            continue
        if key == "max_concurrent_requests":  # the client's, not the profile's (`wire.slots`)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
                return "[provider] max_concurrent_requests must be a whole number from 1 to 1024"
            continue
        kind = PROFILE_FIELDS.get(key)
        if kind is None:
            return f"[provider] has no key {key!r} (known: {', '.join([*PROFILE_FIELDS, 'max_concurrent_requests'])})"
        if key == "wire_api":
            if value not in WIRE_APIS:
                return f"[provider] wire_api must be \"chat\" or \"responses\", not {str(value)[:64]!r}"
            continue
        if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(v, str) and v
                                                                                for v in value)):
            return f"[provider] {key} must be {'a list of names' if kind is list else 'true or false'}"
        if isinstance(value, list):
            if len(value) > _MAX_NAMES:
                return f"[provider] {key} may hold at most {_MAX_NAMES} names"
            for name in value:
                if not FIELD_NAME.fullmatch(name):
                    return f"[provider] {key}: {name[:64]!r} is not a field name (letters, digits, _ . : -)"
                if name in MESSAGE_FIELDS:
                    return (f"[provider] {key} may not name {name!r}: it is a field of the message itself "
                            f"({', '.join(sorted(MESSAGE_FIELDS))})")
    return None


def profile_for(base_url: str) -> Profile:
    """The built-in profile of the server at `base_url` (by host); `Profile()` for any other. The profile a
    client uses, with the config's and learned layers, is `wire.profile.build_profile`'s."""
    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        host = ""
    return next((p for p in PROFILES if host in p.hosts), Profile())


# Chat-template tokens served models leak into function names (`wire.names`): gpt-oss / Harmony
# `<|channel|>`, `<|constrain|>`; the `functions.` namespace of Kimi K2 and Harmony.
LEAKED_TOKEN = "<|"
TOOL_NAMESPACE = "functions."


def _rules(op: str, *targets: str, value: Any = None) -> tuple[dict[str, Any], ...]:
    return tuple({"op": op, "target": t, "value": value} for t in targets or ("",))


_MAX_COMPLETION = _rules("rename_param", "max_tokens", value="max_completion_tokens")
KNOWN_REQUEST_RULES: tuple[tuple[str, str, tuple[dict[str, Any], ...]], ...] = (
    # Gemini's OpenAI-compatible endpoint: 400 'Unknown name "additionalProperties" … Cannot find field' and
    # the like for these keywords (Laisky/one-api#60, openswarm-ai/openswarm#24)
    ("generativelanguage.googleapis.com", "", _rules("drop_schema_keyword", "$schema", "additionalProperties",
                                                     "exclusiveMinimum", "exclusiveMaximum", "propertyNames")),
    # Moonshot: no keyword beside a $ref, no type beside anyOf (MoonshotAI/kimi-cli#2061, #2531)
    ("moonshot.cn", "", (*_rules("inline_schema_refs"), *_rules("schema_type_into_branches"))),
    ("moonshot.ai", "", (*_rules("inline_schema_refs"), *_rules("schema_type_into_branches"))),
    # Ollama's OpenAI endpoint (its usual port): "invalid message content type: <nil>" (pydantic/pydantic-ai#5206)
    (":11434", "", _rules("assistant_tool_content", value="")),
    # OpenAI's reasoning and GPT-5 models: "Use 'max_completion_tokens' instead." (teilomillet/gollm#33)
    ("api.openai.com", "o1", _MAX_COMPLETION),
    ("api.openai.com", "o3", _MAX_COMPLETION),
    ("api.openai.com", "o4", _MAX_COMPLETION),
    ("api.openai.com", "gpt-5", _MAX_COMPLETION),
)
"""Request rules (`wire.rules.Rule`, in `wire.facts` form) applied before the first request: (host, or
`:PORT` for a local server's usual port; model-name prefix, "" for any; the rules)."""
