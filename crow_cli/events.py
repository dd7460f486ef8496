"""Typed events: the only thing the loop tells surfaces (run, chat, JSONL).

Every event is a frozen slotted dataclass with a `type` string; `dataclasses.asdict(event)` is the
JSONL shape, so fields are added, never renamed.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any, Literal

from .history import Message, ToolCall, ToolResult
from .todos import TodoItem

__all__ = [
    "SCHEMA_VERSION",
    "Event",
    "HookRan",
    "MessageAppended",
    "Notice",
    "PlanReady",
    "ReasoningDelta",
    "RunFinished",
    "RunStarted",
    "RunStatus",
    "SubagentEvent",
    "SubagentFinished",
    "SubagentStarted",
    "TextDelta",
    "TodoUpdated",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolResultReady",
    "ToolRunStarted",
    "TurnFinished",
    "WarningEvent",
]

RunStatus = Literal["completed", "max_turns", "error", "cancelled"]

SCHEMA_VERSION = 1
"""Version of the JSONL event schema (`crow_cli/schemas/events.schema.json`); bumped only on a breaking change."""


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The first event of a run, sent by the surface (the loop does not know the model or session)."""

    model: str
    session_id: str | None = None
    """The session the run is stored in; None when it is not stored."""
    schema_version: int = SCHEMA_VERSION
    type: Literal["run_started"] = "run_started"


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of visible answer text, in arrival order."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of `reasoning_content` / `reasoning` text (never part of the answer)."""

    text: str
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The stream opened a tool call (its name is known); arguments are still arriving."""

    index: int
    """Position in call order within the turn."""
    call_id: str
    name: str
    type: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One raw tool-call delta as received (for `--debug` traces): the wire `index` and fields."""

    index: int | None
    call_id: str | None
    name: str | None
    arguments: str | None
    type: Literal["tool_call_delta"] = "tool_call_delta"


@dataclass(frozen=True, slots=True)
class WarningEvent:
    """Something was off but the run goes on (repaired arguments, a `length` finish …)."""

    message: str
    call_id: str | None = None
    type: Literal["warning"] = "warning"


@dataclass(frozen=True, slots=True)
class Notice:
    """Progress a user may want to know about (a retry, a restarted stream); never part of the history."""

    message: str
    code: str | None = None
    """A stable tag for scripts. `"turn_restarted"`: the stream of this turn broke and is being
    requested again from the same history; drop the text, reasoning and tool calls of the turn seen so far.
    `"mcp_starting"`: the configured MCP servers are starting (before the first request; each may take
    up to its `startup_timeout`).
    `"retrying"`: the request failed before its stream started (429, 5xx, a connection error) and the
    client retries it after `wait_s`; nothing of the turn was streamed. `"reasoning_echo"`: the server
    refused (or demanded) the messages' reasoning fields and the request is sent again once without (or
    with) them; nothing of the turn was streamed. `"request_adapted"`: the server refused a part of the
    request its message names (a tool-schema keyword, a parameter, a message shape); that part is changed
    in this and every later request (the history is not) and the request is sent again once
    (`wire.change`). `"adapt_debug"` (`--debug` only): an adaptation decision, traced.
    `"facts_damaged"`: an entry of the learned facts is damaged and counts as not known (one per entry,
    before the first request). `"facts_unwritable"`: what the server taught could not be remembered for
    later runs (the path and the system's reason); the run goes on.
    `"debug"` / `"adapt_debug"` (only with `--debug`): why the accumulator or the client decided
    something (a reasoning block merged, a field dropped or added, a fact remembered).
    `"compacting"`: the history is near (or past) the model's context window; crow asks the model
    for a summary of the oldest exchanges (a separate request). `"compacted"`: later requests start
    from the compacted history (`tokens_before` → `tokens_after`); the stored session keeps it all.
    `"prompt_progress"`: the server is still processing the prompt, before its first token (llama.cpp's
    `prompt_progress` chunks, sent when the request has `return_progress`); the message says how far.
    `"hook_stopped"`: a hook answered `continue: false` (its `stopReason` in the message): the run ends
    (`tools.hooks`).
    `"queued"`: the request waits for one of the server's request slots (`[provider] max_concurrent_requests`,
    shared by a run and its subagents: `wire.slots`).
    `"tool_calls_recovered"`: the model wrote tool calls as text the server did not read as calls; crow runs
    them as calls (once per format per run, naming it: `wire.textcalls`; the format is remembered for the server
    and model, `crow probe --show`)."""
    attempt: int | None = None
    """`retrying`: the number of the request about to be sent (2 = the first retry)."""
    wait_s: float | None = None
    """`retrying`: seconds waited before it (the server's Retry-After, else backoff with jitter)."""
    status: int | None = None
    """`retrying`: the HTTP status of the failed request, None for a connection error or timeout;
    `request_adapted` / `reasoning_echo`: the HTTP status of the refusal (always set)."""
    tokens_before: int | None = None
    """`compacting` / `compacted`: the prompt's size in tokens before compaction (the server's count
    when it gave one, else an estimate)."""
    tokens_after: int | None = None
    """`compacted`: the estimated size in tokens of the compacted history later requests start from."""
    type: Literal["notice"] = "notice"


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A model turn ended; `tool_calls` are what the loop will run next (in call order)."""

    turn: int
    """1-based turn number within the run."""
    finish_reason: str
    usage: dict[str, Any] | None
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    timings: dict[str, Any] | None = None
    """The server's `timings` object beside its usage (llama.cpp: `prompt_n` tokens processed, `cache_n`
    tokens reused from its cache, `predicted_n` …), as sent; None when it sent none."""
    type: Literal["turn_finished"] = "turn_finished"


@dataclass(frozen=True, slots=True)
class ToolRunStarted:
    """Dispatch took up a tool call, before any approval: a denied call is followed by its error result."""

    call: ToolCall
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResultReady:
    """A tool call finished (or failed, was denied, timed out or was cancelled)."""

    result: ToolResult
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class TodoUpdated:
    """The model wrote its todo list (`todo_write`): the whole list, before that call's `tool_result`."""

    todos: tuple[TodoItem, ...]
    type: Literal["todo"] = "todo"


