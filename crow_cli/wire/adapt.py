"""What to change in a request the server refused, read from its error (pure: no I/O, no state).

`change_for(status, error_text, body)` maps a 400/422 whose message names a part of the request to a
`Change`: the rules that make exactly that part acceptable, or None when the message names nothing
crow can change. Every rule is one small frozen class (a `Rule` subclass) with `apply(request)` and
`describe()`, stored as `{"op", "target", "value"}` (`to_json`, `rule_from_json`): the same classes hold
the rules known in advance, configured and learned (`wire.profile` layers them). `apply_rules(body, rules)`
gives the body as it is sent with those rules (a new object: the history and the caller's body are never
changed). The client (`wire.client`) sends the request once more with the change, says so with a
`Notice(code="request_adapted")` (message fields: `"reasoning_echo"`) naming the rule classes, keeps applying it
to every later request and remembers it per base URL + model (`wire.facts`, key `request_rules`), unless it fits
that request only (`Change.once`).

Kinds, each from what real servers answer (sources beside each pattern and in tests/wire/test_adapt.py):
- tool-schema keywords (`DropSchemaKeyword`), local `$ref`s (`InlineSchemaRefs`), a `type` beside
  `anyOf`/`oneOf` (`SchemaTypeIntoBranches`), object schemas without properties (`SchemaEmptyObject`);
- request parameters: dropped (`DropParam`), set to the value the server names (`SetParam`), renamed
  to the one it names instead (`RenameParam`); several named at once are all changed at once;
- sizes: `max_tokens` / `max_completion_tokens` above the most the server allows lowered to what it names
  (`CapParam`; for one request only when that is the room the prompt leaves, `Change.once`), tool results
  longer than the server's string limit cut to fit, with the marker of any cut output (`CutToolResult`);
- tool names a server's rule refuses (`RenameTools`, mapped back by the client when called);
- message shapes: `content` of assistant messages with tool calls null ↔ `""`
  (`AssistantToolContent`), a blank tool result given a placeholder (`ToolResultPlaceholder`), thinking
  parts of assistant content refused: the content sent as its text (`AssistantContentText`), a system role
  refused: folded into the first user message (`FoldRole`);
- message fields (`FieldRule`s, applied by `wire.outgoing` as it copies the history, knowing who wrote each
  message): a field refused (`DropField`) or a reasoning field demanded (`RequireField`), the function `name`
  on tool messages (`ToolMessageName`), tool-call ids another model wrote in a shape the reader refuses
  (`MapToolCallIds`); stored as the facts `refused_fields`, `required_fields`, `tool_message_name`,
  `tool_call_id_rule` (`field_rules`, `field_facts`).
Rules of a provider known in advance (its host or model family) are `known_rules`, from the data in
`wire.profiles.KNOWN_REQUEST_RULES`: the built-in layer of `wire.profile.build_profile`.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ..history import thinking_of
from ..text import short_text, truncate_output
from . import schema as schemas
from .names import WIRE_NAME, ToolNames
from .profiles import KNOWN_REQUEST_RULES, MESSAGE_FIELDS, REASONING_FIELDS, REQUEST_CORE
from .refusal import (
    ASKS_CHANGE,
    WORD,
    field_demanded,
    field_refused,
    message_of,
    names,
    names_exactly,
    param_of,
    reason,
    value_refused,
)
from .refusal import words as refusal_words

__all__ = ["CUT_MARGIN", "MIN_ROOM", "NAME_RULES", "NO_OUTPUT", "OUTPUT_CAPS", "RULES", "SIZED_OPS",
           "AssistantContentText", "AssistantToolContent", "CapParam", "Change", "CutToolResult", "DropParam",
           "DropSchemaKeyword", "FoldRole", "InlineSchemaRefs", "RenameParam", "RenameTools", "Rule",
           "SchemaEmptyObject", "SchemaTypeIntoBranches", "SetParam", "ToolContentBesideReasoning",
           "ToolResultPlaceholder", "apply_rules",
           "change_for", "is_size", "known_rules", "name_rule", "rule_from_json", "rules_from_json", "tool_names",
           "tool_renames", "value_refused"]

CORE = REQUEST_CORE
"""Body fields no parameter rule touches (the request itself: `profiles.REQUEST_CORE`)."""
NO_OUTPUT = "(no output)"
"""The text a blank tool result is sent as, for servers that refuse an empty one."""
OUTPUT_CAPS = ("max_tokens", "max_completion_tokens")
"""The parameters that cap a reply's tokens, under either name (a `rename_param` rule may turn one into the
other)."""
CUT_MARGIN = 200
"""Characters kept free below a server's string limit for the cut marker (`text.truncate_output`)."""
_KEEP_KEYWORDS = frozenset({"type", "properties"})
"""Keywords never dropped on a server's word: without them the schema says nothing."""


class Rule:
    """One change to every request: a small class per kind, the same for rules known in advance, configured
    and learned. A rule is a frozen value (compared and hashed by kind and fields); `op` names its kind in the
    stored form `{"op": …, "target": …, "value": …}` (`to_json`, `rule_from_json`).

    Subclasses set `op`, hold `target` (a parameter, keyword or role name) and/or `value` (the value set, the
    new name, the content used, a size) and implement `apply` and `describe`.
    """

    op: ClassVar[str] = ""
    sized: ClassVar[bool] = False
    """Whether `value` is a size (`is_size`): a stored rule with any other value is left out."""
    target: str = ""
    value: Any = None

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        """`request` (a Chat Completions body) as sent under this rule: a new dict where anything changed
        (only what changes is copied), `request` itself when the rule does not apply to it."""
        raise NotImplementedError

    def describe(self, before: Any = None) -> str:
        """What the rule does, in words for a notice ("dropped parameter seed"); `before`: the value the
        rule's target had in the refused request, where the words name it (`CapParam`)."""
        raise NotImplementedError

    def valid(self) -> bool:
        """Whether the rule's fields are of a kind it can apply (a rule read back that is not: left out)."""
        return True

    def to_json(self) -> dict[str, Any]:
        """The rule as stored in the learned facts (`wire.facts`, `request_rules`)."""
        return {"op": self.op, "target": self.target, "value": self.value}


def _with(request: dict[str, Any], key: str, old: list[Any], new: list[Any]) -> dict[str, Any]:
    """`request` with `new` as its `key` list, or `request` itself when every item of `new` is the one of `old`."""
    if len(new) == len(old) and all(map(operator.is_, new, old)):
        return request
    return {**request, key: new}


def _param_present(request: dict[str, Any], name: str) -> bool:
    return name not in CORE and name in request


@dataclass(frozen=True)
class DropParam(Rule):
    """Drop the request parameter `target` (vLLM "Extra inputs are not permitted", OpenAI "Unrecognized
    request argument supplied")."""

    op: ClassVar[str] = "drop_param"
    target: str

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target):
            return request
        return {k: v for k, v in request.items() if k != self.target}

    def describe(self, before: Any = None) -> str:
        return f"dropped parameter {self.target}"


@dataclass(frozen=True)
class SetParam(Rule):
    """Set the parameter `target`, where the request has it, to `value` (OpenAI "Only the default (1) value is
    supported")."""

    op: ClassVar[str] = "set_param"
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target):
            return request
        return {**request, self.target: self.value}

    def describe(self, before: Any = None) -> str:
        return f"set parameter {self.target} to {json.dumps(self.value)}"


@dataclass(frozen=True)
class RenameParam(Rule):
    """Send the parameter `target` under the name `value` (OpenAI "Use 'max_completion_tokens' instead"); its
    place in the body is kept."""

    op: ClassVar[str] = "rename_param"
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target) or not isinstance(self.value, str) or self.value in CORE:
            return request
        return {(self.value if k == self.target else k): v for k, v in request.items()}

    def describe(self, before: Any = None) -> str:
        return f"renamed parameter {self.target} to {self.value}"


