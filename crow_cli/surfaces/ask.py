"""Asking the user in `crow chat` whether a tool call may run: yes; no, maybe saying why; or always (for
the command's prefix or the tool, this chat).

`ask_approval(question)` prompts with prompt-toolkit; the caller shows the call's preview (the one
`tools.approval.describe_call` makes, in the `Question` handed to the ask callback) above the question. The answer is
read in the loop every terminal surface asks in (`approve.ask_until_answered`), as `crow run` reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..tools.approval import Answer, Question
from .approve import ask_until_answered

if TYPE_CHECKING:
    from prompt_toolkit.key_binding import KeyBindings

__all__ = ["Answer", "ask_approval", "typed_keys"]


async def ask_approval(question: Question, *, pt_input: Any = None, pt_output: Any = None) -> Answer:
    """Prompt `Allow NAME? [y]es / [n]o [reason] / [a]lways for NAME` (or for the command's prefix,
    `approve.approval_question`) until a valid answer; Enter asks again, Ctrl-D says no.

    Args:
        question: what is asked (its preview is shown above by the caller).
        pt_input, pt_output: prompt-toolkit input/output (None: the terminal); tests pass pipes.

    Raises:
        KeyboardInterrupt: Ctrl-C; the caller stops the turn (it is not an answer about this call only).
    """
    from prompt_toolkit import PromptSession

    session: PromptSession[str] = PromptSession(input=pt_input, output=pt_output, key_bindings=typed_keys())

    async def read_reply(text: str, hint: str | None) -> str | None:
        try:  # no answer: the prompt says what is one, then asks again
            return await session.prompt_async(f"{hint}\n{text}" if hint else text, handle_sigint=False)
        except EOFError:
            return None

    return await ask_until_answered(question, read_reply)



def typed_keys() -> KeyBindings:
    """Key bindings every prompt-toolkit prompt of crow takes (the chat's own are added to these).

    crow turns no mouse reporting on, so what prompt-toolkit reads as a mouse event is typed or pasted
    text such as a colour code (ESC [ 3 1 m, pasted where the terminal does not bracket pastes): it is
    dropped, where prompt-toolkit's own mouse handler fails on it (a traceback and "Press ENTER to
    continue..." over the prompt).
    """
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.keys import Keys

    bindings = KeyBindings()

    @bindings.add(Keys.Vt100MouseEvent)
    def _no_mouse(event: Any) -> None:
        """Nothing: the event is not from a mouse."""

    return bindings
