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
    sid = app.recorder.session_id
    assert text.rstrip().endswith(f"session {sid}\nto continue this session: crow chat --resume {sid}")
    assert server.requests[1]["messages"][2]["content"] == "guarded ran: x"


async def test_a_subagents_calls_are_drawn_under_the_task_call_and_its_tokens_counted(store: SessionStore) -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    task = {"description": "look around", "prompt": "List the folder."}
    script = [{"sse": tool_calls_sse(("call_t", "task", task), usage=usage)},
              {"sse": tool_calls_sse(("call_c", "list_directory", {"path": "."}), usage=usage)},
              {"sse": text_stream("It is empty.")},
              {"sse": text_stream("The folder is empty.")}]
    out = io.StringIO()
    with ReplayServer(script) as server, create_pipe_input() as pipe:
        pipe.send_text("go\r/exit\r")
        console = Console(file=out, width=100, force_terminal=True, color_system=None)
        app = ChatApp(Settings(model="test-model", base_url=server.base_url), chat_options(), console=console,
                      pt_input=pipe, pt_output=DummyOutput(), store=store)
        await asyncio.wait_for(app.run(), 120)  # bounds a hang
    text = out.getvalue()
    assert "↳ general: look around (test-model)" in text
    assert "↳ general → list_directory" in text and "↳ general ✓ list_directory" in text
    assert app.usage.prompt == 20  # the parent's request and the child's first (the others sent no usage)
    assert server.requests[3]["messages"][-1] == {"role": "tool", "tool_call_id": "call_t", "content": "It is empty."}
    runs = store.subagent_runs(app.recorder.session_id)
    assert [(r.call_id, r.agent) for r in runs] == [("call_t", "general")]