@dataclass(frozen=True)
class CapParam(Rule):
    """Lower the integer parameter `target` to `value` where it is above it; a reply cap (`OUTPUT_CAPS`) is
    capped under either name (OpenAI "supports at most 16384 completion tokens")."""

    op: ClassVar[str] = "cap_param"
    sized: ClassVar[bool] = True
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not is_size(self.value):
            return request
        out = request
        for name in OUTPUT_CAPS if self.target in OUTPUT_CAPS else (self.target,):
            if name not in CORE and type(out.get(name)) is int and out[name] > self.value:
                out = {**out, name: self.value}
        return out

    def describe(self, before: Any = None) -> str:
        was = f" from {before}" if type(before) is int else ""
        return f"lowered parameter {self.target}{was} to {self.value}"


@dataclass(frozen=True)
class _SchemaRule(Rule):
    """A rule that rewrites the `parameters` schema of every offered tool (`wire.schema`)."""

    def rewrite(self, parameters: dict[str, Any]) -> Any:
        """One tool's `parameters` as sent under this rule."""
        raise NotImplementedError

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        tools = request.get("tools")
        if not isinstance(tools, list):
            return request
        return _with(request, "tools", tools, _map_schemas(tools, self.rewrite))


@dataclass(frozen=True)
class DropSchemaKeyword(_SchemaRule):
    """Drop the JSON-schema keyword `target` from tool parameters (Gemini 'Unknown name "additionalProperties"
    … Cannot find field')."""

    op: ClassVar[str] = "drop_schema_keyword"
    target: str

    def rewrite(self, parameters: dict[str, Any]) -> Any:
        return schemas.drop_keywords(parameters, [self.target])

    def describe(self, before: Any = None) -> str:
        return f"dropped the schema keyword {self.target} from tool parameters"


@dataclass(frozen=True)
class InlineSchemaRefs(_SchemaRule):
    """Inline the local `$ref`s of tool parameters, without `$defs` (Moonshot "conflicting keywords found after
    $ref expansion")."""

    op: ClassVar[str] = "inline_schema_refs"

    def rewrite(self, parameters: dict[str, Any]) -> Any:
        return schemas.inline_refs(parameters)

    def describe(self, before: Any = None) -> str:
        return "inlined the $refs of tool parameters (no $defs)"


@dataclass(frozen=True)
class SchemaTypeIntoBranches(_SchemaRule):
    """Move a `type` beside `anyOf`/`oneOf` into their branches (Moonshot "when using anyOf, type should be
    defined in anyOf items")."""

    op: ClassVar[str] = "schema_type_into_branches"

    def rewrite(self, parameters: dict[str, Any]) -> Any:
        return schemas.type_into_branches(parameters)

    def describe(self, before: Any = None) -> str:
        return "moved the type beside anyOf/oneOf into their branches"


@dataclass(frozen=True)
class SchemaEmptyObject(_SchemaRule):
    """Object schemas without properties: `value` "drop" drops an empty `properties` (Gemini "should be
    non-empty for OBJECT type"), anything else gives a missing one `{}` (OpenAI "object schema missing
    properties")."""

    op: ClassVar[str] = "schema_empty_object"
    value: Any

    def rewrite(self, parameters: dict[str, Any]) -> Any:
        return schemas.drop_empty_objects(parameters) if self.value == "drop" \
            else schemas.fill_missing_properties(parameters)

    def describe(self, before: Any = None) -> str:
        return ("dropped empty properties of object schemas" if self.value == "drop"
                else "gave object schemas without properties an empty properties object")


@dataclass(frozen=True)
class _MessageRule(Rule):
    """A message-shape rule: changes each message it applies to, one at a time."""

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        """One message as sent under this rule (itself when unchanged)."""
        raise NotImplementedError

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return request
        return _with(request, "messages", messages, [self.message(m) if isinstance(m, dict) else m for m in messages])


@dataclass(frozen=True)
class AssistantToolContent(_MessageRule):
    """Send the blank `content` of assistant messages with tool calls as `value` (`""` for Ollama's "invalid
    message content type: <nil>", None for Anthropic-compatible "text content blocks must be non-empty")."""

    op: ClassVar[str] = "assistant_tool_content"
    value: Any

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and message.get("tool_calls") and _blank(message.get("content")) \
                and message.get("content") != self.value:
            return {**message, "content": self.value}
        return message

    def describe(self, before: Any = None) -> str:
        return f"sent content {json.dumps(self.value)} on assistant messages with tool calls"


@dataclass(frozen=True)
class ToolContentBesideReasoning(_MessageRule):
    """Send `content` as null on assistant messages with tool calls that carry reasoning text: gpt-oss's chat
    template on llama.cpp takes one or the other ("Cannot pass both content and thinking in an assistant
    message with tool calls!", a 500: openclaw/openclaw#6514)."""

    op: ClassVar[str] = "tool_content_beside_reasoning"

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and message.get("tool_calls") and not _blank(message.get("content")) \
                and any(isinstance(message.get(f), str) and message[f].strip() for f in REASONING_FIELDS):
            return {**message, "content": None}
        return message

    def describe(self, before: Any = None) -> str:
        return "sent content null on assistant messages with tool calls that carry reasoning"


@dataclass(frozen=True)
class ToolResultPlaceholder(_MessageRule):
    """Send blank tool results as `value` (`NO_OUTPUT`) (Anthropic-compatible "text content blocks must be
    non-empty")."""

    op: ClassVar[str] = "tool_result_placeholder"
    value: Any

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "tool" and _blank(message.get("content")):
            return {**message, "content": self.value}
        return message

    def describe(self, before: Any = None) -> str:
        return f"sent blank tool results as {json.dumps(self.value)}"


@dataclass(frozen=True)
class AssistantContentText(_MessageRule):
    """Send assistant content with thinking parts as its text (vLLM "Input should be 'text' or 'refusal'")."""

    op: ClassVar[str] = "assistant_content_text"

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and _has_thinking(message.get("content")):
            text = _text_of([p for p in message["content"] if thinking_of(p) is None])
            return {**message, "content": text or (None if message.get("tool_calls") else "")}
        return message

    def describe(self, before: Any = None) -> str:
        return "sent the content of assistant messages as text, without its thinking parts"


@dataclass(frozen=True)
class CutToolResult(_MessageRule):
    """Cut tool results longer than `value` characters to fit, with the marker of cut output (OpenAI "string too
    long. Expected a string with maximum length N")."""

    op: ClassVar[str] = "cut_tool_result"
    sized: ClassVar[bool] = True
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        return super().apply(request) if is_size(self.value) else request

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        return _cut_tool_result(message, self.value)  # type: ignore[no-any-return]

    def describe(self, before: Any = None) -> str:
        return (f"cut tool results longer than {self.value} characters to fit (the server's limit; "
                "the session keeps them whole)")


@dataclass(frozen=True)
class FoldRole(Rule):
    """Send the messages of role `target` (system, developer) as part of the first user message (a chat template
    that takes no system role: "System role not supported")."""

    op: ClassVar[str] = "fold_role"
    target: str

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return request
        return _with(request, "messages", messages, _fold_role(messages, self.target))

    def describe(self, before: Any = None) -> str:
        return f"sent {self.target} messages as part of the first user message"


@dataclass(frozen=True)
class RenameTools(Rule):
    """Rename offered tools whose names break the name rule `value` (a key of `NAME_RULES`), in the tools and in
    the history's calls (`tool_renames`); the client maps the names back when they are called."""

    op: ClassVar[str] = "rename_tools"
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(request.get("tools"), list):
            return request
        names = tool_renames(request, self)
        if not names:
            return request
        out = {**request, "tools": [_renamed_tool(t, names) for t in request["tools"]]}
        if isinstance(out.get("messages"), list):
            out["messages"] = [_renamed_calls(m, names) for m in out["messages"]]
        return out

    def describe(self, before: Any = None) -> str:
        return f"renamed tools whose names do not match {NAME_RULES[name_rule(self.value)].pattern} " \
               "(mapped back when called)"


