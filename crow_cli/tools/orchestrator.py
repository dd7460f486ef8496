"""The one owner of a tool call's fate: approval, the sandbox chosen, the escalation, the outcome.

Each call goes one way, and every step's answer is a value (after Codex's `tools/orchestrator.rs`, "the
central place for approvals, sandbox selection and retry"):

    validate the arguments (once; cut off, unknown, invalid: answered, never run)
      → approval (`approval.Approvals`: `decide`, and the surface's question when it asks)
      → run under the run's sandbox (`ToolContext.sandbox`)
      → the sandbox refused it (`sandbox.SandboxBlocked`)? the escalation question: run once outside?
      → yes: run once unconfined; no: the refusal
      → the `ToolResult` and its outcome: ok | error | denied | timeout | cancelled | unknown_tool

No other module of crow calls the approver or chooses a sandbox (`tests/test_layers.py` lists who may
import `tools.approval` and `tools.sandbox`); a surface supplies an `Approvals` with its question
(`ask`) and shows what happens. `dispatch` runs calls concurrently through here and masks and caps
what they return.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ToolDenied, ToolError, ToolFailed
from ..history import Outcome, ToolCall, ToolDisplay, ToolResult
from .approval import Approvals
from .arguments import check_arguments
from .context import ToolContext, using_context
from .names import similar_names
from .registry import ToolRegistry
from .sandbox import Sandbox, SandboxBlocked
from .tool import Tool, ToolOutput

__all__ = ["Approver", "Orchestrator"]

Approver = Approvals
"""What the loop and dispatch carry from a surface to the orchestrator: its `approval.Approvals` (the policy,
the answers remembered and the surface's question)."""

Hold = Callable[[bool], AbstractAsyncContextManager[None]]
"""Dispatch's scheduling: `hold(True)` runs a call alone, `hold(False)` beside other parallel-safe calls."""


@dataclass
class _Clock:
    """When the call's last run started (or the call, before it ran) and that run's time limit."""

    started: float
    deadline: asyncio.Timeout | None = None


@dataclass(frozen=True)
class Orchestrator:
    """What happens to each tool call of a run: `await orchestrator.run(call)` is its one `ToolResult`.

    Nothing escapes as an exception but the cancellation of the run itself: unknown tools, cut-off or
    invalid arguments, refusals, a tool's exceptions and timeouts are results whose text tells the model
    what went wrong, with their `outcome`.
    """

    registry: ToolRegistry
    """The tools by name."""
    approvals: Approvals | None
    """Asked before tools that need approval and about running a call the sandbox stopped outside it; None
    refuses both (nobody could approve)."""
    context: ToolContext
    """The run's workspace, secrets and sandbox; current while a call runs."""
    hold: Hold
    """Taken around each run of a tool (never while a question waits)."""
    timeout_s: float = 120.0
    """Seconds a call may run when its tool sets no `timeout_s`."""
    not_run: Mapping[int, str] = field(default_factory=dict)
    """By call index, the result text of calls the run's policy answers without running them (a call the model
    repeated: `repeats.RepeatGuard`)."""

    async def run(self, call: ToolCall) -> ToolResult:
        """The result of `call`, after approval and the sandbox had their say (see the module).

        Raises:
            asyncio.CancelledError: the run is being cancelled (its caller answers the call).
        """
        clock = _Clock(time.perf_counter())

        def fail(message: str, outcome: Outcome = "error", output: str | None = None,
                 display: ToolDisplay | None = None) -> ToolResult:
            return ToolResult(call.id, call.name, f"Error: {message}" if output is None else output, ok=False,
                              duration_s=time.perf_counter() - clock.started, index=call.index, outcome=outcome,
                              display=display)

        if (said := self.not_run.get(call.index)) is not None:
            return fail(said)
        if call.custom:  # a freeform call crow never offered: no tool of that name may run it
            return fail(f"{call.name!r} was sent as a custom (freeform) tool call; crow offers no custom tools, so "
                        "it was not run. Call one of the function tools offered instead.", "unknown_tool")
        tool = self.registry.get(call.name)
        if tool is None:
            names = sorted(self.registry.wire_name(x.name) for x in self.registry)
            similar = similar_names(call.name, names)
            hint = f"; tools with a similar name: {', '.join(similar)}" if similar else ""
            known = ", ".join(names) or "none"
            return fail(f"unknown tool {call.name!r}{hint}; available tools: {known}", "unknown_tool")
        if call.cut_off:  # repaired for the history, but the values are guesses: never run them
            return fail("the arguments of this call were cut off or not valid JSON (repaired only for the history); "
                        "it was not run. Send the complete call again.")
        try:
            # the one validation of the call: the schema (with the coercions it allows, noted), then the tool's own
            checked = check_arguments(tool.schema()["function"]["parameters"], json.loads(call.arguments), call.name)
            arguments = tool.validate(checked.arguments)
            if tool.needs_approval:
                await self._approve(call, tool, arguments)
            try:
                output = await self._attempt(tool, arguments, self.context, clock)
            except SandboxBlocked as blocked:  # asked outside the hold and the call's time limit
                if self.approvals is None or not await self.approvals.escalate(call, tool, blocked.reason, arguments):
                    shown = blocked.display  # the person reads why too, not only the command's exit code
                    if shown is not None:
                        shown = replace(shown, status=f"{shown.status or 'refused'}; {blocked.reason}; "
                                                      "not run outside it")
                    return fail(blocked.reason, "denied", f"{blocked.output}\n[{blocked.reason}. It was not run "
                                "outside the sandbox. Do not retry it unchanged; work inside the workspace]",
                                display=shown)
                output = await self._attempt(tool, arguments, replace(self.context, sandbox=Sandbox("off")), clock)
        except TimeoutError as exc:
            if clock.deadline is None or not clock.deadline.expired():  # the tool's own TimeoutError, not ours
                return fail(f"{call.name} raised TimeoutError: {exc}")
            return fail(f"{call.name} timed out after {tool.timeout_s or self.timeout_s:g} s and was cancelled",
                        "timeout")
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
        text = output.text + (f"\n[crow read the arguments so: {'; '.join(checked.notes)}]" if checked.notes else "")
        return ToolResult(call.id, call.name, text, ok=True, duration_s=time.perf_counter() - clock.started,
                          index=call.index, display=output.display, images=output.images)

    async def _approve(self, call: ToolCall, tool: Tool, arguments: dict[str, Any]) -> None:
        """Return when the call may run; raise `ToolDenied` (or the tool's pre-check `ToolError`) when not."""
        if self.approvals is None:
            raise ToolDenied(f"{call.name} needs approval and nobody could approve it here; it was not run")
        if not await self.approvals(call, tool, arguments):
            raise ToolDenied(f"the user denied {call.name}; do not retry it unchanged")

    async def _attempt(self, tool: Tool, arguments: dict[str, Any], context: ToolContext,
                       clock: _Clock) -> ToolOutput:
        """One run of the tool under `context`'s sandbox, in its turn and within its time limit (`clock`
        keeps when it started and its deadline, so a `TimeoutError` can be told apart from the tool's own)."""
        async with self.hold(not tool.parallel):
            clock.started = time.perf_counter()
            async with asyncio.timeout(tool.timeout_s or self.timeout_s) as clock.deadline:
                with using_context(context):
                    return await tool.run(arguments, context)
