"""`crow chat`'s approval question (surfaces/ask.py): the answers it reads, as `crow run` reads them."""

from __future__ import annotations

import asyncio
import io

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.plain_text import PlainTextOutput

from crow_cli.history import ToolCall
from crow_cli.surfaces.ask import ask_approval
from crow_cli.tools.approval import Question
from crow_cli.tools.tool import Tool

SHELL = Tool("run_shell", "Runs a command.", lambda command: command, needs_approval=True, kind="shell")


def _question(preview: str = "$ x", outside: bool = False) -> Question:
    return Question(ToolCall("c1", "run_shell", "{}", 0), SHELL, preview, outside=outside)


async def test_enter_asks_again_in_chat_as_in_run() -> None:
    # Enter alone asks again, in chat and in run
    screen = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text("\rmaybe\rA\r")
        answer = await ask_approval(_question(), pt_input=pipe, pt_output=PlainTextOutput(screen))
    assert answer.choice == "always"  # neither the empty line nor "maybe" answered
    assert "Allow run_shell? [y]es / [n]o [reason] / [a]lways for run_shell: " in screen.getvalue()


async def test_end_of_input_says_no() -> None:
    with create_pipe_input() as pipe:
        pipe.send_text("\x04")
        answer = await ask_approval(_question(), pt_input=pipe, pt_output=PlainTextOutput(io.StringIO()))
    assert answer.choice == "no"


async def test_the_question_to_run_outside_the_sandbox_offers_no_always() -> None:
    # running a stopped command outside the sandbox offers no "[a]lways": any yes approves that one run only
    from crow_cli.tools.approval import UNCONFINED_MARK

    screen = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text("y\r")
        answer = await ask_approval(_question(f"{UNCONFINED_MARK}[why]\n$ x", outside=True), pt_input=pipe,
                                    pt_output=PlainTextOutput(screen))
    assert answer.choice == "yes"
    assert "Run it outside the sandbox this once? [y]es / [n]o: " in screen.getvalue()
    assert "always" not in screen.getvalue()


async def test_a_typed_escape_sequence_that_looks_like_a_mouse_event_is_no_internal_error() -> None:
    # ESC [ 3 1 m typed (a colour code pasted where the terminal does not bracket pastes) must not reach
    # prompt-toolkit's mouse handler, which prints a traceback ("Unhandled exception in event loop") and
    # "Press ENTER to continue..." over the question
    screen = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_bytes(b"\x1b[31my\r")
        answer = await asyncio.wait_for(ask_approval(_question(), pt_input=pipe, pt_output=PlainTextOutput(screen)),
                                        60)  # bounds a hang
    assert answer.choice == "yes"
    assert "Unhandled exception" not in screen.getvalue() and "Press ENTER" not in screen.getvalue()
