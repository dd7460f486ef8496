"""One ACP session: its history, approvals, driver and the `session/update` stream (the driver's sink)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import acp
from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CurrentModeUpdate,
    PermissionOption,
    PromptResponse,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    StopReason,
    ToolCallUpdate,
)
from pydantic import ValidationError

from ...config import Settings
from ...errors import ToolDenied
from ...events import (
    Event,
    MessageAppended,
    Notice,
    ReasoningDelta,
    RunFinished,
    SubagentEvent,
    TextDelta,
    TodoUpdated,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ...history import Message, ToolCall, content_text, is_prompt, outcome_of, tool_calls_of, user_message
from ...modes import SandboxMode
from ...text import strip_controls
from ...todos import TodoItem, latest_todos
from ...tools.approval import Answer, Approvals, PlanAnswer, Policy, Question
from ...tools.registry import ToolRegistry
from ...tools.tool import Tool
from ...tools.workspace import resolve_for_write
from ..approve import approver_for, shown_scope
from ..persist import RunModes, SessionRecorder, settle_modes, tell_modes
from ..runtime import Runtime
from .convert import (
    arguments,
    diff_of,
    disk_diff,
    edit_target,
    editor_failure,
    for_editor,
    locations,
    prompt_text,
    reasoning_text,
    stored_diff,
    title,
    tool_kind,
    typed_text,
)


class AgentSide(Protocol):
    """What a session takes of the agent that holds it (`agent.CrowAgent`): its settings, the run's parts
    (its tool context and driver come from them), whether `--yes` was given, what the editor can do, and the
    connection to the editor."""

    settings: Settings
    runtime: Runtime
    capabilities: ClientCapabilities

    @property
    def yes(self) -> bool: ...

    def client(self) -> acp.Client: ...

__all__ = ["MODES", "Session", "plan_update"]

log = logging.getLogger("crow.acp")
_CHILD_LINES = 40
"""Lines of what a subagent did shown inside its parent's call at most (the latest)."""

MODES: dict[Policy, tuple[str, str]] = {
    "ask": ("Ask", "Ask before every tool that changes files or runs commands"),
    "auto-edit": ("Auto-edit", "Edit files in the workspace without asking; ask before commands"),
    "read-only": ("Read-only", "Refuse every tool that changes files or runs commands"),
    "plan": ("Plan", "Read and run read-only commands only; the agent hands over a plan for you to approve"),
    "yolo": ("Yolo", "Run every tool without asking (deny rules still apply)"),
}
"""Session mode id → (name, description): crow's approval policies."""
SANDBOX_MODES: dict[SandboxMode, tuple[str, str]] = {
    "workspace-write": ("Workspace write", "Commands write only the workspace and temp dir; no network"),
    "read-only": ("Read-only", "Nothing is written: no command writes, no file is edited; no network"),
    "off": ("Off", "Commands run with your full rights"),
}
"""The session config option `sandbox`: `modes.SandboxMode` → (name, description)."""


def plan_update(todos: Sequence[TodoItem]) -> Any:
    """The `plan` session update showing the model's todo list (ACP's agent plan: the whole list each time)."""
    return acp.update_plan([acp.plan_entry(item.content, status=item.status) for item in todos])


