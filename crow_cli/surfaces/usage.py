"""Token use as the person reads it: prompt tokens (cached ones counted), completion tokens and the cost.

Servers count cached prompt tokens differently; `wire.usage.token_counts` reads each one's shape.

The cost is counted where `[prices."MODEL"]` in the config gives the model's prices (US dollars per
million tokens: `input`, `output`, `cached_input`; a cached token costs `input` when no `cached_input`
is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..wire.usage import token_counts

__all__ = ["TokenUse", "footer"]


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
