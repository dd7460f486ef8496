"""The react loop: stream a turn, run its tool calls concurrently, answer them, repeat.

    history ──► model turn ──► text?      ──► done (completed)
                    │
                    └─► tool calls ──► dispatch (concurrent) ──► tool results ──► next turn

The loop appends to the caller's history list in place and reports everything as typed events;
its last event is always `RunFinished`. Each tool result is appended (`MessageAppended`) as soon as
every call before it has one, so a surface that stores appended messages keeps finished results.
A turn whose stream breaks or goes idle mid-way is asked for once more from the same history (no
tool of it has run yet). Cancelling the consumer stops the stream and the running tools: the caller
then closes the history with `history.repair_history`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import CrowError, MaxTurnsExceeded, StreamCut
from .events import Event, MessageAppended, Notice, RunFinished, ToolResultReady, TurnFinished
from .history import AssistantTurn, Message, ToolResult
from .tools.dispatch import Approver, dispatch
from .tools.names import ToolNameCleaner  # quirks (issue 10 item 3): leaked template tokens in tool names
from .tools.registry import ToolRegistry
from .wire.accumulate import StreamAccumulator

__all__ = ["ChatStream", "LoopSettings", "react"]


class ChatStream(Protocol):
    """What the loop needs of a model client (`wire.client.ChatClient` is one)."""

    def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
               ) -> AsyncGenerator[dict[str, Any] | Notice, None]:
        """Chunk dicts of one turn; a `Notice` (a retry before the stream started) is passed on as is."""
        ...


@dataclass(frozen=True)
class LoopSettings:
    max_turns: int = 25
    """Model turns per run before stopping with `max_turns`."""
    tool_timeout_s: float = 120.0
    """Default per-call tool timeout, seconds."""
    max_output_chars: int = 50_000
    """Tool output beyond this is cut, with a marker the model sees."""
    trace: bool = False
    """Emit a `ToolCallDelta` per raw tool-call delta (for `--debug`)."""
    stream_attempts: int = 2
    """Requests per turn when the stream breaks or goes idle mid-way (`StreamCut`): 2 = one retry."""


async def react(
    history: list[Message],
    client: ChatStream,
    registry: ToolRegistry | None = None,
    settings: LoopSettings = LoopSettings(),
    approve: Approver | None = None,
) -> AsyncIterator[Event]:
    """Run turns until the model answers without tool calls; yield events as they happen.

    Args:
        history: the messages so far (ends with the user's message); appended to in place.
        client: streams chunk dicts for a history.
        registry: the tools offered to the model (None or empty: no tools).
        settings: limits.
        approve: asked before tools that need approval; None denies them.
    """
    tools = registry.schemas() if registry else None
    names = ToolNameCleaner((t.name for t in registry or ()), trace=settings.trace)  # quirks: issue 10 item 3
    for turn_no in range(1, settings.max_turns + 1):
        streamed: list[AssistantTurn] = []
        try:
            async with aclosing(_stream_turn(history, client, tools, settings, streamed)) as turn_events:
                async for event in turn_events:
                    yield event
        except CrowError as exc:
            yield RunFinished("error", "", turn_no - 1, str(exc), exc.exit_code)
            return
        turn = streamed[0]
        for event in names.clean(turn):  # quirks: issue 10 item 3, before the turn is stored or run
            yield event
        yield _append(history, turn.to_message())
        yield TurnFinished(turn_no, turn.finish_reason, turn.usage, turn.content, tuple(turn.tool_calls))
        if not turn.is_tool_turn:
            yield RunFinished("completed", turn.content or "", turn_no)
            return
        async for event in _run_tools(turn, history, registry, settings, approve):
            yield event
    error = MaxTurnsExceeded(settings.max_turns)
    yield RunFinished("max_turns", "", settings.max_turns, str(error), error.exit_code)


async def _stream_turn(history: list[Message], client: ChatStream, tools: list[dict[str, Any]] | None,
                       settings: LoopSettings, out: list[AssistantTurn]) -> AsyncGenerator[Event, None]:
    """Stream one turn into `out`; a stream that breaks or goes idle is requested once more.

    Tools only run after a turn's stream has ended, so a cut stream never has a tool of its turn
    behind it: asking again from the same history is safe. The retry is announced with a
    `Notice(code="turn_restarted")`: what the cut attempt streamed is superseded, not continued.
    """
    for attempt in range(1, settings.stream_attempts + 1):
        accumulator = StreamAccumulator(trace=settings.trace)
        try:
            async with aclosing(client.stream(history, tools)) as chunks:  # closes the response on cancel
                async for chunk in chunks:
                    if isinstance(chunk, Notice):  # the client retried before the stream started
                        yield chunk
                        continue
                    for event in accumulator.feed(chunk):
                        yield event
        except StreamCut as exc:
            if attempt == settings.stream_attempts:
                raise StreamCut(f"{exc} (after {attempt} attempts)", status=exc.status) from exc
            yield Notice(f"crow: {exc}; asking again, the answer restarts", code="turn_restarted")
            continue
        turn, events = accumulator.finish()
        for event in events:
            yield event
        out.append(turn)
        return


async def _run_tools(turn: AssistantTurn, history: list[Message], registry: ToolRegistry | None,
                     settings: LoopSettings, approve: Approver | None) -> AsyncIterator[Event]:
    # A result joins the history as soon as every call before it has one: call order is kept, and a
    # surface that stores each appended message loses no finished result if the process dies.
    results: dict[int, ToolResult] = {}
    calls, answered = turn.tool_calls, 0
    async for event in dispatch(calls, registry or ToolRegistry(), approve=approve,
                                timeout_s=settings.tool_timeout_s, max_output_chars=settings.max_output_chars):
        yield event
        if isinstance(event, ToolResultReady):
            results[event.result.index] = event.result  # by position: ids may repeat or be ""
            while answered < len(calls) and calls[answered].index in results:
                yield _append(history, results[calls[answered].index].to_message())
                answered += 1


def _append(history: list[Message], message: Message) -> MessageAppended:
    history.append(message)
    return MessageAppended(message)