# ---- message fields ---------------------------------------------------------------------------------

MESSAGE_CORE = frozenset(("role", "content", "tool_calls", "tool_call_id"))
"""Message keys no field rule drops: without them there is no message."""
CALL_CORE = frozenset(("id", "type", "function"))
"""Tool-call keys no field rule drops."""
FUNCTION_CORE = frozenset(("name", "arguments"))
"""Keys of a tool call's function no field rule drops."""


@dataclass(frozen=True)
class FieldRule(_MessageRule):
    """A rule on the fields of messages: a field dropped (`DropField`) or required (`RequireField`), the function
    `name` on tool messages (`ToolMessageName`), tool-call ids in the reader's shape (`MapToolCallIds`).

    Their stored form is the facts of the message policy (`refused_fields`, `required_fields`,
    `tool_message_name`, `tool_call_id_rule`: `field_facts`, `field_rules`), which earlier versions wrote too.
    The client hands them to `wire.outgoing.Outgoing`, which applies them as it makes the outgoing copy of the
    history, message by message and once per message, knowing who wrote each (the stored session keeps the
    originals); `apply` gives the same change to a request on its own. `slot` names what a rule decides: a later
    rule of the same slot replaces an earlier one (a field demanded after it was refused).
    """

    @property
    def slot(self) -> str:
        """What the rule decides; two rules of one slot contradict each other."""
        return self.op

    def asked(self) -> str:
        """What the server asked for, in words for a notice ("refuses reasoning_content in messages")."""
        raise NotImplementedError


@dataclass(frozen=True)
class DropField(FieldRule):
    """Drop the field `target` from every message, tool call and function (Mistral/pydantic `extra_forbidden`,
    Gemini 'Unknown name "x"', strict gateways refusing `reasoning_details`); core keys are never dropped."""

    op: ClassVar[str] = "drop_field"
    target: str

    def valid(self) -> bool:
        return bool(self.target)

    @property
    def slot(self) -> str:
        return f"field {self.target}"

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        key = self.target
        out = {k: v for k, v in message.items() if k != key} if key in message and key not in MESSAGE_CORE \
            else message
        calls = out.get("tool_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) and _call_has(c, key) for c in calls):
            out = {**out, "tool_calls": [_call_without(c, key) if isinstance(c, dict) else c for c in calls]}
        return out

    def describe(self, before: Any = None) -> str:
        return f"dropped {self.target} from every message and tool call"

    def asked(self) -> str:
        return f"refuses {self.target} in {'tool messages' if self.target == 'name' else 'messages'}"


def _call_has(call: dict[str, Any], key: str) -> bool:
    fn = call.get("function")
    return (key in call and key not in CALL_CORE) or (isinstance(fn, dict) and key in fn and key not in FUNCTION_CORE)


def _call_without(call: dict[str, Any], key: str) -> dict[str, Any]:
    """A tool call without the field `key` (itself when it has none)."""
    if not _call_has(call, key):
        return call
    out = {k: v for k, v in call.items() if k in CALL_CORE or k != key}
    fn = out.get("function")
    if isinstance(fn, dict) and key in fn and key not in FUNCTION_CORE:
        out["function"] = {k: v for k, v in fn.items() if k != key}
    return out


@dataclass(frozen=True)
class RequireField(FieldRule):
    """Send the reasoning field `target` on every assistant message: its text under another reasoning name, else
    `""` (DeepSeek thinking mode "The reasoning_content in the thinking mode must be passed back to the API")."""

    op: ClassVar[str] = "require_field"
    target: str

    def valid(self) -> bool:
        return bool(self.target) and self.target not in MESSAGE_FIELDS

    @property
    def slot(self) -> str:
        return f"field {self.target}"

    def text(self, message: dict[str, Any], fields: Iterable[str] = REASONING_FIELDS) -> Any:
        """What the field is sent as on `message`: its first reasoning text among `fields`, else `""`."""
        return next((message[k] for k in fields if isinstance(message.get(k), str)), "")

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") != "assistant" or self.target in message:
            return message
        return {**message, self.target: self.text(message)}

    def describe(self, before: Any = None) -> str:
        return f"sent {self.target} on every assistant message"

    def asked(self) -> str:
        return f"requires {self.target} on assistant messages"


@dataclass(frozen=True)
class ToolMessageName(FieldRule):
    """`value` True: tool messages carry the function `name` of the call they answer (Gemini's OpenAI-compatible
    endpoint: "function_response.name: Name cannot be empty"); False: never (a server that refuses it)."""

    op: ClassVar[str] = "tool_message_name"
    value: Any

    def valid(self) -> bool:
        return isinstance(self.value, bool)

    def named(self, message: dict[str, Any], call_name: str | None) -> dict[str, Any]:
        """A tool message as sent under this rule, `call_name` the name of the call it answers."""
        if self.value is True and "name" not in message and call_name:
            return {**message, "name": call_name}
        if self.value is False and "name" in message:
            return {k: v for k, v in message.items() if k != "name"}
        return message

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list) or not isinstance(self.value, bool):
            return request
        out, calls, answered = [], [], 0
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                calls, answered = [c for c in message.get("tool_calls") or () if isinstance(c, dict)], 0
            elif isinstance(message, dict) and message.get("role") == "tool":
                call = calls[answered] if answered < len(calls) else {}
                fn = call.get("function")
                name = fn.get("name") if isinstance(fn, dict) else None
                message = self.named(message, name if isinstance(name, str) else None)
                answered += 1
            out.append(message)
        return _with(request, "messages", messages, out)

    def describe(self, before: Any = None) -> str:
        return "sent the function name on tool messages" if self.value else \
            "sent tool messages without the function name"

    def asked(self) -> str:
        return "requires the function name on tool messages" if self.value else \
            "refuses the function name on tool messages"


ID_CHARS = {"alnum_dash": re.compile(r"[A-Za-z0-9_-]+"), "alnum": re.compile(r"[A-Za-z0-9]+")}
"""The tool-call id shapes a `MapToolCallIds` rule may name (fixed patterns: no pattern from a server is compiled)."""
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class MapToolCallIds(FieldRule):
    """Send tool-call ids of a shape the reader refuses as ids of its shape: `target` the characters (a key of
    `ID_CHARS`), `value` the length (None: any up to 64), the same in an assistant message's calls and in the tool
    messages answering them (Anthropic-compatible "tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
    Mistral "must be a-z, A-Z, 0-9, with a length of 9"). A mapped id derives from a hash of the original, so
    every request sends the same one. `Outgoing` maps only ids another model wrote; `apply` maps every id that
    does not fit."""

    op: ClassVar[str] = "map_tool_call_ids"
    target: str
    value: Any = None

    def valid(self) -> bool:
        """Whether the rule names a known shape (`ID_CHARS`) and a length of 1 to 64 or None."""
        return self.target in ID_CHARS and (self.value is None or (type(self.value) is int and 0 < self.value <= 64))

    def fits(self, call_id: str) -> bool:
        """Whether `call_id` is of the shape (so it is sent as it is)."""
        return not self.valid() or (ID_CHARS[self.target].fullmatch(call_id) is not None and len(call_id) <= 64
                                    and (self.value is None or len(call_id) == self.value))

    def mapped(self, call_id: str) -> str:
        """The id `call_id` is sent as: from its SHA-256, in base 62 (the same every time)."""
        number = int.from_bytes(hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).digest(), "big")
        digits = []
        while number:
            number, rest = divmod(number, 62)
            digits.append(_BASE62[rest])
        text = "".join(digits)
        return text[:self.value] if self.value is not None else f"call_{text[:24]}"

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list) or not self.valid():
            return request
        ids: dict[str, str] = {}
        out = []
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "assistant" \
                    and isinstance(message.get("tool_calls"), list):
                calls = [{**c, "id": ids.setdefault(c["id"], self.mapped(c["id"]))} if isinstance(c, dict)
                         and isinstance(c.get("id"), str) and not self.fits(c["id"]) else c
                         for c in message["tool_calls"]]
                message = _with(message, "tool_calls", message["tool_calls"], calls)
            elif isinstance(message, dict) and message.get("role") == "tool" and message.get("tool_call_id") in ids:
                message = {**message, "tool_call_id": ids[message["tool_call_id"]]}
            out.append(message)
        return _with(request, "messages", messages, out)

    def describe(self, before: Any = None) -> str:
        shape = ID_CHARS[self.target].pattern if self.target in ID_CHARS else self.target
        length = f" of length {self.value}" if self.value is not None else ""
        return f"sent tool-call ids other models wrote as ids matching {shape}{length} (in the request only)"

    def asked(self) -> str:
        return "refuses tool-call ids another model wrote"


