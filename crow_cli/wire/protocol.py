"""What the loop needs of a model client, written down: `ChatStream`.

`wire.client.ChatClient` is one (on the Chat Completions and the Responses wire alike); test fakes and the
benches' scripted clients are others. A client that knows nothing of its server subclasses `ChatStream` and
takes its defaults: no author recorded, the usual reasoning fields, one choice, calls left in text recovered.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Protocol

from ..events import Notice, WarningEvent
from ..history import Message
from .profiles import REASONING_FIELDS

__all__ = ["ChatStream"]


class ChatStream(Protocol):
    """A model client as the loop uses it: one streamed turn per `stream` call, and what it knows of its server."""

    def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
               ) -> AsyncGenerator[dict[str, Any] | Notice | WarningEvent, None]:
        """Chunk dicts of one turn; a `Notice` (a retry before the stream started, a resend with reasoning
        dropped or added) or a `WarningEvent` (a damaged event skipped) is passed on as is."""
        ...

    @property
    def author(self) -> dict[str, str] | None:
        """Who writes this client's turns, recorded on each assistant message (`history.AUTHOR_KEY`):
        `{"base_url": PUBLIC_URL, "model": M}`; None: not known (nothing is recorded)."""
        return None

    @property
    def reasoning_fields(self) -> tuple[str, ...]:
        """The delta fields the server's reasoning text comes in (for the accumulator)."""
        return REASONING_FIELDS

    @property
    def choices(self) -> int:
        """The number of choices each request asks for (`n`): the turn is choice 0, others are ignored."""
        return 1

    @property
    def recover_tool_calls(self) -> bool:
        """Whether tool calls a turn's text ends with may be run as calls (`wire.textcalls`)."""
        return True
