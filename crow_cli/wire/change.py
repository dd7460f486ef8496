"""A server's refusal read into a `Change`: the rules that make exactly the refused part of a request acceptable.

`change_for(status, error_text, body, policy)` is the one reading of a refusal: a 400/422 (or a chat template's
5xx) whose words name a part of the request gives a `Change` of rule classes (`wire.rules`), else None. The
client sends the request once more with it and keeps it (`Change.once`: for that request only). The server
wording each finder reads, and where it was seen, is the table of `wire.wording`. Pure: no I/O, no state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..text import short_text
from . import schema as schemas
from . import wording
from .profiles import REASONING_FIELDS
from .refusal import (
    WORD,
    field_demanded,
    field_refused,
    message_of,
    names,
    names_exactly,
    param_of,
    reason,
)
from .refusal import words as refusal_words
from .rules import (
    CORE,
    NO_OUTPUT,
    OUTPUT_CAPS,
    AssistantContentText,
    AssistantToolContent,
    CapParam,
    CutToolResult,
    DropField,
    DropParam,
    DropSchemaKeyword,
    FieldRule,
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
    is_size,
    sent_fields,
    tool_renames,
)
from .rules.messages import blank, has_thinking

__all__ = ["MIN_ROOM", "Change", "FieldPolicy", "change_for"]

_KEEP_KEYWORDS = frozenset({"type", "properties"})
"""Keywords never dropped on a server's word: without them the schema says nothing."""


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


# -- message fields: a field refused or demanded, tool-call ids of another model (`wording`: field_*, id_*) --


def _id_rule(text: str) -> MapToolCallIds | None:
    """The id shape a refusal of tool-call ids names, or None (`text` is read only up to 4000 characters)."""
    text = text[:4000]
    if not wording.said("id_context", text.replace('\\"', '"')):
        return None
    if (nine := wording.found("id_length", text)) is not None:  # Mistral
        return MapToolCallIds("alnum", int(nine["length"]) if 0 < int(nine["length"]) <= 64 else None)
    if wording.said("id_alnum_dash", text):  # Anthropic-compatible, Bedrock
        return MapToolCallIds("alnum_dash")
    return None



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


# -- sizes: the room a prompt leaves, a model's cap, a string limit (`wording`: room_left, model_cap …) ----
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
    for pattern in wording.patterns("overflow_requested", "room_left"):
        if (found := pattern.search(text)) is not None:
            room, name = int(found["window"]) - int(found["prompt"]), _output_cap(text, body)
            if name is None or room < MIN_ROOM:
                return Change((), why)
            return Change((CapParam(name, room),), why, once=True)
    for pattern in wording.patterns("model_cap"):
        if (found := pattern.search(text)) is not None and (name := _output_cap(text, body)) is not None:
            cap = int(found["cap"])
            return Change((CapParam(name, cap),) if is_size(cap) else (), why)
    if (found := wording.found("string_limit", text)) is not None:
        at, limit, msgs = int(found["at"]), int(found["limit"]), body.get("messages")
        target = msgs[at] if isinstance(msgs, list) and at < len(msgs) else None
        if is_size(limit) and isinstance(target, dict) and target.get("role") == "tool":
            return Change((CutToolResult(limit),), why)
        return Change((), why)
    return None


# -- tool schemas (`wording`: schema_*) -------------------------------------------------------------



def _tool_parameters(body: dict[str, Any]) -> list[Any]:
    tools = body.get("tools")
    return [t["function"].get("parameters") for t in tools if isinstance(t, dict)
            and isinstance(t.get("function"), dict)] if isinstance(tools, list) else []


# -- tool names the registry's rule, ^[a-zA-Z0-9_-]{1,64}$, does not cover (`wording`: name_*) -------


def _name_change(text: str, body: dict[str, Any]) -> Change | None:
    if not wording.said("tool_name_context", text):
        return None
    found = wording.found("name_pattern", text)
    rule = RenameTools(_name_rule_of(found["pattern"] if found else "", text))
    if not tool_renames(body, rule) and rule.value == "strict":
        rule = RenameTools("letter_first")
    return Change((rule,), text) if tool_renames(body, rule) else None


def _schema_change(text: str, body: dict[str, Any]) -> Change | None:
    params = _tool_parameters(body)
    if not params or not wording.said("schema_context", text):
        return None
    used = set().union(*(schemas.keywords_used(p) for p in params))
    nodes = [n for p in params for n in schemas.schema_nodes(p)]
    why = _short(text)
    if "$ref" in used and wording.said("schema_refs", text):
        return Change((InlineSchemaRefs(),), why)
    if wording.said("schema_branch_type", text) \
            and any("type" in n and any(k in n for k in ("anyOf", "oneOf")) for n in nodes):
        return Change((SchemaTypeIntoBranches(),), why)
    named = _schema_keywords(text, used)
    if named:
        return Change(tuple(DropSchemaKeyword(k) for k in named), why)
    if wording.said("schema_empty_properties", text) \
            and any(n.get("type") == "object" and n.get("properties") == {} for n in nodes):
        return Change((SchemaEmptyObject("drop"),), why)
    if wording.said("schema_missing_properties", text) \
            and any(n.get("type") == "object" and "properties" not in n for n in nodes):
        return Change((SchemaEmptyObject("add"),), why)
    return None


