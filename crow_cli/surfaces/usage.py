"""Token use as the person reads it: prompt tokens (cached ones counted), completion tokens and the cost.

Servers count cached prompt tokens differently; `wire.usage.token_counts` reads each one's shape.

The cost is counted where `[prices."MODEL"]` in the config gives the model's prices (US dollars per
million tokens: `input`, `output`, `cached_input`; a cached token costs `input` when no `cached_input`
is given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
    other_cost: float | None = None
    """The cost of the requests `add_other` counted at their own model's prices (a subagent's); None: none
    of them priced."""
    _other: list[int] = field(default_factory=lambda: [0, 0, 0], repr=False)
    """Prompt, cached and completion tokens `add_other` counted (not priced at `prices`)."""

    def add(self, usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None = None) -> None:
        """Count one request's `usage` (and llama.cpp's `timings`); nothing when the server sent no usage."""
        if not usage:
            return
        prompt, cached, completion = token_counts(usage, timings)
        self.reported = True
        self.prompt += prompt
        self.cached += cached
        self.completion += completion

    def add_other(self, usage: Mapping[str, Any] | None, timings: Mapping[str, Any] | None,
                  prices: Mapping[str, float] | None) -> None:
        """Count one request of another model (a subagent's) in the totals, its cost at `prices` (that model's
        `[prices."MODEL"]`; None: not priced)."""
        if not usage:
            return
        before = (self.prompt, self.cached, self.completion)
        self.add(usage, timings)
        counted = (self.prompt - before[0], self.cached - before[1], self.completion - before[2])
        self._other = [a + b for a, b in zip(self._other, counted, strict=True)]
        if prices:
            self.other_cost = (self.other_cost or 0.0) + _cost(prices, *counted)

    @property
    def cost(self) -> float | None:
        """US dollars, from `prices` (and `other_cost`); None when nothing was priced."""
        own = None
        if self.prices:
            prompt, cached, completion = self._other
            own = _cost(self.prices, self.prompt - prompt, self.cached - cached, self.completion - completion)
        if own is None and self.other_cost is None:
            return None
        return (own or 0.0) + (self.other_cost or 0.0)

    def text(self) -> str:
        """`1,204 in (1,100 cached) · 37 out · $0.0031`, or `not reported by the server`."""
        if not self.reported:
            return "not reported by the server"
        cached = f" ({self.cached:,} cached)" if self.cached else ""
        shown = f"{self.prompt:,} in{cached} · {self.completion:,} out"
        cost = self.cost
        return shown if cost is None else f"{shown} · ${cost:.4f}" if cost < 1 else f"{shown} · ${cost:,.2f}"


def _cost(prices: Mapping[str, float], prompt: int, cached: int, completion: int) -> float:
    """US dollars of `prompt` tokens (`cached` of them from the cache) and `completion` tokens at `prices`."""
    cached_price = prices.get("cached_input", prices.get("input", 0.0))
    return ((prompt - cached) * prices.get("input", 0.0) + cached * cached_price
            + completion * prices.get("output", 0.0)) / 1_000_000


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
