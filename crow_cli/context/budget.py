"""The context budget: how big the model's window is and how much of it a history fills.

The window comes from `context_window` in the config (or a profile), else from the server
(`wire.window.discover_context_window`, asked once the prompt is big enough for it to matter), else
it is unknown: then only a `ContextOverflow` from the server starts a compaction. The prompt's size
is the server's `usage.prompt_tokens` of the last request plus an estimate for the messages added
since, or an estimate alone.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..history import Message, as_json, thinking_of, tool_calls_of
from ..wire.profiles import BLOCK_TEXT_FIELDS, REASONING_BLOCK_FIELDS, REASONING_FIELDS
from ..wire.usage import token_counts

__all__ = ["CHARS_PER_TOKEN", "DISCOVER_FROM_TOKENS", "Budget", "estimate_tokens"]

CHARS_PER_TOKEN = 4
"""The usual ratio for English text and code with BPE tokenizers; an estimate, not a count."""
_MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers)."""
_IMAGE_TOKENS = 1000
"""An image content part, roughly (OpenAI counts 85–1105 for one tile set)."""
DISCOVER_FROM_TOKENS = 2048
"""The estimated prompt size from which an unknown window is asked of the server (`Budget.discover`):
asking costs requests and a connection at start-up, and a smaller prompt is near the limit of no
window crow is used with but the smallest, whose `ContextOverflow` refusal teaches the window anyway."""


def estimate_tokens(messages: list[Message]) -> int:
    """A rough token count of `messages`: characters / 4 plus a few tokens per message.

    Counts the text of contents (strings, text and thinking parts), the reasoning kept on assistant
    messages (reasoning text fields, the text of reasoning blocks), tool-call names and arguments; an
    image part counts 1000. Linear in the size of the messages.
    """
    tokens, chars = _size(messages)
    return tokens + chars // CHARS_PER_TOKEN


def _size(messages: list[Message]) -> tuple[int, int]:
    """(tokens counted outright, characters of text) of `messages`, for `estimate_tokens`."""
    chars = 0
    tokens = 0
    for message in messages:
        tokens += _MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    tokens += _IMAGE_TOKENS
                elif isinstance(part, dict):  # text, or a thinking chunk (Mistral) whose text is nested
                    chars += len(str(part.get("text") or thinking_of(part) or ""))
        if message["role"] == "assistant":
            chars += _reasoning_chars(as_json(message))
        for call in tool_calls_of(message):
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"]) + 10
    return tokens, chars


def _reasoning_chars(message: dict[str, Any]) -> int:
    """Characters of the reasoning kept on an assistant message (text fields, the text of its blocks),
    which goes back with it when the client sends it."""
    chars = sum(len(text) for name in REASONING_FIELDS if isinstance(text := message.get(name), str))
    for name in REASONING_BLOCK_FIELDS:
        blocks = message.get(name)
        if isinstance(blocks, list):
            chars += sum(len(text) for block in blocks if isinstance(block, dict)
                         for key in BLOCK_TEXT_FIELDS if isinstance(text := block.get(key), str))
    return chars


@dataclass
class Budget:
    """What is known of the context window and of the last prompt's size.

    Args:
        window: the model's context window in tokens; None when unknown.
        threshold: compact when the prompt would pass this share of a known window.
        discover: asked once, before the first request whose prompt reaches `DISCOVER_FROM_TOKENS`
            (`window_for`), when `window` is None (returns None when the server does not say); its
            exceptions are ignored.
    """

    window: int | None = None
    threshold: float = 0.85
    discover: Callable[[], Awaitable[int | None]] | None = None
    _asked: bool = field(default=False, repr=False)
    _usage: tuple[int, int] | None = field(default=None, repr=False)
    """(prompt_tokens the server counted, how many outgoing messages that request held)."""
    _estimated: list[Message] = field(default_factory=list, repr=False)
    """The messages of the last estimate (kept alive, so their identities stay unique)."""
    _estimated_size: tuple[int, int] = field(default=(0, 0), repr=False)
    """Their `_size`."""

    async def ensure_window(self) -> int | None:
        """The window, asking `discover` the first time it is unknown."""
        if self.window is None and self.discover is not None and not self._asked:
            self._asked = True
            try:
                self.window = await self.discover()
            except Exception:  # a server that does not say is a server of unknown window
                self.window = None
        return self.window

    async def window_for(self, outgoing: list[Message]) -> int | None:
        """The window as far as a request of `outgoing` needs it: asked of the server (`ensure_window`)
        only once the prompt reaches `DISCOVER_FROM_TOKENS`."""
        if self.window is None and self.prompt_tokens(outgoing) >= DISCOVER_FROM_TOKENS:
            return await self.ensure_window()
        return self.window

    def record_usage(self, usage: Any, sent: int, timings: Any = None) -> None:
        """Note a server's `usage` object (and llama.cpp's `timings` beside it: its cached prompt tokens count
        too, `wire.usage.token_counts`) for a request that carried `sent` messages."""
        if isinstance(usage, dict):
            prompt, _cached, _completion = token_counts(usage, timings if isinstance(timings, dict) else None)
            if prompt > 0:
                self._usage = (prompt, sent)

    def forget_usage(self) -> None:
        """The outgoing history changed shape (compacted): the last count no longer applies."""
        self._usage = None

    def prompt_tokens(self, outgoing: list[Message]) -> int:
        """The size of `outgoing` in tokens: the last count plus an estimate of what came after it."""
        if self._usage is not None and self._usage[1] <= len(outgoing):
            counted, sent = self._usage
            return counted + estimate_tokens(outgoing[sent:])
        return self._estimate(outgoing)

    def _estimate(self, outgoing: list[Message]) -> int:
        """`estimate_tokens(outgoing)`, estimating only the messages appended since the last call (the
        same messages, by identity, start `outgoing`; else it starts over)."""
        known = len(self._estimated)
        if len(outgoing) < known or not all(map(operator.is_, outgoing, self._estimated)):
            self._estimated, self._estimated_size, known = [], (0, 0), 0
        tokens, chars = _size(outgoing[known:])
        self._estimated.extend(outgoing[known:])
        self._estimated_size = (self._estimated_size[0] + tokens, self._estimated_size[1] + chars)
        return self._estimated_size[0] + self._estimated_size[1] // CHARS_PER_TOKEN

    def near_limit(self, outgoing: list[Message]) -> bool:
        """True when the window is known and `outgoing` passes `threshold` of it."""
        return self.window is not None and self.prompt_tokens(outgoing) > self.threshold * self.window

    def describe(self, outgoing: list[Message]) -> str:
        """`12,345 / 32,768 tokens (38 %)`, or `12,345 tokens (window unknown)`; `~` marks an estimate."""
        used = self.prompt_tokens(outgoing)
        mark = "" if self._usage is not None else "~"
        if self.window:
            return f"{mark}{used:,} / {self.window:,} tokens ({100 * used // self.window} %)"
        return f"{mark}{used:,} tokens (context window unknown)"