FIELD_RULES: tuple[type[FieldRule], ...] = (DropField, RequireField, ToolMessageName, MapToolCallIds)
"""The kinds of message-field rule (held by `wire.outgoing.Outgoing`, stored as facts: `field_facts`)."""


def field_rules(facts: Mapping[str, Any]) -> list[FieldRule]:
    """The field rules stored facts stand for (`refused_fields`, `required_fields`, `tool_message_name`,
    `tool_call_id_rule` of `wire.facts` or `ServerProfile.message_facts`); damaged entries are left out."""
    rules: list[FieldRule] = [DropField(f) for f in facts.get("refused_fields") or () if isinstance(f, str)]
    rules += [RequireField(f) for f in facts.get("required_fields") or () if isinstance(f, str)]
    if isinstance(facts.get("tool_message_name"), bool):
        rules.append(ToolMessageName(facts["tool_message_name"]))
    shape = facts.get("tool_call_id_rule")
    if isinstance(shape, Mapping) and isinstance(shape.get("chars"), str) \
            and (ids := MapToolCallIds(shape["chars"], shape.get("length"))).valid():
        rules.append(ids)
    return rules


def field_facts(rules: Iterable[Rule]) -> dict[str, Any]:
    """The facts field rules are stored as (`field_rules` reads them back): `refused_fields` and `required_fields`
    always, `tool_message_name` and `tool_call_id_rule` where a rule decides them."""
    rules = list(rules)
    facts: dict[str, Any] = {"refused_fields": [r.target for r in rules if isinstance(r, DropField)],
                             "required_fields": [r.target for r in rules if isinstance(r, RequireField)]}
    for rule in rules:
        if isinstance(rule, ToolMessageName):
            facts["tool_message_name"] = rule.value
        elif isinstance(rule, MapToolCallIds):
            facts["tool_call_id_rule"] = {"chars": rule.target, "length": rule.value}
    return facts


_REQUEST_KINDS: tuple[type[Rule], ...] = (
    DropParam, SetParam, RenameParam, CapParam, DropSchemaKeyword, InlineSchemaRefs, SchemaTypeIntoBranches,
    SchemaEmptyObject, AssistantToolContent, ToolContentBesideReasoning, ToolResultPlaceholder, AssistantContentText,
    CutToolResult, FoldRole, RenameTools)
RULES: dict[str, type[Rule]] = {cls.op: cls for cls in (*_REQUEST_KINDS, *FIELD_RULES)}
"""Every kind of request rule, by its stored `op` (the message-field rules included: `FIELD_RULES`)."""
SIZED_OPS = frozenset(op for op, cls in RULES.items() if cls.sized)
"""Ops whose value is a size: a positive int below 2**31, else the stored rule is left out."""


def rule_from_json(item: Any) -> Rule | None:
    """The rule a stored `{"op", "target", "value"}` object stands for; None for an unknown op, a target that is
    no string, a sized rule without a size, or anything else damaged."""
    if not isinstance(item, dict) or not isinstance(item.get("target", ""), str):
        return None
    cls = RULES.get(item["op"]) if isinstance(item.get("op"), str) else None
    if cls is None or (cls.sized and not is_size(item.get("value"))):
        return None
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    args = {k: v for k, v in (("target", item.get("target", "")), ("value", item.get("value"))) if k in names}
    rule = cls(**args)
    return rule if rule.valid() else None


def rules_from_json(items: Any) -> list[Rule]:
    """The rules of a stored list (unknown or damaged entries are left out)."""
    found = (rule_from_json(item) for item in (items if isinstance(items, list) else []))
    return [rule for rule in found if rule is not None]


def is_size(value: Any) -> bool:
    """Whether `value` is a size a rule may hold: an int (no bool) in 1 .. 2**31 - 1."""
    return type(value) is int and 0 < value < 1 << 31


@dataclass(frozen=True)
class Change:
    """What to change in a refused request: its rules, the server's words that asked for it, and whether
    the change holds for this request only (`once`: the room the prompt leaves, which the next prompt
    changes) rather than every later one."""

    rules: tuple[Rule, ...]
    why: str
    """The server's reason, as plain words (`refusal.reason`)."""
    once: bool = False
    learned: bool = True
    """False: the change holds for the client's life and is never remembered (`adapt_requests = false`)."""

    @property
    def fields(self) -> bool:
        """Whether the change is to the message policy (its rules are `FieldRule`s, held by `wire.outgoing`)."""
        return all(isinstance(rule, FieldRule) for rule in self.rules)

    def describe(self, body: dict[str, Any] | None = None) -> str:
        """ "dropped parameter seed; set parameter temperature to 1"; with the refused `body`, a lowered
        parameter names the value it had."""
        return "; ".join(rule.describe((body or {}).get(rule.target)) for rule in self.rules)

    def kinds(self) -> str:
        """The rule classes of the change, for a notice: "DropParam, SetParam"."""
        return ", ".join(dict.fromkeys(type(rule).__name__ for rule in self.rules))


# ---- applying rules -------------------------------------------------------------------------------


def apply_rules(body: dict[str, Any], rules: Iterable[Rule]) -> dict[str, Any]:
    """`body` as sent under `rules`, in order. Only what a rule changes is copied; `body` is untouched."""
    out = body
    for rule in rules:
        out = rule.apply(out)
    return out if out is not body else dict(body)


NAME_RULES: dict[str, re.Pattern[str]] = {
    "letter_first": re.compile("[A-Za-z_][A-Za-z0-9_-]{0,63}"),
    "strict": WIRE_NAME,
    "word": re.compile("[A-Za-z0-9_]{1,64}"),
}
"""The tool-name rules a `rename_tools` rule may name (its `value`): a server's pattern is never compiled, it only
chooses one of these. letter_first: Gemini's "Must start with a letter or an underscore" (Moonshot refuses a digit
first); strict: OpenAI/Anthropic `^[a-zA-Z0-9_-]{1,64}$`; word: `^[a-zA-Z0-9_]+$` (no dash)."""
_LEGACY_NAME_RULES = {"[A-Za-z_][A-Za-z0-9_-]{0,63}": "letter_first", "[a-zA-Z0-9_-]{1,64}": "strict",
                      "[a-zA-Z0-9_-]+": "strict", "[a-zA-Z0-9_]+": "word", "[a-zA-Z0-9_]{1,64}": "word"}
"""Patterns earlier versions stored as the rule's value, read as the known rule they are."""


def name_rule(value: Any) -> str:
    """The known name rule (a key of `NAME_RULES`) a stored or chosen `rename_tools` value stands for: a key as
    is, a pattern earlier versions stored as its rule, anything else "strict" (never compiled)."""
    if isinstance(value, str) and value in NAME_RULES:
        return value
    return _LEGACY_NAME_RULES.get(value, "strict") if isinstance(value, str) else "letter_first"


