"""The built-in `task` tool: a subagent, a child loop with a history of its own, whose answer is the call's result.

    parent turn ──► task(description, prompt, agent) ──► Subagents.run
                       child history: system (the run's prompt for the child's tools + the agent's
                       instructions), user (prompt)
                       child tools: the parent's (the agent's subset), never `task`   ──► loop.react
                       child client: the agent's model and profile (its own server and key)
                    ◄── the child's final answer: the call's one result, under the call's own id

The child runs through the same loop, dispatch and orchestrator as its parent, so it is approved, confined
and cancelled as the parent's own calls are; `Subagents` tells how. docs/subagents.md tells it to users.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from ..agents import AgentDefinition, resolve_tools
from ..config import Settings, key_server, load_settings, require_api_key
from ..errors import ConfigError, CrowError, ToolError
from ..events import (
    Notice,
    RunFinished,
    SubagentEvent,
    SubagentFinished,
    SubagentStarted,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ..history import Message, ToolCall, user_message
from ..loop import react
from ..text import strip_controls
from ..tools.context import ToolContext, current_context
from ..tools.dispatch import Approver, CallScope, current_call
from ..tools.registry import ToolRegistry
from ..tools.tool import Tool, tool
from ..wire.client import ChatClient
from .common import build_client, build_compactor, loop_settings

__all__ = ["GENERAL", "TASK_TIMEOUT_S", "TASK_TOOL", "Subagents"]

TASK_TOOL = "task"
"""The tool's name (Claude Code calls its own `Task`)."""
GENERAL = "general"
"""The agent of a call that names none: the parent's model and every tool of the parent but `task`."""
TASK_TIMEOUT_S = 1800.0
"""Seconds a subagent may run before its call is stopped (a tool's default limit is far too short for one)."""
_DESCRIPTION_CHARS = 300
_FORWARDED = (ToolRunStarted, ToolResultReady, TurnFinished, Notice, WarningEvent)
_NOT_FORWARDED = frozenset({"prompt_progress"})
"""Notices of a child's left out: llama.cpp's prompt progress, one per batch of the prompt, for a spinner only."""


