"""The words of a refusal: what a 400/422 body says, read once, in one vocabulary (pure: no I/O, no state).

Every reader of a refusal (`wire.adapt.change_for`, which decides what to change, and through it
`wire.outgoing`) reads the server's words with these patterns, each named for what it means:

- `ASKS_CHANGE`: the server asks for a part of the request to change (it is unsupported, unknown, invalid,
  must be something else …): the gate of every request-rule finder;
- `FIELD_REFUSED`: a field is refused as forbidden, unknown or extra (a message field, a parameter);
- `FIELD_DEMANDED`: a field is demanded (required, missing, must be passed back);
- `PARAMETER_REFUSED`: the parameter itself is refused, whatever its value (so dropping it is the fix);
- `VALUE_REFUSED`: the value of a parameter is refused (out of range, not allowed), not the parameter.

The last two are kept apart on purpose: "Unsupported value: 'temperature' does not support 0.5" refuses a value
(never to be learned as "drop temperature"), "Unsupported parameter: 'seed'" the parameter. Sources are given
beside each pattern and in tests/wire/test_adapt.py, tests/wire/test_profiles.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..text import short_text

__all__ = ["ASKS_CHANGE", "FIELD_DEMANDED", "FIELD_REFUSED", "PARAMETER_REFUSED", "VALUE_REFUSED", "WORD",
           "field_demanded", "field_refused", "mentions_field", "message_of", "names", "names_exactly", "param_of",
           "readable", "reason", "unescape", "value_refused", "words"]

ASKS_CHANGE = re.compile(
    r"unsupported|not supported|unrecogni[sz]ed|unknown|not permitted|not allowed|extra_forbidden|extra inputs?|"
    r"invalid|cannot find field|does not support|doesn'?t support|not available|not enabled|must be|"
    r"only the default|please remove|remove|conflict|should|expected|not a valid|not accepted|unexpected|"
    r"forbidden|deprecated|instead|cannot|can.t|only one", re.IGNORECASE)
"""A refusal asking for a change to some part of the request (what part is for the finders of `wire.adapt`)."""

FIELD_REFUSED = re.compile(r"extra_forbidden|extra (inputs?|fields?)|not permitted|forbidden|unknown|unrecogni[sz]ed|"
                           r"not allowed|unexpected|additional propert|not supported|unsupported|invalid field|"
                           r"no such field|cannot find field", re.IGNORECASE)
"""A field refused as forbidden, unknown or extra: Mistral/pydantic `extra_forbidden`, "Extra inputs are not
permitted", strict OpenAI-compatible validators, Gemini "Unknown name", JSON-schema "additional properties"."""

FIELD_DEMANDED = re.compile(r"must be passed back|must be (provided|included|present|sent|set|non-?empty)|is required|"
                            r"required|missing|must (include|contain|have)|cannot be (empty|blank)|"
                            r"should not be empty|must not be empty", re.IGNORECASE)
"""A field demanded: DeepSeek thinking mode "must be passed back", Gemini "name is required" / "Name cannot be
empty", pydantic `missing`."""

PARAMETER_REFUSED = re.compile(r"extra inputs|extra_forbidden|unrecogni[sz]ed|unsupported parameter|unknown (parameter|"
                               r"field|name|argument)|does not support parameters|argument not supported|"
                               r"please remove|not supported with this model|cannot both|only one of|use only one|"
                               r"mutually exclusive|not both|cannot find field", re.IGNORECASE)
"""The parameter itself refused, whatever its value: vLLM "Extra inputs are not permitted", OpenAI "Unsupported
parameter", "Unrecognized request argument", LiteLLM "does not support parameters", Anthropic "cannot both be
specified"."""

VALUE_REFUSED = re.compile(r"\bvalue\b|\brange\b|maximum|minimum|\bbetween\b|greater|less than|\babove\b|\bbelow\b|"
                           r"must be (in|at)|should be (in|at)|\bgot\b|out of bounds|too (large|small|high|low)",
                           re.IGNORECASE)
