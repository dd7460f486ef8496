"""Repairs for streamed tool-call arguments: split surrogates re-paired, truncated JSON closed."""

from __future__ import annotations

import json

from ..text import clean_text

__all__ = ["repair_arguments"]


def repair_arguments(raw: str) -> tuple[str, str | None]:
    """Make streamed tool-call arguments valid JSON text.

    Args:
        raw: the joined argument fragments.

    Returns:
        `(json_text, problem)`: `raw` itself when it parses (problem None); `"{}"` for empty
        arguments (problem None: tools without parameters often send nothing); the json-repair
        result when the text was truncated; else `"{}"`. `problem` says what was done.
    """
    text = clean_text(raw)
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