class Subagents:
    """The `task` tool of a runtime and the child runs it starts.

    Its calls are approved by the parent's approvals (the same policy, deny rules and remembered answers; the
    question labelled with the agent's name), run in the parent's tool context (workspace, sandbox, secrets),
    and a call the child makes to `task` is an unknown tool (one level of subagents). Several `task` calls of a
    turn run concurrently, as parallel-safe tool calls do; requests to a server with `max_concurrent_requests`
    wait for a slot (`wire.slots`).

    What the child does reaches the parent's event stream (`dispatch.CallScope.emit`) as `SubagentStarted`, its
    tool calls, results, turns, notices and warnings wrapped in `SubagentEvent`, then `SubagentFinished`, all
    with the parent call's id. Cancelling the parent's call (Ctrl-C, an editor's cancel, the call's time limit)
    cancels the child, which closes its own history (every child call gets its one result) before the parent's
    call is answered. The child's transcript is kept with the parent's session (`ToolContext.keep_transcript`).

    Args:
        settings: the parent's settings as they are at call time (a model switch is followed).
        record_dir: where requests are recorded (`--record`), None: not recorded.
        trace: `--debug`: the children's clients trace their adaptations too.
    """

    def __init__(self, settings: Callable[[], Settings], *, record_dir: str | None = None,
                 trace: bool = False, system_for: Callable[[Path, list[str]], str | None] | None = None) -> None:
        self.settings = settings
        self.system_for = system_for
        """The system prompt of a child working in a folder with some tools (`Runtime.system_for`); None: the
        parent's system prompt as it is."""
        self.agents: dict[str, AgentDefinition] = {}
        """The agent definitions found (`agents.find_agents`), by name; `set_agents` offers them."""
        self.record_dir = record_dir
        self.trace = trace
        self.on_stop: Callable[[str, ToolCall, list[Message], bool], Awaitable[str | None]] | None = None
        """The `SubagentStop` hook (issue 41 §1), awaited each time a child has answered, with the agent's name,
        the parent's call, the child's history and `stop_hook_active` (True: the child goes on because of an
        earlier reason); a reason it returns makes the child go on with it as the next user message, once.
        None: no hook."""
        self.tool: Tool = self._make_tool()

    def set_agents(self, agents: dict[str, AgentDefinition]) -> None:
        """Offer `agents` (by name) from the next request on: the tool's description lists them."""
        self.agents = dict(agents)
        self.tool.description = self._description()

    def _description(self) -> str:
        text = ("Start a subagent: a separate model run with its own tools whose final answer is this call's result. "
                "It sees none of this conversation: `prompt` must say everything it needs. Use it for "
                "self-contained work (a search across many files, a review). Task calls of one turn run at once.")
        if not self.agents:
            return text + " Leave `agent` out."
        listed = "\n".join(f"- {a.name}: {_clip(a.description)}" for a in self.agents.values())
        return f"{text} `agent`: one of these (left out: {GENERAL!r}, with every tool):\n{listed}"

    def _make_tool(self) -> Tool:
        async def task(description: str, prompt: str, agent: str | None = None) -> str:
            """Start a subagent.

            Args:
                description: what the task is, in 3 to 5 words (shown to the person).
                prompt: the task in full: everything the subagent needs to know, and what to answer with.
                agent: one of the listed agents; left out: a general agent with every tool.
            """
            scope = current_call()
            if scope is None:
                raise ToolError("task runs only as a tool call of a run")
            return await self.run(scope, current_context(), description, prompt, agent)

        return tool(task, name=TASK_TOOL, description=self._description(), timeout_s=TASK_TIMEOUT_S)

    async def run(self, scope: CallScope, context: ToolContext, description: str, prompt: str,
                  agent: str | None) -> str:
        """The child's final answer to `prompt`; the call `scope.call` is the parent's.

        Raises:
            ToolError: an unknown agent, or a profile that cannot be used (nothing was sent); or the child
                ended without an answer (an error, its turn limit).
            asyncio.CancelledError: the parent's call was cancelled (the child's history closed first).
        """
        definition = None
        if agent and agent != GENERAL:
            definition = self.agents.get(agent)
            if definition is None:
                known = ", ".join([GENERAL, *self.agents])
                raise ToolError(f"unknown agent {strip_controls(agent)[:64]!r}; agents: {known}")
        name = definition.name if definition else GENERAL
        parent = self.settings()
        try:
            settings = child_settings(parent, definition)
        except ConfigError as exc:
            raise ToolError(f"agent {name!r} cannot run: {exc}") from None
        names, problems = resolve_tools(definition, [t.name for t in scope.registry]) if definition else (
            [t.name for t in scope.registry if t.name != TASK_TOOL], [])
        registry = ToolRegistry()
        for tool_name in names:
            found = scope.registry.get(tool_name)
            if found is not None:
                registry.register(found)
        call = scope.call
        history: list[Message] = []
        own = parent.system
        if self.system_for is not None:
            try:
                own = await asyncio.to_thread(self.system_for, context.workspace, [t.name for t in registry])
            except ConfigError as exc:
                raise ToolError(f"agent {name!r} cannot run: {exc}") from None
        system = "\n\n".join(p for p in (own, definition.instructions if definition else None) if p)
        if system:
            history.append({"role": "system", "content": system})
        history.append({"role": "user", "content": prompt})

        def emit(event: Any) -> None:
            scope.emit(SubagentEvent(call.id, call.index, name, event))

        scope.emit(SubagentStarted(call.id, call.index, name, description, settings.model))
        for problem in problems:
            emit(WarningEvent(problem))
        finished: RunFinished | None = None
        client: ChatClient | None = None
        try:
            client = build_client(settings, self.record_dir, trace=self.trace)
            limits = dataclasses.replace(loop_settings(settings, trace=self.trace), images=client.takes_images)
            approvals = _labelled(scope.approvals, name, call)
            compactor = build_compactor(settings)
            hooks = context.hooks
            if hooks is not None:  # the child's calls meet PreToolUse/PostToolUse; its end is SubagentStop, not Stop
                context = dataclasses.replace(context, hooks=hooks.copy(
                    specs=[spec for spec in hooks.specs if spec.event != "Stop"]))
            for stop_hook_active in (False, True):
                async with aclosing(react(history, client, registry, limits, approvals, context,
                                          compactor)) as events:
                    async for event in events:
                        if isinstance(event, _FORWARDED) and not (isinstance(event, Notice)
                                                                  and event.code in _NOT_FORWARDED):
                            emit(event)
                        elif isinstance(event, RunFinished):
                            finished = event
                # SubagentStop (issue 41 §1, hooks): the one place it fires, each time the child has answered; a
                # reason it returns (a blocking hook's) is the child's next message, once (`stop_hook_active`)
                if finished is None or finished.status != "completed":
                    break
                if self.on_stop is not None:
                    reason = await self.on_stop(name, call, history, stop_hook_active)
                elif hooks is not None:
                    reason = await hooks.stop_continues("SubagentStop", active=stop_hook_active,
                                                        fields={"agent": name})
                else:
                    break
                if not reason or stop_hook_active:
                    break
                history.append(user_message(reason))
        except asyncio.CancelledError:
            finished = finished or RunFinished("cancelled", "", 0, "interrupted", 130)
            raise
        finally:
            if client is not None:
                await asyncio.shield(client.aclose())
            done = finished or RunFinished("error", "", 0, "the subagent stopped", 1)
            scope.emit(SubagentFinished(call.id, call.index, name, done.status, done.turns, done.error))
            if context.keep_transcript is not None:
                try:
                    context.keep_transcript(call.id, call.index, name, history)
                except (CrowError, OSError) as exc:
                    emit(WarningEvent(f"the subagent's transcript could not be stored: {exc}"))
        assert finished is not None
        if finished.status == "completed":
            return finished.final_text or "(the subagent gave an empty answer)"
        raise ToolError(f"the subagent {name!r} ended without an answer ({finished.status}): "
                        f"{finished.error or 'no reason given'}")


