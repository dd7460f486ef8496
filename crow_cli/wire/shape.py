"""The shape of a Chat Completions chunk, checked once at the wire's edge (before the accumulator).

A chunk is the JSON object of one SSE `data:` event (OpenAI `chat.completion.chunk`). The fields crow
reads must have the types the OpenAI API reference gives them (the table is at `_Checker`); a field of
another type (a string where an object belongs, `"choices": -1`, an index that is a list) is removed from the
chunk and named, so that nothing after this point meets a type it does not expect. Fields crow does not read
(`id`, `model`, `logprobs`, reasoning fields, extensions) are not checked here. Null is accepted for every
field (servers send `"content": null`, `"usage": null`): it means absent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["check_chunk", "has_choice"]

_TOKEN_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _kind(value: Any) -> str:
    """How a JSON value of the wrong type is named in a problem."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_arguments(value: Any) -> bool:
    return isinstance(value, (str, dict))


class _Checker:
    """Removes wrong-typed fields from one chunk (in place) and collects one problem per removal.

    The fields checked:

        choices            list of objects (null: none)
          index            integer (null: absent)
          delta            object (null: absent)
            content        string, or list of objects whose `text` is a string (content parts)
            refusal        string
            tool_calls     list of objects, or one object sent bare (Azure, some proxies)
              index        integer (absent: Gemini)
              id, type     string
              function     object
                name       string
                arguments  string, or an object (MiniMax sends the parsed arguments)
          finish_reason    string
        usage              object; its `prompt_tokens`, `completion_tokens`, `total_tokens` integers
        error              a non-empty value is an in-band error (`wire.stream`); an empty one is removed
    """

    def __init__(self) -> None:
        self.problems: list[str] = []

    def field(self, obj: dict[str, Any], key: str, ok: Callable[[Any], bool], expected: str, where: str) -> Any:
        """`obj[key]` when it is absent, null or of the right type (then returned); else removed (None)."""
        value = obj.get(key)
        if value is None or ok(value):
            return value
        del obj[key]
        self.problems.append(f"{where}{key} is {_kind(value)}, not {expected}")
        return None

    def objects(self, owner: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        """The objects in the list `owner[key]`; every other item is named and removed from it."""
        values: list[Any] = owner[key]
        kept = [v for v in values if isinstance(v, dict)]
        if len(kept) != len(values):
            self.problems += [f"{where}{key}[{i}] is {_kind(v)}, not an object"
                              for i, v in enumerate(values) if not isinstance(v, dict)]
            owner[key] = kept
        return kept

    def chunk(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk and chunk["error"] is not None:  # a non-empty error was raised before this
            self.problems.append(f"error is {_kind(chunk.pop('error'))}, not an error object")
        usage = self.field(chunk, "usage", _is_object, "an object", "")
        if usage:
            for key in _TOKEN_COUNTS:
                self.field(usage, key, _is_int, "an integer", "usage.")
        choices = self.field(chunk, "choices", lambda v: isinstance(v, list), "a list", "")
        if choices:
            for n, choice in enumerate(self.objects(chunk, "choices", "")):
                self.choice(choice, f"choices[{n}].")

    def choice(self, choice: dict[str, Any], where: str) -> None:
        self.field(choice, "index", _is_int, "an integer", where)
        self.field(choice, "finish_reason", _is_str, "a string", where)
        delta = self.field(choice, "delta", _is_object, "an object", where)
        if not delta:
            return
        where += "delta."
        content = self.field(delta, "content", lambda v: isinstance(v, (str, list)), "a string or a list", where)
        if isinstance(content, list):
            for n, part in enumerate(self.objects(delta, "content", where)):
                self.field(part, "text", _is_str, "a string", f"{where}content[{n}].")
        self.field(delta, "refusal", _is_str, "a string", where)
        calls = self.field(delta, "tool_calls", lambda v: isinstance(v, (list, dict)), "a list", where)
        if isinstance(calls, dict):
            self.call(calls, where + "tool_calls.")
        elif calls:
            for n, call in enumerate(self.objects(delta, "tool_calls", where)):
                self.call(call, f"{where}tool_calls[{n}].")

    def call(self, call: dict[str, Any], where: str) -> None:
        self.field(call, "index", _is_int, "an integer", where)
        self.field(call, "id", _is_str, "a string", where)
        self.field(call, "type", _is_str, "a string", where)
        function = self.field(call, "function", _is_object, "an object", where)
        if function:
            self.field(function, "name", _is_str, "a string", where + "function.")
            self.field(function, "arguments", _is_arguments, "a string or an object", where + "function.")


def check_chunk(chunk: dict[str, Any]) -> list[str]:
    """Remove from `chunk`, in place, every field crow reads whose value has the wrong type (module
    docstring); return one problem per removal, naming the field by its path
    (`choices[0].delta.tool_calls[1].index is a string, not an integer`). [] for a well-formed chunk,
    which is left untouched. Never raises.
    """
    if _well_formed(chunk):
        return []
    checker = _Checker()
    checker.chunk(chunk)
    return checker.problems


def _well_formed(chunk: dict[str, Any]) -> bool:
    """True for a chunk in the shapes servers send on every token (plain dicts, strings and ints where they
    belong, or null), which `_Checker` would leave untouched; False sends the chunk through `_Checker`. Per
    chunk, so it builds no field paths: it only has to be right when it says True."""
    if chunk.get("error") is not None:
        return False
    usage = chunk.get("usage")
    if usage is not None and (type(usage) is not dict or any(type(usage.get(k)) not in _INT for k in _TOKEN_COUNTS)):
        return False
    choices = chunk.get("choices")
    if type(choices) not in _LIST:
        return False
    for choice in choices or ():
        if type(choice) is not dict or type(choice.get("index")) not in _INT \
                or type(choice.get("finish_reason")) not in _STR:
            return False
        delta = choice.get("delta")
        if delta is None:
            continue
        if type(delta) is not dict or type(delta.get("content")) not in _STR or type(delta.get("refusal")) not in _STR \
                or type(calls := delta.get("tool_calls")) not in _LIST:
            return False
        for call in calls or ():
            if type(call) is not dict or type(call.get("index")) not in _INT or type(call.get("id")) not in _STR \
                    or type(call.get("type")) not in _STR or type(function := call.get("function")) not in _OBJECT \
                    or (function and (type(function.get("name")) not in _STR
                                      or type(function.get("arguments")) not in _STR)):
                return False
    return True


_NULL = type(None)
_INT, _STR, _LIST, _OBJECT = (int, _NULL), (str, _NULL), (list, _NULL), (dict, _NULL)
"""The exact types `_well_formed` takes for each kind of field (a subclass, a bool among them, goes to `_Checker`)."""


def has_choice(chunk: dict[str, Any]) -> bool:
    """Whether a checked chunk carries a choice with something in it: a delta object or a finish_reason."""
    return any(isinstance(c.get("delta"), dict) or c.get("finish_reason") for c in chunk.get("choices") or ())
