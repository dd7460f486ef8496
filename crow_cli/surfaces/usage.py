"""Token use as the person reads it: prompt tokens (cached ones counted), completion tokens and the cost.

Servers count cached prompt tokens differently:

- OpenAI (and most OpenAI-compatible APIs): `usage.prompt_tokens` counts every prompt token, and
  `usage.prompt_tokens_details.cached_tokens` says how many of them came from the cache (billed at the
  cached price). DeepSeek says it as `usage.prompt_cache_hit_tokens`.
- llama.cpp: `usage.prompt_tokens` counts only the tokens it processed for this request (`timings.prompt_n`);
  the ones it reused from its cache are `timings.cache_n`, beside usage. Counted alone, a long
  conversation read as a few hundred tokens a turn; here they are added back.

The cost is counted where `[prices."MODEL"]` in the config gives the model's prices (US dollars per
million tokens: `input`, `output`, `cached_input`; a cached token costs `input` when no `cached_input`
is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TokenUse", "footer", "token_counts"]


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


@dataclass
class TokenUse:
    """Tokens summed over requests (a turn, a run, a session) and their cost in US dollars.

    Args:
        prices: the model's `[prices."MODEL"]` table (`input`, `output`, `cached_input` per million
            tokens), or None when the config gives none (no cost is shown then).
    """

    prices: Mapping[str, float] | None = None
    prompt: int = 0
    """Prompt tokens, the cached ones included."""
    cached: int = 0
    """Prompt tokens the server took from its cache."""
    completion: int = 0
    reported: bool = False
    """Whether any request's usage was reported."""

    def add(self, usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None = None) -> None:
        """Count one request's `usage` (and llama.cpp's `timings`); nothing when the server sent no usage."""
        if not usage:
            return
        prompt, cached, completion = token_counts(usage, timings)
        self.reported = True
        self.prompt += prompt
        self.cached += cached
        self.completion += completion

    @property
    def cost(self) -> float | None:
        """US dollars, from `prices`; None without prices."""
        if not self.prices:
            return None
        uncached = self.prompt - self.cached
        cached_price = self.prices.get("cached_input", self.prices.get("input", 0.0))
        return (uncached * self.prices.get("input", 0.0) + self.cached * cached_price
                + self.completion * self.prices.get("output", 0.0)) / 1_000_000

    def text(self) -> str:
        """`1,204 in (1,100 cached) · 37 out · $0.0031`, or `not reported by the server`."""
        if not self.reported:
            return "not reported by the server"
        cached = f" ({self.cached:,} cached)" if self.cached else ""
        shown = f"{self.prompt:,} in{cached} · {self.completion:,} out"
        cost = self.cost
        return shown if cost is None else f"{shown} · ${cost:.4f}" if cost < 1 else f"{shown} · ${cost:,.2f}"


def footer(last: TokenUse, total: TokenUse, model: str, session_id: str | None, *, last_name: str = "this turn",
           total_name: str | None = "this session") -> str:
    """The line after a turn (chat) or a run (`crow run` on a terminal): `── USE this turn, USE this session ·
    MODEL · session ID`; `total_name` None leaves the total out (a run is one turn of its own)."""
    if not total.reported:
        used = "no token usage reported"
    elif total_name is None:
        used = f"{last.text()} {last_name}"
    else:
        used = f"{last.text()} {last_name}, {total.text()} {total_name}"
    parts = [used, model]
    if session_id:
        parts.append(f"session {session_id}")
    return "── " + " · ".join(parts)
