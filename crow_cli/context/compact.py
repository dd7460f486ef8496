"""Compaction: make a history that has outgrown the context window fit again, without losing it.

    outgoing history ──► system prompt │ old exchanges                    │ last exchanges
                                         │ 1. old tool outputs shortened     │ kept verbatim
                                         │ 2. still too big: summarised by   │
                                         │    the model (a separate request) │
    compacted view   ──► system prompt │ user: "[summary …]"               │ last exchanges

The stored session is never changed: the compacted view is a `Checkpoint` that stands for the first
`position` messages of the history, and later requests send `view + history[position:]`. Where the history
is cut is told at `_cut`, what a summary must keep at `_kept_state`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import ContextOverflow
from ..events import Event, Notice, WarningEvent
from ..history import Message, is_prompt, tool_calls_of
from ..images import describe_part, image_parts
from ..modes import mode_note, told_mode
from ..todos import checklist, latest_todos
from ..wire.accumulate import StreamAccumulator
from .budget import CHARS_PER_TOKEN, Budget, estimate_tokens
from .normalise import Normaliser, normalise

__all__ = ["SUMMARY_PREFIX", "Checkpoint", "Compactor", "shorten_tool_output", "shorten_tool_outputs"]

SUMMARY_PREFIX = "[crow: the earlier conversation was compacted to fit the model's context window; summary:]"
"""How the summary message starts (the model and a reader of the session see it)."""

KEEP_EXCHANGES = 2
"""Exchanges (a user message and everything after it) kept verbatim at the end."""
TOOL_OUTPUT_LIMIT = 2_000
"""Old tool outputs longer than this (characters) are shortened ..."""
TOOL_OUTPUT_HEAD, TOOL_OUTPUT_TAIL = 1_000, 500
"""... to their first and last characters, with a marker between."""
TARGET = 0.6
"""After shortening alone, the history must be below this share of the window; otherwise it is summarised."""
SUMMARY_INPUT_CHARS = 120_000
"""The transcript sent for summary at most, when the window is unknown (else 60 % of the window)."""

_SUMMARY_SYSTEM = (
    "You are compacting a conversation between a user and a coding assistant so that it can go on "
    "within a limited context window. Write a summary that lets the assistant continue the work "
    "without the original messages: the user's goals and requests, decisions made, facts learned "
    "(file paths, names, commands and their outcomes, errors), the current state of the work and "
    "what remains to be done. Be concise and specific; use short bullet points; do not address the user.")


class _Stream(Protocol):
    def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
               ) -> AsyncGenerator[Any, None]: ...


@dataclass(frozen=True)
class Checkpoint:
    """A compacted view that stands for the first `position` messages of a history."""

    position: int
    """How many messages of the (stored) history the view replaces."""
    view: list[Message]
    """What is sent instead of `history[:position]`: system prompt, summary, last exchanges."""
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    """The model's summary; None when shortening old tool outputs was enough."""

    def outgoing(self, history: list[Message]) -> list[Message]:
        """`view + history[position:]`; the whole history when it is shorter than `position` (undone)."""
        if self.position > len(history):
            return list(history)
        return [*self.view, *history[self.position:]]


