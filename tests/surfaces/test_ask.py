"""`crow chat`'s approval question (surfaces/ask.py): the answers it reads, as `crow run` reads them."""

from __future__ import annotations

import io

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.plain_text import PlainTextOutput

from crow_cli.history import ToolCall
from crow_cli.surfaces.ask import ask_approval


async def test_enter_asks_again_in_chat_as_in_run() -> None:
    # issue 9: Enter meant "no" in chat and asked again in run; now both ask again
    screen = io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text("\rmaybe\rA\r")
        answer = await ask_approval(ToolCall("c1", "run_shell", "{}", 0), pt_input=pipe,
                                    pt_output=PlainTextOutput(screen))
    assert answer == "always"  # neither the empty line nor "maybe" answered
    assert "Allow run_shell? [y]es / [n]o / [a]lways for run_shell: " in screen.getvalue()


async def test_end_of_input_says_no() -> None:
    with create_pipe_input() as pipe:
        pipe.send_text("\x04")
        answer = await ask_approval(ToolCall("c1", "run_shell", "{}", 0), pt_input=pipe,
                                    pt_output=PlainTextOutput(io.StringIO()))
    assert answer == "no"
