"""The text pieces of a streamed turn: content and reasoning text as it arrives, made whole and shown.

`TextBuffer` joins text deltas and pairs UTF-16 surrogate halves split over deltas, `LeakFilter` drops the
chat-template tags small models leak into their answers, `ThinkSplit` shows a leading `<think>…</think>` block
as reasoning (it stays in the content as sent). `empty` and `keep_first` are the first-non-empty-value rule
every attached value follows. Pure and linear in the text received.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from ..events import Event, ReasoningDelta, TextDelta
from ..text import clean_text, has_surrogates

__all__ = ["HIGH_HALVES", "LOW_HALVES", "Fired", "LeakFilter", "TextBuffer", "ThinkSplit", "empty", "keep_first"]

class Fired(Protocol):
    """Notes that a rule of `AssistantTurn.rules` fired; its first firing, with `why`, is a debug notice appended
    to `events` under `--debug`."""

    def __call__(self, rule: str, events: list[Event] | None = None, why: str = "") -> None: ...

_HIGH_SURROGATES = ("\ud800", "\udbff")
HIGH_HALVES = frozenset(map(chr, range(0xD800, 0xDC00)))
"""The high halves of UTF-16 surrogate pairs: one ending a fragment may be cut from its low half."""
LOW_HALVES = frozenset(map(chr, range(0xDC00, 0xE000)))
"""The low halves of UTF-16 surrogate pairs."""
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def empty(value: Any) -> bool:
    """Whether an attached value says nothing (None, "", {} or []): it never replaces one that does."""
    return value is None or value == "" or value == {} or value == []


def keep_first(into: dict[str, Any], key: str, value: Any) -> None:
    """`into[key] = value` unless it holds a non-empty value already (the tool-call id rule)."""
    if not empty(value) and empty(into.get(key)):
        into[key] = value


class TextBuffer:
    """Collects text deltas; holds back a trailing high surrogate until its low half arrives."""

    __slots__ = ("_held", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._held = ""

    def add(self, text: str) -> str:
        """Append `text`; return what may be shown now (surrogates paired)."""
        if self._held:
            text, self._held = self._held + text, ""
        if has_surrogates(text):
            if _HIGH_SURROGATES[0] <= text[-1] <= _HIGH_SURROGATES[1]:
                text, self._held = text[:-1], text[-1]
            text = clean_text(text)
        if text:
            self.parts.append(text)
        return text

    def flush(self) -> str:
        """The held-back half, if any, as U+FFFD (it will never be paired now)."""
        tail, self._held = clean_text(self._held), ""
        if tail:
            self.parts.append(tail)
        return tail

    def value(self) -> str | None:
        return "".join(self.parts) or None


_LEAKED_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_end|>")
"""Tags of the Hermes/ChatML tool-call templates (Qwen, SmolLM2 under crow's `data/llama-tools.jinja`) that
small models served by llama.cpp leak into the answer text (`</tool_response>` after a result)."""
_LEAKED_TAG = re.compile("(?:" + "|".join(re.escape(tag) for tag in _LEAKED_TAGS) + r")\n?")


class LeakFilter:
    """Drops `_LEAKED_TAGS` from content text, also when a tag arrives split over deltas: a trailing piece
    that may still become one is held back until it does or cannot. Linear; text without `<` passes as is."""

    __slots__ = ("_held", "dropped")

    def __init__(self) -> None:
        self._held = ""
        self.dropped = False

    def feed(self, text: str) -> str:
        if not self._held and "<" not in text:
            return text
        text, self._held = self._held + text, ""
        if "<" not in text:
            return text
        cleaned = _LEAKED_TAG.sub("", text)
        self.dropped = self.dropped or cleaned != text
        start = cleaned.rfind("<")
        tail = cleaned[start:]
        if start >= 0 and len(tail) < 16 and any(tag.startswith(tail) for tag in _LEAKED_TAGS):
            cleaned, self._held = cleaned[:start], tail
        return cleaned

    def flush(self) -> str:
        """What was held back: it never became a tag, so it is text."""
        tail, self._held = self._held, ""
        return tail


class ThinkSplit:
    """Which part of the content is a leading `<think>…</think>` block (shown as reasoning); linear."""

    __slots__ = ("_held", "_state", "plain")

    def __init__(self) -> None:
        self._state = 0  # 0: may still open, 1: inside the block, 2: plain text
        self._held = ""
        self.plain = False
        """Past any think block: all text from here on is answer text (the hot path's test)."""

    def split(self, text: str, events: list[Event]) -> bool:
        """Append the events for `text`; True when a think block opened just now."""
        if self._state == 2:
            events.append(TextDelta(text))
            return False
        text, self._held = self._held + text, ""
        opened = False
        if self._state == 0:
            head = text.lstrip()
            if head.startswith(_THINK_OPEN):
                self._state, text, opened = 1, head[len(_THINK_OPEN):], True
            elif not head:  # only whitespace so far: shown, and a think block may still open
                events.append(TextDelta(text))
                return False
            elif _THINK_OPEN.startswith(head):  # "<", "<thi" …: not decided yet
                self._held = text
                return False
            else:
                self._state, self.plain = 2, True
                events.append(TextDelta(text))
                return False
        end = text.find(_THINK_CLOSE)
        if end >= 0:
            self._state, self.plain = 2, True
            if end:
                events.append(ReasoningDelta(text[:end]))
            if rest := text[end + len(_THINK_CLOSE):].lstrip("\n"):
                events.append(TextDelta(rest))
            return opened
        keep = next((n for n in range(min(len(text), len(_THINK_CLOSE) - 1), 0, -1)
                     if _THINK_CLOSE.startswith(text[-n:])), 0)
        if keep:
            text, self._held = text[:-keep], text[-keep:]
        if text:
            events.append(ReasoningDelta(text))
        return opened

    def flush(self, events: list[Event]) -> None:
        if self._held:
            events.append(ReasoningDelta(self._held) if self._state == 1 else TextDelta(self._held))
            self._held = ""
