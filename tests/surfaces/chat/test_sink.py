"""The chat's sink (`surfaces/chat/sink`): a tool turn drawn on a colour terminal.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from crow_cli.config import Settings
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatApp
from tests.replay_server import ReplayServer, text_stream
from tests.support import chat_options, tool_calls_sse


async def test_a_tool_turn_in_a_colour_terminal(store: SessionStore, tools_dir: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("# Done\n\nThe **tool** ran.\n")}]
    out = io.StringIO()
    with ReplayServer(script) as server, create_pipe_input() as pipe:
        pipe.send_text("go\ry\r/exit\r")
        console = Console(file=out, width=80, force_terminal=True, color_system=None)
        app = ChatApp(Settings(model="test-model", base_url=server.base_url),
                      chat_options(tools_dirs=(str(tools_dir),)), console=console, pt_input=pipe,
                      pt_output=DummyOutput(), store=store)
        assert not app.view.plain
        await asyncio.wait_for(app.run(), 120)  # bounds a hang
    text = out.getvalue()
    assert '✓ guarded({"text": "x"}) ok' in text
    assert "The tool ran." in text  # rendered Markdown (live frames in between are erased on a terminal)
    assert text.rstrip().endswith(f"session {app.recorder.session_id}")
    assert server.requests[1]["messages"][2]["content"] == "guarded ran: x"
