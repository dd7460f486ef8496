"""One server's profile: what crow knows of a base URL + model, built from layers, each value with its layer.

`build_profile` is the one place a `ServerProfile` is made. Its layers, later ones overriding earlier ones key
by key:

1. `built-in`: provider knowledge kept as data: `profiles.PROFILES` (by the base URL's host) and
   `profiles.KNOWN_REQUEST_RULES` (by host, or `:PORT`, and model-name prefix);
2. `config`: the config's `[provider]` table, request rules included (checked when the config is read:
   `profiles.check_overrides`, `rules_problem`);
3. `learned`: what the server taught earlier runs and `crow probe` (`wire.facts.recall`).

A key is a field of `ServerProfile` (`refused_fields`, `tool_message_name` …) or one request rule, keyed by its
kind and target (`rule drop_param seed`): a learned `CapParam("max_tokens", 4096)` replaces a built-in one,
a learned `DropParam("seed")` joins the built-in rules. `ServerProfile.sources` says which layer each value came
from (`crow probe --show`, `--debug`). Pure: the caller reads the learned facts; no I/O here. Built once per
client, never per request or chunk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .adapt import RULES, DropParam, Rule, known_rules, rule_from_json, rules_from_json
from .profiles import PROFILE_FIELDS, REASONING_FIELDS, profile_for

__all__ = ["LAYERS", "Layer", "ServerProfile", "build_profile", "rule_key", "rules_problem"]

Layer = Literal["built-in", "config", "learned"]
"""Where a value of a profile came from."""
LAYERS: tuple[Layer, ...] = ("built-in", "config", "learned")
"""The layers, earliest first: a later one overrides an earlier one key by key."""


@dataclass(frozen=True)
class ServerProfile:
    """What crow knows of one server and model before sending it anything, each value from its layer.

    Attributes:
        name: the built-in provider profile matched by host (`profiles.PROFILES`), "generic" for any other.
        needs_key: the API refuses every request without a key.
        reasoning_fields: delta fields that carry reasoning text.
        tool_message_name: True: tool messages carry the function `name`; False: never; None: as stored.
        refused_fields: message / tool-call fields the server refuses (never sent).
        required_fields: reasoning fields wanted on every assistant message.
        tool_call_id_rule: the tool-call id shape the server demands of ids other models wrote
            (`{"chars": …, "length": …}`, `wire.outgoing`), or None.
        request_rules: the rules applied to every request (`wire.adapt`), in order.
        sources: the layer of each value, by key: a field name, or `rule_key(rule)` for a request rule.
    """

    name: str = "generic"
    needs_key: bool = False
    reasoning_fields: tuple[str, ...] = REASONING_FIELDS
    tool_message_name: bool | None = None
    refused_fields: tuple[str, ...] = ()
    required_fields: tuple[str, ...] = ()
    tool_call_id_rule: Mapping[str, Any] | None = None
    request_rules: tuple[Rule, ...] = ()
    sources: Mapping[str, Layer] = field(default_factory=dict)

    def source(self, key: str) -> Layer:
        """The layer the value of `key` (a field name or a `rule_key`) came from; "built-in" for a default."""
        return self.sources.get(key, "built-in")

    def message_facts(self) -> dict[str, Any]:
        """The message policy, in `wire.outgoing.Outgoing(known=…)` form."""
        facts: dict[str, Any] = {"refused_fields": list(self.refused_fields),
                                 "required_fields": list(self.required_fields)}
        if self.tool_message_name is not None:
            facts["tool_message_name"] = self.tool_message_name
        if self.tool_call_id_rule is not None:
            facts["tool_call_id_rule"] = dict(self.tool_call_id_rule)
        return facts

    def described(self) -> list[tuple[str, str, Layer]]:
        """Each value as (key, value in words, layer), fields first, then the request rules in order: what
        `crow probe --show` and `--debug` print. An empty value (no names, None) says nothing and is left out."""
        out: list[tuple[str, str, Layer]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("request_rules", "sources") or value in ((), None):
                continue
            shown = json.dumps(list(value) if isinstance(value, tuple) else
                               dict(value) if isinstance(value, Mapping) else value)
            out.append((f.name, shown, self.source(f.name)))
        for rule in self.request_rules:
            out.append((rule_key(rule), f"{rule.describe()} ({type(rule).__name__})", self.source(rule_key(rule))))
        return out


def rule_key(rule: Rule) -> str:
    """The key of a request rule among a profile's values: its kind and target (`rule drop_param seed`); a later
    layer's rule of the same key replaces an earlier one's."""
    return f"rule {rule.op} {rule.target}".rstrip()


def _builtin(base_url: str, model: str) -> dict[str, Any]:
    known = profile_for(base_url)
    values: dict[str, Any] = {f.name: getattr(known, f.name) for f in fields(known) if f.name != "hosts"}
    values["request_rules"] = known_rules(base_url, model)
    return values


def _configured(table: Mapping[str, Any]) -> dict[str, Any]:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k in PROFILE_FIELDS}
    if "request_rules" in table:
        values["request_rules"] = rules_from_json(table["request_rules"])
    return values


def rules_problem(items: Any) -> str | None:
    """What is wrong with the config's `[provider] request_rules` (one line naming the rule), or None: each a
    table of `op` (a kind of `adapt.RULES`), `target` and `value` as that kind takes them."""
    for i, item in enumerate(items if isinstance(items, list) else []):
        where = f"[provider] request_rules[{i}]"
        if not isinstance(item, dict) or set(item) - {"op", "target", "value"}:
            return f"{where} may hold op, target and value only"
        cls = RULES.get(item.get("op"))  # type: ignore[arg-type]
        if cls is None:
            return f"{where}: no rule {item.get('op')!r} (known: {', '.join(RULES)})"
        takes = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        if "target" in takes and not item.get("target"):
            return f"{where}: {cls.op} needs a target"
        if ("value" in takes and "value" not in item) or rule_from_json(item) is None:
            return f"{where}: {cls.op} needs a value"
    return None


def _learned(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's keys among learned facts (`wire.facts` form; already checked when read)."""
    values: dict[str, Any] = {}
    for key in ("refused_fields", "required_fields"):
        if isinstance(facts.get(key), list):
            values[key] = tuple(v for v in facts[key] if isinstance(v, str))
    if isinstance(facts.get("tool_message_name"), bool):
        values["tool_message_name"] = facts["tool_message_name"]
    if isinstance(facts.get("tool_call_id_rule"), Mapping):
        values["tool_call_id_rule"] = dict(facts["tool_call_id_rule"])
    rules = rules_from_json(facts.get("request_rules"))
    if facts.get("usage_option_refused") is True:  # what `crow probe` found: no stream_options to send
        rules.append(DropParam("stream_options"))
    if rules:
        values["request_rules"] = rules
    return values


def build_profile(base_url: str, model: str, provider: Mapping[str, Any] | None = None,
                  learned: Mapping[str, Any] | None = None, *, rules: bool = True) -> ServerProfile:
    """The profile of the server at `base_url` for `model`: the built-in layer, the config's `[provider]` table
    (`provider`), then the `learned` facts (`wire.facts.recall`), later layers overriding earlier ones key by
    key (module docstring). `rules=False` (`adapt_requests = false`): no request rule of any layer."""
    values: dict[str, Any] = {}
    sources: dict[str, Layer] = {}
    by_key: dict[str, Rule] = {}
    layers: tuple[tuple[Layer, dict[str, Any]], ...] = (
        ("built-in", _builtin(base_url, model)), ("config", _configured(provider or {})),
        ("learned", _learned(learned or {})))
    for layer, entries in layers:
        for key, value in entries.items():
            if key != "request_rules":
                values[key], sources[key] = value, layer
                continue
            for rule in value if rules else ():
                by_key[rule_key(rule)], sources[rule_key(rule)] = rule, layer
    return ServerProfile(**values, request_rules=tuple(by_key.values()), sources=sources)
