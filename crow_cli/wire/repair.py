"""Text repairs for streamed fragments: re-pairing split UTF-16 surrogates, closing truncated JSON."""

from __future__ import annotations

import json
import re

__all__ = ["fix_surrogates", "has_surrogates", "repair_arguments"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """True when `text` holds any UTF-16 surrogate code point (C-speed scan)."""
    return _SURROGATE.search(text) is not None


def fix_surrogates(text: str) -> str:
    """Re-pair surrogate halves into real code points; a lone half becomes U+FFFD.

    Gateways that slice JSON strings by UTF-16 code units send an emoji as `\\ud83c` at the end of one
    fragment and `\\udf89` at the start of the next (conformance case `openclaw-surrogate-split`).
    """
    if not has_surrogates(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def repair_arguments(raw: str) -> tuple[str, str | None]:
    """Make streamed tool-call arguments valid JSON text.

    Args:
        raw: the joined argument fragments.

    Returns:
        `(json_text, problem)`: `raw` itself when it parses (problem None); `"{}"` for empty
        arguments (problem None: tools without parameters often send nothing); the json-repair
        result when the text was truncated; else `"{}"`. `problem` says what was done.
    """
    text = fix_surrogates(raw)
    if not text.strip():
        return "{}", None
    try:
        json.loads(text)
        return text, None
    except ValueError:
        pass
    import json_repair  # a few ms to import; only paid when a stream really was cut

    try:
        repaired = json_repair.repair_json(text, ensure_ascii=False)
        if isinstance(json.loads(repaired), dict):
            return repaired, "arguments were truncated JSON; repaired"
    except (ValueError, TypeError, RecursionError):
        pass
    return "{}", "arguments were not valid JSON and could not be repaired; sent {} instead"