_COMBINERS = frozenset({"anyOf", "oneOf", "allOf"})
"""Named in messages about what sits beside them (Moonshot's "when using anyOf, type should be …"): not
dropped on an unquoted mention."""


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _schema_keywords(text: str, used: set[str]) -> list[str]:
    """The keywords a refusal names that the tool schemas use: quoted names, and the last step of a path
    into a schema (`...parameters.properties.when.const`); snake_case names match camelCase keywords."""
    candidates = [m.group(1) for m in _QUOTED.finditer(text)]
    candidates += [m.group(1).rsplit(".", 1)[-1].split("[", 1)[0]
                   for m in wording.patterns("schema_path")[0].finditer(text)]
    candidates += [m.group(1) for pattern in wording.patterns("schema_keyword_named") for m in pattern.finditer(text)]
    # unquoted names that can only be keywords (camelCase or $-prefixed: additionalProperties, $schema)
    candidates += [k for k in sorted(used) if (k.startswith("$") or k != k.lower()) and k not in _COMBINERS
                   and names_exactly(text, k)]
    if not wording.said("asks_change", text):
        return []
    found: list[str] = []
    for name in candidates:
        for keyword in (name, _camel(name)):
            if keyword in used and keyword not in _KEEP_KEYWORDS and keyword not in found:
                found.append(keyword)
                break
    return found


# -- message shapes (`wording`: message_context, wants_*, role_refused …) -------------------------------



def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []




def _message_change(text: str, body: dict[str, Any]) -> Change | None:
    msgs = _messages(body)
    if wording.said("role_refused", text):
        for role in ("developer", "system"):
            if any(m.get("role") == role for m in msgs) and (names(text, role) or role == "system"):
                return Change((FoldRole(role),), text)
    if not wording.said("message_context", text):
        return None
    tool_turns = [m for m in msgs if m.get("role") == "assistant" and m.get("tool_calls")]
    why = _short(text)
    if (names(text, "thinking") or wording.said("wants_string", text) or wording.said("text_parts_only", text)) \
            and any(m.get("role") == "assistant" and has_thinking(m.get("content")) for m in msgs):
        return Change((AssistantContentText(),), why)
    if wording.said("wants_string", text) and any(m.get("content") is None for m in tool_turns):
        return Change((AssistantToolContent(""),), why)
    if wording.said("wants_text", text):
        rules: list[Rule] = []
        if any(m.get("role") == "tool" and blank(m.get("content")) for m in msgs):
            rules.append(ToolResultPlaceholder(NO_OUTPUT))
        if any(isinstance(m.get("content"), str | list) and blank(m.get("content")) for m in tool_turns):
            rules.append(AssistantToolContent(None))
        if rules:
            return Change(tuple(rules), why)
    return None


# a chat template's own refusal, a 500 from llama.cpp: sent again unchanged it fails again, so it is read as a
# refusal, not retried as a fault


def _template_change(text: str, body: dict[str, Any]) -> Change | None:
    """The change for a 5xx whose body is a chat template's refusal of the request, or None (a fault to retry)."""
    if wording.said("both_content_and_thinking", text):
        rule = ToolContentBesideReasoning()
        if apply_rules(body, (rule,)) != body:
            return Change((rule,), reason(text))
    return None


# -- request parameters (`wording`: asks_change, only_one, use_instead, only_value) --------------------



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
    if not wording.said("asks_change", text):
        return None
    named = sorted((k for k in body if k not in CORE and names(text, k)), key=lambda k: _first_at(text, k))
    if not named:
        return None
    if len(named) > 1 and wording.said("only_one", text):
        named = named[1:]
    why = _short(text)
    rename = wording.found("use_instead", text)
    if rename and len(named) == 1 and rename["name"] not in CORE and rename["name"] != named[0] \
            and rename["name"] not in body:
        return Change((RenameParam(named[0], rename["name"]),), why)
    if len(named) == 1:
        value = wording.found("only_value", text)
        if value is not None:
            wanted = _value(next(g for g in value.groups() if g is not None))
            if isinstance(wanted, bool | int | float) and wanted != body[named[0]]:
                return Change((SetParam(named[0], wanted),), why)
    return Change(tuple(DropParam(k) for k in named), why)


def _name_rule_of(pattern: str, text: str) -> str:
    """The known rule closest to a server's quoted name `pattern` (only looked at, at most 100 characters)."""
    pattern = pattern[:100]
    if wording.said("name_letter_first", text) or re.match(r"\[(a-zA-Z|A-Za-z)_?\]", pattern):
        return "letter_first"
    if pattern.startswith("[") and "-" not in pattern.replace("a-z", "").replace("A-Z", "").replace("0-9", ""):
        return "word"
    return "strict"

