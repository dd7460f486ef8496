"""Asking the user whether a tool call may run: yes, no, or always (for this tool, this chat).

Self-contained so an approval policy can call it for its "ask" outcome: `ask_approval(call, tool)`
has the shape of an ask callback (`(ToolCall, Tool) -> Awaitable["yes" | "no" | "always"]`).
"""

from __future__ import annotations

from typing import Any, Literal

from ..history import ToolCall
from ..tools.registry import Tool
from .common import short_json

__all__ = ["Answer", "ask_approval"]

Answer = Literal["yes", "no", "always"]
_ANSWERS: dict[str, Answer] = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "": "no", "a": "always",
                               "always": "always"}


async def ask_approval(call: ToolCall, tool: Tool | None = None, *, pt_input: Any = None,
                       pt_output: Any = None) -> Answer:
    """Prompt `Allow NAME(ARGS)? [y]es/[n]o/[a]lways` until a valid answer; Enter, Ctrl-C and Ctrl-D say no.

    Args:
        call: the tool call waiting for approval.
        tool: the tool it calls (unused here; part of the ask-callback shape).
        pt_input, pt_output: prompt-toolkit input/output (None: the terminal); tests pass pipes.
    """
    from prompt_toolkit import PromptSession

    session: PromptSession[str] = PromptSession(input=pt_input, output=pt_output)
    question = f"Allow {call.name}({short_json(call.arguments, 100)})? [y]es / [n]o / [a]lways: "
    while True:
        try:
            reply = await session.prompt_async(question, handle_sigint=False)
        except (KeyboardInterrupt, EOFError):
            return "no"
        answer = _ANSWERS.get(reply.strip().lower())
        if answer is not None:
            return answer
