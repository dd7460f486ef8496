"""tools/arguments.py: a call's arguments against its schema.

Properties guarded here:
- every problem is named by its path and what was expected, in one message, never a Python error text;
- only the coercions the schema makes unambiguous are applied (a number, boolean, object or array sent as a
  string, one value where an array of it is asked), each noted; a string allowed where one came is left alone;
- what cannot be coerced is refused; a schema jsonschema cannot read is not held against the call.
"""

from __future__ import annotations

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.arguments import check_arguments

SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "ratio": {"type": "number"},
    "recursive": {"type": "boolean"}, "paths": {"type": "array", "items": {"type": "string"}},
    "options": {"type": "object", "properties": {"depth": {"type": "integer"}}},
    "mode": {"enum": ["fast", "slow"]}, "either": {"type": ["string", "integer"]}},
    "required": ["path"], "additionalProperties": False}


def test_every_problem_is_named_by_its_path_and_what_was_expected() -> None:
    with pytest.raises(ToolError) as refused:
        check_arguments(SCHEMA, {"line": "3.5", "mode": "medium", "extra": 1}, "edit")
    message = str(refused.value)
    assert message.startswith("invalid arguments for edit: ")
    for part in ("'path' is required", "'line': expected integer, got \"3.5\"",
                 "'mode': expected one of [\"fast\", \"slow\"], got \"medium\"", "unexpected 'extra'"):
        assert part in message, message


def test_unambiguous_coercions_are_applied_and_each_noted() -> None:
    given = {"path": "a.py", "line": "3", "ratio": " 0.5", "recursive": "TRUE", "paths": "b.py",
             "options": '{"depth": "2"}'}
    checked = check_arguments(SCHEMA, given, "edit")
    assert checked.arguments == {"path": "a.py", "line": 3, "ratio": 0.5, "recursive": True, "paths": ["b.py"],
                                 "options": {"depth": 2}}
    assert given["line"] == "3"  # the call's own arguments are never changed
    notes = " | ".join(checked.notes)
    for part in ("'line': read \"3\" as the integer 3", "'recursive': read \"TRUE\" as the boolean true",
                 "'paths': read \"b.py\" as the array [\"b.py\"]", "'options.depth': read \"2\" as the integer 2"):
        assert part in notes, notes


def test_a_value_a_string_may_be_is_left_alone_and_a_bad_one_refused() -> None:
    assert check_arguments(SCHEMA, {"path": "x", "either": "7"}, "t").notes == ()
    with pytest.raises(ToolError, match="'paths\\[0\\]': expected string, got 3"):
        check_arguments(SCHEMA, {"path": "x", "paths": [3]}, "t")
    with pytest.raises(ToolError, match="expected a JSON object, got an array"):
        check_arguments(SCHEMA, [1], "t")


def test_a_schema_of_another_dialect_does_not_refuse_the_call() -> None:
    odd = {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/s.json"}}}
    assert check_arguments(odd, {"a": 1}, "t").arguments == {"a": 1}
    assert check_arguments({"type": "wrong-type"}, {"a": 1}, "t").arguments == {"a": 1}


def test_an_optional_number_sent_as_a_string_is_read_as_the_number() -> None:
    """pydantic's `int | None` is an anyOf of integer and null: a number in a string is still unambiguous."""
    optional = {"type": "object", "properties": {"start_line": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    checked = check_arguments(optional, {"start_line": "2"}, "read_file")
    assert checked.arguments == {"start_line": 2} and "'start_line': read \"2\" as the integer 2" in checked.notes
    with pytest.raises(ToolError, match="'start_line': expected integer or null, got \"two\""):
        check_arguments(optional, {"start_line": "two"}, "read_file")


def test_a_size_or_range_is_said_in_words_never_with_the_whole_value() -> None:
    """jsonschema's own message for maxItems quotes the whole list (4,000 characters for 101 items)."""
    schema = {"type": "object", "properties": {"todos": {"type": "array", "maxItems": 100},
                                               "n": {"type": "integer", "minimum": 1}}}
    with pytest.raises(ToolError) as refused:
        check_arguments(schema, {"todos": [{"content": "x"}] * 101, "n": 0}, "todo_write")
    assert str(refused.value) == "invalid arguments for todo_write: 'n': at least 1; 'todos': at most 100 items"
