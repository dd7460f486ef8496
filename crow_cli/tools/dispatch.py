"""Concurrent tool dispatch: one `ToolResult` for every call, whatever happens to it.

Every result's text is masked once here (`text.mask_secrets` with `ToolContext.secrets`), whatever
tool made it, and so is what the person is shown of it (`ToolResult.display`, which the tool gives by
returning a `registry.ToolOutput` or raising `ToolFailed(..., display=...)`).

What happens to each call (validation, approval, the sandbox, the escalation question, the outcome) is
`tools.orchestrator`'s; nothing escapes as an exception. Calls run concurrently in a task group.
Scheduling is a readers-writer lock: parallel-safe tools share it, tools marked `parallel=False` hold it
alone, so they overlap neither each other nor anything else. Approval is asked before the lock is taken,
so parallel-safe calls keep running while a prompt waits.

Every call runs with the run's `ToolContext` as the current context (approval and preview included):
a tool parameter typed `ToolContext` receives it, and `workspace.resolve_in_workspace` uses its workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from ..events import Event, TodoUpdated, ToolResultReady, ToolRunStarted
from ..history import ToolCall, ToolDisplay
from ..images import IMAGE_TYPES, MAX_IMAGE_BYTES, Image
from ..text import clean_text, mask_secrets, truncate_output
from .context import ToolContext, using_context
from .orchestrator import Approver, Orchestrator
from .registry import ToolRegistry
from .repeats import RepeatGuard

__all__ = ["Approver", "CallScope", "current_call", "dispatch"]


@dataclass(frozen=True)
class CallScope:
    """The tool call running in this task, and what its run lends a tool that runs a loop of its own (the
    built-in `task` tool: its subagent asks the same approvals and reports through the same event stream)."""

    call: ToolCall
    emit: Callable[[Event], None]
    """Puts an event into the run's stream, before this call's result (never a `ToolResultReady` of the
    run's own calls)."""
    approvals: Approver | None
    """The run's approvals (None: nobody can approve)."""
    registry: ToolRegistry
    """The run's tools."""


_SCOPE: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar("crow_call_scope", default=None)


def current_call() -> CallScope | None:
    """The scope of the tool call running in this task (see `CallScope`); None outside `dispatch`."""
    return _SCOPE.get()


async def dispatch(
    calls: list[ToolCall],
    registry: ToolRegistry,
    *,
    approve: Approver | None = None,
    timeout_s: float = 120.0,
    max_output_chars: int = 50_000,
    context: ToolContext | None = None,
    repeats: RepeatGuard | None = None,
    check_schema: bool = True,
) -> AsyncIterator[Event]:
    """Run `calls` concurrently; yield `ToolRunStarted` and `ToolResultReady` as they happen.

    Exactly one `ToolResultReady` is yielded per call (in completion order; `result.call_id` and the
    call's position link them back). Cancelling the consumer cancels the running tools.

    Args:
        calls: the turn's tool calls.
        registry: the tools by name.
        approve: asked before tools that need approval and about running a call the sandbox stopped outside
            it; None denies both.
        timeout_s: seconds a call may run when its tool sets no `timeout_s`.
        max_output_chars: a result's text is cut to this many characters, with a marker.
        context: the workspace and secrets of the run (None: the working directory, no secrets).
        repeats: the run's streak of identical turns: a call repeated too often is answered without running.
        check_schema: check arguments against the tool's schema first (`Orchestrator.check_schema`).
    """
    queue: asyncio.Queue[Event] = asyncio.Queue()
    context = context if context is not None else ToolContext()
    not_run = repeats.admit(calls) if repeats is not None else {}
    orchestrator = Orchestrator(registry, approve, context, _ReadWriteLock().hold, timeout_s, not_run, check_schema)

    async def run(call: ToolCall) -> None:
        await queue.put(ToolRunStarted(call))
        _SCOPE.set(CallScope(call, queue.put_nowait, approve, registry))  # this call's task only
        with using_context(context):  # this call's task (and the thread a sync tool runs in) only
            result = await orchestrator.run(call)
        # sendable (error texts too can carry undecodable file names), without the run's secrets (every
        # tool's output: a .env read, a plugin, an MCP server), and capped
        output = truncate_output(mask_secrets(clean_text(result.output), context.secrets), max_output_chars)
        images, dropped = _capped_images(result.images)
        if dropped:
            output += "\n" + dropped
        if output != result.output or images != result.images:
            result = replace(result, output=output, images=images)
        if result.display is not None:  # what the person sees is masked as what the model reads
            display = _masked(result.display, context.secrets)
            result = replace(result, display=display)
            if result.ok and display.todos is not None:  # the model's todo list: its own event first
                await queue.put(TodoUpdated(display.todos))
        if repeats is not None:
            repeats.record(call, result.output)
        await queue.put(ToolResultReady(result))

    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(run(call))
            remaining = len(calls)
            while remaining:
                event = await queue.get()
                if isinstance(event, ToolResultReady):
                    remaining -= 1
                yield event
    except asyncio.CancelledError:
        # what the cancelled calls said on their way out (a subagent's end: `CallScope.emit`) still reaches the
        # run's stream; their results are the loop's to give (`loop._Closing`)
        while not queue.empty():
            event = queue.get_nowait()
            if not isinstance(event, ToolResultReady):
                yield event
        raise


def _masked(display: ToolDisplay, secrets: tuple[str, ...]) -> ToolDisplay:
    """`display` with its texts sendable and without the run's secrets."""
    def mask(text: str | None) -> str | None:
        return None if text is None else mask_secrets(clean_text(text), secrets)

    todos = None if display.todos is None else tuple(replace(t, content=mask(t.content) or "") for t in display.todos)
    return replace(display, output=mask(display.output), status=mask(display.status), diff=mask(display.diff),
                   todos=todos)


MAX_IMAGES = 8
"""Images of one tool result shown to the model at most (each is a request's worth of tokens)."""


def _capped_images(images: tuple[Image, ...]) -> tuple[tuple[Image, ...], str]:
    """The images of a result the model is shown (known kinds, within the caps), and a line naming the others."""
    fit = [n for n, i in enumerate(images) if i.mime_type in IMAGE_TYPES and len(i.data) <= MAX_IMAGE_BYTES]
    shown = set(fit[:MAX_IMAGES])
    kept = tuple(images[n] for n in sorted(shown))
    left = [i for n, i in enumerate(images) if n not in shown]
    if not left:
        return kept, ""
    return kept, (f"[{len(left)} image{'s' if len(left) > 1 else ''} not shown to the model (more than "
                  f"{MAX_IMAGES}, larger than {MAX_IMAGE_BYTES // 1024 // 1024} MiB, or not PNG, JPEG, GIF or WebP): "
                  f"{', '.join(i.placeholder() for i in left)}]")


class _ReadWriteLock:
    """Shared holds for parallel-safe calls, an exclusive hold for the others; a waiting writer goes first."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.asynccontextmanager
    async def hold(self, exclusive: bool) -> AsyncIterator[None]:
        async with self._cond:
            if exclusive:
                self._writers_waiting += 1
                try:
                    await self._cond.wait_for(lambda: not self._writer and self._readers == 0)
                finally:
                    self._writers_waiting -= 1
                self._writer = True
            else:
                await self._cond.wait_for(lambda: not self._writer and self._writers_waiting == 0)
                self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                if exclusive:
                    self._writer = False
                else:
                    self._readers -= 1
                self._cond.notify_all()

