"""Request slots per server: at most `max_concurrent_requests` streams at once to one server.

A llama.cpp server has a few slots (`--parallel`); more requests than slots wait inside the server or fail,
and a subagent started beside its parent (or beside other subagents) would overload it. The config's
`[provider] max_concurrent_requests` (1 for `--local`) bounds the streams crow has open to the server at
once: every `ChatClient` of the process on the same server (the parent's, each subagent's) shares one
semaphore per event loop, so a request beyond the limit waits its turn in crow instead of in the server.
"""

from __future__ import annotations

import asyncio
import weakref
from urllib.parse import urlsplit

__all__ = ["server_key", "server_slots"]

_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = \
    weakref.WeakKeyDictionary()


def server_key(base_url: str) -> str:
    """What makes two base URLs one server: scheme, host, port and path (no query, no credentials)."""
    try:
        parts = urlsplit(base_url.strip())
        port = parts.port
    except ValueError:
        return base_url
    scheme = parts.scheme.lower()
    port = port or {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


def server_slots(base_url: str, limit: int | None) -> asyncio.Semaphore | None:
    """The semaphore every client of this event loop on `base_url`'s server shares (made with `limit` slots by
    the first client that asks), or None when `limit` is None (no limit).

    Must be called inside a running event loop.
    """
    if limit is None:
        return None
    by_server = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    return by_server.setdefault(server_key(base_url), asyncio.Semaphore(max(1, limit)))
