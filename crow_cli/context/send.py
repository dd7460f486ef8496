"""One request of the loop: the outgoing history made valid and kept within the context window.

    history ──► outgoing (checkpoint view + newer messages, normalised)
                  │ near 85 % of a known window ──► compact (a summary request) ──┐
                  ▼                                                              ▼
               client.stream ── ContextOverflow before any chunk ──► compact ──► client.stream once more

Chunks and the client's own events pass through unchanged; compaction adds its notices.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Protocol

from ..errors import ContextOverflow, CrowError
from ..events import Event, WarningEvent
from ..history import Message
from .compact import Compactor
from .normalise import normalise

__all__ = ["send"]


class _Stream(Protocol):
    def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
               ) -> AsyncGenerator[dict[str, Any] | Event, None]: ...


async def send(history: list[Message], client: _Stream, tools: list[dict[str, Any]] | None,
               compactor: Compactor | None = None) -> AsyncGenerator[dict[str, Any] | Event, None]:
    """Stream one turn for `history` (never modified): chunk dicts and events.

    Without a `compactor` the normalised history is sent as is. With one, the history is compacted
    first when it would pass the threshold of a known window (a failed summary is a warning: the
    request goes as it is), and after a `ContextOverflow` refusal it is compacted and the request
    sent once more.

    Raises:
        ContextOverflow: the compacted history was refused too, or could not be compacted.
        CrowError: whatever the client raises.
    """
    if compactor is None:
        async with aclosing(client.stream(normalise(history), tools)) as items:
            async for item in items:
                yield item
        return
    outgoing = compactor.outgoing(history)
    await compactor.budget.window_for(outgoing)
    if compactor.budget.near_limit(outgoing):
        try:
            async with aclosing(compactor.compact(history, client)) as events:
                async for event in events:
                    yield event
        except CrowError as exc:
            yield WarningEvent(f"could not compact the conversation: {exc}; sending it as it is")
    started = False
    messages = compactor.outgoing(history)
    try:  # the client's stream is read here, not through a generator of its own: a layer less per chunk
        async with aclosing(client.stream(messages, tools)) as items:
            async for item in items:
                if isinstance(item, dict):
                    started = True
                    _record_usage(compactor, item, messages)
                yield item
        return
    except ContextOverflow as exc:
        if started:
            raise
        overflow = exc
    async with aclosing(compactor.compact(history, client, overflow=overflow)) as events:
        async for event in events:
            yield event
    messages = compactor.outgoing(history)
    async with aclosing(client.stream(messages, tools)) as items:
        async for item in items:
            if isinstance(item, dict):
                _record_usage(compactor, item, messages)
            yield item


def _record_usage(compactor: Compactor, chunk: dict[str, Any], messages: list[Message]) -> None:
    """Tell the budget what a chunk carrying `usage` says the request of `messages` cost."""
    if chunk.get("usage"):
        compactor.budget.record_usage(chunk["usage"], len(messages), chunk.get("timings"))