def _name_rule_of(pattern: str, text: str) -> str:
    """The known rule closest to a server's quoted name `pattern` (only looked at, at most 100 characters)."""
    pattern = pattern[:100]
    if re.search(r"start with a letter", text, re.IGNORECASE) or re.match(r"\[(a-zA-Z|A-Za-z)_?\]", pattern):
        return "letter_first"
    if pattern.startswith("[") and "-" not in pattern.replace("a-z", "").replace("A-Z", "").replace("0-9", ""):
        return "word"
    return "strict"


def tool_names(body: dict[str, Any], rule: Rule) -> ToolNames:
    """The tool names of `body` and the names a `rename_tools` rule sends them under, both ways: each name its
    known name rule (`NAME_RULES`) refuses made to match it (`wire.names.wire_name`) and unique."""
    names = [t["function"]["name"] for t in body.get("tools") or [] if isinstance(t, dict)
             and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)]
    return ToolNames(names, NAME_RULES[name_rule(rule.value)])


def tool_renames(body: dict[str, Any], rule: Rule) -> dict[str, str]:
    """The tool names of `body` a `rename_tools` rule changes: name -> the name sent (`tool_names`)."""
    return tool_names(body, rule).renamed


def _renamed_tool(tool: Any, names: dict[str, str]) -> Any:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(fn, dict) and fn.get("name") in names:
        return {**tool, "function": {**fn, "name": names[fn["name"]]}}
    return tool


def _renamed_calls(message: Any, names: dict[str, str]) -> Any:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list) or not any(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                              and c["function"].get("name") in names for c in calls):
        return message
    return {**message, "tool_calls": [_renamed_tool(c, names) for c in calls]}