def child_settings(parent: Settings, definition: AgentDefinition | None) -> Settings:
    """The settings a child of `definition` runs with: its profile's server, key and model (from the parent's
    config file), else the parent's; its model over both. An API key only goes to the server it was configured
    for: the parent's key only when the profile's server is the parent's.

    Raises:
        ConfigError: the profile is unknown or cannot be used (no key for a server that needs one).
    """
    settings = parent
    if definition is not None and definition.profile:
        settings = load_settings(config_path=parent.config_path, profile=definition.profile)
        if settings.api_key is None and key_server(settings.base_url) == key_server(parent.base_url):
            settings = dataclasses.replace(settings, api_key=parent.api_key)
        require_api_key(settings)
        settings = dataclasses.replace(settings, system=parent.system, secrets=(*parent.secrets, *settings.secrets))
    if definition is not None and definition.model:
        settings = dataclasses.replace(settings, model=definition.model)
    return settings



def _labelled(approvals: Approver | None, name: str, parent: ToolCall) -> Approver | None:
    """The parent's approvals for a child's calls: the same policy, rules, remembered answers and one-question-
    at-a-time order. Each question's preview starts with `[subagent NAME]` and it is asked at the parent's call's
    position (an editor asks about the parent's `task` call, which it knows); the surface's hooks about the
    parent's own calls (an editor's buffer diff, its in-progress mark) are left out."""
    if approvals is None:
        return None
    ask = approvals.ask
    if ask is None:
        return dataclasses.replace(approvals, before=None, allowed=None)

    async def labelled(question: Any) -> Any:
        at_parent = dataclasses.replace(question.call, index=parent.index)
        return await ask(dataclasses.replace(question, call=at_parent,
                                             preview=f"[subagent {name}] {question.preview}"))

    return dataclasses.replace(approvals, ask=labelled, before=None, allowed=None)


def _clip(text: str) -> str:
    return text if len(text) <= _DESCRIPTION_CHARS else text[: _DESCRIPTION_CHARS - 1] + "…"
