"""The react loop: stream a turn, run its tool calls concurrently, answer them, repeat.

    history ──► model turn ──► text?      ──► done (completed)
                    │
                    └─► tool calls ──► dispatch (concurrent) ──► tool results ──► next turn

The loop appends to the caller's history list in place and reports everything as typed events; its last
event is always `RunFinished`. It owns its history to the end: stopped at any point, it leaves the history
valid (every call answered) before it re-raises, so no surface has bookkeeping of its own. `react` tells the
turns, images, retries and mode notes; `_Closing` how a cancelled run closes its history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

from .context.compact import Compactor
from .context.send import send
from .errors import ContentFiltered, CrowError, MaxTurnsExceeded, ProviderError, StreamCut
from .events import (
    Event,
    MessageAppended,
    Notice,
    PlanReady,
    RunFinished,
    TextDelta,
    ToolCallStarted,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
)
from .history import (
    AUTHOR_KEY,
    RECOVERED_KEY,
    AssistantTurn,
    Message,
    ToolCall,
    ToolResult,
    as_json,
    assistant_message,
    user_message,
)
from .images import tool_images_message
from .modes import PERMISSION_MODES
from .tools.context import ToolContext
from .tools.dispatch import Approver, dispatch
from .tools.names import ToolNameCleaner
from .tools.registry import ToolRegistry
from .tools.repeats import RepeatGuard
from .wire.accumulate import StreamAccumulator
from .wire.protocol import ChatStream
from .wire.textcalls import Recovered, recover_calls

__all__ = ["CANCELLED_OUTPUT", "ChatStream", "LoopSettings", "react"]

CANCELLED_OUTPUT = "Error: the tool call was cancelled by the user; no result."
"""The tool result of a call that the user (or a signal, or the editor) stopped before it finished."""

INTERRUPTED = "interrupted by the user"
"""The note a partial answer ends with when the canceller gave no reason (`Task.cancel(msg)` gives one)."""


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
    images: bool = True
    """Show the model the images tools return (a user message after the turn's tool results); False for a
    model known to take no images: their placeholders in the tool results stand alone."""
    generation_attempts: int = 3
    """Requests per turn when the server says the model's generation failed (`tool_use_failed`, Groq:
    a 400 or an error event inside a 200 stream, with `failed_generation`): 3 = asked again twice."""
    recover_tool_calls: bool = True
    """Run the tool calls a turn's text ends with when the server's parser missed them (`wire.textcalls`;
    a client whose profile says `recover_tool_calls = false` turns it off too)."""
    max_repeats: int = 3
    """The turn in a row repeating the same calls whose calls are answered without running; one more ends the
    run (`tools.repeats.RepeatGuard`); 0: never."""
    repair_calls: bool = True
    """Check a call's arguments against its tool's schema, with the coercions it allows (`tools.arguments`), and
    run a tool named in another case (`wire.names.clean_tool_name`); False: the tool's own validation only, and
    a name must match but for leaked template tokens (config `repair_tool_calls`, for `bench/local_tools.py`)."""


async def react(
    history: list[Message],
    client: ChatStream,
    registry: ToolRegistry | None = None,
    settings: LoopSettings = LoopSettings(),
    approve: Approver | None = None,
    context: ToolContext | None = None,
    compactor: Compactor | None = None,
) -> AsyncGenerator[Event, None]:
    """Run turns until the model answers without tool calls; yield events as they happen.

    Each tool result is appended (`MessageAppended`) as soon as every call before it has one, so a driver that
    stores appended messages keeps finished results. When the turn's tools returned images, one user message
    holding them follows the last tool message (tool messages carry text only); `LoopSettings.images` False (a
    model known text-only) leaves it out. A turn whose stream breaks or goes idle mid-way is asked for once more
    from the same history (no tool of it has run yet). Before each request, a change of the approval mode since
    the model was last told is noted in the history (`Approvals.mode_note`); a plan `exit_plan_mode` handed over
    with nobody to review it ends the run as its answer (`PlanReady`, then `RunFinished`).

    Args:
        history: the messages so far (ends with the user's message); appended to in place.
        client: streams chunk dicts for a history.
        registry: the tools offered to the model (None or empty: no tools).
        settings: limits.
        approve: asked before tools that need approval; None denies them.
        context: the workspace and secrets tools run with (None: the working directory, no secrets).
        compactor: keeps requests within the context window (`context.send`); None: the normalised
            history is sent as it is.

    Raises:
        asyncio.CancelledError: after closing the history and yielding `RunFinished("cancelled")`.
    """
    tools = registry.schemas() if registry else None
    names = ToolNameCleaner(registry.names if registry else (), trace=settings.trace, by_case=settings.repair_calls)
    closing = _Closing(history)
    closing.images = settings.images
    repeats = RepeatGuard(settings.max_repeats)
    # the server's profile says whether calls left in text are recovered
    recover = settings.recover_tool_calls and bool(tools) and client.recover_tool_calls
    told: set[str] = set()  # the formats recovered calls came in, said once per run
    hooks = context.hooks if context is not None else None
    if hooks is not None:
        hooks.stop_reason = None  # a `continue: false` of an earlier run (its prompt, its stop) is not this run's
    stop_hook_active = False
    try:
        for closing.turn in range(1, settings.max_turns + 1):
            if approve is not None and (note := approve.mode_note(history)) is not None:
                yield _append(history, note)  # the approval mode changed since the model was last told
            if approve is not None and hooks is not None:  # and the hooks of this turn's calls are told it too
                hooks.permission_mode = PERMISSION_MODES[approve.policy.mode]
            turn: AssistantTurn | None = None
            try:
                async with aclosing(_stream_turn(history, client, tools, settings, compactor)) as items:
                    async for item in items:
                        if isinstance(item, AssistantTurn):
                            turn = item
                        else:
                            closing.saw(item)
                            yield item
            except CrowError as exc:
                yield RunFinished("error", "", closing.turn - 1, str(exc), exc.exit_code)
                return
            assert turn is not None  # _stream_turn ends with its turn or raises
            recovered = _recovered(turn, registry) if recover and registry and not turn.tool_calls else None
            if recovered is not None:
                # a client that remembers its server's facts learns the format (once per format per run)
                learn = getattr(client, "text_calls_recovered", None) if recovered.format not in told else None
                for event in _recovery_events(turn, recovered, told):
                    yield event
                if learn is not None and (unwritten := learn(recovered.format)) is not None:
                    yield unwritten
            for warning in names.clean(turn):
                yield warning
            closing.turn_assembled(turn.tool_calls)
            message = turn.to_message()
            if (author := client.author) is not None:  # who wrote it (`history.AUTHOR_KEY`)
                as_json(message)[AUTHOR_KEY] = dict(author)
            if recovered is not None:  # the text the calls came in: kept with the session, never sent back
                as_json(message)[RECOVERED_KEY] = {"format": recovered.format, "text": recovered.raw}
            yield _append(history, message)
            yield TurnFinished(closing.turn, turn.finish_reason, turn.usage, turn.content, tuple(turn.tool_calls),
                               timings=turn.timings)
            if not turn.is_tool_turn:
                # a Stop hook that blocks keeps the run going once, its reason the next user message
                more = None if hooks is None or turn.finish_reason == "content_filter" else \
                    await hooks.stop_continues(hooks.stop_event, active=stop_hook_active)
                if more is None:
                    yield _finished(turn, closing.turn)
                    return
                stop_hook_active = True
                yield _append(history, user_message(more))
                continue
            async for event in _run_tools(turn.tool_calls, history, registry, settings, approve, closing,
                                          context, repeats):
                yield event
            # a plan exit_plan_mode handed over with nobody to review it (crow run, a crow mcp call): the answer
            if approve is not None and (plan := approve.take_plan()) is not None:
                yield PlanReady(plan)
                yield RunFinished("completed", plan, closing.turn)
                return
            if repeats.stopped:
                yield RunFinished("error", "", closing.turn, repeats.reason(), 1)
                return
            if hooks is not None and hooks.stop_reason is not None:  # a hook answered `continue: false`
                reason, hooks.stop_reason = hooks.stop_reason, None
                yield Notice(f"crow: a hook stopped the run{': ' + reason if reason else ''}", code="hook_stopped")
                yield RunFinished("completed", "", closing.turn)
                return
    except asyncio.CancelledError as exc:
        # the canceller may say why (`Task.cancel(msg)`): the partial answer's note is what the model reads later
        for event in closing.close(exc.args[0] if exc.args and isinstance(exc.args[0], str) else INTERRUPTED):
            yield event
        raise
    except BaseException:  # the consumer stopped listening (GeneratorExit), or a bug: keep the history valid
        closing.close()
        raise
    error = MaxTurnsExceeded(settings.max_turns)
    yield RunFinished("max_turns", "", settings.max_turns, str(error), error.exit_code)


async def _stream_turn(history: list[Message], client: ChatStream, tools: list[dict[str, Any]] | None,
                       settings: LoopSettings, compactor: Compactor | None = None
                       ) -> AsyncGenerator[Event | AssistantTurn, None]:
    """Stream one turn: its events, then the assembled `AssistantTurn` as the last item.

    Tools only run after a turn's stream has ended, so a cut stream never has a tool of its turn
    behind it: asking again from the same history is safe. The retry is announced with a
    `Notice(code="turn_restarted")`: what the cut attempt streamed is superseded, not continued.
    """
    failed = 0
    attempt = 0
    while attempt < settings.stream_attempts:
        attempt += 1
        accumulator = StreamAccumulator(trace=settings.trace, reasoning_fields=client.reasoning_fields,
                                        choices=client.choices)
        try:
            async with aclosing(send(history, client, tools, compactor)) as chunks:  # closes the response on cancel
                async for chunk in chunks:
                    if isinstance(chunk, dict):
                        for event in accumulator.feed(chunk):
                            yield event
                    else:  # the client's own event: a retry notice, a skipped damaged event
                        yield chunk
        except StreamCut as exc:
            if attempt == settings.stream_attempts:
                raise StreamCut(f"{exc} (after {attempt} attempts)", status=exc.status) from exc
            yield Notice(f"crow: {exc}; asking again, the answer restarts", code="turn_restarted")
            continue
        except ProviderError as exc:
            # Groq: {"error": {"code": "tool_use_failed", "failed_generation": …}}, as a 400 or inside a 200
            # stream: the model's output could not be parsed as a tool call; no tool of the turn has run, so
            # the same request is asked for again
            if exc.code != "tool_use_failed":
                raise
            failed += 1
            if failed >= settings.generation_attempts:
                raise ProviderError(f"{exc} (the model's generation failed {failed} times)", status=exc.status,
                                    code=exc.code) from exc
            attempt -= 1  # a failed generation has its own bound
            yield Notice(f"crow: the server says the model's generation failed ({exc.code}); asking again "
                         f"(attempt {failed + 1} of {settings.generation_attempts}), the answer restarts",
                         code="turn_restarted")
            continue
        turn, events = accumulator.finish()
        for event in events:
            yield event
        yield turn
        return


async def _run_tools(calls: list[ToolCall], history: list[Message], registry: ToolRegistry | None,
                     settings: LoopSettings, approve: Approver | None, closing: _Closing,
                     context: ToolContext | None = None, repeats: RepeatGuard | None = None
                     ) -> AsyncGenerator[Event, None]:
    # A result joins the history as soon as every call before it has one: call order is kept, and a
    # driver that stores each appended message loses no finished result if the process dies.
    async for event in dispatch(calls, registry or ToolRegistry(), approve=approve,
                                timeout_s=settings.tool_timeout_s, max_output_chars=settings.max_output_chars,
                                context=context, repeats=repeats, check_schema=settings.repair_calls):
        if isinstance(event, ToolRunStarted):
            closing.started[event.call.index] = time.monotonic()
        yield event
        if isinstance(event, ToolResultReady):
            closing.results[event.result.index] = event.result  # by position: ids may repeat or be ""
            while closing.answered < len(calls) and calls[closing.answered].index in closing.results:
                yield _append(history, closing.results[calls[closing.answered].index].to_message())
                closing.answered += 1
    closing.images_shown = True
    if settings.images and (shown := closing.images_message()) is not None:
        yield _append(history, shown)  # after every tool message of the turn: tool messages carry text only


class _Closing:
    """What the loop must know to close its history when it is stopped mid-turn.

    Cancelled, the loop closes the history: finished calls keep their results, every other call of the turn
    gets a "cancelled by the user" result, a call that never finished streaming is dropped, a partial answer is
    kept with a note (the message the task was cancelled with, `Task.cancel(msg)`, or "interrupted by the
    user"); it yields those results and appended messages and a `RunFinished("cancelled")`, then re-raises the
    `CancelledError`.
    """

    def __init__(self, history: list[Message]) -> None:
        self.history = history
        self.turn = 0
        self.text: list[str] = []
        """The answer text streamed so far in this turn (kept as a partial answer)."""
        self.calls: list[ToolCall] = []
        """The calls of the turn whose tools are running."""
        self.results: dict[int, ToolResult] = {}
        self.started: dict[int, float] = {}
        """When each call of the turn was taken up (monotonic seconds, by position): a cancelled one's duration."""
        self.answered = 0
        self.images = True
        """Whether the images of finished results are shown to the model when the history is closed."""
        self.images_shown = False
        """The turn's images message is appended (or there is none to append)."""

    def images_message(self) -> Message | None:
        """The user message showing the model the images the turn's results returned (call order), or None."""
        ordered = [self.results[c.index] for c in self.calls if c.index in self.results]
        message = tool_images_message((r.name, r.call_id, r.images) for r in ordered)
        return cast(Message, message) if message is not None else None

    def turn_assembled(self, calls: list[ToolCall]) -> None:
        self.text.clear()
        self.calls, self.results, self.started, self.answered = calls, {}, {}, 0
        self.images_shown = False

    def saw(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, Notice) and event.code == "turn_restarted":
            self.text.clear()

    def close(self, note: str = INTERRUPTED) -> list[Event]:
        """Make the history valid again; the events saying how (results, appended messages, the end).

        A partial answer is kept, ending with `note` in brackets (why it stops there).
        """
        events: list[Event] = []
        partial = "".join(self.text) if not self.calls else ""
        for call in self.calls[self.answered:]:
            result = self.results.get(call.index)
            if result is None:
                ran = time.monotonic() - self.started[call.index] if call.index in self.started else 0.0
                result = ToolResult(call.id, call.name, CANCELLED_OUTPUT, ok=False, index=call.index,
                                    outcome="cancelled", duration_s=ran)
                events.append(ToolResultReady(result))
            events.append(_append(self.history, result.to_message()))
        self.answered = len(self.calls)
        if self.calls and not self.images_shown and self.images and (shown := self.images_message()) is not None:
            events.append(_append(self.history, shown))  # the finished calls' images, after every result
        self.images_shown = True
        if partial.strip():
            events.append(_append(self.history, assistant_message(f"{partial}\n\n[{note}]")))
            self.text.clear()
        events.append(RunFinished("cancelled", partial, self.turn, "interrupted", 130))
        return events


def _recovered(turn: AssistantTurn, registry: ToolRegistry) -> Recovered | None:
    """The calls `turn`'s text ends with, in a format known from open models (`wire.textcalls`), or None."""
    names = registry.names
    return recover_calls(turn.content, names.sent, lambda name: names.called(name)[0],
                         tags_dropped="template-tags-in-content" in turn.rules)


def _recovery_events(turn: AssistantTurn, found: Recovered, told: set[str]) -> list[Event]:
    """Make `turn` a tool turn of the recovered calls (ids "": the model gave none; its lead-in its content)
    and say so: once per format per run, then each call as if it had streamed."""
    turn.tool_calls = [ToolCall("", name, arguments, index=n) for n, (name, arguments) in enumerate(found.calls)]
    turn.content = found.lead_in or None
    turn.finish_reason = "tool_calls"
    events: list[Event] = []
    if found.format not in told:
        told.add(found.format)
        events.append(Notice(f"crow: the model wrote its tool calls as text ({found.format} format) and the server did "
                             "not read them as calls; crow runs them as calls (recover_tool_calls = false in the "
                             "provider table turns this off)", code="tool_calls_recovered"))
    events += [ToolCallStarted(call.index, call.id, call.name) for call in turn.tool_calls]
    return events


def _finished(turn: AssistantTurn, turns: int) -> RunFinished:
    """How a run ends on a turn without tool calls: completed, or, when the server's content filter stopped the
    answer, an error (`ContentFiltered`, exit 3) carrying the partial text, so a script can tell them apart."""
    if turn.finish_reason != "content_filter":
        return RunFinished("completed", turn.content or "", turns)
    error = ContentFiltered("the server's content filter stopped the answer (finish_reason: content_filter); "
                            "the text shown is partial")
    return RunFinished("error", turn.content or "", turns, str(error), error.exit_code)


def _append(history: list[Message], message: Message) -> MessageAppended:
    history.append(message)
    return MessageAppended(message)
