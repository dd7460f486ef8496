"""Asking a server for the model's context window (when the config does not say).

* vLLM: `GET /v1/models` → the model's `max_model_len`.
* OpenRouter: `GET /v1/models` → the model's `context_length` (or `top_provider.context_length`).
* llama.cpp server: `GET /props` (beside `/v1`) → `default_generation_settings.n_ctx` (the `-c`
  it was started with), or a top-level `n_ctx`.

Anything else (OpenAI's `/models` says nothing about windows, a 404, a timeout, a body over
`body.MAX_BODY_BYTES` decoded) is "unknown". The lookup has a total deadline (`timeout_s`, both
requests together): a server that trickles its answer never holds up the first turn for longer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["discover_context_window", "window_from_models", "window_from_props"]


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def window_from_models(body: Any, model: str) -> int | None:
    """The window of `model` in a `/models` listing (vLLM `max_model_len`, OpenRouter `context_length`)."""
    data = body.get("data") if isinstance(body, dict) else None
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or entry.get("id") != model:
            continue
        provider = entry.get("top_provider")
        for value in (entry.get("max_model_len"), entry.get("context_length"),
                      provider.get("context_length") if isinstance(provider, dict) else None):
            if (found := _positive(value)) is not None:
                return found
    return None


def window_from_props(body: Any) -> int | None:
    """The window in a llama.cpp `/props` answer (`default_generation_settings.n_ctx`, or `n_ctx`)."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    return _positive(settings.get("n_ctx") if isinstance(settings, dict) else None) or _positive(body.get("n_ctx"))


async def discover_context_window(base_url: str, model: str, api_key: str | None = None,
                                  headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> int | None:
    """The model's context window in tokens as the server states it, or None.

    `timeout_s` bounds the whole lookup, however slowly the server answers. Never raises for a server
    that does not answer, answers too much or does not say: it returns None.
    """
    import asyncio
    import json

    import httpx

    from .body import BodyTooLarge, read_body
    from .proxy import proxy_for
    from .tls import ssl_context

    sent = dict(headers or {})
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    base = base_url.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    try:
        async with asyncio.timeout(timeout_s), httpx.AsyncClient(
                timeout=timeout_s, headers=sent, verify=ssl_context(), proxy=proxy_for(base), trust_env=False) as http:
            for url in (f"{base}/models", f"{root}/props"):
                try:
                    async with http.stream("GET", url) as response:
                        body = json.loads(await read_body(response)) if response.status_code == 200 else None
                except (httpx.HTTPError, ValueError, RecursionError, BodyTooLarge):
                    continue
                found = window_from_models(body, model) if url.endswith("/models") else window_from_props(body)
                if found is not None:
                    return found
    except (httpx.HTTPError, TimeoutError):
        return None
    return None
