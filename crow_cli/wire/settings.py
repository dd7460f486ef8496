"""Where and how a client reaches the model: `ClientSettings`, one frozen record per client, and its base URL
split for the SDK (`split_base_url`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .outgoing import ReasoningEcho

__all__ = ["ClientSettings", "split_base_url"]


@dataclass(frozen=True)
class ClientSettings:
    """Where and how to reach the model."""

    base_url: str
    """May carry a query string (`?api-version=…`, Azure): it is sent with every request, never shown."""
    model: str
    api_key: str | None = field(default=None, repr=False)
    """Secret: never printed, logged or stored; `repr` hides it."""
    headers: dict[str, str] = field(default_factory=dict)
    max_retries: int = 3
    """Retries for 408/409/429/5xx and connection errors before any output."""
    connect_timeout_s: float = 15.0
    idle_timeout_s: float = 300.0
    """Longest silence (seconds) between two reads of a response before the turn fails."""
    first_byte_timeout_s: float = 60.0
    """Longest wait (seconds) from sending a request to the start of its response (status and headers);
    past it the turn fails at once, without retries (a server that accepted the connection and hangs)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Extra request fields (temperature, max_tokens …) merged into every request body."""
    record_dir: str | None = None
    """When set, every request body and raw SSE response is written there (see `wire.record`)."""
    reasoning_echo: ReasoningEcho = "auto"
    """Whether a turn's reasoning goes back to the server (a `ReasoningEcho`: `auto`, `always` or `never`);
    see `ChatClient.outgoing_messages`. Another value is a `ValueError` when the client is made."""
    adapt_requests: bool = True
    """Change what a server refuses and send the request again, remembering the change (`wire.change`);
    False: a refusal ends the turn, and no learned or known rule is applied."""
    trace: bool = False
    """Report each adaptation decision as a `Notice(code="adapt_debug")` (for `--debug`)."""
    provider: dict[str, Any] = field(default_factory=dict)
    """Overrides of the server's `wire.profiles.Profile` (the config's `[provider]` table)."""
    params_from: str | None = None
    """Where `params` were set, as a refused value's error names it (`[profiles.fast.params] in FILE`); None:
    not known (the error then points at the config and the flags)."""


def split_base_url(base_url: str) -> tuple[str, dict[str, str | list[str]]]:
    """`base_url` without its query string, and the query's parameters (a repeated name gives a list).

    The SDK joins paths onto the base URL's text, so a query must travel as parameters instead.
    """
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(base_url)
    query: dict[str, str | list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        old = query.get(name)
        query[name] = value if old is None else [*([old] if isinstance(old, str) else old), value]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), query