def shorten_tool_output(text: str, limit: int = TOOL_OUTPUT_LIMIT, head: int = TOOL_OUTPUT_HEAD,
                        tail: int = TOOL_OUTPUT_TAIL) -> str:
    """`text` when at most `limit` characters, else its head and tail with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… crow cut {cut:,} characters of this tool output to save context …]\n{text[-tail:]}"


def shorten_tool_outputs(messages: list[Message], limit: int = TOOL_OUTPUT_LIMIT) -> list[Message]:
    """A copy of `messages` whose long tool outputs are shortened (`shorten_tool_output`)."""
    out: list[Message] = []
    for m in messages:
        if m["role"] == "tool" and isinstance(content := m.get("content"), str) and len(content) > limit:
            m = {**m, "content": shorten_tool_output(content, limit, min(TOOL_OUTPUT_HEAD, limit // 2),
                                                     min(TOOL_OUTPUT_TAIL, limit // 4))}
        out.append(m)
    return out


def _cut(body: list[Message], keep: int) -> int:
    """Where the verbatim part of `body` starts: before the `keep`-th last user message, else before
    the last assistant message (never before a tool result); 0 when nothing can be cut.

    The history is cut only before a user message (or, when one exchange is all there is, before an assistant
    message), so an assistant tool call always stays together with its results.
    """
    users = [i for i, m in enumerate(body) if is_prompt(m)]  # a turn's tool images stay with their results
    if len(users) > keep:
        return users[-keep]
    if users and users[0] > 0:
        return users[0]
    assistants = [i for i, m in enumerate(body) if m.get("role") == "assistant" and i > 0]
    return assistants[-1] if assistants else 0


def _transcript(messages: list[Message], limit: int) -> str:
    lines = []
    for m in messages:
        role = str(m.get("role", "")).upper()
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p["text"]) if "text" in p else "[image]" for p in content
                               if isinstance(p, dict) and ("text" in p or p.get("type") == "image_url"))
        if role == "TOOL":
            lines.append(f"TOOL RESULT: {content}")
            continue
        if content:
            lines.append(f"{role}: {content}")
        for call in tool_calls_of(m):
            lines.append(f"{role} called {call['function']['name']}({call['function']['arguments']})")
    text = "\n\n".join(lines)
    if len(text) > limit:  # the start (an earlier summary, the first request) and the most recent part
        head = limit // 4
        text = f"{text[:head]}\n\n[… {len(text) - limit:,} characters left out …]\n\n{text[-(limit - head):]}"
    return text


class Compactor:
    """Compacts the outgoing history of one conversation and keeps its checkpoint.

    Args:
        budget: the context window and prompt size.
        checkpoint: the conversation's latest checkpoint (a continued session's), if any.
        keep_exchanges: exchanges kept verbatim.
    """

    def __init__(self, budget: Budget, checkpoint: Checkpoint | None = None,
                 keep_exchanges: int = KEEP_EXCHANGES) -> None:
        self.budget = budget
        self.checkpoint = checkpoint
        self.keep_exchanges = keep_exchanges
        self.on_checkpoint: list[Any] = []
        """Callables given each new `Checkpoint` (the session recorder stores it)."""
        self.before_compact: list[Callable[[str, str | None], Awaitable[Any]]] = []
        """Awaited before a summary is asked for, with the trigger (`manual`: `/compact`, else `auto`) and the
        focus asked for (the `PreCompact` hooks)."""
        self._normalise = Normaliser()  # each turn normalises only the messages it appended

    def outgoing(self, history: list[Message]) -> list[Message]:
        """What is sent for `history`: the checkpoint's view and what came after it, normalised."""
        base = self.checkpoint.outgoing(history) if self.checkpoint is not None else history
        return self._normalise(base)

    async def compact(self, history: list[Message], client: _Stream, *, focus: str | None = None,
                      overflow: ContextOverflow | None = None, asked: bool = False) -> AsyncGenerator[Event, None]:
        """Compact the outgoing history of `history`; yields `compacting` / `compacted` notices.

        Args:
            history: the full (stored) history; not changed.
            client: streams the summary request (no tools offered).
            focus: what the summary should keep in particular (`/compact FOCUS`).
            overflow: the server's refusal that asked for it (its `n_ctx` teaches the window).
            asked: the user asked for it (`/compact`), whatever the size: the notice says so.

        Raises:
            CrowError: the summary request failed, or nothing could be made smaller.
        """
        if overflow is not None and overflow.n_ctx and not self.budget.window:
            self.budget.window = overflow.n_ctx
        messages = self.outgoing(history)
        before = self.budget.prompt_tokens(messages)
        if overflow is not None and overflow.prompt_tokens:
            before = max(before, overflow.prompt_tokens)
        n_sys = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
        system, body = messages[:n_sys], messages[n_sys:]
        cut = _cut(body, self.keep_exchanges)
        old, recent = shorten_tool_outputs(body[:cut]), body[cut:]
        window = self.budget.window
        summary: str | None = None
        left_out = ""
        view = [*system, *old, *recent]
        shortened_enough = (window is not None and overflow is None and focus is None
                            and estimate_tokens(view) <= TARGET * window and old != body[:cut])
        kept = estimate_tokens([*system, *recent]) if window is not None else 0
        # the newest exchanges alone (a long signed thinking block) past the target: a summary of the older part
        # cannot make the prompt fit and may make it longer, so no request is spent on one; the server's own
        # overflow answer, if it comes, decides the rest
        hopeless = (window is not None and bool(old) and not shortened_enough and overflow is None
                    and focus is None and not asked and kept > TARGET * window)
        if hopeless:
            assert window is not None
            yield WarningEvent(f"the newest exchanges alone are about {kept:,} tokens, over the "
                               f"{int(TARGET * window):,} a compaction aims for: summarising the {len(old)} earlier "
                               "messages cannot make the prompt fit, so none is asked for")
        if not shortened_enough and old and not hopeless:
            why = (f"compacting as asked ({self._of(before)})" if asked and overflow is None else
                   f"the conversation is {'past' if overflow else 'near'} the model's context window "
                   f"({self._of(before)})")
            for before_compact in self.before_compact:
                await before_compact("manual" if asked else "auto", focus)
            yield Notice(f"crow: {why}; asking the model to summarise {len(old)} earlier "
                         f"message{'s' if len(old) > 1 else ''}",
                         code="compacting", tokens_before=before)
            async with aclosing(self._summarise(client, old, focus)) as items:
                async for item in items:
                    if isinstance(item, str):
                        summary = item
                    else:
                        yield item
            # a summary is text: the images of the summarised messages are named, never dropped unsaid
            images = [describe_part(p, named=False) for m in old for p in image_parts(m.get("content"))]
            note = ""
            if images:
                left_out = f"; left out {len(images)} image{'s' if len(images) > 1 else ''} of the summarised " \
                           f"messages: {', '.join(images)}"
                note = (f"\n\n[crow: the summary stands for {len(images)} image{'s' if len(images) > 1 else ''} "
                        f"the model no longer sees: {', '.join(images)}]")
            note += _kept_state(history, recent)
            view = normalise([*system, {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{summary}{note}"},
                              *recent])
        if not old or (window is not None and estimate_tokens(view) > TARGET * window):
            keep = _last_group(view)  # the last exchanges are long too: all but the newest results shortened
            shorter = [*shorten_tool_outputs(view[:len(view) - keep], 800), *view[len(view) - keep:]]
            if not old and shorter == view:
                raise ContextOverflow("the conversation cannot be compacted further: its last exchange alone "
                                      "does not fit the model's context window")
            view = shorter
        after = estimate_tokens(view)
        if asked and overflow is None and after >= before:  # a summary longer than what it stands for
            yield WarningEvent(f"compacting would not make the conversation smaller ({before:,} → {after:,} "
                               "tokens): it is left as it was")
            return
        self.checkpoint = Checkpoint(len(history), view, before, after, summary)
        self.budget.forget_usage()
        for callback in self.on_checkpoint:
            callback(self.checkpoint)
        how = "summarised earlier exchanges" if summary is not None else "shortened old tool outputs"
        yield Notice(f"crow: compacted the conversation ({how}): {before:,} → {after:,} tokens{left_out}; "
                     "the stored session keeps every message", code="compacted", tokens_before=before,
                     tokens_after=after)

    def _of(self, tokens: int) -> str:
        return f"{tokens:,} of {self.budget.window:,} tokens" if self.budget.window else f"{tokens:,} tokens"

    async def _summarise(self, client: _Stream, old: list[Message], focus: str | None
                         ) -> AsyncGenerator[Event | str, None]:

        window = self.budget.window
        limit = int(window * CHARS_PER_TOKEN * 0.6) if window else SUMMARY_INPUT_CHARS
        ask = "Summarise this conversation so far:\n\n" + _transcript(old, limit)
        if focus:
            ask += f"\n\nIn the summary, keep in particular: {focus}"
        accumulator = StreamAccumulator()
        async with aclosing(client.stream([{"role": "system", "content": _SUMMARY_SYSTEM},
                                           {"role": "user", "content": ask}], None)) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, dict):
                    accumulator.feed(chunk)  # the summary is not shown as answer text
                else:
                    yield chunk  # a retry notice
        turn, _ = accumulator.finish()
        text = (turn.content or "").strip()
        if not text:
            raise ContextOverflow("the model wrote no summary when asked to compact the conversation")
        yield text


def _kept_state(history: list[Message], recent: list[Message]) -> str:
    """What a summary must not lose that the recent messages do not hold: the model's todo list as it last wrote
    it (`todos.latest_todos`) and the approval mode it was last told of (`modes.told_mode`), as notes.

    A summary keeps what the model must not lose and the recent exchanges may not hold: its todo list as it
    last wrote it and the approval mode it was last told of (both read from the stored history).
    """
    kept = ""
    if latest_todos(recent) is None and (todos := latest_todos(history)) is not None:
        kept += f"\n\n[crow: your todo list (todo_write) so far:\n{checklist(todos)}]"
    if told_mode(recent) is None and (mode := told_mode(history)) is not None:
        kept += f"\n\n{mode_note(mode)['content']}"
    return kept


def _last_group(view: list[Message]) -> int:
    """How many messages at the end of `view` form its last assistant call with its results (0: none)."""
    for n, m in enumerate(reversed(view), 1):
        if m.get("role") != "tool":
            return n if m.get("role") == "assistant" else 0
    return 0
