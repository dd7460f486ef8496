"""A tool call's arguments checked against the tool's JSON schema, with the coercions a schema allows.

Small and quantized models get a call's shape right and a type wrong: `"line": "3"`, `"recursive": "true"`, an
object sent as a string of JSON, one path where a list of paths is asked. `check_arguments` reads the arguments
the way the schema says (jsonschema, the reference validator) and applies only the coercions the schema makes
unambiguous, each noted so the model learns of it (`Checked.notes`, added to the call's result); everything
else fails with every problem named, never a Python error text.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ToolError

__all__ = ["Checked", "check_arguments"]

_MAX_PASSES = 8
"""Coercion rounds at most (each fixes what the last uncovered, e.g. an object in a string, then its fields)."""
_INTEGER = re.compile(r"[+-]?\d+")
_SHOWN = 60
"""Characters of a value shown in a problem or a note."""


@dataclass(frozen=True, slots=True)
class Checked:
    """Arguments as the tool will get them, and what crow changed on the way (one note per coercion)."""

    arguments: dict[str, Any]
    notes: tuple[str, ...] = ()


def check_arguments(schema: dict[str, Any] | None, arguments: Any, tool: str) -> Checked:
    """`arguments` checked against `schema` (a tool's `parameters`), coerced where the schema allows it.

    The coercions:

    - a string holding a number or a boolean where the schema asks for `integer`, `number` or `boolean` (and
      allows no string there);
    - a string holding a JSON object or array where the schema asks for an object or array;
    - a single value where the schema asks for an array whose items that value satisfies.

    Everything else fails, with every problem named by its path and what was expected (`'path' is required`,
    `'line': expected integer, got "3.5"`). A schema jsonschema cannot read (a server's own dialect) is not held
    against the call: the tool's own validation still runs.

    Args:
        schema: the JSON schema of the arguments (`type: object`); None: only "an object" is checked.
        arguments: the parsed JSON of the call's arguments.
        tool: the tool's name, for the error.

    Returns:
        The arguments to run the tool with (a copy when coerced) and the notes saying what was coerced.

    Raises:
        ToolError: the arguments are not an object, or fail the schema: every problem, by path, in one message.
    """
    if not isinstance(arguments, dict):
        raise ToolError(f"invalid arguments for {tool}: expected a JSON object, got {_kind(arguments)}")
    if not schema:
        return Checked(arguments)
    import jsonschema

    try:
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_class.check_schema(schema)
        validator = validator_class(schema)
    except Exception:  # a dialect jsonschema cannot read: the tool's own validation decides
        return Checked(arguments)
    errors = _errors(validator, arguments)
    if errors is None:
        return Checked(arguments)
    notes: list[str] = []
    current = arguments
    for _ in range(_MAX_PASSES):
        if not errors:
            break
        fixes = [(error, fixed) for error in errors if (fixed := _coerced(error)) is not None]
        if not fixes:
            break
        current = copy.deepcopy(current) if current is arguments else current
        for error, (value, note) in fixes:
            current = _put(current, list(error.absolute_path), value)
            notes.append(f"{_where(error)}: {note}")
        errors = _errors(validator, current)
        if errors is None:
            return Checked(current, tuple(notes))
    if errors:
        problems = "; ".join(dict.fromkeys(_problem(e) for e in errors))
        raise ToolError(f"invalid arguments for {tool}: {problems}")
    return Checked(current, tuple(notes))


def _errors(validator: Any, instance: Any) -> list[Any] | None:
    """Every schema error of `instance`, by path; None when the schema cannot be applied (an unresolvable
    `$ref`, a pattern Python cannot compile): then the tool's own validation decides."""
    try:
        return sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    except Exception:
        return None


def _coerced(error: Any) -> tuple[Any, str] | None:
    """The value `error.instance` becomes and the note saying so, or None when no coercion is unambiguous."""
    value = error.instance
    types = _wanted_types(error)
    if not types or "string" in types:
        return None
    if isinstance(value, str):
        text = value.strip()
        for kind in types:
            parsed = _from_text(text, kind)
            if parsed is not _NOTHING:
                return parsed, f"read {_shown(value)} as the {kind} {_shown(parsed)}"
    if types == ["array"] and not isinstance(value, list) and error.validator == "type":
        items = error.schema.get("items") if isinstance(error.schema, dict) else None
        if isinstance(items, dict) and not _fits(items, value):
            return None
        return [value], f"read {_shown(value)} as the array {_shown([value])}"
    return None


_NOTHING = object()


def _wanted_types(error: Any) -> list[str]:
    """The JSON types the schema asks for where `error` stands: a `type` keyword's, or every branch's of an
    `anyOf` / `oneOf` whose branches each name theirs (`int | None`: integer, null); [] when any branch names
    none (then nothing is unambiguous)."""
    def types_of(wanted: Any) -> list[str]:
        return [wanted] if isinstance(wanted, str) else [t for t in wanted if isinstance(t, str)] \
            if isinstance(wanted, list) else []

    if error.validator == "type":
        return types_of(error.validator_value)
    if error.validator in ("anyOf", "oneOf") and isinstance(error.validator_value, list):
        found: list[str] = []
        for branch in error.validator_value:
            named = types_of(branch.get("type")) if isinstance(branch, dict) else []
            if not named:
                return []
            found += [t for t in named if t != "null" and t not in found]
        return found
    return []


def _from_text(text: str, kind: str) -> Any:
    """`text` read as a JSON value of `kind`, or `_NOTHING`."""
    if kind == "integer" and _INTEGER.fullmatch(text):
        return int(text)
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return _NOTHING
        if math.isfinite(number):
            return int(number) if _INTEGER.fullmatch(text) else number
        return _NOTHING
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kind in ("object", "array") and text[:1] in "{[":
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return _NOTHING
        if isinstance(parsed, dict if kind == "object" else list):
            return parsed
    return _NOTHING


def _fits(schema: dict[str, Any], value: Any) -> bool:
    import jsonschema

    try:
        return bool(jsonschema.Draft202012Validator(schema).is_valid(value))
    except Exception:  # a schema of its own dialect: not a clear fit
        return False


def _put(root: Any, path: list[Any], value: Any) -> Any:
    """`root` with the value at `path` replaced by `value` (the root itself when `path` is empty)."""
    if not path:
        return value
    target = root
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return root


def _where(error: Any) -> str:
    return f"'{_path(list(error.absolute_path))}'" if error.absolute_path else "the arguments"


def _path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error: Any) -> str:
    """One problem as the model should read it: where, and what was expected."""
    where = _where(error)
    if error.validator == "required":
        missing = [name for name in error.validator_value
                   if isinstance(error.instance, dict) and name not in error.instance]
        inside = f" in {where}" if error.absolute_path else ""
        return "; ".join(f"'{name}' is required{inside}" for name in missing) or error.message
    if error.validator == "type":
        wanted = error.validator_value
        expected = wanted if isinstance(wanted, str) else " or ".join(map(str, wanted))
        return f"{where}: expected {expected}, got {_shown(error.instance)}"
    if error.validator in ("anyOf", "oneOf") and (wanted := _wanted_types(error)):
        nullable = " or null" if any(isinstance(b, dict) and b.get("type") == "null" for b in error.validator_value) \
            else ""
        return f"{where}: expected {' or '.join(wanted)}{nullable}, got {_shown(error.instance)}"
    if error.validator in _BOUNDS:
        return f"{where}: {_BOUNDS[error.validator].format(error.validator_value)}"
    if error.validator == "enum":
        return f"{where}: expected one of {_shown(error.validator_value)}, got {_shown(error.instance)}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set((error.schema.get("properties") or {}) if isinstance(error.schema, dict) else ())
        extra = sorted(k for k in error.instance if k not in allowed)
        known = f" (known: {', '.join(sorted(allowed))})" if allowed else ""
        return f"{where}: unexpected {', '.join(repr(k) for k in extra)}{known}"
    return f"{where}: {_cut(error.message, 200)}"  # never the whole value: a list of 101 items is no message


_BOUNDS = {"maxItems": "at most {} items", "minItems": "at least {} items", "maxLength": "at most {} characters",
           "minLength": "at least {} characters", "maximum": "at most {}", "minimum": "at least {}",
           "exclusiveMaximum": "less than {}", "exclusiveMinimum": "more than {}", "maxProperties": "at most {} keys",
           "minProperties": "at least {} keys"}
"""What a size or range keyword asks, in words (jsonschema's own message quotes the whole value)."""


def _shown(value: Any) -> str:
    return _cut(json.dumps(value, ensure_ascii=False), _SHOWN)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "an array",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)
