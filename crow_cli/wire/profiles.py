"""What crow knows about providers, as data: field names, policies and the wording of their errors.

One place for provider knowledge (the way pydantic-ai keeps `profiles/`): the wire code reads these
tables instead of naming providers itself. Sources are given beside each entry.
"""

from __future__ import annotations

import re

__all__ = ["REASONING_BLOCKS", "REASONING_FIELDS", "field_demanded", "field_refused", "mentions_field"]

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Delta / message fields that carry a turn's reasoning as text: `reasoning_content` (DeepSeek, vLLM,
SGLang, LiteLLM), `reasoning` (OpenRouter, Ollama, LM Studio, newer vLLM)."""

REASONING_BLOCKS = "reasoning_details"
"""The field of typed reasoning blocks (`reasoning.text`, `reasoning.summary`, `reasoning.encrypted`):
OpenRouter and gateways in front of Anthropic, Gemini and OpenAI o-series; sent back as merged."""

BLOCK_TEXT_FIELDS = ("text", "summary")
"""Block fields streamed in pieces and joined; every other block field keeps its first non-empty value."""

# A 400/422 that refuses a field (Mistral/pydantic `extra_forbidden`, "Extra inputs are not permitted",
# strict OpenAI-compatible validators, Gemini "Unknown name", JSON-schema "additional properties").
_REFUSED = re.compile(r"extra_forbidden|extra (inputs?|fields?)|not permitted|forbidden|unknown|unrecogni[sz]ed|"
                      r"not allowed|unexpected|additional propert|not supported|unsupported|invalid field|"
                      r"no such field|cannot find field", re.IGNORECASE)
# A 400/422 that demands one (DeepSeek thinking mode "must be passed back", Gemini "name is required",
# pydantic `missing`, "cannot be empty").
_DEMANDED = re.compile(r"must be passed back|must be (provided|included|present|sent|set|non-?empty)|is required|"
                       r"required|missing|must (include|contain|have)|cannot be (empty|blank)|"
                       r"should not be empty|must not be empty", re.IGNORECASE)
_COMMON_WORDS = frozenset({"name", "content", "type", "role", "index", "id", "data", "text", "format", "summary",
                           "signature"})


def mentions_field(text: str, key: str) -> bool:
    """Whether an error text names the field `key`.

    A plain English word (`name`, `content` …) counts only quoted (`"name"`, `'name'`, `` `name` ``), as
    a path segment (`messages[2].name`, `/name`), or right beside what is said of it (`name is required`,
    `missing name`): Gemini's `Unknown name "x"` names the field x, not `name`.
    """
    word = re.escape(key)
    if key not in _COMMON_WORDS:
        return re.search(rf"(?<![A-Za-z0-9_]){word}(?![A-Za-z0-9_])", text) is not None
    patterns = (rf"[\"'`]{word}\\?[\"'`]", rf"[.\]/]{word}(?![A-Za-z0-9_])",
                rf"(?<![A-Za-z0-9_]){word}\s+(is|are|must|field|cannot|should|required|missing)\b",
                rf"\b(missing|field|parameter|property)\s+\\?[\"'`]?{word}(?![A-Za-z0-9_])")
    return any(re.search(p, text, re.IGNORECASE) for p in patterns)


def field_refused(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` (fields that were sent) that a 400/422 body refuses as forbidden,
    unknown or extra; None when it refuses none of them."""
    if status not in (400, 422) or not _REFUSED.search(text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)


def field_demanded(status: int, text: str, candidates: list[str]) -> str | None:
    """The field among `candidates` that a 400/422 body demands (required, missing, must be passed
    back); None when it demands none of them."""
    if status not in (400, 422) or not _DEMANDED.search(text):
        return None
    return next((k for k in candidates if mentions_field(text, k)), None)
