"""The words of a refusal: what a 400/422 body says, read with the kinds of `wire.wording` (pure: no I/O, no state).

The body's words (`words`: every string of its JSON, quote escaping undone), its `message` and `param`, the reason
told in a notice (`reason`), whether it names a field or parameter (`names`, `mentions_field`) and what it says of
it, by the kinds of `wire.wording`: a field refused (`field_refused`) or demanded (`field_demanded`), a value
refused rather than its parameter (`value_refused`: "Unsupported value: 'temperature' does not support 0.5" is
never learned as "drop temperature", "Unsupported parameter: 'seed'" is). `wire.change` reads a refusal with these.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..text import short_text
from . import wording

__all__ = ["WORD", "field_demanded", "field_refused", "mentions_field", "message_of", "names", "names_exactly",
           "param_of", "readable", "reason", "unescape", "value_refused", "words"]

WORD = r"(?<![\w$]){}(?![\w$])"
"""A name as a whole word (`WORD.format(re.escape(name))`)."""

_COMMON_WORDS = frozenset({"name", "content", "type", "role", "index", "id", "data", "text", "format", "summary",
                           "signature"})
_SKIPPED_KEYS = ("input", "ctx", "url", "request_id", "requestId")
"""Keys of an error body whose strings are not the server's words (the request's values a validator echoes)."""


def unescape(text: str) -> str:
    """The error body with JSON/Python escaping of quotes undone (messages quote names as \\"x\\" or \\'x\\')."""
    return text.replace('\\\\"', '"').replace("\\\\'", "'").replace('\\"', '"').replace("\\'", "'")


def _strings(text: str) -> list[str] | None:
    """Every string of an error body's JSON, in order, but those under `_SKIPPED_KEYS`; None: no JSON."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    found: list[str] = []
    stack: list[Any] = [data]
    while stack:  # depth first, in document order, without recursion (a deep body is no RecursionError)
        value = stack.pop()
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            stack += reversed([item for key, item in value.items() if key not in _SKIPPED_KEYS])
        elif isinstance(value, list):
            stack += reversed(value)
    return found


def readable(text: str) -> str:
    """The words of an error body: every string in its JSON (a message, a `param`, a pydantic `loc`), joined
    with " | "; not the JSON's own `null`s and keys, nor the request's values a validator echoes back (`input`).
    A body that is no JSON is read as it is."""
    found = _strings(text)
    return " | ".join(found) if found else text


def words(text: str) -> str:
    """What the finders read: `readable(text)` with quote escaping undone."""
    return unescape(readable(text))


def names(text: str, name: str) -> bool:
    """Whether `text` names `name` as a whole word (also in camelCase: xAI's `frequencyPenalty`)."""
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
    return any(re.search(WORD.format(re.escape(n)), text) for n in {name, camel})


def names_exactly(text: str, name: str) -> bool:
    """Whether `text` names `name` as a whole word, exactly as written."""
    return re.search(WORD.format(re.escape(name)), text) is not None


def mentions_field(text: str, key: str) -> bool:
    """Whether an error text names the field `key`.

    A plain English word (`name`, `content` …) counts only quoted (`"name"`, `'name'`, `` `name` ``), as
    a path segment (`messages[2].name`, `/name`), or right beside what is said of it (`name is required`,
    `missing name`): Gemini's `Unknown name "x"` names the field x, not `name`.
    """
    word = re.escape(key)
    if key not in _COMMON_WORDS:
        return re.search(rf"(?<![A-Za-z0-9_]){word}(?![A-Za-z0-9_])", text) is not None
    if key == "name" and wording.said("tool_message_name", text):
        return True  # "tool messages need a name", "the name of the function response"
    patterns = (rf"[\"'`]{word}\\?[\"'`]", rf"[.\]/]{word}(?![A-Za-z0-9_])",
                rf"(?<![A-Za-z0-9_]){word}\s+(is|are|must|field|cannot|should|required|missing)\b",
                rf"\b(missing|field|parameter|property)\s+\\?[\"'`]?{word}(?![A-Za-z0-9_])")
    return any(re.search(p, text, re.IGNORECASE) for p in patterns)


def field_refused(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` (fields that were sent) that a 400/422 body refuses as forbidden,
    unknown or extra (`wording` field_refused); None when it refuses none of them."""
    if status not in (400, 422) or not wording.said("field_refused", text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)


def field_demanded(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` that a 400/422 body demands (`wording` field_demanded: required, missing, must be
    passed back); None when it demands none of them."""
    if status not in (400, 422) or not wording.said("field_demanded", text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)


def value_refused(text: str, name: str, value: Any) -> bool:
    """Whether a refusal naming parameter `name` refuses its value (`wording` value_refused: out of range, a typo)
    rather than the parameter itself (parameter_refused): then dropping it would silently lose what the user
    configured."""
    said = words(text)
    if wording.said("parameter_refused", said) or not names(said, name):
        return False
    shown = json.dumps(value) if not isinstance(value, str) else value
    return wording.said("value_refused", said) or (len(shown) <= 40 and names_exactly(said, shown))


def param_of(text: str) -> str | None:
    """The `error.param` of an error body (OpenAI's shape, kept by relays such as OpenRouter and LiteLLM)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    error = data.get("error", data) if isinstance(data, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) else None


def message_of(text: str) -> str:
    """The human part of an error body: its (first) `message` string; "" when there is none."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    stack = [data]
    while stack:
        value = stack.pop(0)
        if isinstance(value, dict):
            if isinstance(value.get("message"), str) and value["message"].strip():
                return str(value["message"])
            stack += list(value.values())
        elif isinstance(value, list):
            stack += value
    return ""


_BRACES = re.compile(r"[{}]")


def reason(text: str, limit: int = 200) -> str:
    """The server's reason for a refusal as plain words for a one-line notice: its message (a pydantic error list
    read as "msg at loc"), else the strings of its body joined with "; ", on one line, without the braces of a
    serialised object, without a closing period and at most `limit` characters. It is never put in parentheses
    of crow's (a reason has its own)."""
    said = message_of(text)
    items = [(m.group(3), ".".join(p.strip(" '\"") for p in m.group(1).split(",") if p.strip(" '\"")))
             for m in wording.patterns("pydantic_errors")[0].finditer(said or text)]
    if items:
        said = "; ".join(f"{msg} at {loc}" if loc else msg for msg, loc in dict.fromkeys(items))
    elif not said:
        found = _strings(text)
        said = "; ".join(dict.fromkeys(s for s in found if s.strip())) if found else text
    said = _BRACES.sub("", unescape(said))
    return short_text(" ".join(said.split()), limit).rstrip(" .;:") or "no reason given"
