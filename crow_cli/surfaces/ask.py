"""Asking the user whether a tool call may run: yes, no, or always (for this tool, this chat).

`ask_approval(call, tool)` has the shape of an ask callback (`(ToolCall, Tool) -> Awaitable["yes" | "no" |
"always"]`); the caller shows the call's preview (`tools.approval.describe_call`) above the question.
"""

from __future__ import annotations

from typing import Any, Literal

from ..history import ToolCall
from ..tools.registry import Tool

__all__ = ["Answer", "ask_approval"]

Answer = Literal["yes", "no", "always"]
_ANSWERS: dict[str, Answer] = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "": "no", "a": "always",
                               "always": "always"}


async def ask_approval(call: ToolCall, tool: Tool | None = None, *, pt_input: Any = None,
                       pt_output: Any = None) -> Answer:
    """Prompt `Allow NAME? [y]es / [n]o / [a]lways for NAME` until a valid answer; Enter and Ctrl-D say no.

    Args:
        call: the tool call waiting for approval.
        tool: the tool it calls.
        pt_input, pt_output: prompt-toolkit input/output (None: the terminal); tests pass pipes.

    Raises:
        KeyboardInterrupt: Ctrl-C; the caller stops the turn (it is not an answer about this call only).
    """
    from prompt_toolkit import PromptSession

    session: PromptSession[str] = PromptSession(input=pt_input, output=pt_output)
    name = tool.name if tool is not None else call.name
    question = f"Allow {name}? [y]es / [n]o / [a]lways for {name}: "
    while True:
        try:
            reply = await session.prompt_async(question, handle_sigint=False)
        except EOFError:
            return "no"
        answer = _ANSWERS.get(reply.strip().lower())
        if answer is not None:
            return answer
