"""Tool-schema rewrites for servers that refuse parts of JSON Schema (pure: no I/O, inputs never changed).

A tool's `parameters` is a JSON Schema whose *schema objects* are the root and what `properties`,
`items`, `anyOf`/`oneOf`/`allOf`, `$defs`, `additionalProperties` … hold, at any depth. A schema
object's keys are keywords; the keys of `properties` (and of `$defs`, `patternProperties` …) are
names, never keywords, so a property called `default` survives dropping the `default` keyword.

Servers differ on what they take (Gemini's OpenAI-compatible endpoint: no `$schema`,
`additionalProperties`, `exclusiveMinimum` …; Moonshot: no `$ref` beside other keywords, no `type`
beside `anyOf`); `wire.change` decides what to change from the server's message, this module changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

__all__ = ["drop_empty_objects", "drop_keywords", "fill_missing_properties", "inline_refs", "keywords_used",
           "schema_nodes", "type_into_branches"]

# Where a keyword holds sub-schemas: one schema, a list of them, or an object of them by name.
# (The same reading as ../shared/conformance/replay_server.py `schema_nodes`.)
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
        "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_BRANCHES = ("anyOf", "oneOf")

Schema = Any
"""A JSON Schema value: usually an object, sometimes a bare `true`/`false`."""


def schema_nodes(schema: Schema) -> Iterator[dict[str, Any]]:
    """Every schema object of `schema`, the root first (depth first)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node
        for key in _ONE:
            if isinstance(node.get(key), dict):
                stack.append(node[key])
        for key in _LIST:
            if isinstance(node.get(key), list):
                stack.extend(node[key])
        for key in _MAP:
            if isinstance(node.get(key), dict):
                stack.extend(node[key].values())


def keywords_used(schema: Schema) -> set[str]:
    """The keywords any schema object of `schema` uses."""
    return {key for node in schema_nodes(schema) for key in node}


def _rebuild(schema: Schema, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Schema:
    """`schema` with every schema object replaced by `fn` of its copy (children first)."""
    if not isinstance(schema, dict):
        return schema
    node = dict(schema)
    for key in _ONE:
        if isinstance(node.get(key), dict):
            node[key] = _rebuild(node[key], fn)
    for key in _LIST:
        if isinstance(node.get(key), list):
            node[key] = [_rebuild(item, fn) for item in node[key]]
    for key in _MAP:
        if isinstance(node.get(key), dict):
            node[key] = {name: _rebuild(sub, fn) for name, sub in node[key].items()}
    return fn(node)


def drop_keywords(schema: Schema, keywords: Collection[str]) -> Schema:
    """`schema` without `keywords` in any of its schema objects (property names are kept)."""
    wanted = set(keywords)
    return _rebuild(schema, lambda node: {k: v for k, v in node.items() if k not in wanted})


_LOCAL = ("#/$defs/", "#/definitions/")


def inline_refs(schema: Schema) -> Schema:
    """`schema` with each local `$ref` (`#/$defs/NAME`, `#/definitions/NAME`) replaced by what it names, and
    `$defs` / `definitions` dropped. Keywords beside a `$ref` (a `description`) win over the target's. A
    reference inside the definition it names (a recursive type) becomes `{"type": "object"}`; a
    reference that names nothing loses its `$ref` and keeps its other keywords."""
    if not isinstance(schema, dict):
        return schema
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(schema.get(key), dict):
            defs.update({f"#/{key}/{name}": sub for name, sub in schema[key].items()})

    def resolve(node: Schema, seen: tuple[str, ...]) -> Schema:
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_LOCAL):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if ref in seen:
                return {"type": "object", **rest}
            target = defs.get(ref)
            if not isinstance(target, dict):
                return resolve(rest, seen)
            merged = {**resolve(target, (*seen, ref)), **{k: resolve_child(k, v, seen) for k, v in rest.items()}}
            return {k: v for k, v in merged.items() if k not in ("$defs", "definitions")}
        return {k: resolve_child(k, v, seen) for k, v in node.items() if k not in ("$defs", "definitions")}

    def resolve_child(key: str, value: Any, seen: tuple[str, ...]) -> Any:
        if key in _ONE and isinstance(value, dict):
            return resolve(value, seen)
        if key in _LIST and isinstance(value, list):
            return [resolve(item, seen) for item in value]
        if key in _MAP and isinstance(value, dict):
            return {name: resolve(sub, seen) for name, sub in value.items()}
        return value

    return resolve(schema, ())


def type_into_branches(schema: Schema) -> Schema:
    """`schema` with the `type` of each object that also has `anyOf`/`oneOf` moved into those branches
    (a branch with its own `type`, or a `$ref`, keeps it): Moonshot wants the type in the branches."""

    def move(node: dict[str, Any]) -> dict[str, Any]:
        if "type" not in node or not any(isinstance(node.get(k), list) for k in _BRANCHES):
            return node
        kind = node["type"]
        out = {k: v for k, v in node.items() if k != "type"}
        for key in _BRANCHES:
            if isinstance(out.get(key), list):
                out[key] = [{**b, "type": kind} if isinstance(b, dict) and "type" not in b and "$ref" not in b
                            else b for b in out[key]]
        return out

    return _rebuild(schema, move)


def _empty_object(node: dict[str, Any]) -> bool:
    return node.get("type") == "object" and not node.get("properties")


def drop_empty_objects(schema: Schema) -> Schema:
    """`schema` with `properties` (and `required`) dropped from each object schema that has none in it
    (Gemini: "properties: should be non-empty for OBJECT type"); the object still takes any arguments."""
    return _rebuild(schema, lambda node: {k: v for k, v in node.items() if k not in ("properties", "required")}
                    if _empty_object(node) and "properties" in node else node)


def fill_missing_properties(schema: Schema) -> Schema:
    """`schema` with `"properties": {}` added to each object schema that has no `properties` key (OpenAI
    and strict validators: "object schema missing properties")."""
    return _rebuild(schema, lambda node: {**node, "properties": {}} if node.get("type") == "object"
                    and "properties" not in node else node)
