"""Message-field rules: which fields the messages, tool calls and functions carry toward a server.

A field refused (`DropField`) or a reasoning field demanded (`RequireField`), the function `name` on tool messages
(`ToolMessageName`), tool-call ids another model wrote mapped to the reader's shape (`MapToolCallIds`).
`wire.outgoing.Outgoing` applies them as it copies the history (knowing who wrote each message); their stored
form is the facts `refused_fields`, `required_fields`, `tool_message_name`, `tool_call_id_rule` (`field_facts`,
`field_rules`), which earlier versions wrote too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..profiles import MESSAGE_FIELDS, REASONING_FIELDS
from .base import Rule, with_items
from .messages import MessageRule

__all__ = ["CALL_CORE", "FIELD_RULES", "FUNCTION_CORE", "ID_CHARS", "MESSAGE_CORE", "DropField", "FieldRule",
           "MapToolCallIds", "RequireField", "ToolMessageName", "field_facts", "field_rules", "sent_fields"]

MESSAGE_CORE = frozenset(("role", "content", "tool_calls", "tool_call_id"))
"""Message keys no field rule drops: without them there is no message."""
CALL_CORE = frozenset(("id", "type", "function"))
"""Tool-call keys no field rule drops."""
FUNCTION_CORE = frozenset(("name", "arguments"))
"""Keys of a tool call's function no field rule drops."""


@dataclass(frozen=True)
class FieldRule(MessageRule):
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

    def decides(self) -> frozenset[str]:
        """The field: it is sent or not, so dropping and requiring it contradict each other."""
        return frozenset({self.slot})

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

    def decides(self) -> frozenset[str]:
        """The field: it is sent or not, so dropping and requiring it contradict each other."""
        return frozenset({self.slot})

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
        return with_items(request, "messages", messages, out)

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
                message = with_items(message, "tool_calls", message["tool_calls"], calls)
            elif isinstance(message, dict) and message.get("role") == "tool" and message.get("tool_call_id") in ids:
                message = {**message, "tool_call_id": ids[message["tool_call_id"]]}
            out.append(message)
        return with_items(request, "messages", messages, out)

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

