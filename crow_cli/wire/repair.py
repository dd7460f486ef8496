"""Repairs for streamed tool-call arguments: split surrogates re-paired, truncated JSON closed."""

from __future__ import annotations

import json
from typing import NamedTuple

from ..text import clean_text

__all__ = ["RepairedArguments", "repair_arguments"]

_CLOSER = {"{": "}", "[": "]"}


class RepairedArguments(NamedTuple):
    """What `repair_arguments` made of one call's joined argument fragments."""

    text: str
    """Valid JSON text of an object: what is persisted and sent back."""
    problem: str | None
    """What was done, for a warning; None when nothing was (valid or empty arguments)."""
    cut_off: bool
    """True when the repair had to guess (close an open string, drop or fill a dangling key or value,
    or fall back to `{}`): the arguments are not what the model meant, so the call must not run.
    False when the text was valid, empty, or only missed closing `}` / `]` (Qwen/DashScope drop the
    final brace): then every value is complete."""


def repair_arguments(raw: str) -> RepairedArguments:
    """Make streamed tool-call arguments valid JSON text (reference: streaming-tool-calls.md §4).

    Args:
        raw: the joined argument fragments.

    Returns:
        `raw` itself when it parses; `"{}"` for empty arguments (tools without parameters often send
        nothing); `raw` plus its missing closing brackets when that alone makes a complete object
        (not `cut_off`); else the json-repair result (`cut_off`), or `"{}"` when that fails too
        (`cut_off`). Never raises.
    """
    text = clean_text(raw)
    if not text.strip():
        return RepairedArguments("{}", None, False)
    try:
        json.loads(text)
        return RepairedArguments(text, None, False)
    except json.JSONDecodeError as exc:  # at the end, or an open string: it ended mid-value; else it is wrong
        at_end = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        error = str(exc)
    except RecursionError:  # valid or not, nested deeper than Python's parser goes: no tool can take it
        return RepairedArguments("{}", "arguments were nested too deeply to read; sent {} instead, the call is "
                                 "not run", True)
    closed = _close_brackets(text)
    if closed is not None:
        return RepairedArguments(closed, "arguments lacked their closing brackets; closed them", False)
    import json_repair  # a few ms to import; only paid when a stream really was cut

    cut = ("arguments were cut off mid-value (truncated JSON)" if at_end else
           f"arguments were not valid JSON ({error})") + "; repaired for the history, the call is not run"
    try:
        repaired = json_repair.repair_json(text, ensure_ascii=False)
        if isinstance(json.loads(repaired), dict):
            return RepairedArguments(repaired, cut, True)
    except (ValueError, TypeError, RecursionError):
        pass
    return RepairedArguments("{}", "arguments were not valid JSON and could not be repaired; sent {} instead, "
                             "the call is not run", True)


def _close_brackets(text: str) -> str | None:
    """`text` plus the `}` / `]` it lacks, when that is a complete JSON object whose last value is whole.

    None when the text ends inside a string, after a key, comma or colon, or in a number or literal
    (a number such as `12` may have been cut from `125`), or when closing it does not parse.
    """
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSER:
            stack.append(_CLOSER[ch])
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    body = text.rstrip()
    if in_string or not stack or not body.endswith(('"', "}", "]", "true", "false", "null")):
        return None
    closed = body + "".join(reversed(stack))
    try:
        value = json.loads(closed)
    except (ValueError, RecursionError):
        return None
    return closed if isinstance(value, dict) else None
