"""The one owner of a tool call's fate: approval, the sandbox chosen, the escalation, the outcome.

Each call goes one way, and every step's answer is a value (after Codex's `tools/orchestrator.rs`, "the
central place for approvals, sandbox selection and retry"); `Orchestrator` draws the way. No other module of
crow calls the approver or chooses a sandbox (`tests/test_layers.py` lists who may import `tools.approval`
and `tools.sandbox`); a surface supplies an `Approvals` with its question (`ask`) and shows what happens.
`dispatch` runs calls concurrently through here and masks and caps what they return.
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
from ..text import clean_text, mask_secrets
from .approval import Approvals, Deny, may_write
from .arguments import Checked, check_arguments
from .context import ToolContext, using_context
from .hooks import Hooks
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
    arguments: dict[str, Any] | None = None
    """The arguments the tool ran with (a `PreToolUse` hook may change them); None: it did not run."""
    said: list[str] = field(default_factory=list)
    """What the `PreToolUse` hooks gave the model beside the call (`additionalContext`), after its result."""


@dataclass(frozen=True)
class Orchestrator:
    """What happens to each tool call of a run: `await orchestrator.run(call)` is its one `ToolResult`.

    Nothing escapes as an exception but the cancellation of the run itself: unknown tools, cut-off or
    invalid arguments, refusals, a tool's exceptions and timeouts are results whose text tells the model
    what went wrong, with their `outcome`.

        validate the arguments (once; cut off, unknown, invalid: answered, never run)
          → `PreToolUse` hooks (`tools.hooks`): block (the reason is the result), deny, ask, allow, new arguments
          → approval (`approval.Approvals`: `decide`, and the surface's question when it asks)
          → run under the run's sandbox (`ToolContext.sandbox`), between two snapshots of the workspace when it
            may write (`ToolContext.snapshot`, `approval.may_write`)
          → the sandbox refused it (`sandbox.SandboxBlocked`)? the escalation question: run once outside?
          → yes: run once unconfined; no: the refusal
          → the `ToolResult` and its outcome: ok | error | denied | timeout | cancelled | unknown_tool
          → `PostToolUse` hooks when the tool ran (what they say for the model follows the result)

    A hook's `allow` approves as an allow rule does (never past a deny rule, the read-only policy or a sandbox
    question); its `deny` refuses whatever the policy (`--yes` too); its `ask` asks even under `yolo`.
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
    check_schema: bool = True
    """Check the arguments against the tool's JSON schema with the coercions it allows (`arguments`), and name
    similar tools to an unknown name; False: the tool's own validation only (config `repair_tool_calls`)."""

    async def run(self, call: ToolCall) -> ToolResult:
        """The result of `call`, after hooks, approval and the sandbox had their say (see the module).

        Raises:
            asyncio.CancelledError: the run is being cancelled (its caller answers the call).
        """
        clock = _Clock(time.perf_counter())
        result = await self._run(call, clock)
        hooks = self.context.hooks
        if clock.said:
            result = replace(result, output="\n".join([result.output, *clock.said]))
        if hooks is None or clock.arguments is None or not hooks.has("PostToolUse"):
            return result
        return await self._post_hooks(hooks, call, clock.arguments, result)

    async def _run(self, call: ToolCall, clock: _Clock) -> ToolResult:
        """The result of `call` before the `PostToolUse` hooks (`clock.arguments`: what it ran with)."""
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
            similar = similar_names(call.name, names) if self.check_schema else []
            hint = f"; tools with a similar name: {', '.join(similar)}" if similar else ""
            known = ", ".join(names) or "none"
            return fail(f"unknown tool {call.name!r}{hint}; available tools: {known}", "unknown_tool")
        if call.cut_off:  # repaired for the history, but the values are guesses: never run them
            return fail("the arguments of this call were cut off or not valid JSON (repaired only for the history); "
                        "it was not run. Send the complete call again.")
        context = self._context()
        try:
            # the one validation of the call: the schema (with the coercions it allows, noted), then the tool's own
            parsed = json.loads(call.arguments)
            checked = check_arguments(tool.schema()["function"]["parameters"], parsed, call.name) \
                if self.check_schema else Checked(parsed)
            arguments = tool.validate(checked.arguments)
            permission = None
            if self.context.hooks is not None:
                arguments, permission = await self._pre_hooks(self.context.hooks, call, tool, arguments, clock)
            if (tool.needs_approval or permission == "ask") and \
                    (denied := await self._approve(call, tool, arguments, permission)) is not None:
                return fail(denied.reason, "denied", display=ToolDisplay(status=denied.shown or denied.reason))
            try:
                output = await self._attempt(tool, arguments, context, clock)
            except SandboxBlocked as blocked:  # asked outside the hold and the call's time limit
                if self.approvals is None or not await self.approvals.escalate(call, tool, blocked.reason, arguments):
                    shown = blocked.display  # the person reads why too, not only the command's exit code
                    if shown is not None:
                        shown = replace(shown, status=f"{shown.status or 'refused'}; {blocked.reason}; "
                                                      "not run outside it")
                    return fail(blocked.reason, "denied", f"{blocked.output}\n[{blocked.reason}. It was not run "
                                "outside the sandbox. Do not retry it unchanged; work inside the workspace]",
                                display=shown)
                output = await self._attempt(tool, arguments, replace(context, sandbox=Sandbox("off")), clock)
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

    async def _pre_hooks(self, hooks: Hooks, call: ToolCall, tool: Tool, arguments: dict[str, Any],
                         clock: _Clock) -> tuple[dict[str, Any], str | None]:
        """The `PreToolUse` hooks' say: the arguments to run with and their permission (`allow`, `ask` or None);
        raises `ToolDenied` naming the hook when one blocked or denied the call (`ToolError` for new arguments
        that are not valid)."""
        decision = await hooks.fire("PreToolUse", {"tool_name": self.registry.wire_name(tool.name),
                                                   "tool_input": arguments, "tool_use_id": call.id},
                                    call_id=call.id)
        if decision.blocked is not None:
            by = decision.by
            shown = "blocked by a PreToolUse hook" if by is None else \
                f"blocked by the PreToolUse hook `{by.command}`" + (f" ({by.source})" if by.source else "")
            raise ToolDenied(f"a PreToolUse hook blocked this call; it was not run: {decision.blocked}", shown)
        if decision.updated_input is not None:
            arguments = tool.validate(decision.updated_input)
        clock.said += [f"[PreToolUse hook context]\n{text}" for text in decision.context]
        return arguments, decision.permission

    async def _post_hooks(self, hooks: Hooks, call: ToolCall, arguments: dict[str, Any], result: ToolResult
                          ) -> ToolResult:
        """`result` with what the `PostToolUse` hooks say for the model after it (a block's reason, context)."""
        response = {"output": mask_secrets(clean_text(result.output), self.context.secrets), "ok": result.ok,
                    "outcome": result.outcome}
        decision = await hooks.fire("PostToolUse", {"tool_name": self.registry.wire_name(call.name),
                                                    "tool_input": arguments, "tool_response": response,
                                                    "tool_use_id": call.id}, call_id=call.id)
        said = [f"[PostToolUse hook: {decision.blocked}]"] if decision.blocked is not None else []
        said += [f"[PostToolUse hook context]\n{text}" for text in decision.context]
        return replace(result, output="\n".join([result.output, *said])) if said else result

    def _context(self) -> ToolContext:
        """The context a call runs under: the run's, with its approvals (`exit_plan_mode` hands its plan to
        them); while planning, a confined command's sandbox is read-only (plan mode changes nothing, even
        through a command its list of read-only ones let pass)."""
        context = self.context
        if self.approvals is None:
            return context
        if self.approvals.policy.mode == "plan" and context.sandbox.confines:
            context = replace(context, sandbox=replace(context.sandbox, mode="read-only"))
        return replace(context, modes=self.approvals)

    async def _approve(self, call: ToolCall, tool: Tool, arguments: dict[str, Any],
                       permission: str | None = None) -> Deny | None:
        """None when the call may run, else the approver's `Deny` (raises only the tool's pre-check `ToolError`).

        `permission`: a `PreToolUse` hook's `allow` (approves as an allow rule of the tool would) or `ask` (asks
        whatever the policy and the rules approve; nobody to ask refuses)."""
        approvals = self.approvals
        if approvals is None:
            return Deny(f"{call.name} needs approval and nobody could approve it here; it was not run")
        if permission == "allow":
            approvals = replace(approvals, policy=replace(approvals.policy, allow=(*approvals.policy.allow,
                                                                                    tool.name)))
        elif permission == "ask":
            mode: Any = approvals.policy.mode if approvals.policy.mode in ("read-only", "plan") else "ask"
            approvals = replace(approvals, policy=replace(approvals.policy, mode=mode, allow=()), always=set())
        hooks = self.context.hooks
        if hooks is not None and approvals.ask is not None and hooks.has("Notification"):
            asking = approvals.ask

            async def ask(question: Any) -> Any:  # approval's Question, answered as the surface answers it
                assert hooks is not None
                hooks.notify({"message": f"crow needs your permission to use {call.name}",
                              "notification_type": "permission_prompt"})
                return await asking(question)

            approvals = replace(approvals, ask=ask)
        decision = await approvals(call, tool, arguments)
        return decision if isinstance(decision, Deny) else None

    async def _attempt(self, tool: Tool, arguments: dict[str, Any], context: ToolContext,
                       clock: _Clock) -> ToolOutput:
        """One run of the tool under `context`'s sandbox, in its turn and within its time limit (`clock`
        keeps when it started and its deadline, so a `TimeoutError` can be told apart from the tool's own)."""
        async with self.hold(not tool.parallel):
            snapshot = context.snapshot if context.snapshot is not None and may_write(tool, arguments, context) \
                else None
            if snapshot is not None:  # the files as the call finds them, for /rewind (outside its time limit)
                await snapshot("before")
            clock.started = time.perf_counter()
            clock.arguments = arguments
            try:
                async with asyncio.timeout(tool.timeout_s or self.timeout_s) as clock.deadline:
                    with using_context(context):
                        return await tool.run(arguments, context)
            finally:
                task = asyncio.current_task()
                if snapshot is not None and (task is None or not task.cancelling()):
                    await snapshot("after")  # ... and as it left them (a cancelled run takes none)