class Session:
    """One ACP session: its history (a stored crow session), tools, approvals, driver and update stream.

    It is the driver's sink: `handle` turns events into `session/update` notifications, queued in
    order and sent by one task, so a slow client never blocks the loop.
    """

    def __init__(self, agent: AgentSide, session_id: str, cwd: Path, history: list[Message],
                 recorder: SessionRecorder, registry: ToolRegistry | None) -> None:
        self.agent = agent
        self.id = session_id
        self.cwd = cwd
        self.history = history
        self.recorder = recorder
        self.registry = registry
        settings = agent.settings
        self.approvals: Approvals = approver_for(settings, yes=agent.yes, ask=self.ask)
        """The session's approval (its mode is the policy); the editor answers its questions (`ask`)."""
        fs = agent.capabilities.fs
        self.editor_reads = registry is not None and bool(fs and fs.read_text_file)
        """The file tools read through the editor: edit diffs come from its buffers."""
        if self.editor_reads:
            self.approvals.before = self._buffer_diff
        self.approvals.allowed = lambda call: self._update(call.index, status="in_progress")
        self.approvals.review = self.review_plan  # a plan exit_plan_mode hands over: the editor's answer
        self.approvals.mode_changed = self._mode_changed  # an approved plan: the editor's mode selector follows
        # the recorder keeps the files crow's tools change (undo restores them) and the compaction checkpoints
        self.context = agent.runtime.context_for(cwd, backup=recorder.backup)
        self.driver = agent.runtime.new_driver(self.approvals, recorder=recorder, context=self.context,
                                               tools=registry)
        # a loaded session keeps the modes it ran under where they are stricter (the editor may switch them)
        kept = settle_modes(recorder, history, RunModes(self.approvals.policy.mode, self.context.sandbox.mode),
                            given=agent.runtime.options.modes_given, network=self.context.sandbox.network)
        self.approvals.policy = replace(self.approvals.policy, mode=kept.approval)
        if kept.sandbox != self.context.sandbox.mode:
            self.context = replace(self.context, sandbox=replace(self.context.sandbox, mode=kept.sandbox))
            self.driver.context = self.context
        self.turns = 0
        """Model turns with tool calls so far in this session (the first part of ACP tool-call ids)."""
        self.calls: dict[int, str] = {}
        """ACP tool-call id of each call of the current turn, by the call's position."""
        self.diffs: dict[int, Any] = {}
        self.child_lines: dict[int, list[str]] = {}
        """What the subagent of each `task` call of the turn did, by the call's position (`_child_line`)."""
        self.refused = False
        self.finish_reason = ""
        """The last model turn's finish_reason (`length` → `max_tokens`, `content_filter` → `refusal`)."""
        self.busy = False
        self.idle = asyncio.Event()
        """Set while no prompt runs."""
        self.idle.set()
        self._plan_call = ""
        """The ACP id of the exit_plan_mode call of the turn (its review is asked about it)."""
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    # the update stream

    def send(self, update: Any) -> None:
        """Queue one `session/update` (sent in order by the sender task)."""
        self._outbox.put_nowait(update)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all(), name=f"acp-updates-{self.id}")

    async def _send_all(self) -> None:
        while not self._outbox.empty():
            update = self._outbox.get_nowait()
            try:
                await self.agent.client().session_update(session_id=self.id, update=update)
            except Exception as exc:  # the editor went away or refused it: nothing else to tell
                log.warning("session/update not delivered: %s", exc)
            finally:
                self._outbox.task_done()

    async def flush(self) -> None:
        """Wait until every queued update has been written."""
        await self._outbox.join()

    # modes and approvals

    def modes(self) -> SessionModeState:
        return SessionModeState(current_mode_id=self.mode, available_modes=[
            SessionMode(id=mode, name=name, description=description) for mode, (name, description) in MODES.items()])

    def config_options(self) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        """The session's options besides its mode: the sandbox of its commands (`tools.sandbox`)."""
        return [SessionConfigOptionSelect(
            id="sandbox", name="Sandbox", type="select", current_value=self.context.sandbox.mode,
            description="How run_shell commands are confined", options=[
                SessionConfigSelectOption(value=mode, name=name, description=description)
                for mode, (name, description) in SANDBOX_MODES.items()])]

    def set_sandbox(self, mode: str) -> None:
        """Confine this session's next commands by the sandbox mode `mode`."""
        chosen = next((known for known in SANDBOX_MODES if known == mode), None)  # as its Literal
        if chosen is None:
            raise RequestError(-32602, f"unknown sandbox mode {mode!r} (modes: {', '.join(SANDBOX_MODES)})")
        self.context = replace(self.context, sandbox=replace(self.context.sandbox, mode=chosen))
        self.driver.context = self.context
        self._retell_modes()

    @property
    def mode(self) -> Policy:
        """The session's mode: its approval policy."""
        return self.approvals.policy.mode

    def set_mode(self, mode: str) -> None:
        """Switch the approval policy; "always" and "never" answers given so far stay."""
        chosen = next((known for known in MODES if known == mode), None)  # as its Literal
        if chosen is None:
            raise RequestError(-32602, f"unknown mode {mode!r} (modes: {', '.join(MODES)})")
        self.approvals.policy = replace(self.approvals.policy, mode=chosen)
        self._retell_modes()

    def _mode_changed(self, mode: Policy) -> None:
        """The mode changed from inside the session (an approved plan): recorded and told, and the editor's mode
        selector follows (`current_mode_update`)."""
        self._retell_modes()
        self.send(CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode))

    def _retell_modes(self) -> None:
        """The modes now in force, recorded with the session (the editor chose them) and told in the system message
        (`persist.tell_modes`; the stored message stays)."""
        modes = RunModes(self.mode, self.context.sandbox.mode)
        self.recorder.keep_modes(modes)
        tell_modes(self.history, modes, network=self.context.sandbox.network)

    async def _buffer_diff(self, call: ToolCall, tool: Tool) -> None:
        """The diff of an edit from the editor's buffer (`fs/read_text_file`), sent before it is asked about
        (`Approvals.before`); an edit the buffer cannot take raises the tool's own error (`convert.diff_of`)."""
        args = arguments(call)
        file = edit_target(tool, args, self.cwd)
        if file is None or args is None:
            return
        resolve_for_write(file, self.context)  # what no answer can allow (the workspace's .git): its error, unasked
        try:
            old: str | None = (await self.agent.client().read_text_file(session_id=self.id, path=str(file))).content
        except Exception:  # no such buffer or file (a new file), or the editor refused: as absent
            old = None
        diff = diff_of(args, file, old, strict=True)
        if diff is not None:
            self.diffs[call.index] = diff
            self._update(call.index, content=[diff])

    async def ask(self, question: Question) -> Answer:
        """Ask the editor about one call (`session/request_permission`): allow once / always (for the
        command's prefix, when it has one, or the tool), reject once / always; run once outside the sandbox.

        Raises:
            ToolDenied: the editor failed the request (nobody said yes).
        """
        call, tool, scope = question.call, question.tool, question.scope
        args = arguments(call)
        acp_id = self.calls.get(call.index, "")
        diff = self.diffs.get(call.index)
        content = [diff] if diff is not None else [acp.tool_content(acp.text_block(question.preview))]
        options = [
            PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
            PermissionOption(option_id="allow_always", name=f"Always allow {tool.name}", kind="allow_always"),
            PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
            PermissionOption(option_id="reject_always", name=f"Always reject {tool.name}", kind="reject_always"),
        ]
        if scope:  # "always" for what this command runs (`pytest …`) comes before "always" for the whole tool
            options.insert(1, PermissionOption(option_id="allow_always_prefix", kind="allow_always",
                                               name=f"Always allow {shown_scope(scope)}"))
        if question.outside:  # running outside the sandbox is approved one command at a time
            options = [PermissionOption(option_id="allow_once", name="Run outside the sandbox once",
                                        kind="allow_once"), options[2]]
        await self.flush()  # the editor knows the call before it is asked about it
        try:
            response = await self.agent.client().request_permission(
                session_id=self.id, options=options,
                tool_call=ToolCallUpdate(tool_call_id=acp_id, title=title(call, args), kind=tool_kind(tool),
                                         status="pending", content=content, raw_input=args))
        except (RequestError, ValidationError) as exc:  # nobody said yes: a denial, not a failure of the tool
            raise ToolDenied(f"the editor did not answer the permission request ({editor_failure(exc)}); "
                             f"{tool.name} was not run") from None
        outcome = response.outcome
        choice = outcome.option_id if isinstance(outcome, AllowedOutcome) else "cancelled"
        if choice == "allow_once":
            return Answer("yes")
        if choice == "allow_always_prefix" and scope:
            return Answer("always", scope)
        if choice == "allow_always":
            return Answer("always")
        return Answer("never" if choice == "reject_always" else "no")

    async def review_plan(self, plan: str) -> PlanAnswer:
        """Ask the editor about the plan `exit_plan_mode` handed over (`session/request_permission`, the plan as
        the call's content): approve and go on in auto-edit, approve and go on asking, or keep planning. A
        failed request keeps planning (nobody approved)."""
        options = [
            PermissionOption(option_id="plan_auto_edit", name="Yes, and edit files without asking",
                             kind="allow_always"),
            PermissionOption(option_id="plan_ask", name="Yes, and ask before each change", kind="allow_once"),
            PermissionOption(option_id="plan_keep", name="No, keep planning", kind="reject_once"),
        ]
        await self.flush()
        try:
            response = await self.agent.client().request_permission(
                session_id=self.id, options=options,
                tool_call=ToolCallUpdate(tool_call_id=self._plan_call, title="Ready to carry out the plan?",
                                         kind="switch_mode", status="pending",
                                         content=[acp.tool_content(acp.text_block(plan))]))
        except (RequestError, ValidationError) as exc:
            log.warning("session %s: the plan was not reviewed (%s)", self.id, editor_failure(exc))
            return PlanAnswer("keep")
        outcome = response.outcome
        choice = outcome.option_id if isinstance(outcome, AllowedOutcome) else "plan_keep"
        if choice == "plan_auto_edit":
            return PlanAnswer("auto-edit")
        if choice == "plan_ask":
            return PlanAnswer("ask")
        return PlanAnswer("keep")

    # the driver's sink

    def handle(self, event: Event) -> None:
        """Turn one loop event into `session/update` notifications (never blocks)."""
        match event:
            case TextDelta(text=text):
                self.send(acp.update_agent_message_text(text))
            case ReasoningDelta(text=text):
                self.send(acp.update_agent_thought_text(text))
            case TurnFinished(finish_reason=finish, tool_calls=calls):
                self.finish_reason = finish
                if calls:
                    self._announce(calls)
            case TodoUpdated(todos=todos):
                self.send(plan_update(todos))
            case ToolRunStarted(call=call):
                tool = self.registry.get(call.name) if self.registry is not None else None
                if tool is not None and tool.kind == "plan":  # its review is asked about this call
                    self._plan_call = self.calls.get(call.index, "")
                if tool is None or not tool.needs_approval:  # those go in progress once approved
                    self._update(call.index, status="in_progress")
            case ToolResultReady(result=result):
                diff = self.diffs.get(result.index) if result.ok else None
                output = acp.tool_content(acp.text_block(result.output))
                self._update(result.index, status="completed" if result.ok else "failed",
                             content=[diff, output] if diff is not None else [output])
            case SubagentEvent(index=index, agent=agent, event=ToolRunStarted() | ToolResultReady() as inner):
                self._child_line(index, agent, inner)
            case MessageAppended(message=message) if message.get("role") == "assistant":
                self.refused = bool(message.get("refusal"))
            case Notice(code="turn_restarted"):
                self.send(acp.update_agent_message_text("\n\n[crow: the stream broke; the answer starts again]\n\n"))
            case Notice(message=message) | WarningEvent(message=message):
                log.warning("session %s: %s", self.id, for_editor(message))
            case RunFinished(status="error", error=error):
                log.warning("session %s: %s", self.id, for_editor(error or ""))

    def _announce(self, calls: Sequence[ToolCall]) -> None:
        self.turns += 1
        self.calls, self.diffs, self.child_lines = {}, {}, {}
        for call in calls:
            acp_id = self.calls[call.index] = f"{self.turns}-{call.index}"
            args = arguments(call)
            tool = self.registry.get(call.name) if self.registry is not None else None
            diff = None if self.editor_reads else disk_diff(tool, args, self.cwd)  # else from the buffer, in approve
            if diff is not None:
                self.diffs[call.index] = diff
            self.send(acp.start_tool_call(acp_id, title(call, args), kind=tool_kind(tool),
                                          status="pending", locations=locations(args, self.cwd),
                                          raw_input=args if args is not None else call.arguments,
                                          content=[diff] if diff is not None else None))

    def _child_line(self, index: int, agent: str, event: ToolRunStarted | ToolResultReady) -> None:
        """What a subagent does, inside the parent's `task` call (at `index`): a line per call it starts and ends,
        the call's content until its own result replaces them."""
        if isinstance(event, ToolRunStarted):
            line = f"{agent} → {title(event.call, arguments(event.call))}"
        else:
            line = f"{agent} {'✓' if event.result.ok else '✗'} {strip_controls(event.result.name)}"
        lines = self.child_lines.setdefault(index, [])
        lines.append(strip_controls(line))
        self._update(index, content=[acp.tool_content(acp.text_block("\n".join(lines[-_CHILD_LINES:])))])

    def _update(self, index: int, **fields: Any) -> None:
        acp_id = self.calls.get(index)
        if acp_id is not None:
            self.send(acp.update_tool_call(acp_id, **fields))

    # prompts and replays

    async def prompt(self, blocks: Sequence[Any]) -> PromptResponse:
        """Run one prompt to its end; every update is sent before the answer.

        Raises:
            RequestError: -32600 while another prompt of the session runs; -32602 for a block crow does not
                accept; -32603 with crow's one-line error when the run fails (401, unknown model,
                unreachable server …); the session stays usable.
        """
        if self.busy:
            raise RequestError(-32600, "a prompt is already running in this session")
        text = prompt_text(blocks)
        self.recorder.title = typed_text(blocks) or None  # a new session's title: never an embedded file's text
        self.busy, self.refused, self.finish_reason = True, False, ""
        self.idle.clear()
        try:
            self.history.append(user_message(text))
            finished = await self.driver.run(self.history, self, self.recorder)
            await self.flush()
        finally:
            self.busy = False
            self.idle.set()
        if finished.status == "error" and self.finish_reason != "content_filter":  # that one is ACP's refusal
            raise RequestError(-32603, finished.error or "the run failed", {"exitCode": finished.exit_code})
        reason: StopReason = "refusal" if self.refused or self.finish_reason == "content_filter" else "end_turn"
        if self.finish_reason == "length":
            reason = "max_tokens"
        if finished.status == "max_turns":
            reason = "max_turn_requests"
        elif finished.status == "cancelled":
            reason = "cancelled"
        return PromptResponse(stop_reason=reason)

    async def replay(self) -> None:
        """Send the stored history as `session/update` notifications: messages (a prompt's images named, as
        `[image: NAME, SIZE]`), tool calls with their outcome."""
        messages = self.history
        for i, message in enumerate(messages):
            content = content_text(message.get("content"))
            if is_prompt(message) and (prompt := content_text(message.get("content"), images=True)):
                self.send(acp.update_user_message_text(prompt))  # an image as `[image: NAME, SIZE]`
            elif message["role"] == "assistant":
                reasoning = reasoning_text(message)
                if reasoning:
                    self.send(acp.update_agent_thought_text(reasoning))
                if content:
                    self.send(acp.update_agent_message_text(content))
                calls = tool_calls_of(message)
                if calls:
                    self.turns += 1
                for n, wire in enumerate(calls):
                    result = messages[i + 1 + n] if i + 1 + n < len(messages) else None
                    call = ToolCall(wire.get("id") or "", wire["function"]["name"], wire["function"]["arguments"], n)
                    args = arguments(call)
                    output = content_text(result.get("content")) if result and result["role"] == "tool" else ""
                    tool = self.registry.get(call.name) if self.registry is not None else None
                    failed = result is not None and result["role"] == "tool" and outcome_of(result) != "ok"
                    shown = [acp.tool_content(acp.text_block(output))]
                    diff = None if failed else stored_diff(tool, args, self.cwd)
                    self.send(acp.start_tool_call(
                        f"{self.turns}-{n}", title(call, args), kind=tool_kind(tool),
                        status="failed" if failed else "completed", locations=locations(args, self.cwd),
                        raw_input=args if args is not None else call.arguments,
                        content=[diff, *shown] if diff is not None else shown))
        if (todos := latest_todos(messages)) is not None:  # the model's todo list as it last wrote it
            self.send(plan_update(todos))
        await self.flush()

