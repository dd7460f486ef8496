"""A server's model list (`GET {base}/models`) and the context length each entry gives, where it does.

Context length fields, by server: `context_length` (OpenRouter), `max_model_len` (vLLM),
`context_window` (Groq and others), `max_context_length`, `meta.n_ctx_train` (llama.cpp's
training context); llama.cpp's served context is `n_ctx` in `GET {root}/props`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..config import Settings
from ..errors import AuthError, ProviderError
from ..text import mask_secrets, public_url, short_text
from ..wire.body import BodyTooLarge, read_body_sync
from ..wire.proxy import proxy_for, through
from ..wire.tls import ssl_context

__all__ = ["ModelInfo", "auth_headers", "context_length", "fetch_models", "model_id"]

_CONTEXT_KEYS = ("context_length", "max_model_len", "context_window", "max_context_length")


@dataclass(frozen=True)
class ModelInfo:
    """One `/models` entry."""

    id: str
    owned_by: str | None = None
    context_length: int | None = None
    """Tokens, when the entry says."""
    context_source: str = ""
    """Which field said it (`/models max_model_len`)."""


def _tokens(value: Any) -> bool:
    """A count of tokens: a positive int, not a bool (`true` is an int to Python) nor a negative number."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def context_length(entry: dict[str, Any] | None, props: Any = None) -> tuple[int | None, str]:
    """The context window in tokens and where it was found: `/props` n_ctx first, then the `/models` entry."""
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        for value in (props.get("n_ctx"), settings.get("n_ctx") if isinstance(settings, dict) else None):
            if _tokens(value):
                return value, "/props n_ctx"
    if entry:
        for key in _CONTEXT_KEYS:
            if _tokens(entry.get(key)):
                return int(entry[key]), f"/models {key}"
        meta = entry.get("meta")
        if isinstance(meta, dict) and _tokens(meta.get("n_ctx_train")):
            return int(meta["n_ctx_train"]), "/models meta.n_ctx_train (training context)"
    return None, ""


def model_id(entry: Any) -> str | None:
    """The model name one `/models` entry gives: its `id` when that is a non-blank string, or a number (as its
    text); None for anything else (an object, a list, a boolean, null, blank: no model to pick or send)."""
    name = entry.get("id") if isinstance(entry, dict) else None
    if isinstance(name, int) and not isinstance(name, bool):
        return str(name)
    return name if isinstance(name, str) and name.strip() else None


def auth_headers(settings: Settings) -> dict[str, str]:
    """The config's headers plus `Authorization: Bearer KEY` when a key is set (the key wins)."""
    headers = {k: v for k, v in settings.headers.items() if not (settings.api_key and k.lower() == "authorization")}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    return headers


def fetch_models(settings: Settings, timeout_s: float = 15.0) -> list[ModelInfo]:
    """`GET {base_url}/models`, each entry with its context length where the server gives it; an entry whose
    `id` is no name (an object, a list, a boolean, blank) is left out, a number is kept as its text.

    `timeout_s` bounds the whole request (a server trickling a byte every few seconds included); the
    body is read up to `wire.body.MAX_BODY_BYTES` decoded.

    Raises:
        AuthError: 401/403.
        ProviderError: unreachable, no whole answer within `timeout_s`, another error status, a body
            too large or not a model list.
    """
    url = f"{settings.base_url.rstrip('/')}/models"
    shown_url = public_url(url)
    deadline = time.monotonic() + timeout_s
    proxy = proxy_for(url)
    try:
        # no redirect followed: the config's credential headers would go with it to another host
        with httpx.stream("GET", url, headers=auth_headers(settings), timeout=timeout_s, verify=ssl_context(),
                          proxy=proxy, trust_env=False) as response:
            content = read_body_sync(response, deadline=deadline)
    except (httpx.TimeoutException, TimeoutError):
        raise ProviderError(f"no answer from {shown_url} within {timeout_s:g} s") from None
    except BodyTooLarge as exc:
        raise ProviderError(f"{shown_url}: {exc}") from None
    except httpx.HTTPError as exc:  # the reason, as `crow run` gives it (a refused connection, a certificate)
        reason = mask_secrets(short_text(str(exc) or type(exc).__name__), [settings.api_key])
        raise ProviderError(f"cannot reach {shown_url}{through(proxy)}: {reason}") from None
    if response.status_code in (401, 403):
        raise AuthError(f"authentication failed ({response.status_code}) at {shown_url}; check the API key "
                        "(--api-key, CROW_API_KEY or OPENAI_API_KEY)", status=response.status_code)
    if 300 <= response.status_code < 400:
        where = public_url(response.headers.get("location", "")) or "no address given"
        raise ProviderError(f"{shown_url} redirected the request ({response.status_code}) to {where}; it was not "
                            "followed (crow sends its credentials only to the configured server): set --base-url to "
                            "the address it should be", status=response.status_code)
    if response.status_code >= 400:
        raise ProviderError(f"{shown_url} answered {response.status_code}", status=response.status_code)
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        body = None
    data = body.get("data") if isinstance(body, dict) else body if isinstance(body, list) else None
    if not isinstance(data, list):
        raise ProviderError(f"{shown_url} gave no model list")
    out = []
    for entry in data:
        name = model_id(entry)
        if name is not None and isinstance(entry, dict):
            n_ctx, source = context_length(entry)
            owner = entry.get("owned_by")
            out.append(ModelInfo(name, str(owner) if owner is not None else None, n_ctx, source))
    return out
