"""What a configured request rule may say: `[provider] request_rules` checked before any is built.

A rule the config names is checked for its kind (`op`), its target and its value in one pass, so a mistake is one
line naming the rule (`[provider] request_rules[2]: …`) at start, never a refusal at the first request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any

from ..profiles import FIELD_NAME, MESSAGE_FIELDS, OWNED_PARAMS
from . import (
    NAME_RULES,
    RULES,
    CapParam,
    DropField,
    DropParam,
    RenameParam,
    RequireField,
    Rule,
    SetParam,
    is_size,
    rule_from_json,
)

__all__ = ["rules_problem", "unsent_set_param"]

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
"""A request parameter's name (`top_p`, DashScope's `parameter.enable_thinking`)."""
_KEYWORD = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_-]{0,63}")
"""A JSON-schema keyword (`additionalProperties`, `$schema`)."""
_PARAM_OPS = frozenset(cls.op for cls in (DropParam, SetParam, RenameParam, CapParam))
_FOLDED_ROLES = ("system", "developer")
_FIELD_OPS = frozenset(cls.op for cls in (DropField, RequireField))
_OWN_CHANGEABLE = {("drop_param", "stream_options"), ("set_param", "stream_options")}
"""Of the fields crow sets itself, the ones a rule may change: the usage option, dropped or set."""
_VALUES: dict[str, tuple[str, Any]] = {
    "set_param": ("JSON: a string, number, boolean, list or table (no date or time)", lambda v: _is_json(v)),
    "cap_param": ("a positive integer (a number of tokens, below 2**31)", is_size),
    "cut_tool_result": ("a positive integer (a number of characters, below 2**31)", is_size),
    "rename_param": ("a parameter name (letters, digits, _ . -)", lambda v: isinstance(v, str)
                     and _PARAM_NAME.fullmatch(v) is not None),
    "rename_tools": (f"one of the known name rules: {', '.join(NAME_RULES)}", lambda v: v in NAME_RULES),
    "schema_empty_object": ('"drop" (drop empty properties) or "add" (add missing ones)',
                            lambda v: v in ("drop", "add")),
    "assistant_tool_content": ('a string (the content sent, "" for a server that refuses null)',
                               lambda v: isinstance(v, str)),
    "tool_result_placeholder": ('a string that is not blank (what a blank tool result is sent as)',
                                lambda v: isinstance(v, str) and v.strip() != ""),
}
"""What the `value` of each kind that takes one must be, in words and as a check."""


def _is_json(value: Any) -> bool:
    """Whether a TOML value is JSON too (a request body holds it): no date or time at any depth."""
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(_is_json(v) for v in value.values())
    return isinstance(value, str | int | float | bool)


def rules_problem(items: Any, table: Mapping[str, Any] | None = None) -> str | None:
    """What is wrong with the config's `[provider] request_rules` (one line naming the rule,
    `[provider] request_rules[2]: …`), or None: each a table of `op` (a kind of `rules.RULES`) and the
    `target` and `value` that kind takes, no other; a target and value that rule can act on (a parameter
    name, never one crow sets itself; a schema keyword; a role crow folds: system, developer); no two rules
    deciding the same (`Rule.decides`), also none deciding a field that `table`'s `refused_fields` or
    `required_fields` (the rest of the same `[provider]` table) decides otherwise. Whether a `set_param` has a
    parameter to set is `unsent_set_param`."""
    seen: list[tuple[int, Rule]] = []
    decided = {f"field {name}": f"{key} = [{name!r}]" for key in ("refused_fields", "required_fields")
               for name in (table or {}).get(key) or () if isinstance(name, str)}
    for i, item in enumerate(items if isinstance(items, list) else []):
        where = f"[provider] request_rules[{i}]"
        problem = _rule_problem(item)
        if problem:
            return f"{where}{problem}"
        rule = rule_from_json(item)
        if rule is None:  # a check above misses what the rule itself refuses
            return f"{where}: {item.get('op')} cannot act on {json.dumps(item, default=str)[:80]}"
        if clash := next((said for key, said in decided.items() if key in rule.decides()
                          and not (isinstance(rule, DropField) and said.startswith("refused_fields"))
                          and not (isinstance(rule, RequireField) and said.startswith("required_fields"))), None):
            return f"{where}: {rule.describe()} contradicts [provider] {clash}: keep one"
        twin = next((j for j, old in seen if old.decides() & rule.decides()), None)
        if twin is not None:
            return (f"{where}: {rule.describe()} decides what request_rules[{twin}] does "
                    f"({dict(seen)[twin].describe()}): keep one")
        seen.append((i, rule))
    return None


def _rule_problem(item: Any) -> str | None:
    """What is wrong with one configured rule, after its place (`: drop_param needs a target`), or None."""
    if not isinstance(item, dict) or set(item) - {"op", "target", "value"}:
        return " may hold op, target and value only"
    cls = RULES.get(item["op"]) if isinstance(item.get("op"), str) else None
    if cls is None:
        said = f"no rule {item['op'][:64]!r}" if isinstance(item.get("op"), str) else "needs an op, the name of a rule"
        return f": {said} (known: {', '.join(RULES)})"
    takes = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    op, target, value = cls.op, item.get("target"), item.get("value")
    for name in ("target", "value"):
        if name not in takes and item.get(name) is not None:  # the stored form writes "value": null
            return f": {op} takes no {name}"
    if "target" in takes and (not isinstance(target, str) or not target):
        return f": {op} needs a target"
    if "value" in takes and "value" not in item:
        wanted = _VALUES.get(op, ("a value",))[0]
        return f": {op} needs a value: {wanted}"
    if op in _PARAM_OPS:
        if target in OWNED_PARAMS and (op, target) not in _OWN_CHANGEABLE:
            return (f": {op} cannot change {target!r}: crow sets {', '.join(OWNED_PARAMS)} itself "
                    "(only stream_options may be dropped or set)")
        if not _PARAM_NAME.fullmatch(str(target)):
            return f": {op} target {str(target)[:64]!r} is not a parameter name (letters, digits, _ . -)"
    if op == "drop_schema_keyword" and not _KEYWORD.fullmatch(str(target)):
        return f": drop_schema_keyword target {str(target)[:64]!r} is not a schema keyword (like $schema, default)"
    if op in _FIELD_OPS and (not FIELD_NAME.fullmatch(str(target)) or target in MESSAGE_FIELDS):
        return (f": {op} target {str(target)[:64]!r} is not a field crow may {op.split('_')[0]}: a name of letters, "
                f"digits, _ . : -, never a field of the message itself ({', '.join(sorted(MESSAGE_FIELDS))})")
    if op == "fold_role" and target not in _FOLDED_ROLES:
        return f": fold_role target must be {' or '.join(_FOLDED_ROLES)} (got {str(target)[:64]!r})"
    wanted, fits = _VALUES.get(op, ("", None))
    if fits is not None and not fits(value):
        return f": {op} value must be {wanted} (got {json.dumps(value, default=str)[:64]})"
    if op == "rename_param" and (value == target or value in OWNED_PARAMS):
        return f": rename_param cannot rename {target} to {value}" + (
            " (the same name)" if value == target else f": crow sets {value} itself")
    return None


def unsent_set_param(items: Any, params: Collection[str]) -> str | None:
    """The first configured `set_param` (one line naming it) whose parameter no request has: neither `[params]`
    (`params`: the names it sets) nor crow sends it, so the rule could never set anything; or None. A
    `set_param` changes the value of a parameter a request has, in every layer; a value to send is `[params]`'s."""
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("op") == "set_param" and item.get("target") not in params \
                and item.get("target") != "stream_options":
            name, value = str(item.get("target")), json.dumps(item.get("value"), default=str)
            return (f"[provider] request_rules[{i}]: set_param changes {name} only where a request has it, and "
                    f"[params] sets no {name}: to send it, set it in [params] ({name} = {value})")
    return None
