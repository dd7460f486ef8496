"""Request rules: every change crow makes to what a server refuses, one small frozen class per kind.

The families, one module each: request parameters (`params`), the offered tools' schemas and names (`tools`),
message shapes (`messages`), message fields (`fields`, applied by `wire.outgoing`). Here: the registry of kinds
by stored `op` (`RULES`), reading stored rules back (`rule_from_json`), applying rules to a body (`apply_rules`)
and the rules known in advance for a host and model (`known_rules`, from `profiles.KNOWN_REQUEST_RULES`).
Which refusal asks for which rule is `wire.change`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..profiles import KNOWN_REQUEST_RULES
from .base import Rule, is_size
from .fields import (
    CALL_CORE,
    FIELD_RULES,
    FUNCTION_CORE,
    ID_CHARS,
    MESSAGE_CORE,
    DropField,
    FieldRule,
    MapToolCallIds,
    RequireField,
    ToolMessageName,
    field_facts,
    field_rules,
    sent_fields,
)
from .messages import (
    CUT_MARGIN,
    NO_OUTPUT,
    AssistantContentText,
    AssistantToolContent,
    CutToolResult,
    FoldRole,
    ToolContentBesideReasoning,
    ToolResultPlaceholder,
)
from .params import CORE, OUTPUT_CAPS, CapParam, DropParam, RenameParam, SetParam
from .tools import (
    NAME_RULES,
    DropSchemaKeyword,
    InlineSchemaRefs,
    RenameTools,
    SchemaEmptyObject,
    SchemaTypeIntoBranches,
    name_rule,
    tool_names,
    tool_renames,
)

__all__ = ["CALL_CORE", "CORE", "CUT_MARGIN", "FIELD_RULES", "FUNCTION_CORE", "ID_CHARS", "MESSAGE_CORE",
           "NAME_RULES", "NO_OUTPUT", "OUTPUT_CAPS", "RULES", "SIZED_OPS", "AssistantContentText",
           "AssistantToolContent", "CapParam", "CutToolResult", "DropField", "DropParam", "DropSchemaKeyword",
           "FieldRule", "FoldRole", "InlineSchemaRefs", "MapToolCallIds", "RenameParam", "RenameTools",
           "RequireField", "Rule", "SchemaEmptyObject", "SchemaTypeIntoBranches", "SetParam",
           "ToolContentBesideReasoning", "ToolMessageName", "ToolResultPlaceholder", "apply_rules", "field_facts",
           "field_rules", "is_size", "known_rules", "name_rule", "rule_from_json", "rules_from_json", "sent_fields",
           "tool_names", "tool_renames"]

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
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    args = {k: v for k, v in (("target", item.get("target", "")), ("value", item.get("value"))) if k in names}
    rule = cls(**args)
    return rule if rule.valid() else None


def rules_from_json(items: Any) -> list[Rule]:
    """The rules of a stored list (unknown or damaged entries are left out)."""
    found = (rule_from_json(item) for item in (items if isinstance(items, list) else []))
    return [rule for rule in found if rule is not None]


def apply_rules(body: dict[str, Any], rules: Iterable[Rule]) -> dict[str, Any]:
    """`body` as sent under `rules`, in order. Only what a rule changes is copied; `body` is untouched."""
    out = body
    for rule in rules:
        out = rule.apply(out)
    return out if out is not body else dict(body)


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