def _map_schemas(tools: list[Any], rewrite: Callable[[dict[str, Any]], Any]) -> list[Any]:
    out = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("parameters"), dict):
            new = rewrite(fn["parameters"])
            if new != fn["parameters"]:
                tool = {**tool, "function": {**fn, "parameters": new}}
        out.append(tool)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _fold_role(messages: list[Any], role: str) -> list[Any]:
    """`messages` without those of `role`, their text put before the first user message's (a template that
    refuses the system role: the instructions still come first); with no user message they become one."""
    folded = [_text_of(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == role]
    if not folded:
        return messages
    rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") == role)]
    prefix = "\n\n".join(t for t in folded if t.strip())
    at = next((i for i, m in enumerate(rest) if isinstance(m, dict) and m.get("role") == "user"), None)
    if at is None:
        return [{"role": "user", "content": prefix}, *rest]
    user = rest[at]
    content = user.get("content")
    if isinstance(content, list):
        new: Any = [{"type": "text", "text": prefix}, *content]
    else:
        new = f"{prefix}\n\n{content}" if isinstance(content, str) and content else prefix
    return [*rest[:at], {**user, "content": new}, *rest[at + 1:]]


def _cut(text: Any, limit: int) -> Any:
    """`text` (a string longer than `limit`) cut with the marker of cut output so that all of it fits."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return truncate_output(text, limit - CUT_MARGIN if limit > 2 * CUT_MARGIN else limit // 2)


def _cut_tool_result(message: Any, limit: int) -> Any:
    """A tool message whose content (a string, or the text of one of its parts) is longer than `limit`, cut."""
    if not isinstance(message, dict) or message.get("role") != "tool":
        return message
    content = message.get("content")
    if isinstance(content, str) and len(content) > limit:
        return {**message, "content": _cut(content, limit)}
    if isinstance(content, list) and any(isinstance(p, dict) and isinstance(p.get("text"), str)
                                         and len(p["text"]) > limit for p in content):
        return {**message, "content": [{**p, "text": _cut(p["text"], limit)} if isinstance(p, dict)
                                       and isinstance(p.get("text"), str) else p for p in content]}
    return message


def _blank(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):  # a part other than text (thinking, an image) is content
        return all(isinstance(p, dict) and p.get("type") in ("text", None) and not str(p.get("text") or "").strip()
                   for p in content)
    return content is None


def _has_thinking(content: Any) -> bool:
    return isinstance(content, list) and any(thinking_of(part) is not None for part in content)


# ---- reading a refusal ----------------------------------------------------------------------------

_QUOTED = re.compile(r"""["'`‘’“”]([A-Za-z_$][\w$.-]{0,80})["'`‘’“”]""")


@dataclass(frozen=True)
class FieldPolicy:
    """What a refusal of message fields is read against (`change_for(fields=…)`): `wire.outgoing.Outgoing.policy`.

    Attributes:
        rules: the field rules in force.
        reasoning: every reasoning field name (text and blocks); offered for dropping only when `echo_auto`.
        text_fields: the reader's reasoning text fields (those a refusal may demand).
        echo_auto: `reasoning_echo` is `auto` (else reasoning goes as the user said: never dropped or added).
        foreign_ids: whether messages another model wrote hold call ids a `MapToolCallIds` rule would map; None:
            the reader is unknown, so ids are never mapped.
    """

    rules: tuple[FieldRule, ...] = ()
    reasoning: tuple[str, ...] = ()
    text_fields: tuple[str, ...] = REASONING_FIELDS
    echo_auto: bool = True
    foreign_ids: Callable[[MapToolCallIds], bool] | None = None


def change_for(status: int, text: str, body: dict[str, Any], fields: FieldPolicy | None = None, *,
               adapting: bool = True) -> Change | None:
    """The change a refusal asks for, or None when it names nothing crow can change: the one reading of a refusal.

    Message fields first (with `fields`: a field refused or demanded, tool messages' `name`, tool-call ids of
    other models), then sizes, tool names, schemas, message shapes and parameters.

    Args:
        status: the HTTP status (400 and 422 are read; a 5xx only for a chat template's refusal of the request).
        text: the error body as the server sent it (JSON or plain text).
        body: the request as it was sent (with the rules already in force applied).
        fields: the message policy in force; None: message fields are not changed.
        adapting: False (`adapt_requests = false`): only a refused `stream_options` is read (dropped, as crow's
            own parameter, for the client's life: `Change.learned` is False).

    Returns:
        A `Change` whose rules change `body` (`apply_rules(body, rules) != body`; for field rules: that the
        policy does not hold already), else None.
    """
    if status >= 500 and text and adapting:  # a chat template refusing the request's shape: a refusal to read
        return _template_change(text, body)
    if status not in (400, 422) or not text:
        return None
    if not adapting:
        usage = DropParam("stream_options")
        return Change((usage,), reason(text), learned=False) if "stream_options" in text \
            and usage.apply(body) != body else None
    if fields is not None and (change := _field_change(status, text, body, fields)) is not None:
        return change
    words = refusal_words(text)
    sized = _size_change(words, body)
    if sized is not None:  # a size refusal: lowered or cut, or nothing here (an overflow, a user's own message)
        return Change(sized.rules, reason(text), sized.once) if sized.rules \
            and apply_rules(body, sized.rules) != body else None
    for finder in (_name_change, _schema_change, _message_change, _param_change):
        change = finder(words, body)
        if change is not None and apply_rules(body, change.rules) != body:
            return Change(change.rules, reason(text), change.once)
    named = param_of(text)  # a relay's only word: the `param` of its error object
    if named is not None and named not in CORE and named in body and not re.search(r"\d", message_of(text)):
        return Change((DropParam(named),), reason(text))
    return None


# -- message fields -------------------------------------------------------------------------------------
# Refused: Mistral/pydantic "extra_forbidden" with a `loc` into the messages, strict gateways "Extra inputs are not
#   permitted" for `reasoning_details`, Gemini 'Unknown name "x_vendor"'; demanded: DeepSeek "The
#   reasoning_content in the thinking mode must be passed back to the API.", Gemini "function_response.name: Name
#   cannot be empty." (tests/wire/test_outgoing.py, test_client_reasoning_echo.py).
# Tool-call ids of another model: Anthropic-compatible "messages.1.content.0.tool_use.id: String should match
#   pattern '^[a-zA-Z0-9_-]+$'", Bedrock's toolUseId constraint, Mistral "Tool call id was functions.lookup_order:0
#   but must be a-z, A-Z, 0-9, with a length of 9." (the rule is taken from a fixed set of shapes the words match;
#   no pattern a server sends is compiled).
_ID_CONTEXT = re.compile(r"tool_use\.id|tool_use_id|toolUseId|tool_call_id|tool[ _]?call[ _]?id|tool_calls\[\d+\]\.id|"
                         r"tool_calls\.\d+\.id", re.IGNORECASE)
_ID_ALNUM_DASH = re.compile(r"\[a-zA-Z0-9_-\]|\[a-zA-Z0-9-_\]|\[A-Za-z0-9_-\]|\[a-z0-9A-Z_-\]")
_ID_NINE = re.compile(r"a-z, A-Z, 0-9,? with a length of (\d{1,2})", re.IGNORECASE)


def _id_rule(text: str) -> MapToolCallIds | None:
    """The id shape a refusal of tool-call ids names, or None (`text` is read only up to 4000 characters)."""
    text = text[:4000]
    if not _ID_CONTEXT.search(text.replace('\\"', '"')):
        return None
    if (nine := _ID_NINE.search(text)) is not None:  # Mistral
        return MapToolCallIds("alnum", int(nine.group(1)) if 0 < int(nine.group(1)) <= 64 else None)
    if _ID_ALNUM_DASH.search(text):  # Anthropic-compatible, Bedrock
        return MapToolCallIds("alnum_dash")
    return None


def sent_fields(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every optional key on the messages, their tool calls and functions, in first-seen order."""
    seen: dict[str, None] = {}
    for message in messages:
        seen.update((k, None) for k in message if k not in MESSAGE_CORE)
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                seen.update((k, None) for k in call if k not in CALL_CORE)
                fn = call.get("function")
                if isinstance(fn, Mapping):
                    seen.update((k, None) for k in fn if k not in FUNCTION_CORE)
    return [k for k in seen if k != "role"]


def _field_change(status: int, text: str, body: dict[str, Any], policy: FieldPolicy) -> Change | None:
    """A field of the messages refused (dropped from every message and tool call) or demanded (a reasoning field
    on every assistant message, the function `name` on tool messages), or tool-call ids another model wrote in a
    shape the reader refuses; None when the policy already holds what the refusal asks."""
    sent = [m for m in body.get("messages") or () if isinstance(m, dict)]
    rules = policy.rules
    dropped = [r.target for r in rules if isinstance(r, DropField)]
    required = [r.target for r in rules if isinstance(r, RequireField)]
    tool_name = next((r.value for r in rules if isinstance(r, ToolMessageName)), None)
    why = reason(text)
    if policy.foreign_ids is not None and not any(isinstance(r, MapToolCallIds) for r in rules) \
            and (ids := _id_rule(text)) is not None and policy.foreign_ids(ids) \
            and any(not ids.fits(c.get("id") or "") for m in sent if m.get("role") == "assistant"
                    for c in m.get("tool_calls") or () if isinstance(c, dict)):
        return Change((ids,), why)
    candidates = sent_fields(sent)
    if not policy.echo_auto:  # reasoning goes as the user said
        candidates = [k for k in candidates if k not in policy.reasoning]
    refused = field_refused(status, text, [k for k in candidates if k not in dropped])
    if refused is not None:
        return Change((DropField(refused), *((ToolMessageName(False),) if refused == "name" else ())), why)
    missing: list[str] = []
    if policy.echo_auto:
        # a field refused before (learned, or from another server at this URL) that is now demanded: the fact
        # was wrong, the demand replaces it
        missing += [k for k in policy.text_fields if k not in required
                    and any(k not in m for m in sent if m.get("role") == "assistant")]
    if tool_name is not True and "name" not in dropped and any(
            m.get("role") == "tool" and not m.get("name") for m in sent):
        missing.append("name")
    demanded = field_demanded(status, text, missing)
    if demanded is None:
        return None
    return Change((ToolMessageName(True),) if demanded == "name" else (RequireField(demanded),), why)


def _short(text: str) -> str:

    return short_text(" ".join(text.split()), 200)


# -- sizes ----------------------------------------------------------------------------------------------
# The room the prompt leaves (for this request only: the next prompt is longer), the window and the prompt named:
#   vLLM (`serving_engine.py`, `_validate_input`; OpenAI's own wording before 2024): "This model's maximum context
#   length is 4096 tokens. However, you requested 5000 tokens (1000 in the messages, 4000 in the completion).
#   Please reduce the length of the messages or completion."; newer vLLM: "'max_tokens' or 'max_completion_tokens'
#   is too large: 5000. This model's maximum context length is 4096 tokens and your request has 1000 input tokens
#   (5000 > 4096 - 1000)."
# The model's own limit (learned):
#   OpenAI: "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you
#   provided 100000." (param max_tokens, code invalid_value); DeepSeek: "Invalid max_tokens value, the valid range
#   of max_tokens is [1, 8192]"; Anthropic-compatible: "max_tokens: 200000 > 64000, which is the maximum allowed
#   number of output tokens for claude-sonnet-4-20250514".
# A string over the server's limit: OpenAI "Invalid 'messages[3].content': string too long. Expected a string with
#   maximum length 10485760, but got a string with length 12000000 instead." (param messages[3].content, code
#   string_above_max_length).
# A relay naming only `param: "max_tokens"` (OpenRouter, LiteLLM) falls through to `_param_change`: dropped.
_ROOM_LEFT = (re.compile(r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the "
                         r"messages, \d+ in the completion\)", re.IGNORECASE),
              re.compile(r"is too large: \d+\. This model's maximum context length is (\d+) tokens and your request "
                         r"has (\d+) input tokens", re.IGNORECASE))
_MODEL_CAP = (re.compile(r"supports at most (\d+) completion tokens", re.IGNORECASE),
              re.compile(r"valid range of \w+ is \[\s*\d+\s*,\s*(\d+)\s*\]", re.IGNORECASE),
              re.compile(r"\d+ > (\d+), which is the maximum allowed number of output tokens", re.IGNORECASE))
_STRING_LIMIT = re.compile(r"'?messages\[(\d+)\]\.content(?:\[\d+\]\.text)?'?: string too long\. Expected a string "
                           r"with maximum length (\d+)", re.IGNORECASE)
MIN_ROOM = 256
"""Tokens a reply must have room for before `max_tokens` is lowered to the room left: with less, the refusal is the
context overflow it is (the conversation is compacted)."""


def _output_cap(text: str, body: dict[str, Any]) -> str | None:
    """The reply-cap parameter of `body` a refusal is about (named, else the one the body has)."""
    present = [k for k in OUTPUT_CAPS if type(body.get(k)) is int]
    return next((k for k in present if names(text, k)), present[0] if present else None)


def _size_change(text: str, body: dict[str, Any]) -> Change | None:
    """A refusal of a size: `max_tokens` above the room left or the model's limit (lowered), a tool result above
    the server's string limit (cut); a `Change` without rules for a size refusal crow leaves as it is (too little
    room: a context overflow; a string limit on a message that is no tool result); None for any other."""
    why = _short(text)
    for pattern in _ROOM_LEFT:
        if (found := pattern.search(text)) is not None:
            room, name = int(found.group(1)) - int(found.group(2)), _output_cap(text, body)
            if name is None or room < MIN_ROOM:
                return Change((), why)
            return Change((CapParam(name, room),), why, once=True)
    for pattern in _MODEL_CAP:
        if (found := pattern.search(text)) is not None and (name := _output_cap(text, body)) is not None:
            cap = int(found.group(1))
            return Change((CapParam(name, cap),) if is_size(cap) else (), why)
    if (found := _STRING_LIMIT.search(text)) is not None:
        at, limit, msgs = int(found.group(1)), int(found.group(2)), body.get("messages")
        target = msgs[at] if isinstance(msgs, list) and at < len(msgs) else None
        if is_size(limit) and isinstance(target, dict) and target.get("role") == "tool":
            return Change((CutToolResult(limit),), why)
        return Change((), why)
    return None


# -- tool schemas ---------------------------------------------------------------------------------------
# Gemini (generativelanguage.googleapis.com, also behind one-api / new-api gateways): "Invalid JSON payload
#   received. Unknown name \"additionalProperties\" at 'tools[0].function_declarations[0].parameters': Cannot
#   find field." (Laisky/one-api#60, google/adk-python#1277 "additional_properties", decolua/9router#2309
#   "multipleOf", openswarm-ai/openswarm#24 "$schema", "const", "exclusiveMinimum", "propertyNames").
# Moonshot: "tools.function.parameters is not a valid moonshot flavored json schema, details: <At path
#   'properties.assetRef': conflicting keywords found after $ref expansion: description>" (MoonshotAI/kimi-cli
#   #2061, #1903), "<At path 'root': when using anyOf, type should be defined in anyOf items instead of the
#   parent schema>" (MoonshotAI/kimi-cli#2531), "references must start with #/$de..." (CommandCodeAI#594).
# Gemini: "GenerateContentRequest.tools[0].function_declarations[0].parameters.properties: should be non-empty
#   for OBJECT type" (langchain-ai/langchainjs#7935, BerriAI/litellm#18237).
# OpenAI structured outputs: "Invalid schema for function 'f': In context=('properties', 'x'), 'format' is not
#   permitted." and "... object schema missing properties".

_SCHEMA_CONTEXT = re.compile(r"parameters|function_declarations|schema|tools\[\d+\]|tools\.\d+", re.IGNORECASE)
_REFS = re.compile(r"\$ref|\breferences?\b|\$defs|\bdefinitions\b", re.IGNORECASE)
_BRANCH_TYPE = re.compile(r"(any_?of|one_?of).{0,80}\btype\b|\btype\b.{0,80}(any_?of|one_?of)|"
                          r"(alongside|beside|together with) (any_?of|one_?of)|(any_?of|one_?of).{0,60}only field",
                          re.IGNORECASE | re.S)
_EMPTY_PROPS = re.compile(r"properties\W{0,5}(should|must) (be )?non-?empty|properties.{0,30}(non-?empty|not be empty"
                          r"|cannot be empty|empty)", re.IGNORECASE)
_MISSING_PROPS = re.compile(r"missing properties|properties.{0,20}(is )?(required|missing)", re.IGNORECASE)
_PATH_END = re.compile(r"(?:parameters|properties|items|value|any_of|anyOf)(?:\[\d+\])?((?:\.[\w$]+(?:\[\d+\])?)+)")


def _tool_parameters(body: dict[str, Any]) -> list[Any]:
    tools = body.get("tools")
    return [t["function"].get("parameters") for t in tools if isinstance(t, dict)
            and isinstance(t.get("function"), dict)] if isinstance(tools, list) else []


# -- tool names (what the registry's wire rule, ^[a-zA-Z0-9_-]{1,64}$, does not cover) ------------------------
# Gemini: "GenerateContentRequest.tools[0].function_declarations[18].name: Invalid function name. Must start with
#   a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.) or dashes (-), with a
#   maximum length of 64." (google-gemini/gemini-cli#2966); Moonshot refuses names starting with a digit
#   (MoonshotAI/kimi-cli#2531); OpenAI-style messages quote their pattern ("Expected a string that matches the
#   pattern '^[a-zA-Z0-9_-]+$'", hackers365/xiaozhi-esp32-server-golang#268).
_NAME_CONTEXT = re.compile(r"function[_ ]?name|function\.name|declarations\[\d+\]\.name|custom\.name|tool names?\b|"
                           r"invalid (function|tool) name", re.IGNORECASE)
_PATTERN = re.compile(r"pattern[^'\"`]{0,20}['\"`]\^?([^'\"`]{1,100})")


def _name_change(text: str, body: dict[str, Any]) -> Change | None:
    if not _NAME_CONTEXT.search(text):
        return None
    found = _PATTERN.search(text)
    rule = RenameTools(_name_rule_of(found.group(1) if found else "", text))
    if not tool_renames(body, rule) and rule.value == "strict":
        rule = RenameTools("letter_first")
    return Change((rule,), text) if tool_renames(body, rule) else None


def _schema_change(text: str, body: dict[str, Any]) -> Change | None:
    params = _tool_parameters(body)
    if not params or not _SCHEMA_CONTEXT.search(text):
        return None
    used = set().union(*(schemas.keywords_used(p) for p in params))
    nodes = [n for p in params for n in schemas.schema_nodes(p)]
    why = _short(text)
    if "$ref" in used and _REFS.search(text):
        return Change((InlineSchemaRefs(),), why)
    if _BRANCH_TYPE.search(text) and any("type" in n and any(k in n for k in ("anyOf", "oneOf")) for n in nodes):
        return Change((SchemaTypeIntoBranches(),), why)
    named = _schema_keywords(text, used)
    if named:
        return Change(tuple(DropSchemaKeyword(k) for k in named), why)
    if _EMPTY_PROPS.search(text) and any(n.get("type") == "object" and n.get("properties") == {} for n in nodes):
        return Change((SchemaEmptyObject("drop"),), why)
    if _MISSING_PROPS.search(text) and any(n.get("type") == "object" and "properties" not in n for n in nodes):
        return Change((SchemaEmptyObject("add"),), why)
    return None


_COMBINERS = frozenset({"anyOf", "oneOf", "allOf"})
"""Named in messages about what sits beside them (Moonshot's "when using anyOf, type should be …"): not
dropped on an unquoted mention."""
_KEYWORD_NAMED = (re.compile(r"\bkeywords?\s+[\"'`]?([A-Za-z_$][\w$]*)", re.IGNORECASE),
                  re.compile(r"([A-Za-z_$][\w$]*)[\"'`]?\s+keyword\b", re.IGNORECASE))


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _schema_keywords(text: str, used: set[str]) -> list[str]:
    """The keywords a refusal names that the tool schemas use: quoted names, and the last step of a path
    into a schema (`...parameters.properties.when.const`); snake_case names match camelCase keywords."""
    candidates = [m.group(1) for m in _QUOTED.finditer(text)]
    candidates += [m.group(1).rsplit(".", 1)[-1].split("[", 1)[0] for m in _PATH_END.finditer(text)]
    candidates += [m.group(1) for pattern in _KEYWORD_NAMED for m in pattern.finditer(text)]
    # unquoted names that can only be keywords (camelCase or $-prefixed: additionalProperties, $schema)
    candidates += [k for k in sorted(used) if (k.startswith("$") or k != k.lower()) and k not in _COMBINERS
                   and names_exactly(text, k)]
    if not ASKS_CHANGE.search(text):
        return []
    found: list[str] = []
    for name in candidates:
        for keyword in (name, _camel(name)):
            if keyword in used and keyword not in _KEEP_KEYWORDS and keyword not in found:
                found.append(keyword)
                break
    return found


# -- messages -------------------------------------------------------------------------------------------
# content null beside tool calls, where a string is wanted:
#   Ollama: "invalid message content type: <nil>" (pydantic/pydantic-ai#5206, QwenLM/qwen-code#3350);
#   OpenAI-compatible gateways: "Invalid value for 'content': expected a string, got null." (docker/docker-agent#63,
#   langchain4j/langchain4j#1105); LM Studio: "Invalid 'content': 'content' field must be a string or an array of
#   objects." (lmstudio-ai/lmstudio-bug-tracker#261).
# content "" (or a blank tool result) where something non-empty is wanted:
#   Anthropic-compatible endpoints and Bedrock-backed gateways: "messages: text content blocks must be non-empty"
#   (aliasrobotics/cai#182, anthropics/claude-code#59812, vercel/ai#14612).

_MESSAGE_CONTEXT = re.compile(r"\bcontent\b|messages?\b|\btool\b", re.IGNORECASE)
_WANTS_STRING = re.compile(r"<nil>|got null|\bnull\b|\bNone\b|must be a string|expected a string|"
                           r"invalid type: null|content type", re.IGNORECASE)
# assistant content with Mistral thinking parts, on a server that takes text parts only (a session carried
# to another server): vLLM/pydantic "Input should be 'text' or 'refusal'", OpenAI "Invalid value: 'thinking'.
# Supported values are: 'text' and 'refusal'."; the parts are sent as their text from then on.
_TEXT_PARTS_ONLY = re.compile(r"should be 'text'|supported values are: 'text'|valid string", re.IGNORECASE)
_WANTS_TEXT = re.compile(r"non-?empty|not be empty|cannot be empty|is empty|empty (string|text|content)|blank|"
                         r"too short|at least 1 character|must have (some )?(content|text)", re.IGNORECASE)


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []


# a chat template that takes no system role (Gemma on vLLM, SGLang, llama-cpp-python): 400 "System role not
#   supported" (huggingface/chat-ui#1386, vllm-project/vllm#2964, sgl-project/sglang#892); Mistral's older
#   templates: "Only user and assistant roles are supported!", "Conversation roles must alternate
#   user/assistant/user/assistant/..." (kubeai-project/kubeai#499).
_ROLE_REFUSED = re.compile(r"\b(system|developer)\b.{0,30}\broles?\b.{0,30}(not supported|unsupported|not allowed|"
                           r"invalid|not permitted)|only user and assistant roles|roles must alternate|"
                           r"invalid value: '(system|developer)'", re.IGNORECASE)


def _message_change(text: str, body: dict[str, Any]) -> Change | None:
    msgs = _messages(body)
    if _ROLE_REFUSED.search(text):
        for role in ("developer", "system"):
            if any(m.get("role") == role for m in msgs) and (names(text, role) or role == "system"):
                return Change((FoldRole(role),), text)
    if not _MESSAGE_CONTEXT.search(text):
        return None
    tool_turns = [m for m in msgs if m.get("role") == "assistant" and m.get("tool_calls")]
    why = _short(text)
    if (names(text, "thinking") or _WANTS_STRING.search(text) or _TEXT_PARTS_ONLY.search(text)) \
            and any(m.get("role") == "assistant" and _has_thinking(m.get("content")) for m in msgs):
        return Change((AssistantContentText(),), why)
    if _WANTS_STRING.search(text) and any(m.get("content") is None for m in tool_turns):
        return Change((AssistantToolContent(""),), why)
    if _WANTS_TEXT.search(text):
        rules: list[Rule] = []
        if any(m.get("role") == "tool" and _blank(m.get("content")) for m in msgs):
            rules.append(ToolResultPlaceholder(NO_OUTPUT))
        if any(isinstance(m.get("content"), str | list) and _blank(m.get("content")) for m in tool_turns):
            rules.append(AssistantToolContent(None))
        if rules:
            return Change(tuple(rules), why)
    return None


# A chat template's own refusal, which llama.cpp answers with a 500 naming the Jinja exception:
#   gpt-oss: "Jinja Exception: Cannot pass both content and thinking in an assistant message with tool calls! Put
#   the analysis message in one or the other, but not both." (openclaw/openclaw#6514). Sent again unchanged it
#   fails again: read as a refusal, not retried as a fault.
_BOTH_CONTENT_AND_THINKING = re.compile(r"cannot pass both content and (thinking|reasoning)", re.IGNORECASE)


def _template_change(text: str, body: dict[str, Any]) -> Change | None:
    """The change for a 5xx whose body is a chat template's refusal of the request, or None (a fault to retry)."""
    if _BOTH_CONTENT_AND_THINKING.search(text):
        rule = ToolContentBesideReasoning()
        if apply_rules(body, (rule,)) != body:
            return Change((rule,), reason(text))
    return None


# -- request parameters ---------------------------------------------------------------------------------
# OpenAI: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'
#   instead." (teilomillet/gollm#33), "Unsupported value: 'temperature' does not support 0.2 with this model.
#   Only the default (1) value is supported." (holoviz/lumen#1087), "Unrecognized request argument supplied:
#   logprobs" (openai/openai-python#1080).
# vLLM: "[{'type': 'extra_forbidden', 'loc': ('body', 'stream_options'), 'msg': 'Extra inputs are not
#   permitted', ...}]" (modelscope/ms-agent#489, 1Panel-dev/MaxKB#2912 max_completion_tokens).
# LiteLLM: "litellm.UnsupportedParamsError: anthropic does not support parameters: ['seed'], for model=..."
#   (kaiko-ai/eva#895), "ollama does not support parameters: {'seed': 1}" (BerriAI/litellm#3923).
# DashScope: "parameter.enable_thinking must be set to false for non-streaming calls" (OpenBMB/UltraRAG#287).
# xAI (via LiteLLM): "Argument not supported on this model: frequencyPenalty" (BerriAI/litellm#14056).
# vLLM on Gaudi: "Please remove 'logprobs'/'top_logprobs' from your request" (vllm-project/vllm-gaudi#1098).
# Anthropic models (Bedrock via LiteLLM, Claude Sonnet 4.5+): "`temperature` and `top_p` cannot both be specified
#   for this model. Please use only one." (skydiscover-ai/skydiscover#15, langfuse/langfuse#9882): the first
#   one named is kept, the others dropped.

_ONLY_ONE = re.compile(r"cannot both|only one of|use only one|mutually exclusive|not both", re.IGNORECASE)
_INSTEAD = re.compile(r"""use\s+["'`]?([A-Za-z_][\w.]*)["'`]?\s+instead""", re.IGNORECASE)
_ONLY_VALUE = re.compile(r"only the default \(([^)]{1,40})\)|must be (?:set to |equal to )?([\w.\"'-]{1,40})"
                         r"|(?:only|supports? only) (?:the )?value ([\w.\"'-]{1,40})", re.IGNORECASE)


def _first_at(text: str, name: str) -> int:
    found = re.search(WORD.format(re.escape(name)), text)
    return found.start() if found else len(text)


def _value(token: str) -> Any:
    token = token.strip().strip("\"'`")
    try:
        return json.loads(token)
    except (ValueError, RecursionError):
        return token


def _param_change(text: str, body: dict[str, Any]) -> Change | None:
    if not ASKS_CHANGE.search(text):
        return None
    named = sorted((k for k in body if k not in CORE and names(text, k)), key=lambda k: _first_at(text, k))
    if not named:
        return None
    if len(named) > 1 and _ONLY_ONE.search(text):
        named = named[1:]
    why = _short(text)
    rename = _INSTEAD.search(text)
    if rename and len(named) == 1 and rename.group(1) not in CORE and rename.group(1) != named[0] \
            and rename.group(1) not in body:
        return Change((RenameParam(named[0], rename.group(1)),), why)
    if len(named) == 1:
        value = _ONLY_VALUE.search(text)
        if value is not None:
            wanted = _value(next(g for g in value.groups() if g is not None))
            if isinstance(wanted, bool | int | float) and wanted != body[named[0]]:
                return Change((SetParam(named[0], wanted),), why)
    return Change(tuple(DropParam(k) for k in named), why)


# ---- known in advance -----------------------------------------------------------------------------

def known_rules(base_url: str, model: str) -> list[Rule]:
    """The rules known in advance for a server (its host, `:PORT` for a local server's usual port) and model
    family (a name prefix): `profiles.KNOWN_REQUEST_RULES`; [] for any other."""

    try:
        parts = urlsplit(base_url)
        host, port = (parts.hostname or "").lower(), f":{parts.port}" if parts.port else ""
    except ValueError:
        return []
    out: list[Rule] = []
    for where, prefix, rules in KNOWN_REQUEST_RULES:
        hit = port == where if where.startswith(":") else host == where or host.endswith(f".{where}")
        if hit and model.lower().startswith(prefix):
            out += [r for r in rules_from_json(list(rules)) if r not in out]
    return out
