"""`!COMMAND` in `crow chat`: a command the person runs in the workspace's shell, and what the model is told of it.

The command is a call of the built-in `run_shell` tool that the person makes, dispatched as the model's
calls are (`tools.dispatch`): the same sandbox, environment, output cap and approval rules, except that
having typed it is the person's yes (`Approvals.typed_by_person`). The model is told of it as the person's context
for their next message, never as a tool call it did not make: a user message (`shell_note`) that the chat
keeps as the last message of the history (stored at once, so a resumed session has it) until the next
message is sent, joined to it (`with_note`). So no request carries two user messages in a row, which
chat templates that want user and assistant to alternate refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from ..events import Event, ToolResultReady, ToolRunStarted
from ..history import ContentPart, Message, ToolCall, ToolResult, UserMessage, content_text
from ..loop import LoopSettings
from ..tools.approval import Approvals
from ..tools.builtin.shell import MAX_TIMEOUT_S, run_shell
from ..tools.context import ToolContext
from ..tools.dispatch import dispatch
from ..tools.registry import ToolRegistry

__all__ = ["NOTE_HEAD", "USAGE", "is_shell_note", "run_typed", "shell_note", "typed_call", "typed_command",
           "with_note"]

USAGE = "usage: !COMMAND runs COMMAND in the workspace's shell; its output goes with your next message"
"""The one line a `!` with no command gets."""
NOTE_HEAD = "I ran a command in the shell:\n$ "
"""How the model is told of a command the person ran (the command, then its status line and output)."""


def typed_command(text: str) -> str | None:
    """The command of a `!COMMAND` line (`""` for `!` alone), or None when `text` does not start with `!`."""
    line = text.lstrip()
    return line[1:].strip() if line.startswith("!") else None


def typed_call(command: str) -> ToolCall:
    """The `run_shell` call for `command`, with run_shell's longest time limit (the person stops it with
    Ctrl-C); its id is never sent: the call never enters the history."""
    return ToolCall("", run_shell.name, json.dumps({"command": command, "timeout_s": MAX_TIMEOUT_S},
                                                   ensure_ascii=False))


async def run_typed(command: str, approvals: Approvals, settings: LoopSettings, context: ToolContext | None,
                    sink: Callable[[Event], None]) -> ToolResult:
    """Run `command` as a call of the built-in `run_shell` (never a plugin's tool of that name), with the
    chat's sandbox and secrets (`context`) and output cap (`settings.max_output_chars`); `sink` gets the
    call's `ToolRunStarted` (its arguments as typed: the command, not the time limit crow adds) and
    `ToolResultReady`. Returns its result (a refused call's says why).

    Raises:
        asyncio.CancelledError: the caller was cancelled (Ctrl-C); the command and everything it started
            are killed first.
    """
    registry = ToolRegistry()
    registry.register(replace(run_shell), source="builtin")
    result: ToolResult | None = None
    typed = json.dumps({"command": command}, ensure_ascii=False)
    async for event in dispatch([typed_call(command)], registry,
                                approve=approvals.typed_by_person(),
                                timeout_s=settings.tool_timeout_s, max_output_chars=settings.max_output_chars,
                                context=context):
        if isinstance(event, ToolRunStarted):
            event = replace(event, call=replace(event.call, arguments=typed))
        sink(event)
        if isinstance(event, ToolResultReady):
            result = event.result
    assert result is not None  # dispatch yields one result per call
    return result


def shell_note(command: str, result: ToolResult) -> str:
    """What the model is told of `command` that the person ran: the command, then the result the model
    would have read of it (`[exit code N]` and the output, capped as run_shell output is)."""
    return f"{NOTE_HEAD}{command}\n{result.output.rstrip()}"


def is_shell_note(message: Message) -> bool:
    """Whether `message` is a user message holding only shell notes (a resumed session that ended with one)."""
    return message["role"] == "user" and isinstance(message["content"], str) and \
        message["content"].startswith(NOTE_HEAD)


def with_note(note: Message, message: UserMessage) -> UserMessage:
    """`message` with the notes of `note` (a user message of shell notes) before it, as one user message."""
    head = content_text(note.get("content")) + "\n\n"
    content = message["content"]
    if isinstance(content, str):
        return {"role": "user", "content": head + content}
    parts: list[ContentPart] = [{"type": "text", "text": head}, *content]
    return {"role": "user", "content": parts}