"""A value refused, not its parameter: OpenAI "Invalid 'temperature': decimal above maximum value. Expected a value
<= 2, but got 5 instead." (code decimal_above_max_value), "Unsupported value: 'temperature' does not support 0.5";
vLLM "temperature must be in [0, 2], got 5.0." / pydantic "Input should be less than or equal to 2"; Anthropic
"temperature: range: 0..1"."""

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
    if key == "name" and re.search(r"\b(tool|function)[ _]?(message|response|result|call_output)s?\b.{0,80}"
                                   r"\bname\b|\bname\b.{0,40}\b(tool|function)[ _]?(message|response|result)",
                                   text, re.IGNORECASE | re.DOTALL):
        return True  # "tool messages need a name", "the name of the function response"
    patterns = (rf"[\"'`]{word}\\?[\"'`]", rf"[.\]/]{word}(?![A-Za-z0-9_])",
                rf"(?<![A-Za-z0-9_]){word}\s+(is|are|must|field|cannot|should|required|missing)\b",
                rf"\b(missing|field|parameter|property)\s+\\?[\"'`]?{word}(?![A-Za-z0-9_])")
    return any(re.search(p, text, re.IGNORECASE) for p in patterns)


def field_refused(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` (fields that were sent) that a 400/422 body refuses as forbidden,
    unknown or extra (`FIELD_REFUSED`); None when it refuses none of them."""
    if status not in (400, 422) or not FIELD_REFUSED.search(text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)


def field_demanded(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` that a 400/422 body demands (`FIELD_DEMANDED`: required, missing, must be
    passed back); None when it demands none of them."""
    if status not in (400, 422) or not FIELD_DEMANDED.search(text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)


def value_refused(text: str, name: str, value: Any) -> bool:
    """Whether a refusal naming parameter `name` refuses its value (`VALUE_REFUSED`: out of range, a typo) rather
    than the parameter itself (`PARAMETER_REFUSED`): then dropping it would silently lose what the user
    configured."""
    said = words(text)
    if PARAMETER_REFUSED.search(said) or not names(said, name):
        return False
    shown = json.dumps(value) if not isinstance(value, str) else value
    return bool(VALUE_REFUSED.search(said)) or (len(shown) <= 40 and names_exactly(said, shown))


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


# pydantic's error list as Python text inside a message (vLLM: "[{'type': 'extra_forbidden', 'loc': ('body',
# 'seed'), 'msg': 'Extra inputs are not permitted', 'input': 7}]"): its `msg` and `loc` are the reason
_PYDANTIC_ITEM = re.compile(r"""['"]loc['"]:\s*[(\[]([^)\]]{0,200})[)\]].{0,200}?['"]msg['"]:\s*(['"])(.{1,200}?)\2""",
                            re.S)
_BRACES = re.compile(r"[{}]")


def reason(text: str, limit: int = 200) -> str:
    """The server's reason for a refusal as plain words for a one-line notice: its message (a pydantic error list
    read as "msg at loc"), else the strings of its body joined with "; ", on one line, without the braces of a
    serialised object, without a closing period and at most `limit` characters. It is never put in parentheses
    of crow's (a reason has its own)."""
    said = message_of(text)
    items = [(m.group(3), ".".join(p.strip(" '\"") for p in m.group(1).split(",") if p.strip(" '\"")))
             for m in _PYDANTIC_ITEM.finditer(said or text)]
    if items:
        said = "; ".join(f"{msg} at {loc}" if loc else msg for msg, loc in dict.fromkeys(items))
    elif not said:
        found = _strings(text)
        said = "; ".join(dict.fromkeys(s for s in found if s.strip())) if found else text
    said = _BRACES.sub("", unescape(said))
    return short_text(" ".join(said.split()), limit).rstrip(" .;:") or "no reason given"