@dataclass(frozen=True, slots=True)
class PlanReady:
    """The model handed over its plan (`exit_plan_mode`) with nobody to review it: the run ends with it (the
    `run_finished` after it has it as `final_text`)."""

    plan: str
    """The plan, Markdown, as the model wrote it."""
    type: Literal["plan"] = "plan"


@dataclass(frozen=True, slots=True)
class MessageAppended:
    """The loop appended a message to the history (what a session store persists)."""

    message: Message
    type: Literal["message"] = "message"


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The last event of a run: how it ended and the final answer text.

    Its cause is typed: `status`, and for a cancelled run `signal` (stopped by that signal) or
    `output_errno` (its output could not be written); surfaces decide from these, never from `error`.
    """

    status: RunStatus
    final_text: str
    turns: int
    error: str | None = None
    exit_code: int = 0
    signal: int | None = None
    """The signal that stopped the run (2 SIGINT, 15 SIGTERM, 1 SIGHUP), or None."""
    output_errno: int | None = None
    """The errno that stopped the run because its output could not be written (EPIPE: a closed pipe, EIO: a
    terminal that hung up, ENOSPC: a full disk …), or None."""
    changes_refused: int = 0
    """How many tool calls approval, a rule or the sandbox refused, when the run tried changes (edits, commands)
    and every one was refused, so nothing was changed; 0 otherwise (`crow run` sets it)."""
    type: Literal["run_finished"] = "run_finished"

    @property
    def output_gone(self) -> bool:
        """The output went away (a closed pipe or terminal): nobody is left to tell; a full disk is not gone."""
        return self.output_errno in (errno.EPIPE, errno.EIO)


@dataclass(frozen=True, slots=True)
class HookRan:
    """A lifecycle hook's command ran (`tools.hooks`): which, for what, how it ended and how long it took."""

    event: str
    """The hook event (`PreToolUse`, `Stop` …, Claude Code's names)."""
    command: str
    """The command as configured (the run's secrets masked)."""
    outcome: Literal["ok", "blocked", "error", "timeout"]
    """`ok`: exit 0; `blocked`: it blocked or denied what it was asked about (exit 2, or a JSON `deny` /
    `block`); `error`: another exit code or an answer crow could not read (the run goes on); `timeout`: it ran
    past its `timeout_s` and was killed with its process group (the run goes on)."""
    duration_s: float
    """Seconds it ran."""
    source: str = ""
    """The file it is configured in (crow's config.toml or a project's `.crow/settings.toml`)."""
    exit_code: int | None = None
    """Its exit code; None when it was killed or could not start."""
    message: str | None = None
    """Why it blocked (its reason) or what went wrong, on one line; None when it went on quietly."""
    call_id: str | None = None
    """The tool call it was about (`PreToolUse`, `PostToolUse`), the model's id; None for other events."""
    type: Literal["hook"] = "hook"


@dataclass(frozen=True, slots=True)
class SubagentStarted:
    """A `task` call started a subagent: a child loop with a history of its own (`surfaces.task`)."""

    call_id: str
    """The parent's `task` call (its id, unchanged; `""` when the model sent none)."""
    index: int
    """The call's position in its turn (links it when ids repeat or are `""`)."""
    agent: str
    """The agent's name (`general` when the call named none)."""
    description: str
    """The call's short description of the task."""
    model: str
    """The child's model."""
    type: Literal["subagent_started"] = "subagent_started"


@dataclass(frozen=True, slots=True)
class SubagentEvent:
    """Something the subagent of the parent's call `call_id` did: one of its own events (`tool_call`,
    `tool_result`, `turn_finished`, `notice`, `warning`), never part of the parent's history."""

    call_id: str
    index: int
    agent: str
    event: ToolRunStarted | ToolResultReady | TurnFinished | Notice | WarningEvent
    type: Literal["subagent_event"] = "subagent_event"


@dataclass(frozen=True, slots=True)
class SubagentFinished:
    """The subagent of the parent's call `call_id` ended; its answer is that call's one result."""

    call_id: str
    index: int
    agent: str
    status: RunStatus
    turns: int
    """The child's model turns."""
    error: str | None = None
    type: Literal["subagent_finished"] = "subagent_finished"


Event = (
    RunStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallDelta
    | WarningEvent
    | Notice
    | TurnFinished
    | ToolRunStarted
    | ToolResultReady
    | MessageAppended
    | RunFinished
    | HookRan
    | SubagentStarted
    | SubagentEvent
    | SubagentFinished
    | TodoUpdated
    | PlanReady
)
