"""Concurrent tool dispatch: one `ToolResult` for every call, whatever happens to it.

Every result's text is masked once here (`text.mask_secrets` with `ToolContext.secrets`), whatever
tool made it, and so is what the person is shown of it (`ToolResult.display`, which the tool gives by
returning a `registry.ToolOutput` or raising `ToolFailed(..., display=...)`).

Unknown tools, arguments the stream cut off (`ToolCall.cut_off`: never run), arguments that fail the
schema, denied approvals, exceptions and timeouts all become results whose text tells the model what
went wrong; nothing escapes as an exception. Calls run
concurrently in a task group. Scheduling is a readers-writer lock: parallel-safe tools share it, tools
marked `parallel=False` hold it alone, so they overlap neither each other nor anything else. Approval
is asked before the lock is taken, so parallel-safe calls keep running while a prompt waits.

Every call runs with the run's `ToolContext` as the current context (approval and preview included):
a tool parameter typed `ToolContext` receives it, and `workspace.resolve_in_workspace` uses its workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from ..errors import ToolDenied, ToolError, ToolFailed
from ..events import Event, ToolResultReady, ToolRunStarted
from ..history import Outcome, ToolCall, ToolDisplay, ToolResult
from ..images import IMAGE_TYPES, MAX_IMAGE_BYTES, Image
from ..text import clean_text, mask_secrets, truncate_output
from .context import ToolContext, using_context
from .registry import ToolRegistry
from .sandbox import Sandbox, SandboxBlocked
from .tool import Tool

__all__ = ["Approver", "Escalate", "EscalatingApprover", "dispatch"]

Approver = Callable[[ToolCall, Tool], Awaitable[bool]]
"""Asked before a tool with `needs_approval` runs; True lets it run, False or `ToolDenied(reason)` refuses it,
any other `ToolError` answers the call with its message (a pre-check). It runs with the call's context
current. Supplied by the surface; `tools.approval.make_approver` builds one from a policy, rules and an ask
callback. An approver with an `escalate(call, tool, reason) -> Awaitable[bool]` method is asked whether a
call the sandbox stopped (`sandbox.SandboxBlocked`) may run once outside it; without one it may not."""


Escalate = Callable[[ToolCall, Tool, str], Awaitable[bool]]
"""Whether a call the sandbox stopped (for the reason given) may run once outside it."""


@dataclass(frozen=True)
class EscalatingApprover:
    """An `Approver` made of an approve function and an `escalate` one (a surface whose approver is a
    method: `EscalatingApprover(self.approve, self.approvals.escalate)`)."""

    approve: Approver
    escalate: Escalate

    async def __call__(self, call: ToolCall, tool: Tool) -> bool:
        return await self.approve(call, tool)


async def dispatch(
    calls: list[ToolCall],
    registry: ToolRegistry,
    *,
    approve: Approver | None = None,
    timeout_s: float = 120.0,
    max_output_chars: int = 50_000,
    context: ToolContext | None = None,
) -> AsyncIterator[Event]:
    """Run `calls` concurrently; yield `ToolRunStarted` and `ToolResultReady` as they happen.

    Exactly one `ToolResultReady` is yielded per call (in completion order; `result.call_id` and the
    call's position link them back). Cancelling the consumer cancels the running tools.

    Args:
        calls: the turn's tool calls.
        registry: the tools by name.
        approve: asked before tools that need approval; None denies them.
        timeout_s: seconds a call may run when its tool sets no `timeout_s`.
        max_output_chars: a result's text is cut to this many characters, with a marker.
        context: the workspace and secrets of the run (None: the working directory, no secrets).
    """
    queue: asyncio.Queue[Event] = asyncio.Queue()
    exclusive = _ReadWriteLock()
    context = context if context is not None else ToolContext()

    async def run(call: ToolCall) -> None:
        await queue.put(ToolRunStarted(call))
        with using_context(context):  # this call's task (and the thread a sync tool runs in) only
            result = await _run_one(call, registry, approve, exclusive, timeout_s, context)
        # sendable (error texts too can carry undecodable file names), without the run's secrets (every
        # tool's output: a .env read, a plugin, an MCP server), and capped
        output = truncate_output(mask_secrets(clean_text(result.output), context.secrets), max_output_chars)
        images, dropped = _capped_images(result.images)
        if dropped:
            output += "\n" + dropped
        if output != result.output or images != result.images:
            result = replace(result, output=output, images=images)
        if result.display is not None:  # what the person sees is masked as what the model reads
            result = replace(result, display=_masked(result.display, context.secrets))
        await queue.put(ToolResultReady(result))

    async with asyncio.TaskGroup() as group:
        for call in calls:
            group.create_task(run(call))
        remaining = len(calls)
        while remaining:
            event = await queue.get()
            if isinstance(event, ToolResultReady):
                remaining -= 1
            yield event


def _masked(display: ToolDisplay, secrets: tuple[str, ...]) -> ToolDisplay:
    """`display` with its texts sendable and without the run's secrets."""
    def mask(text: str | None) -> str | None:
        return None if text is None else mask_secrets(clean_text(text), secrets)

    return replace(display, output=mask(display.output), status=mask(display.status), diff=mask(display.diff))


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


async def _run_one(
    call: ToolCall, registry: ToolRegistry, approve: Approver | None, exclusive: _ReadWriteLock,
    default_timeout: float, context: ToolContext,
) -> ToolResult:
    started = time.perf_counter()

    def fail(message: str, outcome: Outcome = "error", output: str | None = None,
             display: ToolDisplay | None = None) -> ToolResult:
        return ToolResult(call.id, call.name, f"Error: {message}" if output is None else output, ok=False,
                          duration_s=time.perf_counter() - started, index=call.index, outcome=outcome,
                          display=display)

    deadline: asyncio.Timeout | None = None
    t = registry.get(call.name)
    if t is None:
        known = ", ".join(sorted(registry.wire_name(x.name) for x in registry)) or "none"
        return fail(f"unknown tool {call.name!r}; available tools: {known}", "unknown_tool")
    if call.cut_off:  # repaired for the history, but the values are guesses: never run them
        return fail("the arguments of this call were cut off or not valid JSON (repaired only for the history); "
                    "it was not run. Send the complete call again.")
    try:
        arguments = t.validate(json.loads(call.arguments))
        if t.needs_approval:
            if approve is None:
                raise ToolDenied(f"{call.name} needs approval and nobody could approve it here; it was not run")
            if not await approve(call, t):
                raise ToolDenied(f"the user denied {call.name}; do not retry it unchanged")
        try:
            async with exclusive.hold(not t.parallel):
                started = time.perf_counter()
                async with asyncio.timeout(t.timeout_s or default_timeout) as deadline:
                    output = await t.run(arguments, context)
        except SandboxBlocked as blocked:  # asked outside the lock and the call's time limit
            escalate = getattr(approve, "escalate", None)
            if escalate is None or not await escalate(call, t, blocked.reason):
                return fail(blocked.reason, "denied", f"{blocked.output}\n[{blocked.reason}. It was not run outside "
                            "the sandbox. Do not retry it unchanged; work inside the workspace]",
                            display=blocked.display)
            unconfined = replace(context, sandbox=Sandbox("off"))
            async with exclusive.hold(not t.parallel):
                started = time.perf_counter()
                async with asyncio.timeout(t.timeout_s or default_timeout) as deadline:
                    with using_context(unconfined):
                        output = await t.run(arguments, unconfined)
    except TimeoutError as exc:
        if deadline is None or not deadline.expired():  # the tool's own TimeoutError, not ours
            return fail(f"{call.name} raised TimeoutError: {exc}")
        return fail(f"{call.name} timed out after {t.timeout_s or default_timeout:g} s and was cancelled", "timeout")
    except ToolDenied as exc:  # the person reads the refusal, the model what to do instead
        return fail(str(exc), "denied", display=ToolDisplay(status=exc.shown))
    except ToolFailed as exc:  # it ran: the model reads its output as it is
        display = exc.display if isinstance(exc.display, ToolDisplay) else None
        return fail(str(exc), output=exc.output, display=display)
    except ToolError as exc:
        return fail(str(exc))
    except json.JSONDecodeError as exc:  # the accumulator guarantees JSON; a stored history may not
        return fail(f"arguments are not valid JSON ({exc.msg})")
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the run is being cancelled: dispatch's caller answers the call
        return fail(f"{call.name} raised CancelledError")
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a plugin's sys.exit() must not end the run
        return fail(f"{call.name} raised {type(exc).__name__}: {exc}")
    return ToolResult(call.id, call.name, output.text, ok=True, duration_s=time.perf_counter() - started,
                      index=call.index, display=output.display,
                      images=output.images)
