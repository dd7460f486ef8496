"""Tool rules: the offered tools' schemas and names rewritten where a server refuses them as sent.

Schema rules rewrite every tool's `parameters` (`wire.schema` does the rewriting); `RenameTools` sends the
tools, and the history's calls, under names a known name rule takes (`NAME_RULES`), mapped back by the client
when the model calls them. Each rule's docstring names the server wording it answers (`wire.wording`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from .. import schema as schemas
from ..names import WIRE_NAME, ToolNames
from .base import Rule, with_items

__all__ = ["NAME_RULES", "DropSchemaKeyword", "InlineSchemaRefs", "RenameTools", "SchemaEmptyObject",
           "SchemaTypeIntoBranches", "name_rule", "tool_names", "tool_renames"]


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
        return with_items(request, "tools", tools, _map_schemas(tools, self.rewrite))


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

