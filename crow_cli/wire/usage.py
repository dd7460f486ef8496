"""Token counts out of a server's `usage` (and llama.cpp's `timings`), whoever's shape they are in.

- OpenAI (and most OpenAI-compatible APIs): `usage.prompt_tokens` counts every prompt token, and
  `usage.prompt_tokens_details.cached_tokens` says how many of them came from the cache (billed at the
  cached price). DeepSeek says it as `usage.prompt_cache_hit_tokens`.
- llama.cpp: `usage.prompt_tokens` counts only the tokens it processed for this request (`timings.prompt_n`);
  the ones it reused from its cache are `timings.cache_n`, in the chunk beside usage. Counted alone, a long
  conversation read as a few hundred tokens a turn (in the footer, and in the prompt's size the context
  budget goes by); here they are added back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["token_counts"]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def token_counts(usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None = None) -> tuple[int, int, int]:
    """(prompt tokens, of which cached, completion tokens) of one request, from the server's `usage` and
    `timings` objects (see the module docstring for whose shape is whose); zeros for what was not reported."""
    usage = usage or {}
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    cached = cached or _count(usage.get("prompt_cache_hit_tokens"))
    if not cached and timings:
        reused = _count(timings.get("cache_n"))
        if reused and prompt == _count(timings.get("prompt_n")):  # llama.cpp counted the processed ones only
            prompt += reused
        cached = reused if reused <= prompt else 0
    return prompt, min(cached, prompt), completion
