"""Tool-schema rewrites: keywords dropped only where they are keywords, $refs inlined, types moved into branches."""

from __future__ import annotations

import copy

from crow_cli.wire.schema import (
    drop_empty_objects,
    drop_keywords,
    fill_missing_properties,
    inline_refs,
    keywords_used,
    schema_nodes,
    type_into_branches,
)

# the shape zod-to-json-schema and pydantic give MCP tools (which Gemini and Moonshot refuse)
ZOD = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "default": {"type": "string", "default": "x", "description": "a property named like a keyword"},
        "when": {"type": "string", "format": "date-time", "const": "now"},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "default": "a"}},
        "pick": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"$ref": "#/$defs/Pick"}]},
    },
    "required": ["default"],
    "additionalProperties": False,
    "$defs": {"Pick": {"type": "object", "properties": {"name": {"type": "string", "default": "n"}},
                       "additionalProperties": False}},
}


def test_dropping_a_keyword_removes_it_at_every_depth_but_keeps_properties_of_that_name() -> None:
    before = copy.deepcopy(ZOD)
    out = drop_keywords(ZOD, ["default"])
    assert before == ZOD  # the input is never changed
    assert "default" not in keywords_used(out)
    assert out["properties"]["default"] == {"type": "string", "description": "a property named like a keyword"}
    assert out["required"] == ["default"]
    assert out["properties"]["tags"]["items"] == {"type": "string", "minLength": 1}
    assert out["$defs"]["Pick"]["properties"]["name"] == {"type": "string"}


def test_dropping_nested_keywords_reaches_any_of_branches_items_and_defs() -> None:
    out = drop_keywords(ZOD, ["additionalProperties", "exclusiveMinimum", "$schema", "format", "const"])
    assert not keywords_used(out) & {"additionalProperties", "exclusiveMinimum", "$schema", "format", "const"}
    assert out["properties"]["pick"]["anyOf"][0] == {"type": "integer"}
    assert out["properties"]["when"] == {"type": "string"}


def test_inline_refs_replaces_local_refs_keeps_sibling_keywords_and_drops_defs() -> None:
    schema = {"type": "object", "properties": {
        "asset": {"$ref": "#/$defs/Asset", "description": "the asset"},
        "old": {"$ref": "#/definitions/Old"}, "gone": {"$ref": "#/$defs/Missing", "type": "string"}},
        "$defs": {"Asset": {"type": "object", "description": "generic", "properties": {
            "child": {"$ref": "#/$defs/Asset"}}}},
        "definitions": {"Old": {"type": "integer"}}}
    out = inline_refs(schema)
    assert "$ref" not in keywords_used(out) and not {"$defs", "definitions"} & keywords_used(out)
    asset = out["properties"]["asset"]
    assert asset["description"] == "the asset" and asset["type"] == "object"
    assert asset["properties"]["child"] == {"type": "object"}  # a recursive type stops there
    assert out["properties"]["old"] == {"type": "integer"}
    assert out["properties"]["gone"] == {"type": "string"}


def test_type_beside_any_of_moves_into_the_branches_without_a_type() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "anyOf": [
        {"enum": ["a"]}, {"type": "null"}, {"$ref": "#/$defs/X"}]}}}
    out = type_into_branches(schema)
    assert out["properties"]["v"] == {"anyOf": [{"enum": ["a"], "type": "string"}, {"type": "null"},
                                                {"$ref": "#/$defs/X"}]}


def test_object_schemas_without_properties_get_the_shape_asked_for() -> None:
    schema = {"type": "object", "properties": {}, "required": []}
    assert drop_empty_objects(schema) == {"type": "object"}
    nested = {"type": "object", "properties": {"opts": {"type": "object"}}}
    assert fill_missing_properties(nested)["properties"]["opts"] == {"type": "object", "properties": {}}
    assert drop_empty_objects(nested) == nested


def test_schema_nodes_reads_like_the_conformance_harness() -> None:
    # property names are never nodes' keys; every nested schema object is a node
    keys = keywords_used(ZOD)
    assert "when" not in keys and "tags" not in keys and "minLength" in keys and "exclusiveMinimum" in keys
    assert sum(1 for _ in schema_nodes(ZOD)) == 10
